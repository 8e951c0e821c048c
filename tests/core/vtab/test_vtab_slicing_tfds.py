"""Split membership side by side with TFDS: our pure slicing against TFDS 4.9's own resolution.

Two independent routes to each VTAB split's examples must agree:
- ours: ``resolve(task, split, sizes)`` (the registry's carving, our slicing);
- theirs: the reference's split strings for that dataset (re-stated below from
  task_adaptation's per-dataset ``tfds_splits``), resolved by
  ``tfds.core.ReadInstruction.from_spec(spec).to_absolute(split_infos)``.
Either both refuse (a missing TFDS split, a slice past a split's end) or both give the
same (split, index) sequence. Random specs check the slicing grammar on its own.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from conftest import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_vtab_tasks import REFERENCE_SIZES

from sampler_server.core.vtab import READ_ORDER_SPLITS, SPLITS, TASKS, get_task, resolve, resolve_spec
from sampler_server.core.vtab.slicing import SliceRange, expand, parse_spec, take
from sampler_server.errors import InvalidArgument

import tensorflow_datasets as tfds

SLICE_SPLITS = tuple(split for split in SPLITS if split not in READ_ORDER_SPLITS)
"""The splits that are slices (trainval1000, a read order, is checked in test_vtab_read_order_tfds)."""

_TAIL = {"caltech101": 90, "cifar100": 90, "oxford_iiit_pet": 80, "svhn_cropped": 90, "clevr": 90}
_THREE_WAY = {"eurosat/rgb": (60, 20), "resisc45": (60, 20), "dsprites": (80, 10)}


def reference_specs(tfds_name: str, sizes: Mapping[str, int]) -> dict[str, str | None]:
    """The reference's split strings for a dataset (None for those needing a missing ``train`` size)."""
    if tfds_name == "smallnorb":
        return {"train": "train", "val": "test[:50%]", "trainval": "train+test[:50%]", "test": "test[50%:]",
                "train800": "train[:800]", "val200": "test[:200]", "train800val200": "train[:800]+test[:200]"}
    if tfds_name not in _TAIL and tfds_name not in _THREE_WAY:
        return {"train": "train", "val": "validation", "trainval": "train+validation", "test": "test",
                "train800": "train[:800]", "val200": "validation[:200]",
                "train800val200": "train[:800]+validation[:200]"}
    total = sizes.get("train", -1)
    if tfds_name in _TAIL:
        cut = _TAIL[tfds_name] * total // 100
        specs: dict[str, str | None] = {
            "train": f"train[:{cut}]", "val": f"train[{cut}:]", "trainval": "train",
            "test": "validation" if tfds_name == "clevr" else "test", "train800": "train[:800]",
            "val200": f"train[{cut}:{cut + 200}]", "train800val200": f"train[:800]+train[{cut}:{cut + 200}]"}
        needs_count = ("train", "val", "val200", "train800val200")
    else:
        train_pct, val_pct = _THREE_WAY[tfds_name]
        cut, val_count = total * train_pct // 100, total * val_pct // 100
        specs = {"train": f"train[:{cut}]", "val": f"train[{cut}:{cut + val_count}]",
                 "trainval": f"train[:{cut + val_count}]", "test": f"train[{cut + val_count}:]",
                 "train800": "train[:800]", "val200": f"train[{cut}:{cut + 200}]",
                 "train800val200": f"train[:800]+train[{cut}:{cut + 200}]"}
        needs_count = tuple(specs)
    return {split: None if total < 0 and split in needs_count else spec for split, spec in specs.items()}


def tfds_ranges(spec: str, sizes: Mapping[str, int]) -> tuple[SliceRange, ...] | None:
    """TFDS's own resolution of ``spec`` (None when TFDS refuses it)."""
    infos = {name: tfds.core.SplitInfo(name=name, shard_lengths=[size], num_bytes=0) for name, size in sizes.items()}
    try:
        instructions = tfds.core.ReadInstruction.from_spec(spec).to_absolute(infos)
    except Exception:  # noqa: BLE001 - TFDS signals a bad spec with ValueError, NotImplementedError, ...
        return None
    return tuple(
        SliceRange(str(i.splitname), i.from_ or 0, sizes[str(i.splitname)] if i.to is None else i.to)
        for i in instructions
    )


def expected_ranges(task_name: str, split: str, sizes: Mapping[str, int]) -> tuple[SliceRange, ...] | None:
    specs = reference_specs(get_task(task_name).tfds_name, sizes)
    if split == "trainval1000-canonical":  # data.take(1000) on trainval read one file at a time
        spec = specs["trainval"]
        trainval = None if spec is None else tfds_ranges(spec, sizes)
        return None if trainval is None else take(trainval, 1000)
    spec = specs[split]
    return None if spec is None else tfds_ranges(spec, sizes)


def ours(task_name: str, split: str, sizes: Mapping[str, int]) -> tuple[SliceRange, ...] | None:
    try:
        return get_task(task_name).ranges(split, sizes)
    except InvalidArgument:
        return None


def assert_same_as_tfds(task_name: str, split: str, sizes: Mapping[str, int]) -> None:
    expected, got = expected_ranges(task_name, split, sizes), ours(task_name, split, sizes)
    assert got == expected, (task_name, split, dict(sizes))
    if got is not None:
        assert all(0 <= piece.start <= piece.stop <= sizes[piece.split] for piece in got)
        # Our own spec strings, read by TFDS, select the same examples.
        assert tfds_ranges(get_task(task_name).spec(split, sizes), sizes) == expected


def _sizes_for(task_name: str, train: int, validation: int, test: int) -> dict[str, int]:
    present = REFERENCE_SIZES[get_task(task_name).tfds_name]
    wanted = {"train": train, "validation": validation, "test": test}
    return {name: size for name, size in wanted.items() if name in present}


