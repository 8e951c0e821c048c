"""Content fingerprint of a packed store.

It identifies WHAT the store holds, not how it is encoded: for each class in id
order its name, wnid, group and split, then for each record in id order the
original file it came from (path relative to the input root), the derivation the
converter applied to it (a crop box, an inversion, a bitmap row) and the SHA-256 of
the original bytes (and, for TFDS stores, each record's split, index and label
attributes, canonical JSON). Pack options that only change the encoding (``--max-side``,
``--raw-size``, worker count) do not enter it. Fields are length-prefixed, so no
two different contents hash the same byte stream. Memory use is constant.
"""

from __future__ import annotations

import hashlib

_DOMAIN = b"sampler-server/store-content/v1"


class ContentFingerprint:
    """Incremental hasher fed by the writer in record-id order."""

    def __init__(self, source: str) -> None:
        self._hash = hashlib.sha256()
        self._field(_DOMAIN)
        self._field(source.encode("utf-8"))

    def _field(self, data: bytes) -> None:
        self._hash.update(len(data).to_bytes(8, "big"))
        self._hash.update(data)

    def add_class(self, name: str, wnid: str | None, group: str | None, split: str | None) -> None:
        self._field(b"class")
        for value in (name, wnid or "", group or "", split or ""):
            self._field(value.encode("utf-8"))

    def add_record(self, origin: str, derivation: str, source_digest: bytes) -> None:
        self._field(b"record")
        self._field(origin.encode("utf-8"))
        self._field(derivation.encode("utf-8"))
        self._field(source_digest)

    def add_labels(self, data: bytes) -> None:
        """What a record's labels derive from (VTAB's TFDS index and attributes), after its record."""
        self._field(b"labels")
        self._field(data)

    def hexdigest(self) -> str:
        return "sha256:" + self._hash.copy().hexdigest()
