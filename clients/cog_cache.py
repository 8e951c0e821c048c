"""The ImageNet-CoG feature cache (framework-free): a level split's features, extracted once
with one backbone and reused by every seed, every N and every later run.

An entry is keyed by everything its features depend on (``feature_key``): the backbone's
fingerprint (``LoadedBackbone.fingerprint``: the sha256 of its weights as loaded), the
split's fingerprint (as GetCogSplit and ``sampler-server cog split`` give it), the
preprocessing (``Preprocessing.key()``: side, range, mean, std), the resize and the
extraction's precision (float32 or bf16, ``--precision``); so every
command that embeds the same split with the same weights shares the entry. The key's
sha256 names a directory
``<DIR>/<key>/`` holding ``meta.json`` (the key and the shapes), ``record_ids.npy``,
``labels.npy`` and ``features.npy`` (float32 [N, D], the backbone's raw output: the
evaluation L2-normalises it when it reads it, so one entry serves any use).

Writes are atomic: an extraction fills ``<key>.partial/`` (each batch's features written
into ``features.npy`` as it arrives; synced, and counted in ``progress.json``, every
``RECORD_SECONDS`` and when the stream breaks), then renames it to ``<key>/``. A run that
stopped part way resumes at the batch after the last one recorded. Two runs extracting the same entry take turns (an advisory lock on
``<key>.lock``); the second finds the first's finished entry.

An entry whose meta, record ids or labels disagree with the split asked for, or that
cannot be read, is refused with one line naming it (exit 2), never used: the cache
holds what the run computed, so a disagreement means a damaged or foreign file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clients.errors import UsageError

CACHE_FORMAT = "sampler-cog-features-v1"

# How often an extraction's written batches are synced and counted in progress.json: a run
# killed outright redoes at most this much; a stream that breaks records every batch written.
# (Per batch, the sync and the rewrite cost about 1.6 ms on the thread that feeds the GPU:
# 0.3 s of a 2 s pass of ResNet-50 on one H200.)
RECORD_SECONDS = 2.0
_CHUNK = 1 << 20


class _FeaturesFile:
    """An entry's ``features.npy`` (float32 [N, D]) being filled: each batch written with
    ``os.pwrite`` at its rows' offset. Not through a memory map: writing a batch of fresh pages
    through one took 0.90-1.04 ms per 128 x 2048 batch against 0.20-0.30 ms for ``pwrite`` (a
    2-core development machine, ext4), on the thread that launches the model between two batches."""

    def __init__(self, path: Path, offset: int, total: int, dim: int) -> None:
        self.path, self.offset, self.total, self.dim = path, offset, total, dim
        self.fd = os.open(path, os.O_RDWR)

    @classmethod
    def create(cls, path: Path, total: int, dim: int) -> "_FeaturesFile":
        """A new file of ``total`` rows of ``dim`` (the header written, the rows unwritten)."""
        made = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(total, dim))
        offset = made.offset
        del made
        return cls(path, offset, total, dim)

    @classmethod
    def reopen(cls, path: Path, total: int) -> "_FeaturesFile":
        """An interrupted extraction's file; ValueError unless it holds float32 [total, D]."""
        found = np.lib.format.open_memmap(path, mode="r")
        if found.dtype != np.float32 or found.ndim != 2 or found.shape[0] != total:
            raise ValueError(f"{path}: {found.dtype} {found.shape}, expected float32 [{total}, D]")
        offset, dim = found.offset, int(found.shape[1])
        del found
        return cls(path, offset, total, dim)

    def write(self, row: int, rows: np.ndarray) -> None:
        """``rows`` (float32 [n, dim]) as rows ``row`` to ``row + n``."""
        data = memoryview(np.ascontiguousarray(rows, dtype=np.float32)).cast("B")
        at = self.offset + row * self.dim * 4
        while data:  # a write may take less than it was given
            done = os.pwrite(self.fd, data, at)
            data, at = data[done:], at + done

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class FeatureCacheError(UsageError):
    """A cache entry that cannot be used (damaged, foreign, unreadable): one line, exit 2."""


def sha256_path(path: str | Path) -> str:
    """sha256 of a file's bytes, or of a directory's files (relative path and each file's
    sha256, in sorted path order), so a SavedModel directory has one hash."""
    path = Path(path)
    if path.is_file():
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(block)
        return digest.hexdigest()
    if path.is_dir():
        digest = hashlib.sha256()
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{child.relative_to(path).as_posix()}\0{sha256_path(child)}\n".encode())
        return digest.hexdigest()
    raise FeatureCacheError(f"backbone checkpoint {str(path)!r}: expected a file or a directory, found neither")