FIXED_SIZES = [
    (1200, 300, 500),     # small: 800 fits, val200 past the end for the 90% carvings
    (2000, 200, 501),     # 90% carvings just fit (1800 + 200 = 2000)
    (2500, 250, 12151),   # smallnorb's test[50%:] rounds 6075.5 to 6076 (half to even)
    (4000, 1000, 12153),  # 6076.5 rounds to 6076
    (800, 200, 1),
    (799, 199, 3),
    (0, 0, 0),
    (7001, 333, 2),       # the 60/20 and 80/10 carvings floor
]


@pytest.mark.parametrize("split", SLICE_SPLITS)
@pytest.mark.parametrize("task_name", list(TASKS))
def test_every_split_of_every_task_matches_tfds_at_reference_sizes(task_name: str, split: str) -> None:
    sizes = REFERENCE_SIZES[get_task(task_name).tfds_name]
    assert_same_as_tfds(task_name, split, sizes)
    ranges = expected_ranges(task_name, split, sizes)
    assert ranges is not None
    if sum(map(len, ranges)) <= 100_000:
        assert resolve(task_name, split, sizes) == expand(ranges)


@pytest.mark.parametrize("sizes", FIXED_SIZES, ids=lambda sizes: "-".join(map(str, sizes)))
@pytest.mark.parametrize("task_name", list(TASKS))
def test_every_split_matches_tfds_at_small_and_rounding_sizes(task_name: str, sizes: tuple[int, int, int]) -> None:
    split_sizes = _sizes_for(task_name, *sizes)
    for split in SLICE_SPLITS:
        assert_same_as_tfds(task_name, split, split_sizes)
        expected = expected_ranges(task_name, split, split_sizes)
        if expected is not None:
            assert resolve(task_name, split, split_sizes) == expand(expected)


def test_small_sizes_refuse_what_tfds_refuses() -> None:
    sizes = {"train": 1200, "test": 500}
    assert ours("caltech101", "val200", sizes) is None  # train[1080:1280] of 1200: TFDS raises too
    assert ours("caltech101", "train800", sizes) == (SliceRange("train", 0, 800),)
    assert ours("smallnorb_azimuth", "test", {"train": 10, "test": 12151}) == (SliceRange("test", 6076, 12151),)


@settings(max_examples=examples(300), deadline=None)
@given(
    task_name=st.sampled_from(list(TASKS)),
    split=st.sampled_from(SLICE_SPLITS),
    sizes=st.dictionaries(st.sampled_from(["train", "validation", "test", "extra"]), st.integers(0, 4000)),
)
def test_random_sizes_match_tfds(task_name: str, split: str, sizes: dict[str, int]) -> None:
    assert_same_as_tfds(task_name, split, sizes)


_bound = st.one_of(
    st.none(),
    st.integers(-5000, 5000).map(str),
    st.integers(-110, 110).map(lambda value: f"{value}%"),
    st.floats(-101, 101, allow_nan=False).map(lambda value: f"{value:.2f}%"),
)


@st.composite
def _specs(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(["train", "validation", "test", "extra"]))
        start, stop = draw(_bound), draw(_bound)
        if start is None and stop is None and draw(st.booleans()):
            parts.append(name)
        else:
            parts.append(f"{name}[{start or ''}:{stop or ''}]")
    return draw(st.sampled_from(["+", " + ", "+ "])).join(parts)


@settings(max_examples=examples(400), deadline=None)
@given(spec=_specs(), sizes=st.fixed_dictionaries({"train": st.integers(0, 3000), "test": st.integers(0, 3000),
                                                    "validation": st.integers(0, 300)}))
@example(spec="test[:50%]+test[50%:]", sizes={"train": 0, "test": 12151, "validation": 0})
@example(spec="train[-10:]+train[:-10]", sizes={"train": 10, "test": 0, "validation": 0})
@example(spec="train[10:50%]", sizes={"train": 1000, "test": 0, "validation": 0})
@example(spec="train[33.33%:66.67%]", sizes={"train": 1001, "test": 0, "validation": 0})
def test_random_specs_resolve_as_tfds_resolves_them(spec: str, sizes: dict[str, int]) -> None:
    expected = tfds_ranges(spec, sizes)
    try:
        got: tuple[SliceRange, ...] | None = resolve_spec(spec, sizes)
    except InvalidArgument as error:
        got = None
        reversed_slice = expected is not None and any(piece.start > piece.stop for piece in expected)
        assert expected is None or (reversed_slice and "reversed" in str(error)), (spec, expected, str(error))
    if got is not None:
        assert got == expected


@settings(max_examples=examples(500), deadline=None)
@given(spec=st.text(alphabet="tranes[]:%-0123456789._+ ", max_size=24))
def test_the_grammar_accepts_what_tfds_accepts(spec: str) -> None:
    sizes = {"train": 10_000, "test": 100, "tra": 5}
    expected = tfds_ranges(spec, sizes)
    try:
        got = resolve_spec(spec, sizes)
    except InvalidArgument:
        assert expected is None or any(piece.start > piece.stop for piece in expected), spec
    else:
        assert got == expected, spec


@pytest.mark.parametrize(
    "spec",
    ["all", "train[5]", "train[1:2:3]", "train[:]", "train[1shard:]", "train[1.5:]", "train[:101%]", "", "train+",
     "train [1:2]", "tr@in"],
)
def test_refused_specs(spec: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_spec(spec) and resolve_spec(spec, {"train": 100})


def test_parse_is_faithful() -> None:
    assert [(p.split, p.start, p.stop, p.percent) for p in parse_spec("train[:800] + validation[-5%:]")] == [
        ("train", None, 800, False), ("validation", -5.0, None, True)]
