"""Atomic, streaming creation of one store.

The store is built in a hidden sibling directory ``.<name>.partial`` under an
exclusive ``flock`` and becomes visible only by renaming it to ``<name>`` after the
LMDB data is synced and the manifest written. A process killed at any point leaves
at most the hidden directory, which no reader looks at and the next pack of the
same name deletes. Records go in with bounded transactions, so memory does not
grow with the number of images. LMDB reads the pages it builds on through its map, and
a page once mapped stays in the process's resident set until the map goes: the
environment is re-opened every ``_REMAP_RECORDS`` records, which keeps the pack's
resident memory flat (before, appending 1.2 M records of 1.4 KB grew it by 321 MB of
mapped pages, and packing 1.28 M ILSVRC records peaked at 512 MB against 241 MB at 10 k;
``bench/scale_bench.py`` measures it).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import shutil
from pathlib import Path
from types import TracebackType
from typing import Callable

import lmdb

from sampler_server.errors import FailedPrecondition
from sampler_server.store.manifest import DATA_NAME, MANIFEST_NAME, Manifest, write_manifest
from sampler_server.store.record import LAYOUT_VERSION, Record, encode_record, record_key

_MAP_SIZE = 1 << 40  # address space only; the file grows as records are written
_TXN_RECORDS = 512
_TXN_BYTES = 64 << 20
_REMAP_RECORDS = 1 << 16


class StoreWriter:
    """Append records in id order; ``commit`` publishes, ``abort`` removes all trace."""

    def __init__(self, output_root: Path, name: str) -> None:
        self.output_root = Path(output_root)
        self.name = name
        self.final_dir = self.output_root / name
        self.partial_dir = self.output_root / f".{name}.partial"
        self._lock_path = self.output_root / f".{name}.lock"
        self._lock_fd: int | None = None
        self._env: lmdb.Environment | None = None
        self._txn: lmdb.Transaction | None = None
        self._pending_records = 0
        self._pending_bytes = 0
        self._mapped_records = 0  # committed since the environment was (re-)opened
        self.num_records = 0
        self.num_bytes = 0

    def open(self) -> "StoreWriter":
        self.output_root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise FailedPrecondition(
                f"{self.final_dir}: another pack is writing this store right now"
            ) from None
        if self.partial_dir.exists():  # left by a killed pack
            shutil.rmtree(self.partial_dir)
        self.partial_dir.mkdir()
        self._env = self._open_environment()
        return self

    def _open_environment(self) -> lmdb.Environment:
        return lmdb.open(
            str(self.partial_dir),
            map_size=_MAP_SIZE,
            subdir=True,
            sync=False,
            metasync=False,
            readahead=False,
            max_dbs=0,
        )

    def append(self, record: Record) -> int:
        assert self._env is not None, "writer is not open"
        if self._txn is None:
            self._txn = self._env.begin(write=True)
        value = encode_record(record)
        record_id = self.num_records
        self._txn.put(record_key(record_id), value, append=True)
        self.num_records += 1
        self.num_bytes += len(value)
        self._pending_records += 1
        self._pending_bytes += len(value)
        if self._pending_records >= _TXN_RECORDS or self._pending_bytes >= _TXN_BYTES:
            self._flush()
        return record_id

    def _flush(self) -> None:
        if self._txn is not None:
            self._txn.commit()
            self._txn = None
        self._mapped_records += self._pending_records
        self._pending_records = 0
        self._pending_bytes = 0
        if self._mapped_records >= _REMAP_RECORDS and self._env is not None:
            self._env.close()  # unmaps the pages read so far (see the module docstring)
            self._env = self._open_environment()
            self._mapped_records = 0

    def commit(self, manifest: Manifest) -> Path:
        """Sync data, write the manifest, then rename into place (the publish step).

        The manifest written records the record layout and the size and SHA-256 of the
        synced data file (whatever ``manifest`` said about them is replaced)."""
        assert self._env is not None, "writer is not open"
        self._flush()
        self._env.sync(True)
        self._env.close()
        self._env = None
        lock_file = self.partial_dir / "lock.mdb"
        if lock_file.exists():  # readers open lock-free; a stale lock file only confuses
            lock_file.unlink()
        data_size, data_sha256 = file_digest(self.partial_dir / DATA_NAME)
        manifest = dataclasses.replace(
            manifest, record_layout=LAYOUT_VERSION, data_size=data_size, data_sha256=data_sha256
        )
        write_manifest(self.partial_dir, manifest)
        _fsync_dir(self.partial_dir)
        retired = self.output_root / f".{self.name}.retired"
        if retired.exists():
            shutil.rmtree(retired)
        if self.final_dir.exists():
            os.replace(self.final_dir, retired)
        os.replace(self.partial_dir, self.final_dir)
        _fsync_dir(self.output_root)
        if retired.exists():
            shutil.rmtree(retired)
        self._release()
        return self.final_dir

    def abort(self) -> None:
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        if self._env is not None:
            self._env.close()
            self._env = None
        if self.partial_dir.exists():
            shutil.rmtree(self.partial_dir, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
            try:
                self._lock_path.unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> "StoreWriter":
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._lock_fd is not None:  # not committed
            self.abort()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_digest(path: Path, progress: Callable[[int], object] | None = None) -> tuple[int, str]:
    """(size in bytes, "sha256:<hex>") of a file, read in 1 MiB blocks; ``progress``
    is called with the byte count of each block."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            size += len(block)
            if progress is not None:
                progress(len(block))
    return size, "sha256:" + digest.hexdigest()


def is_servable(directory: Path) -> bool:
    """A directory is a store only when both the data and the manifest are there."""
    return (directory / MANIFEST_NAME).is_file() and (directory / DATA_NAME).is_file()
