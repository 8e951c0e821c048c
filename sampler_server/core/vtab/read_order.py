"""TFDS's default read order of a split expression, as a pure function of shard lengths.

task_adaptation's ``scripts/run_all_tasks.sh`` trains on ``--train_examples 1000`` of
``trainval``: ``get_tf_data`` takes the first 1000 examples of TFDS's default read of
the trainval expression (``../shared/reference/vtab.md``, "Caveat"). That read is not
canonical order. In tensorflow-datasets 4.9.10 (``core/reader.py`` ``_read_files``,
``core/utils/read_config.py``, ``core/utils/shard_utils.py`` ``get_file_instructions``):

- the expression becomes file instructions: its parts in order, each part the split's
  shard files in file order, empty shards dropped, each shard cut to the part's slice
  and dropped when nothing of it is left;
- with ``shuffle_files=False`` the instructions keep that order and are read through
  ``tf.data.Dataset.interleave`` with ``ReadConfig``'s defaults: ``cycle_length`` 16
  (1 when the dataset's info sets ``disable_shuffling``), ``block_length`` 16,
  deterministic;
- interleave keeps ``cycle_length`` slots and visits them in turn, reading up to
  ``block_length`` examples of the file in the slot. A file found exhausted empties
  its slot and the visit moves on; an empty slot takes the next file when the visit
  comes back to it (``interleave`` below states this exactly; the tests compare it
  with ``tf.data`` and with TFDS itself).

The records of a store stay in canonical order; a read-order split is a list of
(TFDS split, canonical index) pairs in the order TFDS reads them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

from sampler_server.core.vtab.slicing import SliceRange
from sampler_server.errors import InvalidArgument

READ_CYCLE_LENGTH = 16
"""``tfds.ReadConfig().interleave_cycle_length`` when the dataset allows shuffling (TFDS 4.9.10)."""
READ_BLOCK_LENGTH = 16
"""``tfds.ReadConfig().interleave_block_length`` (TFDS 4.9.10)."""

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """How a prepared TFDS dataset is cut into files: each split's shard lengths in file
    order, and whether its info disables shuffling (then TFDS reads one file at a time)."""

    shard_lengths: Mapping[str, tuple[int, ...]]
    disable_shuffling: bool = False

    def __post_init__(self) -> None:
        for split, lengths in self.shard_lengths.items():
            if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in lengths):
                raise InvalidArgument(f"shard lengths of split {split!r} must be non-negative ints, "
                                      f"got {list(lengths)}")

    @property
    def cycle_length(self) -> int:
        return 1 if self.disable_shuffling else READ_CYCLE_LENGTH

    def split_size(self, split: str) -> int:
        if split not in self.shard_lengths:
            have = ", ".join(repr(name) for name in self.shard_lengths) or "none"
            raise InvalidArgument(f"no shard lengths for TFDS split {split!r} (have: {have})")
        return sum(self.shard_lengths[split])


def file_reads(ranges: Iterable[SliceRange], layout: ShardLayout) -> tuple[SliceRange, ...]:
    """TFDS's file instructions for ``ranges`` (a resolved expression), each as the canonical
    range of one shard it reads: parts in order, shards in file order, empty pieces dropped."""
    reads = []
    for piece in ranges:
        size = layout.split_size(piece.split)
        if not 0 <= piece.start <= piece.stop <= size:
            raise InvalidArgument(f"range [{piece.start}:{piece.stop}] of split {piece.split!r} is outside its "
                                  f"{size} examples")
        shard_start = 0
        for length in layout.shard_lengths[piece.split]:
            start, stop = max(piece.start, shard_start), min(piece.stop, shard_start + length)
            if start < stop:
                reads.append(SliceRange(piece.split, start, stop))
            shard_start += length
    return tuple(reads)


def interleave(sources: Iterable[Iterable[T]], cycle_length: int, block_length: int) -> Iterator[T]:
    """``tf.data.Dataset.interleave``'s deterministic order over ``sources``."""
    if cycle_length < 1 or block_length < 1:
        raise InvalidArgument(f"cycle_length and block_length must be >= 1, got {cycle_length}, {block_length}")
    pending = iter(sources)
    slots: list[Iterator[T] | None] = [None] * cycle_length
    input_done, open_slots, slot, taken = False, 0, 0, 0
    end = object()
    while not input_done or open_slots:
        current = slots[slot]
        if current is not None:
            item = next(current, end)
            if item is not end:
                yield item  # type: ignore[misc]
                taken += 1
                if taken == block_length:
                    slot, taken = (slot + 1) % cycle_length, 0
                continue
            slots[slot] = None  # exhausted: the slot stays empty until the visits come back to it
            open_slots -= 1
            slot, taken = (slot + 1) % cycle_length, 0
        elif not input_done:
            source = next(pending, end)
            if source is end:
                input_done = True
            else:
                slots[slot] = iter(source)  # type: ignore[call-overload]
                open_slots += 1
        else:
            slot, taken = (slot + 1) % cycle_length, 0


def default_read(ranges: Iterable[SliceRange], layout: ShardLayout, count: int | None = None) -> list[tuple[str, int]]:
    """The first ``count`` (all when None) examples of TFDS's default read of ``ranges``
    (``shuffle_files=False``) as (TFDS split, canonical index), in the order read."""
    # zip binds each file's split now: a generator reading ``read.split`` late would name the
    # split of the last file opened, and interleave keeps several files open at once
    files = (zip(itertools.repeat(read.split), range(read.start, read.stop)) for read in file_reads(ranges, layout))
    return list(itertools.islice(interleave(files, layout.cycle_length, READ_BLOCK_LENGTH), count))
