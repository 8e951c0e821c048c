"""The precomputed WordNet split beside a store's manifest: ``wordnet_split.json``.

Stores whose classes are split by WordNet (ILSVRC-2012) get this file at pack time
(``core.md.imagenet_spec.precompute_split``; layout and checks in
``core.hierarchy.precomputed``), so a server builds their spec without loading WordNet.
It is derived data: the manifest and the shipped WordNet file determine it, it enters
no fingerprint, and a store without it (packed before it existed) or with one that
fails its checks is served the same episodes from a split built from WordNet on the
first request. The pack writes it into the store's hidden directory before the
store is published, so a published store has it complete or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

SPLIT_FILE_NAME = "wordnet_split.json"


def write_split_file(directory: str | os.PathLike[str], blob: bytes) -> Path:
    """Write the file into ``directory`` atomically (a reader sees all of it or none)."""
    path = Path(directory) / SPLIT_FILE_NAME
    tmp = path.with_name(SPLIT_FILE_NAME + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(blob)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def read_split_file(directory: str | os.PathLike[str]) -> bytes | None:
    """The file's bytes, or None when the store has none.

    Raises:
        OSError: it exists and cannot be read.
    """
    try:
        return (Path(directory) / SPLIT_FILE_NAME).read_bytes()
    except FileNotFoundError:
        return None


def has_split_file(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / SPLIT_FILE_NAME).is_file()
