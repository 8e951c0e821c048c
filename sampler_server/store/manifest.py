"""The manifest: a human-readable JSON description of one packed source.

It is the only file the server reads at start-up (images stay in LMDB), so it holds
everything a sampler needs: classes in id order with their contiguous record
ranges, their split, hierarchy references, the pack options and the content
fingerprint. Loading validates it fully; a manifest that does not describe a
consistent store is refused rather than served.

Integrity (``storage``): the record layout of the values (2: each carries a CRC-32;
1: stores packed before checksums, which cannot be verified), and the size and
SHA-256 of ``data.mdb`` as the pack left it. The server compares the size at start-up
(cheap: a truncated file is quarantined, never mapped and read past its end);
``sampler-server verify`` also recomputes the SHA-256. Manifests written before these
fields existed load with ``record_layout=1`` and no size or digest.

``tfds`` is present only on stores of one TFDS dataset (``pack vtab``): its name,
version, split sizes, label attributes and columnar side file
(``store.vtab_records`` reads it).

``validation`` is present only on ILSVRC-2012 stores packed with ``--validation``: the
official validation images, a held-out partition stored after every class's records
(ids ``[num_records, total_records)``), per class one contiguous range in class order,
with a content fingerprint of its own. Class ranges, ``num_records`` and ``fingerprint``
describe the train partition alone, so what reads classes (Meta-Dataset's specs,
episodes, batches and their fingerprints) never sees a validation record.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sampler_server.core.split import Split
from sampler_server.errors import DataLoss, NotFound

VALIDATION = "validation"
"""Name of the held-out partition (ILSVRC-2012's official validation images)."""
MANIFEST_NAME = "manifest.json"
DATA_NAME = "data.mdb"
FORMAT_NAME = "sampler-server-store"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ClassInfo:
    """One class: its id is its position; its records are [start, end).

    ``digest``: the class's content digest, on stores fingerprinted per class
    (``store.fingerprint.ClassDigestFingerprint``: sources packed in shards)."""

    id: int
    name: str
    start: int
    end: int
    split: Split | None = None
    wnid: str | None = None
    group: str | None = None
    digest: str | None = None

    @property
    def count(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "start": self.start,
            "end": self.end,
            "count": self.count,
            "split": self.split.value if self.split else None,
        }
        if self.wnid is not None:
            out["wnid"] = self.wnid
        if self.group is not None:
            out["group"] = self.group
        if self.digest is not None:
            out["digest"] = self.digest
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ClassInfo":
        split = data.get("split")
        return cls(
            id=int(data["id"]),
            name=str(data["name"]),
            start=int(data["start"]),
            end=int(data["end"]),
            split=Split(split) if split else None,
            wnid=data.get("wnid"),
            group=data.get("group"),
            digest=data.get("digest"),
        )


@dataclass(frozen=True)
class HeldOutPartition:
    """Records stored after every class's range and never part of one.

    ``ranges[i]`` is class i's [start, end) in it (possibly empty); the ranges follow
    each other in class order from the end of the last class's range. ``fingerprint``
    covers what the partition holds (``store.fingerprint.ContentFingerprint`` with its
    name); ``labels`` says where its labels were read from."""

    name: str
    ranges: tuple[tuple[int, int], ...]
    fingerprint: str
    labels: str = ""

    @property
    def start(self) -> int:
        return self.ranges[0][0] if self.ranges else 0

    @property
    def end(self) -> int:
        return self.ranges[-1][1] if self.ranges else 0

    @property
    def num_records(self) -> int:
        return self.end - self.start

    def summary(self) -> dict[str, Any]:
        """What ``pack`` and ``inspect`` show of it."""
        counts = [end - start for start, end in self.ranges] or [0]
        return {"images": self.num_records, "images_per_class": {"min": min(counts), "max": max(counts)},
                "labels": self.labels, "fingerprint": self.fingerprint}

    def to_json(self, classes: tuple[ClassInfo, ...]) -> dict[str, Any]:
        return {
            "num_records": self.num_records, "start": self.start, "end": self.end,
            "fingerprint": self.fingerprint, "labels": self.labels,
            "classes": [{"id": info.id, "name": info.name, "start": start, "end": end, "count": end - start}
                        for info, (start, end) in zip(classes, self.ranges)],
        }

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any], classes: tuple[ClassInfo, ...],
                  where: str = "manifest") -> "HeldOutPartition":
        """Checked: one range per class, named as it, contiguous from the last class's end."""
        entries = list(data["classes"])
        if [e.get("name") for e in entries] != [c.name for c in classes]:
            raise DataLoss(f"{where}: {name} lists {len(entries)} classes; expected one per class "
                           f"({len(classes)}), in class order")
        expected = classes[-1].end if classes else 0
        ranges = []
        for entry in entries:
            start, end = int(entry["start"]), int(entry["end"])
            if start != expected or end < start:
                raise DataLoss(f"{where}: {name} of class {entry['name']!r} has records [{start}, {end}), "
                               f"expected a range starting at {expected}")
            ranges.append((start, end))
            expected = end
        partition = cls(name, tuple(ranges), str(data["fingerprint"]), str(data.get("labels", "")))
        if data.get("num_records") not in (None, partition.num_records):
            raise DataLoss(f"{where}: {name} num_records {data['num_records']} disagrees with its ranges")
        return partition


