"""What every reader of a served source offers, written once.

``StoreReader`` (one LMDB store) and ``ShardedReader`` (the shards of one source read
as one) differ only in where a record's bytes live. The record-id check, the
missing-record error, the typed reads and the decode error all sit here, so both
readers answer the same request with the same error, naming the store by its
manifest name (a sharded source's merged name) and the record by its id as served.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

from sampler_server.errors import DataLoss, InvalidArgument
from sampler_server.store.manifest import Manifest
from sampler_server.store.record import Record, decode_record


class RecordReader(ABC):
    """Random access to a source's records by id; subclasses say where the bytes are."""

    manifest: Manifest

    @property
    def num_records(self) -> int:
        """Every record the data holds (the classes', then a validation partition's)."""
        return self.manifest.total_records

    @abstractmethod
    def data_bytes(self) -> int:
        """Size of the data now (0 when it cannot be read): what a record costs on average."""

    @abstractmethod
    def check_data(self) -> None:
        """Open the data now and check its size (start-up).

        Raises:
            StoreUnreadable: missing, not LMDB, or shorter than it must be.
        """

    @abstractmethod
    def values_or_none(self, record_ids: Sequence[int]) -> list[bytes | None]:
        """Like ``read_values``, with None for a record missing from the data (for ``verify``)."""

    @abstractmethod
    def origins(self, record_ids: Sequence[int]) -> list[str]:
        """Each record's origin (its original file), from its metadata only: no payload is
        copied, so listing a large class's files touches one page per record."""

    @abstractmethod
    def iter_records(self) -> Iterator[tuple[int, Record]]:
        """Every record in id order (for inspection and tests)."""

    def _check_id(self, record_id: int) -> None:
        if not 0 <= record_id < self.num_records:
            raise InvalidArgument(
                f"record id {record_id} is out of range for store {self.manifest.name!r}; "
                f"allowed: 0 to {self.num_records - 1}"
            )

    def _missing(self, record_id: int) -> DataLoss:
        return DataLoss(f"store {self.manifest.name!r}: record {record_id} is missing from its LMDB data")

    def _malformed(self, record_id: int, error: DataLoss) -> DataLoss:
        return DataLoss(f"store {self.manifest.name!r}, record {record_id}: {error}")

    def read_value(self, record_id: int) -> bytes:
        """The raw stored value (header + metadata + payload)."""
        return self.read_values([record_id])[0]

    def read_values(self, record_ids: Sequence[int]) -> list[bytes]:
        """Several values, in the order asked (one read transaction per store touched)."""
        out: list[bytes] = []
        for record_id, value in zip(record_ids, self.values_or_none(record_ids)):
            if value is None:
                raise self._missing(record_id)
            out.append(value)
        return out

    def read(self, record_id: int) -> Record:
        """One record, decoded. A data file found unreadable raises its own ``StoreUnreadable``
        unchanged (the server quarantines the store by it); a malformed value is a
        ``DataLoss`` naming the store and the record."""
        value = self.read_value(record_id)
        try:
            return decode_record(value)
        except DataLoss as error:
            raise self._malformed(record_id, error) from None