@dataclass(frozen=True)
class SplitIds:
    """What a split is, without images: record ids and labels in split order, its fingerprint."""

    level: str
    split: str
    fingerprint: str
    record_ids: np.ndarray  # int64 [N]
    labels: np.ndarray      # int64 [N]


@dataclass(frozen=True)
class CachedFeatures:
    """One split's features (``features`` may be a read-only memory map)."""

    path: Path
    record_ids: np.ndarray
    labels: np.ndarray
    features: np.ndarray  # float32 [N, D]
    extracted: int         # images this call ran through the backbone (0: read from the cache)

    def rows(self, record_ids: Iterable[int], labels: np.ndarray | None = None, what: str = "subset") -> np.ndarray:
        """Row positions of ``record_ids``; every id must be here (and carry ``labels`` if given)."""
        wanted = np.asarray(record_ids if isinstance(record_ids, np.ndarray) else list(record_ids), np.int64)
        order = np.argsort(self.record_ids, kind="stable")
        sorted_ids = self.record_ids[order]
        at = np.searchsorted(sorted_ids, wanted)
        found = at < len(sorted_ids)
        found[found] = sorted_ids[at[found]] == wanted[found]
        if not np.all(found):
            missing = wanted[~found][:3].tolist()
            raise FeatureCacheError(f"feature cache {self.path}: the {what} holds record ids {missing} that its "
                                    "split's features do not (the server's subsets should lie inside the full split)")
        rows = order[at]
        if labels is not None and not np.array_equal(self.labels[rows], np.asarray(labels, np.int64)):
            raise FeatureCacheError(f"feature cache {self.path}: the {what}'s labels disagree with its split's")
        return rows


def feature_key(backbone_sha256: str, split_fingerprint: str, preprocessing: str, resize: str,
                precision: str) -> dict[str, str]:
    """The key fields of the entry of one split's features: what they depend on, nothing else
    (not the command, nor the framework beyond what the weights' fingerprint says); the
    extraction's ``precision`` (``--precision``) among them, so float32 and bf16 features
    never share an entry."""
    return {"backbone_sha256": backbone_sha256, "split_fingerprint": split_fingerprint,
            "preprocessing": preprocessing, "resize": resize, "precision": precision}


