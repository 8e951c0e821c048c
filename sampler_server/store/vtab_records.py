"""Which TFDS example each record of a VTAB store is, and its label attributes.

A store packed by ``sampler-server pack vtab`` holds one TFDS dataset. Its manifest's
classes are the dataset's TFDS splits (not label classes): sorted by split name, each
the contiguous record range of that split's examples in canonical index order, i.e.
the order TFDS slicing (``train[i:i+1]``) refers to: shard after shard, each in file
order. So ``record_id = start[split] + index`` whenever nothing was skipped at pack time
(``--on-error skip``); otherwise the ``tfds_index`` column is searched.

The manifest's ``tfds`` block names the dataset, config and version, gives each TFDS
split's size and shard lengths and whether the dataset disables shuffling (what TFDS's
default read order, and so ``trainval1000``, follows from), the label attributes kept,
and describes the columnar side file ``tfds_records.bin`` (``store.columns``): per
record its ``tfds_index`` and every attribute, ragged lists (CLEVR and KITTI objects)
via offsets. The file's size
and SHA-256 are in the manifest; the attribute values also enter the store's content
fingerprint. No MD split is set on these classes, so the Meta-Dataset service lists
such a store with zero classes per split and never samples an episode from it.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sampler_server.core.hashing import listing_fingerprint
from sampler_server.errors import DataLoss, FailedPrecondition, InvalidArgument, NotFound
from sampler_server.quoting import quoted
from sampler_server.store.columns import ColumnsReader, ColumnSpec, ColumnsWriter
from sampler_server.store.manifest import Manifest, load_manifest

COLUMNS_FILE = "tfds_records.bin"
SPLIT_RULE = "tfds-splits"
SOURCE_PREFIX = "tfds:"
INDEX_COLUMN = "tfds_index"
SPLIT_ORDER = "TFDS splits sorted by name; each split's examples in canonical index order (shard after shard)"


def source_kind(tfds_name: str) -> str:
    """The manifest ``source`` of a VTAB store: ``tfds:<name>[/<config>]``. The prefix keeps a
    TFDS dataset apart from the Meta-Dataset source of the same name (``dtd``)."""
    return SOURCE_PREFIX + tfds_name


def version_matches(version: str, pattern: str) -> bool:
    """``3.1.0`` matches ``3.1.0``, ``3.*.*`` and ``*.*.*``."""
    have, want = version.split("."), pattern.split(".")
    return len(have) == len(want) and all(w in ("*", h) for h, w in zip(have, want))


def is_tfds_store(manifest: Manifest) -> bool:
    return manifest.tfds is not None and manifest.source.startswith(SOURCE_PREFIX)


def record_attributes(metadata: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The attributes of one record's metadata, as the columns and the fingerprint see them."""
    return {name: metadata[name] for name in names}


