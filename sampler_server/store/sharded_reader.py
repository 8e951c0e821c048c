"""The ``StoreReader`` interface over the shards of one source (``store.shards``).

Global record ids are contiguous over the shards in shard order (shard I's records
follow shard I-1's), so a record id maps to its shard with one bisection and a read of
many ids becomes one read transaction per shard touched, results put back in the order
asked. Errors name the merged store and the GLOBAL record id, as a single store's
reader does; a shard whose data file turns unreadable raises ``StoreUnreadable``
naming the merged store, so the server quarantines the source as a whole, never
serving it with a hole.

Decode workers in other processes cannot receive an open reader; they get a
``ReaderLocation`` (picklable) and ``open_reader`` re-opens the same view there.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from sampler_server.errors import DataLoss
from sampler_server.store.manifest import Manifest
from sampler_server.store.reader import StoreReader, StoreUnreadable
from sampler_server.store.record import Record
from sampler_server.store.record_reader import RecordReader
from sampler_server.store.shards import merge_shards


@dataclass(frozen=True)
class ReaderLocation:
    """Where a reader's data is: one store directory, or the shard directories of one
    source (in shard order) and the name it is served under."""

    directories: tuple[str, ...]
    name: str | None = None  # set for a sharded source


def open_reader(location: ReaderLocation | str | os.PathLike[str]) -> "StoreReader | ShardedReader":
    """The reader a location describes (a path is one store)."""
    if not isinstance(location, ReaderLocation):
        return StoreReader(location)
    if location.name is None:
        return StoreReader(location.directories[0])
    return ShardedReader(location.name, [StoreReader(d) for d in location.directories])


def reader_location(reader: "StoreReader | ShardedReader") -> ReaderLocation:
    if isinstance(reader, ShardedReader):
        return reader.location
    return ReaderLocation((str(reader.directory),))


class ShardedReader(RecordReader):
    """Random access to the records of all shards by global id; the merged manifest is
    built (and checked) on construction, data is opened lazily per shard."""

    def __init__(self, name: str, shards: Sequence[StoreReader]) -> None:
        self.name = name
        manifest = merge_shards(name, {reader.directory.name: reader.manifest for reader in shards})
        order = manifest.pack_options["shards"]["stores"]
        by_name = {reader.directory.name: reader for reader in shards}
        self.shards: tuple[StoreReader, ...] = tuple(by_name[shard] for shard in order)
        self.manifest: Manifest = manifest
        self._starts: list[int] = []
        start = 0
        for reader in self.shards:
            self._starts.append(start)
            start += reader.num_records

    @property
    def location(self) -> ReaderLocation:
        return ReaderLocation(tuple(str(reader.directory) for reader in self.shards), self.name)

    @property
    def directories(self) -> tuple[Path, ...]:
        return tuple(reader.directory for reader in self.shards)

    def data_bytes(self) -> int:
        """Bytes of all shards' data files."""
        return sum(reader.data_bytes() for reader in self.shards)

    def _unreadable(self, error: StoreUnreadable) -> StoreUnreadable:
        return StoreUnreadable(f"{error} (a shard of {self.name!r}, which is served only whole)", self.name)

    def check_data(self) -> None:
        """Every shard's; the ``StoreUnreadable`` names this merged store."""
        for reader in self.shards:
            try:
                reader.check_data()
            except StoreUnreadable as error:
                raise self._unreadable(error) from None

    def values_or_none(self, record_ids: Sequence[int]) -> list[bytes | None]:
        """One read transaction per shard touched."""
        return self._per_shard(record_ids, "values_or_none")

    def origins(self, record_ids: Sequence[int]) -> list[str]:
        """One read transaction per shard touched."""
        return self._per_shard(record_ids, "origins")

    def _per_shard(self, record_ids: Sequence[int], method: str) -> list[Any]:
        """``method`` of each shard's reader over that shard's records (one read transaction
        per shard touched), answers put back in the order asked."""
        by_shard: dict[int, list[int]] = {}
        for position, record_id in enumerate(record_ids):
            self._check_id(record_id)
            by_shard.setdefault(bisect.bisect_right(self._starts, record_id) - 1, []).append(position)
        out: list[Any] = [None] * len(record_ids)
        for shard, positions in by_shard.items():
            start = self._starts[shard]
            try:
                answers = getattr(self.shards[shard], method)([record_ids[p] - start for p in positions])
            except StoreUnreadable as error:
                raise self._unreadable(error) from None
            for position, answer in zip(positions, answers):
                out[position] = answer
        return out

    def iter_records(self) -> Iterator[tuple[int, Record]]:
        """In global id order (one cursor pass per shard)."""
        for start, reader in zip(self._starts, self.shards):
            try:
                for record_id, record in reader.iter_records():
                    yield start + record_id, record
            except StoreUnreadable as error:
                raise self._unreadable(error) from None
            except DataLoss as error:
                raise DataLoss(f"store {self.name!r} (shard {reader.directory.name!r}): {error}") from None
