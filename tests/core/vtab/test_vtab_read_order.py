"""TFDS's default read order in pure Python (``core.vtab.read_order``) and ``trainval1000``.

Properties of the order on its own (a permutation of what the expression selects;
canonical order when one file is read or the dataset disables shuffling), and the
interleave itself against ``tf.data.Dataset.interleave`` as TFDS calls it (cycle and
block 16, parallel, deterministic) over random file lengths, empty files and files
that end exactly on a block boundary included. The comparison with TFDS's own read
of multi-shard datasets is in ``tests/fidelity/test_vtab_trainval1000_tfds.py``.
"""

from __future__ import annotations

import os
import random

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.vtab import ShardLayout, default_read, get_task, resolve
from sampler_server.core.vtab.read_order import READ_BLOCK_LENGTH, READ_CYCLE_LENGTH, file_reads, interleave
from sampler_server.core.vtab.slicing import SliceRange, expand, resolve_spec
from sampler_server.errors import FailedPrecondition, InvalidArgument

_lengths = st.lists(st.integers(0, 70), min_size=1, max_size=40)


@st.composite
def _layout_and_ranges(draw: st.DrawFn) -> tuple[ShardLayout, tuple[SliceRange, ...]]:
    """Shard lengths of two splits and an expression of one slice of each, in either order."""
    layout = ShardLayout({"train": tuple(draw(_lengths)), "validation": tuple(draw(_lengths))})
    ranges = []
    for split in draw(st.sampled_from([["train"], ["validation"], ["train", "validation"], ["validation", "train"]])):
        size = layout.split_size(split)
        start = draw(st.integers(0, size))
        ranges.append(SliceRange(split, start, draw(st.integers(start, size))))
    return layout, tuple(ranges)


@settings(max_examples=examples(300), deadline=None)
@given(case=_layout_and_ranges())
def test_the_default_read_is_a_permutation_of_what_the_expression_selects(case) -> None:
    layout, ranges = case
    read = default_read(ranges, layout)
    assert sorted(read) == sorted(expand(ranges))
    # Every file is read in its own order, and files start in instruction order.
    reads = file_reads(ranges, layout)
    assert expand(reads) == expand(ranges)
    for piece in reads:
        mine = [pair for pair in read if pair[0] == piece.split and piece.start <= pair[1] < piece.stop]
        assert mine == expand([piece])


@settings(max_examples=examples(200), deadline=None)
@given(lengths=_lengths, data=st.data())
def test_one_file_or_disabled_shuffling_reads_canonical_order(lengths, data) -> None:
    size = sum(lengths)
    start = data.draw(st.integers(0, size))
    ranges = (SliceRange("train", start, data.draw(st.integers(start, size))),)
    assert default_read(ranges, ShardLayout({"train": (size,)})) == expand(ranges)
    ordered = ShardLayout({"train": tuple(lengths), "test": (3, 4)}, disable_shuffling=True)
    assert ordered.cycle_length == 1
    both = ranges + (SliceRange("test", 0, 7),)
    assert default_read(both, ordered) == expand(both)


def test_three_even_shards_keep_666_of_the_canonical_first_1000() -> None:
    """The issue's Caltech figure: 2010 examples in 3 shards of 670; 48 examples a round."""
    sizes = {"train": 2010, "test": 30}
    layout = ShardLayout({"train": (670, 670, 670), "test": (30,)})
    ours = resolve("caltech101", "trainval1000", sizes, layout)
    canonical = resolve("caltech101", "trainval1000-canonical", sizes)
    assert len(ours) == len(canonical) == 1000 and canonical == [("train", i) for i in range(1000)]
    assert len(set(ours) & set(canonical)) == 666
    assert ours[:18] == [("train", i) for i in range(16)] + [("train", 670), ("train", 671)]


def test_dtd_trainval1000_holds_validation_examples_where_canonical_holds_none() -> None:
    sizes = {"train": 1880, "validation": 1880, "test": 1880}
    layout = ShardLayout({"train": (940, 940), "validation": (940, 940), "test": (1880,)})
    ours = resolve("dtd", "trainval1000", sizes, layout)
    assert sum(split == "validation" for split, _ in ours) == 488  # 4 files of 16 a round: 15 rounds, then 16+16+8
    assert all(split == "train" for split, _ in resolve("dtd", "trainval1000-canonical", sizes))