def entry_key(fields: Mapping[str, Any]) -> str:
    """The directory name of an entry: sha256 of its key fields as canonical JSON."""
    text = json.dumps({"format": CACHE_FORMAT, **fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as handle:
        json.dump(value, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


Batches = Callable[[int], Iterable[tuple[int, np.ndarray, np.ndarray, np.ndarray]]]
"""start batch index -> (batch index, record ids, labels, features) from that batch on."""


def _meta(fields: Mapping[str, Any], split: SplitIds, batch_size: int) -> dict[str, Any]:
    """What an entry (and an interrupted extraction of it) records of its key and split."""
    return {"key": {"format": CACHE_FORMAT, **fields}, "level": split.level, "split": split.split,
            "fingerprint": split.fingerprint, "count": len(split.record_ids), "batch_size": batch_size}


class FeatureCache:
    """Entries under one directory (created when first written)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, fields: Mapping[str, Any]) -> Path:
        return self.root / entry_key(fields)

    def load(self, fields: Mapping[str, Any], split: SplitIds) -> CachedFeatures | None:
        """The entry of ``fields`` checked against ``split``; None when there is none yet."""
        path = self.path(fields)
        if not path.exists():
            return None
        try:
            meta = json.loads((path / "meta.json").read_text())
            record_ids = np.load(path / "record_ids.npy", allow_pickle=False)
            labels = np.load(path / "labels.npy", allow_pickle=False)
            features = np.load(path / "features.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as error:
            raise FeatureCacheError(f"feature cache {path}: cannot be read ({type(error).__name__}: "
                                    f"{' '.join(str(error).split())[:160]}); delete it to extract again") from None
        if meta.get("key") != {"format": CACHE_FORMAT, **fields}:
            raise FeatureCacheError(f"feature cache {path}: its meta.json names another key than "
                                    f"{split.level}/{split.split} (fingerprint {split.fingerprint[:16]}) with this "
                                    "backbone; delete it to extract again")
        self._check(path, split, record_ids, labels, features)
        return CachedFeatures(path, record_ids, labels, features, 0)

    @staticmethod
    def _check(path: Path, split: SplitIds, record_ids: np.ndarray, labels: np.ndarray, features: np.ndarray) -> None:
        what = f"{split.level}/{split.split} (fingerprint {split.fingerprint[:16]})"
        if not np.array_equal(record_ids, split.record_ids):
            raise FeatureCacheError(f"feature cache {path}: its record ids disagree with split {what}; "
                                    "delete it to extract again")
        if not np.array_equal(labels, split.labels):
            raise FeatureCacheError(f"feature cache {path}: its labels disagree with split {what}; "
                                    "delete it to extract again")
        if features.ndim != 2 or features.shape[0] != len(record_ids) or features.dtype != np.float32:
            raise FeatureCacheError(f"feature cache {path}: features of shape {features.shape} ({features.dtype}), "
                                    f"expected float32 [{len(record_ids)}, D]; delete it to extract again")

    def resume_point(self, fields: Mapping[str, Any], split: SplitIds, batch_size: int) -> int:
        """The batch a missing entry's extraction starts at: after the batches an interrupted
        extraction of the same entry wrote, else 0."""
        partial = self.path(fields).with_name(self.path(fields).name + ".partial")
        try:
            progress = json.loads((partial / "progress.json").read_text())
        except (OSError, ValueError):
            return 0
        if progress.get("meta") != _meta(fields, split, batch_size) or not progress.get("dim"):
            return 0
        return int(progress.get("batches", 0))

    def get_or_extract(self, fields: Mapping[str, Any], split: SplitIds, batch_size: int, batches: Batches,
                       log: Callable[[str], None] = lambda _: None) -> CachedFeatures:
        """The entry of ``fields``, extracted first when missing (resuming a partial one)."""
        found = self.load(fields, split)
        if found is not None:
            return found
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path(fields)
        with _locked(final.with_name(final.name + ".lock")):
            found = self.load(fields, split)  # another run may have finished it while we waited
            if found is not None:
                return found
            extracted = self._extract(fields, split, batch_size, batches, final, log)
            found = self.load(fields, split)
            assert found is not None
            return CachedFeatures(found.path, found.record_ids, found.labels, found.features, extracted)

    def _extract(self, fields: Mapping[str, Any], split: SplitIds, batch_size: int, batches: Batches, final: Path,
                 log: Callable[[str], None]) -> int:
        partial = final.with_name(final.name + ".partial")
        total = len(split.record_ids)
        meta = _meta(fields, split, batch_size)
        progress_path = partial / "progress.json"
        start, features = self.resume_point(fields, split, batch_size), None
        if start:
            try:
                features = _FeaturesFile.reopen(partial / "features.npy", total)
                log(f"{split.level} {split.split}: resuming the extraction at batch {start}")
            except (OSError, ValueError):
                features, start = None, 0
        if features is None:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        extracted, recorded, recorded_at = 0, start, time.monotonic()

        def record() -> None:  # the batches written so far, on disk, then counted in progress.json
            if features is not None and start > recorded:
                features.sync()
                _write_json(progress_path, {"meta": meta, "batches": start, "dim": features.dim})

        try:
            for index, ids, labels, rows in batches(start):
                lo = index * batch_size
                hi = lo + len(ids)
                if index != start or hi > total:
                    raise FeatureCacheError(f"extraction of {split.level}/{split.split}: the server sent batch "
                                            f"{index} of {len(ids)} images, expected batch {start} within {total} "
                                            "images")
                if not (np.array_equal(ids, split.record_ids[lo:hi]) and np.array_equal(labels, split.labels[lo:hi])):
                    raise FeatureCacheError(f"extraction of {split.level}/{split.split}: batch {index}'s record ids "
                                            "or labels disagree with the split the server listed")
                if features is None:
                    features = _FeaturesFile.create(partial / "features.npy", total, rows.shape[1])
                if rows.shape != (len(ids), features.dim):
                    raise FeatureCacheError(f"extraction of {split.level}/{split.split}: batch {index}'s features "
                                            f"have shape {tuple(rows.shape)}, expected ({len(ids)}, {features.dim}) "
                                            "as the batches before it")
                features.write(lo, rows)
                start, extracted = start + 1, extracted + len(ids)
                if time.monotonic() - recorded_at >= RECORD_SECONDS:
                    record()
                    recorded, recorded_at = start, time.monotonic()
        except BaseException:  # a stream that broke resumes after the last batch written
            record()
            raise
        finally:
            if features is not None:
                features.close()
        if features is None or min(start * batch_size, total) != total:
            raise FeatureCacheError(f"extraction of {split.level}/{split.split}: the stream ended after "
                                    f"{min(start * batch_size, total)} of {total} images")
        np.save(partial / "record_ids.npy", np.asarray(split.record_ids, np.int64))
        np.save(partial / "labels.npy", np.asarray(split.labels, np.int64))
        _write_json(partial / "meta.json", meta)
        progress_path.unlink(missing_ok=True)  # none when the whole split took less than RECORD_SECONDS
        for name in ("features.npy", "record_ids.npy", "labels.npy"):
            with (partial / name).open("rb+") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(partial)
        os.rename(partial, final)
        _fsync_dir(self.root)
        return extracted
