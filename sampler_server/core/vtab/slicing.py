"""TFDS split-slice specs (``"train[:800]+validation[:200]"``) resolved in pure Python.

VTAB-1k defines its splits as TFDS slice specs. The packer and the samplers must
pick exactly the examples ``tfds.load(split=spec)`` would, without importing TFDS,
so this module re-states TFDS 4.9's slicing rules (``tfds.core.splits``), checked
against TFDS itself in the tests:

- a spec is parts joined by ``+`` (spaces around it allowed), read in order; a part
  is ``name`` or ``name[from:to]``; an omitted bound is the split's start or end;
- bounds are absolute examples (negative ones count from the end) or percents;
  a ``%`` on either bound makes both percents; a percent bound ``p`` of a split of
  ``n`` examples is ``round(p * n / 100.0)`` (TFDS's default ``closest`` rounding,
  Python's round-half-to-even on that float);
- a bound beyond the split's size is an error, as in TFDS: nothing is clamped.

Two things TFDS accepts are refused here: ``all`` and shard slices (the VTAB specs
use neither), and a reversed slice (``from > to`` once resolved), which TFDS's
reader turns into a read to the split's end rather than an empty or failed one.
Every error is ``InvalidArgument``, one line, naming the dataset and the spec.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted

_PART_SEPARATOR = re.compile(r"\s*\+\s*")
_PART = re.compile(r"^(?P<split>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_BOUND = re.compile(r"^((?P<value>-?[\d_.]+)(?P<unit>%|shard)?)?$")


@dataclasses.dataclass(frozen=True)
class SlicePart:
    """One ``name[from:to]`` part of a spec, not yet resolved against split sizes."""

    split: str
    start: int | float | None = None
    stop: int | float | None = None
    percent: bool = False


@dataclasses.dataclass(frozen=True)
class SliceRange:
    """Examples ``[start, stop)`` of one TFDS split, in canonical (prepared) order."""

    split: str
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def spec(self, split_size: int) -> str:
        """The shortest absolute spec of this range (the bare name when it is the whole split)."""
        start = "" if self.start == 0 else str(self.start)
        stop = "" if self.stop == split_size else str(self.stop)
        return self.split if not start and not stop else f"{self.split}[{start}:{stop}]"


def parse_spec(spec: str, *, dataset: str = "") -> tuple[SlicePart, ...]:
    """Parses a spec into its parts, in order (TFDS's grammar; see the module docstring)."""
    if not isinstance(spec, str):
        raise InvalidArgument(f"{_where(dataset)}a split spec must be a string, got {quoted(spec)}")
    return tuple(_parse_part(part, spec, dataset) for part in _PART_SEPARATOR.split(spec))


def _parse_part(part: str, spec: str, dataset: str) -> SlicePart:
    def refuse(problem: str) -> InvalidArgument:
        return InvalidArgument(f"{_where(dataset)}split spec {quoted(spec)}: {problem}")

    match = _PART.match(part)
    if match is None:
        raise refuse(f"{quoted(part)} is not NAME or NAME[FROM:TO]")
    split, selector = match["split"], match["selector"]
    if split == "all":
        raise refuse("'all' is not supported; name the splits joined by '+'")
    if selector is None:
        return SlicePart(split)
    bounds = [_BOUND.match(piece) for piece in selector.split(":")]
    if len(bounds) != 2 or not all(bounds) or not any(bound[0] for bound in bounds if bound):
        raise refuse(f"{quoted(part)} needs a slice [FROM:TO] with at least one bound")
    # As in TFDS, the first bound's unit wins: "train[10:50%]" is 10% to 50%.
    unit = next((bound["unit"] for bound in bounds if bound and bound["unit"]), None)
    if unit == "shard":
        raise refuse("shard slices are not supported")
    percent = unit == "%"
    values: list[int | float | None] = []
    for bound in bounds:
        text = bound["value"] if bound else None
        try:
            values.append(None if text is None else float(text) if percent else int(text))
        except ValueError:
            raise refuse(f"bound {quoted(text)} is not a{' percent' if percent else 'n integer'}") from None
    if percent and any(value is not None and abs(value) > 100 for value in values):
        raise refuse("percent bounds must lie in [-100, 100]")
    return SlicePart(split, values[0], values[1], percent)


def resolve_spec(
    spec: str | Sequence[str], sizes: Mapping[str, int], *, dataset: str = ""
) -> tuple[SliceRange, ...]:
    """The absolute ranges a spec (or parts already split at ``+``) selects, in order.

    ``sizes`` maps each TFDS split name to its number of examples. A split the spec
    names but ``sizes`` lacks, a bound beyond a split's size, or a reversed slice is
    an ``InvalidArgument``.
    """
    checked = check_sizes(sizes, dataset=dataset)
    texts = [spec] if isinstance(spec, str) else list(spec)
    return tuple(
        _resolve_part(part, text, checked, dataset) for text in texts for part in parse_spec(text, dataset=dataset)
    )


def _resolve_part(part: SlicePart, spec: str, sizes: Mapping[str, int], dataset: str) -> SliceRange:
    size = split_size(sizes, part.split, dataset=dataset)

    def absolute(bound: int | float | None, default: int) -> int:
        if bound is None:
            return default
        if part.percent:
            return int(round(bound * size / 100.0))
        assert isinstance(bound, int)
        return bound

    start, stop = absolute(part.start, 0), absolute(part.stop, size)
    if abs(start) > size or abs(stop) > size:
        raise InvalidArgument(
            f"{_where(dataset)}split spec {quoted(spec)} asks for [{start}:{stop}] of {part.split!r}, "
            f"which has {size} examples"
        )
    start = start + size if start < 0 else start
    stop = stop + size if stop < 0 else stop
    if start > stop:
        raise InvalidArgument(
            f"{_where(dataset)}split spec {quoted(spec)} is reversed: [{start}:{stop}] of {part.split!r}"
        )
    return SliceRange(part.split, start, stop)


def take(ranges: Iterable[SliceRange], count: int) -> tuple[SliceRange, ...]:
    """The first ``count`` examples of ``ranges`` (all of them when there are fewer), as
    ``tf.data.Dataset.take`` gives them."""
    kept: list[SliceRange] = []
    left = count
    for piece in ranges:
        if left <= 0:
            break
        stop = min(piece.stop, piece.start + left)
        kept.append(SliceRange(piece.split, piece.start, stop))
        left -= stop - piece.start
    return tuple(kept)


def expand(ranges: Iterable[SliceRange]) -> list[tuple[str, int]]:
    """Every example of ``ranges`` as (TFDS split, index within it), in order."""
    return [(piece.split, index) for piece in ranges for index in range(piece.start, piece.stop)]


def check_sizes(sizes: Mapping[str, int], *, dataset: str = "") -> Mapping[str, int]:
    """``sizes`` itself, once every value is a non-negative int (not a bool)."""
    if not isinstance(sizes, Mapping):
        raise InvalidArgument(f"{_where(dataset)}split sizes must be a mapping, got {quoted(sizes)}")
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidArgument(
                f"{_where(dataset)}size of split {quoted(name)} must be a non-negative int, got {quoted(size)}"
            )
    return sizes


def split_size(sizes: Mapping[str, int], split: str, *, dataset: str = "") -> int:
    """``sizes[split]``, or an ``InvalidArgument`` naming the dataset and the missing split."""
    if split not in sizes:
        have = ", ".join(repr(name) for name in sizes) or "none"
        raise InvalidArgument(
            f"{_where(dataset)}needs the TFDS split {split!r}, which the split sizes lack (have: {have})"
        )
    return sizes[split]


def _where(dataset: str) -> str:
    return f"{dataset}: " if dataset else ""
