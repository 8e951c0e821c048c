"""Content fingerprint of a packed store.

It identifies WHAT the store holds, not how it is encoded: for each class in id
order its name, wnid, group and split, then for each record in id order the
original file it came from (path relative to the input root), the derivation the
converter applied to it (a crop box, an inversion, a bitmap row) and the SHA-256 of
the original bytes (and, for TFDS stores, each record's split, index and label
attributes, canonical JSON). Pack options that only change the encoding (``--max-side``,
``--raw-size``, worker count) do not enter it. Fields are length-prefixed, so no
two different contents hash the same byte stream. Memory use is constant.

Sources packed in shards (ImageNet-21K) use ``ClassDigestFingerprint`` instead: each
class gets its own digest (name, wnid, group, split, then its records as above), kept
in the manifest, and the store's fingerprint hashes the class digests in class order
(``fingerprint_of_classes``). Shards merged in class order therefore give the same
fingerprint as one store packed from the same input, however it was sharded. Every
other source keeps ``ContentFingerprint`` (its fingerprints are pinned by tests).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

_DOMAIN = b"sampler-server/store-content/v1"
_CLASS_DOMAIN = b"sampler-server/class-content/v1"
_BY_CLASS_DOMAIN = b"sampler-server/store-content-by-class/v1"


def _field(hasher: "hashlib._Hash", data: bytes) -> None:
    hasher.update(len(data).to_bytes(8, "big"))
    hasher.update(data)


class ContentFingerprint:
    """Incremental hasher fed by the writer in record-id order.

    ``partition``: the name of a held-out partition it covers (ILSVRC-2012's
    ``validation``), hashed after the source; a store's classes (its train partition)
    take none, so their fingerprint is the one they always had."""

    def __init__(self, source: str, partition: str | None = None) -> None:
        self._hash = hashlib.sha256()
        self._field(_DOMAIN)
        self._field(source.encode("utf-8"))
        if partition is not None:
            self._field(b"partition")
            self._field(partition.encode("utf-8"))

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


class ClassDigestFingerprint:
    """Same feeding as ``ContentFingerprint``, hashed per class (see the module docstring)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._digests: list[str] = []
        self._class: hashlib._Hash | None = None

    def _finish_class(self) -> None:
        if self._class is not None:
            self._digests.append("sha256:" + self._class.hexdigest())
            self._class = None

    def add_class(self, name: str, wnid: str | None, group: str | None, split: str | None) -> None:
        self._finish_class()
        self._class = hashlib.sha256()
        _field(self._class, _CLASS_DOMAIN)
        for value in (name, wnid or "", group or "", split or ""):
            _field(self._class, value.encode("utf-8"))

    def add_record(self, origin: str, derivation: str, source_digest: bytes) -> None:
        assert self._class is not None, "a record before its class"
        _field(self._class, b"record")
        _field(self._class, origin.encode("utf-8"))
        _field(self._class, derivation.encode("utf-8"))
        _field(self._class, source_digest)

    def add_labels(self, data: bytes) -> None:
        assert self._class is not None, "labels before their class"
        _field(self._class, b"labels")
        _field(self._class, data)

    def class_digests(self) -> list[str]:
        """One digest per class fed so far, in the order fed (closes the current class)."""
        self._finish_class()
        return list(self._digests)

    def hexdigest(self) -> str:
        return fingerprint_of_classes(self.source, self.class_digests())


def fingerprint_of_classes(source: str, class_digests: Iterable[str]) -> str:
    """A store's fingerprint from its classes' digests, in class order."""
    hasher = hashlib.sha256()
    _field(hasher, _BY_CLASS_DOMAIN)
    _field(hasher, source.encode("utf-8"))
    for digest in class_digests:
        _field(hasher, digest.encode("ascii"))
    return "sha256:" + hasher.hexdigest()