@pytest.mark.parametrize("task", ["eurosat", "smallnorb_azimuth", "kitti_distance", "svhn"])
def test_trainval1000_is_the_first_1000_of_the_default_read_of_trainval(task: str) -> None:
    sizes = {"eurosat": {"train": 1340}, "smallnorb_azimuth": {"train": 810, "test": 420},
             "kitti_distance": {"train": 500, "validation": 300, "test": 5},
             "svhn": {"train": 2010, "test": 30, "extra": 9}}[task]
    layout = ShardLayout({split: (size // 3, size - 2 * (size // 3), size // 3) for split, size in sizes.items()})
    trainval = get_task(task).ranges("trainval", sizes)
    ours = resolve(task, "trainval1000", sizes, layout)
    assert ours == default_read(trainval, layout)[:1000]
    assert len(ours) == min(1000, sum(map(len, trainval))) == len(set(ours))
    assert set(ours) <= set(expand(trainval))


def test_trainval1000_needs_the_shard_layout_and_it_must_fit_the_sizes() -> None:
    sizes = {"train": 810, "validation": 210, "test": 30}
    with pytest.raises(FailedPrecondition, match="trainval1000 of dtd .*default .*read of trainval.*shard lengths"):
        resolve("dtd", "trainval1000", sizes)
    with pytest.raises(InvalidArgument, match="dtd: shard lengths of split 'validation' sum to 200, not its 210"):
        resolve("dtd", "trainval1000", sizes, ShardLayout({"train": (810,), "validation": (200,), "test": (30,)}))
    with pytest.raises(InvalidArgument, match="no shard lengths for TFDS split 'validation'"):
        resolve("dtd", "trainval1000", sizes, ShardLayout({"train": (810,), "test": (30,)}))
    with pytest.raises(InvalidArgument, match="not a slice"):
        get_task("dtd").slices("trainval1000", sizes)
    with pytest.raises(InvalidArgument, match="non-negative"):
        ShardLayout({"train": (3, -1)})
    assert len(resolve("dtd", "train800", sizes)) == 800  # the slice splits need no layout


def test_a_range_outside_the_shards_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"range \[5:12\] of split 'train' is outside its 10 examples"):
        file_reads([SliceRange("train", 5, 12)], ShardLayout({"train": (4, 6)}))


def test_file_reads_cut_shards_as_tfds_file_instructions_do() -> None:
    layout = ShardLayout({"train": (4, 0, 6, 5), "test": (10, 10)})
    ranges = resolve_spec("train[2:12]+test[50%:]", {"train": 15, "test": 20})
    assert file_reads(ranges, layout) == (
        SliceRange("train", 2, 4), SliceRange("train", 4, 10), SliceRange("train", 10, 12), SliceRange("test", 10, 20))


def _tf_interleave(lengths: list[int]) -> list[tuple[int, int]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    files = tf.data.Dataset.zip((tf.data.Dataset.range(len(lengths)),
                                 tf.data.Dataset.from_tensor_slices(tf.constant(lengths, tf.int64))))
    read = files.interleave(lambda file, n: tf.data.Dataset.range(n).map(lambda i: (file, i)),
                            cycle_length=READ_CYCLE_LENGTH, block_length=READ_BLOCK_LENGTH,
                            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return [(int(file), int(i)) for file, i in read.as_numpy_iterator()]


_RANDOM_FILES = [[rng.choice([0, 1, 16, 32, rng.randint(0, 60)]) for _ in range(rng.randint(1, 40))]
                 for rng in [random.Random(seed) for seed in range(6)]]


@pytest.mark.parametrize("lengths", [[32] * 20, [16, 48, 0, 5] * 6, *_RANDOM_FILES])
def test_interleave_is_tf_data_interleave(lengths: list[int]) -> None:
    """[32] * 20: files ending on a block boundary are found exhausted one visit later."""
    ours = list(interleave(([(f, i) for i in range(n)] for f, n in enumerate(lengths)),
                           READ_CYCLE_LENGTH, READ_BLOCK_LENGTH))
    assert ours == _tf_interleave(lengths)