@dataclass(frozen=True)
class Manifest:
    """Everything about a packed source except the image bytes."""

    source: str
    name: str
    classes: tuple[ClassInfo, ...]
    split_rule: str
    fingerprint: str
    pack_options: dict[str, Any] = field(default_factory=dict)
    hierarchy: str | None = None
    num_skipped: int = 0
    skipped: tuple[dict[str, str], ...] = ()
    created_by: str = ""
    record_layout: int = 1
    data_size: int | None = None
    data_sha256: str | None = None
    tfds: dict[str, Any] | None = None
    validation: HeldOutPartition | None = None

    @property
    def verifiable(self) -> bool:
        """Records carry checksums (layout 2 or later)."""
        return self.record_layout >= 2

    @property
    def num_records(self) -> int:
        """Records of the classes' ranges (the train partition)."""
        return self.classes[-1].end if self.classes else 0

    @property
    def total_records(self) -> int:
        """Every record the data holds: the classes' ranges, then any validation partition."""
        return max(self.num_records, self.validation.end) if self.validation is not None else self.num_records

    def classes_in(self, split: Split) -> tuple[ClassInfo, ...]:
        return tuple(c for c in self.classes if c.split is split)

    def to_json(self) -> dict[str, Any]:
        split_counts = {s.value: len(self.classes_in(s)) for s in Split}
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "source": self.source,
            "name": self.name,
            "fingerprint": self.fingerprint,
            "num_records": self.num_records,
            "num_classes": len(self.classes),
            "split_rule": self.split_rule,
            "split_counts": split_counts,
            "hierarchy": self.hierarchy,
            "pack_options": self.pack_options,
            "num_skipped": self.num_skipped,
            "skipped": list(self.skipped),
            "created_by": self.created_by,
            "storage": self._storage_json(),
            **({"tfds": self.tfds} if self.tfds is not None else {}),
            **({VALIDATION: self.validation.to_json(self.classes)} if self.validation is not None else {}),
            "classes": [c.to_json() for c in self.classes],
        }

    def _storage_json(self) -> dict[str, Any]:
        storage: dict[str, Any] = {
            "lmdb": DATA_NAME,
            "key": "uint64 big-endian record id",
            "record_layout": self.record_layout,
        }
        if self.data_size is not None:
            storage["data_bytes"] = self.data_size
        if self.data_sha256 is not None:
            storage["data_sha256"] = self.data_sha256
        return storage

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "manifest") -> "Manifest":
        if data.get("format") != FORMAT_NAME:
            raise DataLoss(f"{where}: not a {FORMAT_NAME} manifest (format={data.get('format')!r})")
        if data.get("format_version") != FORMAT_VERSION:
            raise DataLoss(
                f"{where}: format_version {data.get('format_version')!r} is not supported "
                f"(this build reads {FORMAT_VERSION})"
            )
        try:
            classes = tuple(ClassInfo.from_json(c) for c in data["classes"])
            manifest = cls(
                source=str(data["source"]),
                name=str(data["name"]),
                classes=classes,
                split_rule=str(data["split_rule"]),
                fingerprint=str(data["fingerprint"]),
                pack_options=dict(data.get("pack_options") or {}),
                hierarchy=data.get("hierarchy"),
                num_skipped=int(data.get("num_skipped", 0)),
                skipped=tuple(data.get("skipped") or ()),
                created_by=str(data.get("created_by", "")),
                tfds=dict(data["tfds"]) if data.get("tfds") is not None else None,
                **_storage_fields(data.get("storage") or {}),
            )
            validate_class_ranges(manifest.classes, where)
            if data.get(VALIDATION) is not None:
                validation = HeldOutPartition.from_json(VALIDATION, data[VALIDATION], classes, where)
                manifest = dataclasses.replace(manifest, validation=validation)
        except (KeyError, TypeError, ValueError) as error:
            raise DataLoss(f"{where}: malformed manifest ({error!r})") from None
        if data.get("num_records") not in (None, manifest.num_records):
            raise DataLoss(f"{where}: num_records {data['num_records']} disagrees with class ranges")
        return manifest


def _storage_fields(storage: Mapping[str, Any]) -> dict[str, Any]:
    size = storage.get("data_bytes")
    digest = storage.get("data_sha256")
    return {
        "record_layout": int(storage.get("record_layout", 1)),
        "data_size": int(size) if size is not None else None,
        "data_sha256": str(digest) if digest is not None else None,
    }


def validate_class_ranges(classes: Iterable[ClassInfo], where: str = "manifest") -> None:
    """Ids are positions; ranges are contiguous, non-empty and in id order."""
    expected_start = 0
    for position, info in enumerate(classes):
        if info.id != position:
            raise DataLoss(f"{where}: class {info.name!r} has id {info.id}, expected {position}")
        if info.start != expected_start or info.end <= info.start:
            raise DataLoss(
                f"{where}: class {info.name!r} has records [{info.start}, {info.end}), "
                f"expected a non-empty range starting at {expected_start}"
            )
        expected_start = info.end


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Write atomically: a reader sees the old file, the new one, or none."""
    path = directory / MANIFEST_NAME
    tmp = directory / (MANIFEST_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(manifest.to_json(), handle, indent=1, ensure_ascii=False)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_manifest(directory: str | os.PathLike[str]) -> Manifest:
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        raise NotFound(f"{directory}: no {MANIFEST_NAME}; not a packed store (or its pack did not finish)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataLoss(f"{path}: unreadable manifest ({error})") from None
    manifest = Manifest.from_json(data, where=str(path))
    if not (Path(directory) / DATA_NAME).is_file():
        raise DataLoss(f"{directory}: manifest present but {DATA_NAME} is missing")
    return manifest
