"""What a converter returns: the classes of a source and how to make each record."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.errors import InvalidArgument
from sampler_server.pack.splits import DEFAULT_RULE, default_split, half_valid_half_test
from sampler_server.store.manifest import Split


@dataclass(frozen=True)
class Derivation:
    """How a record's image is derived from its original file.

    Applied in this order: read (a file, or one row of a ``.npy`` bitmap array),
    crop to ``crop`` = (left, upper, right, lower) in pixels (clipped to the image),
    invert, multiply values by ``scale`` (capped at 255: dSprites' 0/1 masks become
    the 0/255 its reference feeds the model). The canonical ``describe()`` string
    enters the content fingerprint.
    """

    crop: tuple[int, int, int, int] | None = None
    invert: bool = False
    npy_row: int | None = None
    scale: int | None = None

    def __post_init__(self) -> None:
        if self.crop is not None:
            left, upper, right, lower = self.crop
            if right <= left or lower <= upper:
                raise InvalidArgument(f"crop box {self.crop} is empty; expected left < right and upper < lower")
        if self.npy_row is not None and self.npy_row < 0:
            raise InvalidArgument(f"npy_row must be >= 0, got {self.npy_row}")
        if self.scale is not None and not 2 <= self.scale <= 255:
            raise InvalidArgument(f"scale must be in [2, 255], got {self.scale}")

    @property
    def changes_pixels(self) -> bool:
        return self.crop is not None or self.invert or self.npy_row is not None or self.scale is not None

    def describe(self) -> str:
        parts = []
        if self.npy_row is not None:
            parts.append(f"npy_row={self.npy_row}")
        if self.crop is not None:
            parts.append("crop=" + ",".join(str(v) for v in self.crop))
        if self.invert:
            parts.append("invert")
        if self.scale is not None:
            parts.append(f"scale={self.scale}")
        return ";".join(parts)


@dataclass(frozen=True)
class SourceItem:
    """One future record.

    ``origin`` is the original file's path relative to the input root, with a
    ``#fragment`` when one file yields several records (a COCO object, a bitmap
    row); it identifies the record in the fingerprint and in error messages.
    ``data`` holds the original bytes when they come out of a container read by the
    converter (a TFDS example) rather than a file; ``where`` then names the record
    in error messages (dataset, split, index, field).
    """

    origin: str
    path: Path
    derivation: Derivation = field(default_factory=Derivation)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    data: bytes | None = None
    where: str | None = None

    @property
    def location(self) -> str:
        return self.where or str(self.path)


@dataclass(frozen=True)
class ClassPlan:
    """A class before packing; ``items`` is called once, when the class is written."""

    name: str
    items: Callable[[], Iterable[SourceItem]]
    split: Split | None = None
    wnid: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class SourcePlan:
    """Classes in final id order, and how their split was decided.

    ``reference_encoding``: store records as the Meta-Dataset reference converter
    does (originals only when they are RGB JPEGs it leaves alone, everything else an
    RGB JPEG at quality 75; ``pack.derive``). On for the MD sources.
    ``sidecar``: made with the store's partial directory, it keeps per-record data
    beside the LMDB values (VTAB's TFDS index and label attributes); its ``finish``
    gives the manifest's ``tfds`` block. ``default_name``: the store directory when
    ``--name`` is not given (else the source name). ``total_items``: when known,
    progress counts images instead of classes. ``class_digests``: fingerprint per
    class (``store.fingerprint.ClassDigestFingerprint``), so shards of the source
    merge into the fingerprint of one store (ImageNet-21K).
    """

    source: str
    classes: tuple[ClassPlan, ...]
    split_rule: str
    hierarchy: str | None = None
    notes: Mapping[str, Any] = field(default_factory=dict)
    reference_encoding: bool = False
    sidecar: Callable[[Path], RecordSidecar] | None = None
    default_name: str | None = None
    total_items: int | None = None
    class_digests: bool = False
    validation: tuple[ClassPlan, ...] = ()
    validation_labels: str = ""

    def __post_init__(self) -> None:
        if self.validation and [c.name for c in self.validation] != [c.name for c in self.classes]:
            raise ValueError("a validation partition lists one entry per class, in class order")


class RecordSidecar(Protocol):
    """Per-record data written beside the records, one ``add`` per written record in id order."""

    def add(self, metadata: Mapping[str, Any]) -> bytes:
        """Keep a written record's data; returns bytes for the content fingerprint."""

    def finish(self) -> dict[str, Any]:
        """Complete the side files; returns the manifest's ``tfds`` block."""

    def abort(self) -> None:
        """Close; the partial directory holding the files is removed by the writer."""


@dataclass(frozen=True)
class ConverterOptions:
    """Source-specific inputs a user may pass to ``pack``."""

    class_splits: Path | None = None
    duplicates: tuple[Path, ...] = ()
    labels: Path | None = None
    tfds_name: str | None = None  # VTAB: name[/config][:version] of a prepared TFDS dataset
    wnids: Path | None = None  # ImageNet-21K: pack only the synsets listed (one wnid per line)
    shard: tuple[int, int] | None = None  # ImageNet-21K: (index I, count N) of the share to pack
    validation: Path | None = None  # ILSVRC-2012: the official validation images (wnid folders or flat)
    validation_labels: Path | None = None  # ILSVRC-2012, flat validation: LOC_val_solution.csv or ground truth
    devkit_meta: Path | None = None  # ILSVRC-2012, ground-truth labels: the devkit's meta.mat
    split_fractions: tuple[float, float, float] | None = None  # image_folder: train, valid, test shares of the classes


_RULE_SPLITS: dict[str, tuple[Callable[[str, Sequence[str]], dict[str, Split]], tuple[Split, ...]]] = {
    DEFAULT_RULE: (default_split, (Split.TRAIN, Split.VALID, Split.TEST)),
    "default-half-valid-half-test": (half_valid_half_test, (Split.VALID, Split.TEST)),
}
"""A default split rule, its assignment and the splits it means to fill (a test-only rule,
or a user's split file, may leave a split empty on purpose)."""
MAX_CLASSES_ASKED = 1000


def empty_split_warnings(plan: SourcePlan) -> list[str]:
    """One line per split that a default rule meant to fill but left empty (too few classes
    for its proportions), saying how many classes it needs or which flag decides instead."""
    if plan.split_rule not in _RULE_SPLITS:
        return []
    assign, expected = _RULE_SPLITS[plan.split_rule]
    counts = {split: sum(1 for c in plan.classes if c.split is split) for split in Split}
    empty = [split for split in expected if counts[split] == 0]
    if not empty:
        return []

    def fills_all(n: int) -> bool:
        assigned = list(assign(plan.source, [f"class{i}" for i in range(n)]).values())
        return all(split in assigned for split in expected)

    needed = next((n for n in range(1, MAX_CLASSES_ASKED) if fills_all(n)), None)
    shown = ", ".join(f"{split.value} {counts[split]}" for split in (Split.TRAIN, Split.VALID, Split.TEST))
    at_least = f"pack at least {needed} classes, or " if needed is not None else ""
    return [f"warning: {plan.source}: split {split.value} is empty: the default rule ({plan.split_rule}) gives it "
            f"none of the {len(plan.classes)} classes ({shown}), so its episodes will be refused; {at_least}give "
            "--class-splits FILE to name each class's split (Meta-Dataset's JSON: {\"train\": [...], \"valid\": "
            "[...], \"test\": [...]})" for split in empty]


MD_MIN_WAYS = EpisodeConfig().min_ways
"""The fewest classes Meta-Dataset's variable-way episodes draw (``min_ways``, 5)."""
FIXED_WAYS_FLAGS = {Split.TRAIN: "--ways N", Split.VALID: "--eval-ways N", Split.TEST: "--eval-ways N"}
"""The trainers' flag that draws a split's episodes with N fixed ways instead."""


def small_split_warnings(plan: SourcePlan) -> list[str]:
    """One line per split holding some classes but fewer than Meta-Dataset's variable-way
    episodes need, so its default episodes will be refused; the flags that fix it."""
    counts = {split: sum(1 for c in plan.classes if c.split is split) for split in FIXED_WAYS_FLAGS}
    lines = []
    for split, count in counts.items():
        if 0 < count < MD_MIN_WAYS:
            evaluate = f", evaluate --md-ways {count}" if split is Split.TEST else ""
            fixed = (f"draw {count}-way episodes (the trainers' {FIXED_WAYS_FLAGS[split].replace('N', str(count))}"
                     f"{evaluate}) or " if count > 1 else "")  # one class: no episode classifies anything
            lines.append(
                f"warning: {plan.source}: split {split.value} has {count} class{'es' if count > 1 else ''}, fewer "
                f"than the {MD_MIN_WAYS} of Meta-Dataset's variable-way episodes, which will be refused; {fixed}"
                f"give --class-splits FILE naming each class's split (JSON: {{\"train\": [...], \"valid\": "
                f"[...], \"test\": [...]}}; docs/packing.md)")
    return lines


def order_classes(classes: Iterable[ClassPlan]) -> tuple[ClassPlan, ...]:
    """Canonical class order: train, valid, test, unsplit; by name within each."""
    rank = {Split.TRAIN: 0, Split.VALID: 1, Split.TEST: 2, None: 3}
    return tuple(sorted(classes, key=lambda c: (rank[c.split], c.name)))
