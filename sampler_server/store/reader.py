"""Read-only access to a packed store, safe to share across processes.

LMDB is opened read-only and lock-free (``lock=False``): the store is immutable
once published, so readers need no lock table, and many processes share its pages
through the OS page cache. Environments are opened lazily, once per store per process,
and dropped in a forked child (LMDB handles must not cross ``fork``), so a reader can
be created before a worker pool starts and be pickled to workers.

A read never touches a page past the end of the data file (which would kill the
process with SIGBUS, not raise): when an environment is opened, the file must hold
every page LMDB claims ((last_pgno + 1) x page size) and, where the manifest recorded
it, at least the size the pack left; before every batch of reads one ``stat`` checks
that the file has not shrunk since (a file truncated while the server runs). Either
failure is a ``StoreUnreadable`` (a ``DataLoss``) naming the store and both sizes.
Record checksums are verified where values are parsed (``record.read_header``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import lmdb

from sampler_server.errors import DataLoss, InvalidArgument, NotFound
from sampler_server.store.manifest import DATA_NAME, MANIFEST_NAME, Manifest, load_manifest
from sampler_server.store.record import Record, decode_record, record_key, record_origin
from sampler_server.store.record_reader import RecordReader


class StoreUnreadable(DataLoss):
    """The store's data file cannot be read safely (missing, truncated, not LMDB).
    ``store`` names it, so a server can stop serving that store (it crosses process
    boundaries: decode workers raise it too)."""

    def __init__(self, message: str, store: str | None = None) -> None:
        super().__init__(message)
        self.store = store

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return type(self), (str(self), self.store)


# realpath -> (inode, environment, bytes the environment needs)
_ENVIRONMENTS: dict[str, tuple[int, lmdb.Environment, int]] = {}


def _environment_for(directory: Path, name: str, expected_size: int | None = None) -> lmdb.Environment:
    """One handle per store per process (py-lmdb refuses to open a path twice);
    re-opened when the store was replaced (another data file under the same path).
    Refuses (``StoreUnreadable``) a data file shorter than its pages."""
    path = os.path.realpath(directory)
    try:
        stat = os.stat(os.path.join(path, DATA_NAME))
    except OSError as error:
        raise StoreUnreadable(f"store {name!r}: cannot open {DATA_NAME} ({error.strerror})", name) from None
    cached = _ENVIRONMENTS.get(path)
    if cached is not None and cached[0] == stat.st_ino:
        if stat.st_size < cached[2]:
            raise StoreUnreadable(_truncated(name, stat.st_size, cached[2], "after it was opened"), name)
        return cached[1]
    if cached is not None:
        _ENVIRONMENTS.pop(path)
        cached[1].close()
    if expected_size is not None and stat.st_size < expected_size:
        # shorter than packed is always a loss; longer can be a legitimate LMDB write
        # (verify's SHA-256 tells those apart)
        raise StoreUnreadable(
            f"store {name!r}: {DATA_NAME} is {stat.st_size} bytes, its manifest records {expected_size} "
            "(truncated since it was packed); not served", name,
        )
    try:
        env = lmdb.open(path, readonly=True, lock=False, subdir=True, readahead=False, max_readers=1024)
        needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    except lmdb.Error as error:
        raise StoreUnreadable(f"store {name!r}: cannot open {DATA_NAME} as LMDB ({error})", name) from None
    if stat.st_size < needed:
        env.close()
        raise StoreUnreadable(_truncated(name, stat.st_size, needed, ""), name)
    _ENVIRONMENTS[path] = (stat.st_ino, env, needed)
    return env


def _truncated(name: str, size: int, needed: int, when: str) -> str:
    when = f" {when}" if when else ""
    return (
        f"store {name!r}: {DATA_NAME} is {size} bytes but its LMDB pages need {needed} "
        f"(truncated{when}); not served"
    )


def _drop_inherited_environments() -> None:
    """After fork the parent's handles must not be used; closing the child's copy
    of a read-only, lock-free environment only unmaps it in the child."""
    inherited = list(_ENVIRONMENTS.values())
    _ENVIRONMENTS.clear()
    for _, env, _ in inherited:
        env.close()


os.register_at_fork(after_in_child=_drop_inherited_environments)


class StoreReader(RecordReader):
    """Random access to one store's records by id; the manifest is loaded eagerly, data lazily."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest: Manifest = load_manifest(self.directory)

    def _environment(self) -> lmdb.Environment:
        # named by its directory, as the server serves it (a copied store keeps its manifest name)
        return _environment_for(self.directory, self.directory.resolve().name, self.manifest.data_size)

    def data_bytes(self) -> int:
        try:
            return (self.directory / DATA_NAME).stat().st_size
        except OSError:
            return 0

    def check_data(self) -> None:
        """Raises ``StoreUnreadable`` also for a data file not the size the manifest records."""
        self._environment()

    def stored_entries(self) -> int:
        """Records the LMDB data holds (its entry count), whatever the manifest says (``verify``)."""
        return int(self._environment().stat()["entries"])

    def values_or_none(self, record_ids: Sequence[int]) -> list[bytes | None]:
        for record_id in record_ids:
            self._check_id(record_id)
        with self._environment().begin(buffers=False) as txn:
            return [txn.get(record_key(record_id)) for record_id in record_ids]

    def origins(self, record_ids: Sequence[int]) -> list[str]:
        for record_id in record_ids:
            self._check_id(record_id)
        out: list[str] = []
        with self._environment().begin(buffers=True) as txn:
            for record_id in record_ids:
                value = txn.get(record_key(record_id))
                if value is None:
                    raise self._missing(record_id)
                try:
                    out.append(record_origin(value))
                except DataLoss as error:
                    raise self._malformed(record_id, error) from None
        return out

    def iter_records(self) -> Iterator[tuple[int, Record]]:
        """One cursor pass."""
        with self._environment().begin(buffers=False) as txn:
            for key, value in txn.cursor():
                record_id = int.from_bytes(key, "big")
                try:
                    yield record_id, decode_record(value)
                except DataLoss as error:
                    raise self._malformed(record_id, error) from None


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


def find_stores_in(data_dirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Published stores under several data directories (``find_stores`` of each), sorted by
    name. A store is served by its directory name, so two stores of one name are refused;
    one directory named twice (or reached twice through a link) is one.

    Raises:
        NotFound: a directory that does not exist.
        InvalidArgument: two stores of one name (naming both).
    """
    found: dict[str, Path] = {}
    for data_dir in data_dirs:
        for path in find_stores(data_dir):
            other = found.setdefault(path.name, path)
            if other is not path and other.resolve() != path.resolve():
                raise InvalidArgument(
                    f"--data: two stores named {path.name!r}, {other} and {path} (a store is served by its "
                    "directory's name): leave one directory out of --data, or rename one of the two")
    return [found[name] for name in sorted(found)]
