"""Frozen features on disk, keyed by what they depend on (framework-free).

An entry holds the arrays a backbone produced for one split (e.g. a Meta-Dataset
episode's support and query features). Its key is the backbone's fingerprint (the sha256
of its weights as loaded, ``LoadedBackbone.fingerprint``), the split's fingerprint (as the
server gives it: an episode's fingerprint covers its composition and the store's content),
the preprocessing (``Preprocessing.key()``: served side, range, mean, std) and whatever
else the caller names (the resize method); so every protocol that reads the same split
with the same backbone and preprocessing reads the same entry, and nothing else can.

Layout: ``<DIR>/<kk>/<key>.npz`` (``kk`` the key's first two hex digits), one NumPy
``.npz`` holding the arrays and ``__key__``, the canonical JSON of the key fields (checked
when read, so a hash collision or a foreign file is never used). Writes are atomic: a
temporary file in the same directory, flushed and renamed over the entry. An entry that
cannot be read (truncated, damaged, of another key) is recomputed and replaced, never
fatal: the cache only saves time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

CACHE_DIR_NAME = Path("sampler-server") / "features"


def default_cache_dir() -> Path:
    """Where ``--feature-cache`` points when not given: the user's cache directory
    (``$XDG_CACHE_HOME``, else ``~/.cache``), shared by every run of the user, which is what
    lets a later run or another protocol reuse the features (they are keyed by what they depend
    on, so sharing is safe)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_DIR_NAME

CACHE_FORMAT = "sampler-features-v1"
KEY_ARRAY = "__key__"


def key_text(backbone_fingerprint: str, split_fingerprint: str, preprocessing_key: str,
             extra: Mapping[str, Any] | None = None) -> str:
    """The canonical JSON of an entry's key fields."""
    fields = {"format": CACHE_FORMAT, "backbone": backbone_fingerprint, "split": split_fingerprint,
              "preprocessing": preprocessing_key, **dict(extra or {})}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


class FeatureCache:
    """Entries under one directory (created when first written). ``hits`` and ``misses``
    count this object's lookups; ``recomputed`` the damaged entries it replaced."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.hits = self.misses = self.recomputed = 0

    def path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.npz"

    def load(self, key: str) -> dict[str, np.ndarray] | None:
        """The arrays of ``key``; None when absent or unreadable (a damaged entry is counted)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
            if str(arrays.pop(KEY_ARRAY)) != key:
                raise ValueError("the entry holds another key")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            self.recomputed += 1
            return None
        return arrays

    def store(self, key: str, arrays: Mapping[str, np.ndarray]) -> Path:
        """Write ``arrays`` under ``key`` atomically (replacing any entry there)."""
        if KEY_ARRAY in arrays:
            raise ValueError(f"arrays: {KEY_ARRAY!r} is the cache's own name")
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, **{KEY_ARRAY: np.asarray(key)}, **{k: np.asarray(v) for k, v in arrays.items()})
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return path

    def get_or_compute(self, key: str, compute: Callable[[], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The cached arrays of ``key``, else ``compute()``'s, stored first."""
        found = self.load(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        arrays = {name: np.asarray(value) for name, value in compute().items()}
        self.store(key, arrays)
        return arrays
