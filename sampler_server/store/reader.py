"""Read-only access to a packed store, safe to share across processes.

LMDB is opened read-only and lock-free (``lock=False``): the store is immutable
once published, so readers need no lock table, and many processes share its pages
through the OS page cache. Environments are opened lazily, once per store per process,
and dropped in a forked child (LMDB handles must not cross ``fork``), so a reader can
be created before a worker pool starts and be pickled to workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import lmdb

from sampler_server.errors import DataLoss, InvalidArgument, NotFound
from sampler_server.store.manifest import DATA_NAME, MANIFEST_NAME, Manifest, load_manifest
from sampler_server.store.record import Record, decode_record, record_key


_ENVIRONMENTS: dict[str, tuple[int, lmdb.Environment]] = {}


def _environment_for(directory: Path) -> lmdb.Environment:
    """One handle per store per process (py-lmdb refuses to open a path twice);
    re-opened when the store was replaced (another data file under the same path)."""
    path = os.path.realpath(directory)
    try:
        inode = os.stat(os.path.join(path, DATA_NAME)).st_ino
    except OSError as error:
        raise DataLoss(f"{directory}: cannot open LMDB data ({error.strerror})") from None
    cached = _ENVIRONMENTS.get(path)
    if cached is not None and cached[0] == inode:
        return cached[1]
    if cached is not None:
        cached[1].close()
    try:
        env = lmdb.open(path, readonly=True, lock=False, subdir=True, readahead=False, max_readers=1024)
    except lmdb.Error as error:
        raise DataLoss(f"{directory}: cannot open LMDB data ({error})") from None
    _ENVIRONMENTS[path] = (inode, env)
    return env


def _drop_inherited_environments() -> None:
    """After fork the parent's handles must not be used; closing the child's copy
    of a read-only, lock-free environment only unmaps it in the child."""
    inherited = list(_ENVIRONMENTS.values())
    _ENVIRONMENTS.clear()
    for _, env in inherited:
        env.close()


os.register_at_fork(after_in_child=_drop_inherited_environments)


class StoreReader:
    """Random access to records by id; the manifest is loaded eagerly, data lazily."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest: Manifest = load_manifest(self.directory)

    @property
    def num_records(self) -> int:
        return self.manifest.num_records

    def _environment(self) -> lmdb.Environment:
        return _environment_for(self.directory)

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
