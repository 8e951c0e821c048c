"""Read-only access to a packed store, safe to share across processes.

LMDB is opened read-only and lock-free (``lock=False``): the store is immutable
once published, so readers need no lock table, and many processes share its pages
through the OS page cache. The environment is opened lazily and re-opened after a
fork (LMDB handles must not cross ``fork``), so a reader can be created before a
worker pool starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import lmdb

from sampler_server.errors import DataLoss, InvalidArgument, NotFound
from sampler_server.store.manifest import MANIFEST_NAME, Manifest, load_manifest
from sampler_server.store.record import Record, decode_record, record_key


class StoreReader:
    """Random access to records by id; the manifest is loaded eagerly, data lazily."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest: Manifest = load_manifest(self.directory)
        self._env: lmdb.Environment | None = None
        self._pid = -1

    @property
    def num_records(self) -> int:
        return self.manifest.num_records

    def _environment(self) -> lmdb.Environment:
        if self._env is None or self._pid != os.getpid():
            try:
                self._env = lmdb.open(
                    str(self.directory),
                    readonly=True,
                    lock=False,
                    subdir=True,
                    readahead=False,
                    max_readers=1024,
                )
            except lmdb.Error as error:
                raise DataLoss(f"{self.directory}: cannot open LMDB data ({error})") from None
            self._pid = os.getpid()
        return self._env

    def _check_id(self, record_id: int) -> None:
        if not 0 <= record_id < self.num_records:
            raise InvalidArgument(
                f"record id {record_id} is out of range for store {self.manifest.name!r}; "
                f"allowed: 0 to {self.num_records - 1}"
            )

    def read_value(self, record_id: int) -> bytes:
        """The raw stored value (header + metadata + payload)."""
        return self.read_values([record_id])[0]

    def read_values(self, record_ids: Sequence[int]) -> list[bytes]:
        """Several values in one read transaction, in the order asked."""
        for record_id in record_ids:
            self._check_id(record_id)
        out: list[bytes] = []
        with self._environment().begin(buffers=False) as txn:
            for record_id in record_ids:
                value = txn.get(record_key(record_id))
                if value is None:
                    raise DataLoss(
                        f"store {self.manifest.name!r}: record {record_id} is missing from its LMDB data"
                    )
                out.append(value)
        return out

    def read(self, record_id: int) -> Record:
        try:
            return decode_record(self.read_value(record_id))
        except DataLoss as error:
            raise DataLoss(f"store {self.manifest.name!r}, record {record_id}: {error}") from None

    def iter_records(self) -> Iterator[tuple[int, Record]]:
        """Every record in id order (one cursor pass; for inspection and tests)."""
        with self._environment().begin(buffers=False) as txn:
            for key, value in txn.cursor():
                yield int.from_bytes(key, "big"), decode_record(value)

    def close(self) -> None:
        if self._env is not None and self._pid == os.getpid():
            self._env.close()
        self._env = None

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_env"] = None
        state["_pid"] = -1
        return state


def open_store(directory: str | os.PathLike[str]) -> StoreReader:
    return StoreReader(directory)


def find_stores(data_dir: str | os.PathLike[str]) -> list[Path]:
    """Published stores under a data directory (or the directory itself), sorted by name.

    Hidden entries (in-progress or killed packs) are never stores.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise NotFound(f"{root}: no such directory")
    if (root / MANIFEST_NAME).is_file():
        return [root]
    return sorted(
        child
        for child in root.iterdir()
        if child.is_dir() and not child.name.startswith(".") and (child / MANIFEST_NAME).is_file()
    )
