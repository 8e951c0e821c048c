"""DatasetSpec: the read-only, in-memory description of a source that samplers use.

A spec holds, per class, its id, name, contiguous record range [start, start +
count), split and (optionally) wnid or group, plus for WordNet-structured sources
the candidate internal nodes of each split (every node spanning at least 5 leaves;
a request's span cap selects among them when its plan is built). It is built from a
store's manifest (``DatasetSpec.from_manifest``), from the ImageNet glue
(``core.md.imagenet_spec``) or in memory (``DatasetSpec.from_counts``) for tests;
samplers never see LMDB.

Invariants checked on construction (``InvalidArgument`` otherwise):
- class ids are positions 0..n-1; records are contiguous: class i starts where
  class i-1 ends, and every class has at least one record;
- every class has a split, or none has (such a spec cannot be sampled until the
  split comes from a hierarchy, e.g. ImageNet's);
- per split, hierarchy nodes are sorted by id, unique, and list sorted leaf ids of
  classes of that split; a spec has either a node hierarchy or alphabet-like groups
  (``ClassSpec.group`` on every class), not both.
Listings (``classes_in``, ``groups_in``) are sorted by class id / group name, never by
insertion or hash order.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import Any

from sampler_server.core.hashing import FieldHasher
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument


@dataclasses.dataclass(frozen=True)
class ClassSpec:
    """One class: records [start, start + count)."""

    id: int
    name: str
    start: int
    count: int
    split: Split | None
    wnid: str | None = None
    group: str | None = None

    @property
    def end(self) -> int:
        return self.start + self.count


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """A candidate internal node: its id (a wnid) and the sorted class ids of the leaves it spans.

    A request's span cap (``EpisodeConfig.max_span_leaves``) picks the nodes it may
    draw from by ``len(leaves)``; the spec lists every candidate, whatever the cap.
    """

    id: str
    leaves: tuple[int, ...]


HierarchySpec = tuple[NodeSpec, ...]
"""The candidate nodes of one split (before a request's span cap), sorted by node id."""


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A source's classes and (optionally) per-split eligible hierarchy nodes.

    ``fingerprint`` is the store's content fingerprint (it enters every episode's
    fingerprint). ``hierarchy`` maps a split to its eligible nodes (ImageNet-like
    sources) and is None otherwise.
    """

    source: str
    fingerprint: str
    classes: tuple[ClassSpec, ...]
    hierarchy: Mapping[Split, HierarchySpec] | None = None
    _by_split: Mapping[Split, tuple[ClassSpec, ...]] = dataclasses.field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source:
            raise InvalidArgument(f"source: got {self.source!r}, expected a non-empty name")
        classes = tuple(self.classes)
        object.__setattr__(self, "classes", classes)
        _check_classes(self.source, classes)
        by_split = {split: tuple(c for c in classes if c.split is split) for split in Split}
        object.__setattr__(self, "_by_split", types.MappingProxyType(by_split))
        if self.hierarchy is not None:
            hierarchy = {Split(split): tuple(nodes) for split, nodes in self.hierarchy.items()}
            _check_hierarchy(self.source, hierarchy, by_split)
            if any(c.group is not None for c in classes):
                raise InvalidArgument(f"spec {self.source!r}: a node hierarchy and class groups are exclusive")
            object.__setattr__(self, "hierarchy", types.MappingProxyType(hierarchy))
        grouped = [c.group is not None for c in classes]
        if any(grouped) and not all(grouped):
            raise InvalidArgument(f"spec {self.source!r}: some classes have a group and some do not")

    @property
    def num_records(self) -> int:
        return self.classes[-1].end if self.classes else 0

    @property
    def has_splits(self) -> bool:
        return bool(self.classes) and self.classes[0].split is not None

    def classes_in(self, split: Split) -> tuple[ClassSpec, ...]:
        """Classes of ``split`` sorted by id."""
        return self._by_split[Split(split)]

    def nodes_in(self, split: Split) -> HierarchySpec | None:
        """Eligible nodes of ``split`` (sorted by id), or None for a source without a node hierarchy."""
        if self.hierarchy is None:
            return None
        return self.hierarchy.get(Split(split), ())

    def groups_in(self, split: Split) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
        """(group name, sorted class ids) of ``split`` sorted by name, or None for an ungrouped source."""
        members = self.classes_in(split)
        if not self.classes or self.classes[0].group is None:
            return None
        groups: dict[str, list[int]] = {}
        for info in members:
            groups.setdefault(str(info.group), []).append(info.id)
        return tuple((name, tuple(groups[name])) for name in sorted(groups))

    def content_hash(self) -> str:
        """SHA-256 of everything a sampler reads: store fingerprint, classes, splits, groups, nodes."""
        hasher = FieldHasher("sampler-server/dataset-spec/v1").text(self.source).text(self.fingerprint)
        hasher.integer(len(self.classes))
        for info in self.classes:
            hasher.integer(info.start).integer(info.count).text(info.name)
            for value in (info.split.value if info.split else None, info.wnid, info.group):
                hasher.text("" if value is None else "=" + value)
        for split in Split:
            nodes = self.nodes_in(split)
            hasher.integer(-1 if nodes is None else len(nodes))
            for node in nodes or ():
                hasher.text(node.id).integers(node.leaves)
        return hasher.hexdigest()

    @classmethod
    def from_manifest(cls, manifest: Any, hierarchy: Mapping[Split, HierarchySpec] | None = None) -> DatasetSpec:
        """The spec of a loaded ``store.manifest.Manifest`` (duck-typed), classes and splits as stored."""
        classes = tuple(
            ClassSpec(
                id=int(info.id),
                name=str(info.name),
                start=int(info.start),
                count=int(info.end) - int(info.start),
                split=_split_or_none(info.split),
                wnid=info.wnid,
                group=info.group,
            )
            for info in manifest.classes
        )
        return cls(source=str(manifest.source), fingerprint=str(manifest.fingerprint), classes=classes, hierarchy=hierarchy)

    @classmethod
    def from_counts(
        cls,
        source: str,
        counts: Sequence[int],
        splits: Sequence[Split | None],
        *,
        groups: Sequence[str] | None = None,
        hierarchy: Mapping[Split, HierarchySpec] | None = None,
        fingerprint: str = "in-memory",
    ) -> DatasetSpec:
        """An in-memory spec: class i has ``counts[i]`` records, in ``splits[i]`` (and ``groups[i]``)."""
        if len(splits) != len(counts) or (groups is not None and len(groups) != len(counts)):
            raise InvalidArgument(
                f"from_counts: got {len(counts)} counts, {len(splits)} splits"
                + ("" if groups is None else f", {len(groups)} groups")
                + ", expected equal lengths"
            )
        classes, start = [], 0
        for index, count in enumerate(counts):
            classes.append(
                ClassSpec(
                    id=index,
                    name=f"class_{index:05d}",
                    start=start,
                    count=int(count),
                    split=_split_or_none(splits[index]),
                    group=None if groups is None else groups[index],
                )
            )
            start += int(count)
        return cls(source=source, fingerprint=fingerprint, classes=tuple(classes), hierarchy=hierarchy)


def _split_or_none(value: Split | str | None) -> Split | None:
    if value is None:
        return None
    try:
        return Split(value)
    except ValueError:
        allowed = ", ".join(s.value for s in Split)
        raise InvalidArgument(f"split: got {value!r}, expected one of {allowed} or None") from None


def _check_classes(source: str, classes: tuple[ClassSpec, ...]) -> None:
    expected_start = 0
    for position, info in enumerate(classes):
        if info.id != position:
            raise InvalidArgument(f"spec {source!r}: class {info.name!r} has id {info.id}, expected {position}")
        if info.start != expected_start or info.count < 1:
            raise InvalidArgument(
                f"spec {source!r}: class {info.name!r} has records [{info.start}, {info.end}), "
                f"expected a non-empty range starting at {expected_start}"
            )
        if (info.split is None) != (classes[0].split is None):
            raise InvalidArgument(f"spec {source!r}: class {info.name!r} has split {info.split}; every class or none needs one")
        expected_start = info.end


def _check_hierarchy(
    source: str, hierarchy: Mapping[Split, HierarchySpec], by_split: Mapping[Split, tuple[ClassSpec, ...]]
) -> None:
    for split, nodes in hierarchy.items():
        members = {c.id for c in by_split[split]}
        ids = [node.id for node in nodes]
        if ids != sorted(set(ids)):
            raise InvalidArgument(f"spec {source!r} split {split.value}: hierarchy nodes must be unique and sorted by id")
        for node in nodes:
            leaves = tuple(node.leaves)
            if not leaves or list(leaves) != sorted(set(leaves)) or not set(leaves) <= members:
                raise InvalidArgument(
                    f"spec {source!r} split {split.value}: node {node.id} must list sorted, unique class ids "
                    f"of that split, got {leaves[:8]}{'...' if len(leaves) > 8 else ''}"
                )
