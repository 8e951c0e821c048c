"""The packed record store: one LMDB environment per source plus a JSON manifest.

Invariants every part relies on:
- records of class c occupy the contiguous id range [start_c, end_c);
- keys are 8-byte big-endian record ids, so LMDB's order is id order;
- a store is servable only once its directory holds a manifest; the writer builds
  it under a hidden temporary name and renames it into place as the last step;
- the content fingerprint hashes what the records ARE (original files, their
  classes, their order, the split) and not how they are encoded, so packing with
  another ``--max-side`` or ``--raw-size`` keeps the fingerprint.
"""

from typing import Any

from sampler_server.store.manifest import ClassInfo, Manifest, Split, load_manifest
from sampler_server.store.record import Encoding, Record, decode_record, encode_record


def __getattr__(name: str) -> Any:
    # The reader pulls in LMDB; modules that only need manifests (pure layers) must
    # be able to import this package without it.
    if name in ("StoreReader", "find_stores", "open_store"):
        from sampler_server.store import reader

        return getattr(reader, name)
    raise AttributeError(name)

__all__ = [
    "ClassInfo",
    "Encoding",
    "Manifest",
    "Record",
    "Split",
    "StoreReader",
    "decode_record",
    "encode_record",
    "find_stores",
    "load_manifest",
    "open_store",
]
