"""Canonical, length-prefixed SHA-256 hashing shared by seeding, configs and fingerprints.

Every field is written as an 8-byte big-endian length followed by its bytes, and
every hash starts with a domain tag, so no two different field sequences produce
the same byte stream (``("ab", "c")`` never collides with ``("a", "bc")``) and a
hash of one kind can never be mistaken for a hash of another. Integers are encoded
as 8-byte big-endian words (with a sign marker for single integers), text as
UTF-8. Nothing here
depends on the Python hash seed, the platform's byte order or dict order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

_INT_BYTES = 8
_INT_MIN = -(2 ** (8 * _INT_BYTES - 1))
_UINT_MAX = 2 ** (8 * _INT_BYTES) - 1


class FieldHasher:
    """SHA-256 over a domain tag and a sequence of length-prefixed fields."""

    def __init__(self, domain: str) -> None:
        self._hash = hashlib.sha256()
        self.text(domain)

    def raw(self, data: bytes) -> FieldHasher:
        """One field of raw bytes."""
        self._hash.update(len(data).to_bytes(_INT_BYTES, "big"))
        self._hash.update(data)
        return self

    def text(self, value: str) -> FieldHasher:
        """One UTF-8 text field."""
        return self.raw(value.encode("utf-8"))

    def integer(self, value: int) -> FieldHasher:
        """One integer field: 8 bytes, unsigned when non-negative (up to 2**64 - 1), else two's complement."""
        if not _INT_MIN <= value <= _UINT_MAX:
            raise OverflowError(f"integer {value} does not fit {_INT_BYTES} bytes")
        signed = value < 0
        return self.raw(value.to_bytes(_INT_BYTES, "big", signed=signed) + (b"-" if signed else b"+"))

    def integers(self, values: Iterable[int]) -> FieldHasher:
        """A sequence of ids in [0, 2**64): one field of packed 8-byte big-endian words.

        The field's length prefix carries the count, so sequences stay unambiguous.
        """
        items = [int(v) for v in values]
        if items and not (0 <= min(items) and max(items) <= _UINT_MAX):
            raise OverflowError(f"ids must lie in [0, {_UINT_MAX}], got {min(items)}..{max(items)}")
        return self.raw(np.array(items, dtype=">u8").tobytes())

    def digest(self) -> bytes:
        return self._hash.digest()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def listing_fingerprint(domain: str, task: str, store_fingerprint: str, split: str, record_ids: Iterable[int],
                        labels: Iterable[int]) -> str:
    """Stable hash of a task split's composition (task, store content, split, ordered record ids and
    labels), under its kind's domain tag: VTAB splits and source-task splits hash alike, never equal."""
    hasher = FieldHasher(domain).text(task).text(store_fingerprint).text(split)
    return "sha256:" + hasher.integers(record_ids).integers(labels).hexdigest()
