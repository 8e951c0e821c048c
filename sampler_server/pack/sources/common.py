"""Helpers converters share: checked paths, image listings, plan assembly."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.pack.plan import (
    ClassPlan,
    ConverterOptions,
    SourceItem,
    SourcePlan,
    order_classes,
)
from sampler_server.pack.splits import DEFAULT_RULE, assign_splits
from sampler_server.store.manifest import Split

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".gif", ".tif", ".tiff", ".webp"})


def require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise InputFormatError(path, f"missing {what} directory")
    return path


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise InputFormatError(path, f"missing {what}")
    return path


def list_images(directory: Path, suffixes: Iterable[str] = IMAGE_SUFFIXES) -> list[Path]:
    """Image files directly in ``directory``, sorted by name (hidden files skipped)."""
    allowed = {s.lower() for s in suffixes}
    return sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in allowed
    )


def file_items(root: Path, files: Sequence[Path]) -> list[SourceItem]:
    return [SourceItem(origin=p.relative_to(root).as_posix(), path=p) for p in files]


@dataclass(frozen=True)
class ClassEntry:
    """A class as a converter finds it, before its split is known."""

    name: str
    items: Callable[[], Iterable[SourceItem]]
    wnid: str | None = None
    group: str | None = None
    split: Split | None = None  # set by converters whose split is structural (Omniglot)


@dataclass
class PlanBuilder:
    source: str
    entries: list[ClassEntry] = field(default_factory=list)
    reference_encoding: bool = True  # a Meta-Dataset source: store what its reference converter stores

    def add(self, entry: ClassEntry) -> None:
        self.entries.append(entry)

    def build(
        self,
        options: ConverterOptions,
        default_rule: str = DEFAULT_RULE,
        hierarchy: str | None = None,
        notes: dict[str, Any] | None = None,
        structural_rule: str | None = None,
    ) -> SourcePlan:
        names = [e.name for e in self.entries]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InputFormatError(self.source, f"two classes share the name(s) {duplicates}")
        if not self.entries:
            raise InputFormatError(self.source, "no classes found in the input")
        if structural_rule is not None:
            splits = {e.name: e.split for e in self.entries}
            rule = structural_rule
        else:
            splits, rule = assign_splits(self.source, names, options.class_splits, default_rule,
                                         options.split_fractions)
        classes = [
            ClassPlan(name=e.name, items=e.items, split=splits[e.name], wnid=e.wnid, group=e.group)
            for e in self.entries
        ]
        return SourcePlan(
            source=self.source,
            classes=order_classes(classes),
            split_rule=rule,
            hierarchy=hierarchy,
            notes=notes or {},
            reference_encoding=self.reference_encoding,
        )


def reject_unused(source: str, options: ConverterOptions, accepts: Iterable[str]) -> None:
    """A flag the source does not use is a user error, not something to ignore."""
    accepted = set(accepts)
    flags = {"class_splits": "--class-splits", "duplicates": "--duplicates", "labels": "--labels",
             "tfds_name": "--tfds-name", "wnids": "--wnids", "shard": "--shard", "validation": "--validation",
             "validation_labels": "--validation-labels", "devkit_meta": "--devkit-meta",
             "split_fractions": "--split-fractions"}
    for field_name, flag in flags.items():
        value = getattr(options, field_name)
        if value and field_name not in accepted:
            allowed = ", ".join(flags[a] for a in sorted(accepted)) or "none"
            raise InvalidArgument(f"{flag} does not apply to source {source!r} (it accepts: {allowed})")