class TfdsRecordsWriter:
    """The pipeline's sidecar for a VTAB pack: one row per written record, in id order."""

    def __init__(self, directory: Path, tfds: Mapping[str, Any]) -> None:
        self.tfds = dict(tfds)
        self.attribute_names = [a["name"] for a in self.tfds["attributes"]]
        specs = [ColumnSpec(INDEX_COLUMN, "<i8")] + [
            ColumnSpec(a["name"], a["dtype"], bool(a["ragged"])) for a in self.tfds["attributes"]
        ]
        self._columns = ColumnsWriter(directory, COLUMNS_FILE, specs)

    def add(self, metadata: Mapping[str, Any]) -> bytes:
        """Keep one record's index and attributes; returns the bytes the fingerprint hashes."""
        attributes = record_attributes(metadata, self.attribute_names)
        self._columns.append({INDEX_COLUMN: metadata[INDEX_COLUMN], **attributes})
        identity = {"tfds_split": metadata["tfds_split"], INDEX_COLUMN: metadata[INDEX_COLUMN], **attributes}
        return json.dumps(identity, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def finish(self) -> dict[str, Any]:
        """The manifest's ``tfds`` block, with the written columns file described."""
        return {**self.tfds, "columns": self._columns.finish()}

    def abort(self) -> None:
        self._columns.abort()


class TfdsRecords:
    """Read-only view of a VTAB store's TFDS identity; never opens LMDB or images."""

    def __init__(self, directory: str | os.PathLike[str], manifest: Manifest | None = None) -> None:
        self.directory = Path(directory)
        self.manifest = manifest if manifest is not None else load_manifest(self.directory)
        where = f"store {self.manifest.name!r}"
        if not is_tfds_store(self.manifest):
            raise InvalidArgument(f"{where} is not a TFDS (VTAB) store (source {self.manifest.source!r})")
        tfds = self.manifest.tfds or {}
        try:
            self.name = str(tfds["name"])
            self.version = str(tfds["version"])
            self.attribute_specs = tuple(tfds["attributes"])
            self._sizes = {str(k): int(v["num_examples"]) for k, v in tfds["splits"].items()}
            columns = tfds["columns"]
        except (KeyError, TypeError, ValueError) as error:
            raise DataLoss(f"{where}: malformed tfds block in its manifest ({error!r})") from None
        self._shards = _shard_layout(tfds, self._sizes, where)
        self.columns = ColumnsReader(self.directory, columns, where=where)
        self._ranges = {c.name: (c.start, c.end) for c in self.manifest.classes}
        if self.columns.rows != self.manifest.num_records:
            raise DataLoss(f"{where}: {COLUMNS_FILE} has {self.columns.rows} rows for {self.manifest.num_records} records")
        unknown = sorted(set(self._ranges) - set(self._sizes))
        if unknown:
            raise DataLoss(f"{where}: record ranges {unknown} name no TFDS split of its manifest")
        for split, (start, end) in self._ranges.items():
            if end - start > self._sizes[split]:
                raise DataLoss(f"{where}: split {split!r} has {end - start} records but {self._sizes[split]} examples")

    @property
    def attribute_names(self) -> list[str]:
        return [str(a["name"]) for a in self.attribute_specs]

    def split_sizes(self) -> dict[str, int]:
        """TFDS split name -> number of examples in TFDS (what slicing percentages refer to)."""
        return dict(self._sizes)

    def shard_layout(self) -> Any:
        """How the packed TFDS splits were cut into files (a ``core.vtab.ShardLayout``).

        Raises:
            FailedPrecondition: the store was packed before its manifest recorded it.
        """
        if self._shards is None:
            raise FailedPrecondition(
                f"store {self.manifest.name!r} was packed without the TFDS shard layout (shard lengths and "
                f"disable_shuffling in its manifest) that TFDS's default read order needs; re-pack it with "
                f"`sampler-server pack vtab --tfds-name {self.name}`")
        return self._shards

    def examples(self, task: Any, split: str) -> list[tuple[str, int]]:
        """The (TFDS split, canonical index) pairs of VTAB ``split`` of ``task``, in order.

        Raises:
            FailedPrecondition: a read-order split (``trainval1000``) of a store packed before
                shard layouts were recorded.
            InvalidArgument: the split cannot be carved from these sizes.
        """
        from sampler_server.core.vtab import READ_ORDER_SPLITS, resolve  # pure; imported here, as the shard layout reader does

        shards = self.shard_layout() if split in READ_ORDER_SPLITS else None
        return resolve(task, split, self.split_sizes(), shards)

    def split_range(self, split: str) -> tuple[int, int]:
        """The record ids [start, end) of a TFDS split."""
        if split not in self._ranges:
            raise NotFound(f"TFDS split {quoted(split)} is not in store {self.manifest.name!r}; "
                           f"splits: {', '.join(sorted(self._ranges))}")
        return self._ranges[split]

    def record_ids(self, split: str, indices: Sequence[int]) -> np.ndarray:
        """Record ids of canonical TFDS indices of ``split``, in the order given.

        Raises:
            InvalidArgument: an index outside the split.
            NotFound: an example skipped at pack time (``--on-error skip``).
        """
        start, end = self.split_range(split)
        wanted = np.asarray(indices, dtype=np.int64)
        size = self._sizes[split]
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= size):
            bad = int(wanted.min() if wanted.min() < 0 else wanted.max())
            raise InvalidArgument(f"{self.name} split {split}: index {bad} is outside [0, {size})")
        if end - start == size:
            return start + wanted
        held = self.columns.scalar(INDEX_COLUMN)[start:end]  # ascending: packed in index order
        positions = np.searchsorted(held, wanted)
        found = np.zeros(len(wanted), dtype=bool)
        inside = positions < len(held)
        found[inside] = held[positions[inside]] == wanted[inside]
        if not found.all():
            missing = int(wanted[~found][0])
            raise NotFound(f"{self.name} split {split} index {missing}: skipped when the store was packed "
                           f"(see skipped in its manifest)")
        return start + positions

    def record_id(self, split: str, index: int) -> int:
        return int(self.record_ids(split, [index])[0])

    def location(self, record_id: int) -> tuple[str, int]:
        """(TFDS split, canonical index) of a record."""
        if not 0 <= record_id < self.manifest.num_records:
            raise InvalidArgument(f"record id {record_id} is outside [0, {self.manifest.num_records})")
        starts = [c.start for c in self.manifest.classes]
        info = self.manifest.classes[bisect.bisect_right(starts, record_id) - 1]
        return info.name, int(self.columns.scalar(INDEX_COLUMN)[record_id])

    def attributes(self, record_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Label attributes of records, plain Python values, in the order asked."""
        return self.columns.rows_at(record_ids, self.attribute_names)

    def scalar_attributes(self) -> list[str]:
        """The stored attributes holding one number per record (not a per-object list)."""
        ragged = {spec.name for spec in self.columns.specs if spec.ragged}
        return [name for name in self.attribute_names if name not in ragged]

    def numeric_attribute(self, name: str, record_ids: Sequence[int], field: str = "target") -> np.ndarray:
        """Attribute ``name`` of records as float64, in the order asked (e.g. a regression target).

        Raises:
            InvalidArgument: ``name`` is not stored in this store, or holds a list per record;
                one line naming ``field``, the store and its scalar attributes.
        """
        allowed = ", ".join(self.scalar_attributes()) or "none"
        where = f"store {self.manifest.name!r}"
        if name not in self.attribute_names:
            raise InvalidArgument(f"{field}: {quoted(name)} is not an attribute stored in {where}; "
                                  f"numeric attributes: {allowed}")
        if name not in self.scalar_attributes():
            raise InvalidArgument(f"{field}: attribute {quoted(name)} of {where} holds a list per record, not one "
                                  f"number; numeric attributes: {allowed}")
        return self.columns.scalar(name)[np.asarray(record_ids, dtype=np.int64)].astype(np.float64)

    def check_task(self, task: Any) -> None:
        """The store holds the task's TFDS dataset in a version the task takes (``core.vtab.Task``)."""
        if task.tfds_name != self.name or not version_matches(self.version, task.version):
            raise FailedPrecondition(
                f"store {self.manifest.name!r} holds {self.name}:{self.version}; task {task.name} reads "
                f"{task.tfds_name}:{task.version}"
            )

    def verify(self) -> None:
        """Recompute the columns file's SHA-256 against the manifest (``sampler-server verify``)."""
        self.columns.verify_digest()


def _shard_layout(tfds: Mapping[str, Any], sizes: Mapping[str, int], where: str) -> Any:
    """The manifest's shard layout (None when it predates ``disable_shuffling`` being recorded)."""
    from sampler_server.core.vtab import ShardLayout  # pure; imported here so storage stays importable alone

    splits = tfds["splits"]
    if "disable_shuffling" not in tfds or any("shard_lengths" not in info for info in splits.values()):
        return None
    try:
        lengths = {str(name): tuple(int(n) for n in info["shard_lengths"]) for name, info in splits.items()}
        layout = ShardLayout(lengths, disable_shuffling=bool(tfds["disable_shuffling"]))
    except (TypeError, ValueError, InvalidArgument) as error:
        raise DataLoss(f"{where}: malformed shard lengths in its manifest ({error})") from None
    for name, size in sizes.items():
        if layout.split_size(name) != size:
            raise DataLoss(f"{where}: shard lengths of split {name!r} sum to {layout.split_size(name)}, "
                           f"not its {size} examples")
    return layout


@dataclass(frozen=True)
class SplitListing:
    """A VTAB split of one task read from a store: its records in order and their labels."""

    task: str
    split: str
    store: str
    store_fingerprint: str
    num_classes: int
    record_ids: tuple[int, ...]
    locations: tuple[tuple[str, int], ...]
    labels: tuple[int, ...]

    @property
    def fingerprint(self) -> str:
        return split_fingerprint(self.task, self.store_fingerprint, self.split, self.record_ids, self.labels)


def split_fingerprint(task: str, store_fingerprint: str, split: str, record_ids: Sequence[int],
                      labels: Sequence[int]) -> str:
    """Stable hash of a split's composition: task, store content, split, ordered (record id, label)."""
    return listing_fingerprint("sampler-server/vtab-split/v1", task, store_fingerprint, split, record_ids, labels)


def list_split(records: TfdsRecords, task: Any, split: str) -> SplitListing:
    """The records of VTAB ``split`` of ``task`` (a ``core.vtab.Task``), labels by its rule; no image is read.

    Raises:
        FailedPrecondition: the store holds another dataset or a version the task does not take.
        FailedPrecondition: ``trainval1000`` of a store packed before shard layouts were recorded.
        InvalidArgument, NotFound: the split cannot be carved from these sizes, or an example was skipped.
    """
    records.check_task(task)
    pairs = records.examples(task, split)
    ids = np.empty(len(pairs), dtype=np.int64)
    by_split: dict[str, list[int]] = {}
    for position, (tfds_split, _) in enumerate(pairs):
        by_split.setdefault(tfds_split, []).append(position)
    for tfds_split, positions in by_split.items():
        ids[positions] = records.record_ids(tfds_split, [pairs[p][1] for p in positions])
    id_list = [int(i) for i in ids]
    labels = tuple(int(task.label(attributes)) for attributes in records.attributes(id_list))
    return SplitListing(
        task=task.name, split=split, store=records.manifest.name, store_fingerprint=records.manifest.fingerprint,
        num_classes=int(task.num_classes), record_ids=tuple(id_list), locations=tuple(pairs), labels=labels,
    )
