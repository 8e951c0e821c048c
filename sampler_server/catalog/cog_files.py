"""naver/cog's level and split files as the server (and ``sampler-server cog``) read them.

A request names the files by path on the server: absolute, or relative to its data
directory. Parsed files are cached keyed by (resolved path, size, mtime): the concepts
split file is about 680 MB, and a split request must not parse it again; a file replaced
on disk is read again. The images a level's names resolve to (read from the store's
record origins, ``StoreReader.origins``) are cached per (store content, split file,
level). Both caches are small LRUs. The pure rules are in ``core.cog.official_files``
(reading) and ``core.cog.official_levels`` (levels, splits, fingerprints).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sampler_server.core.cog import LEVEL_NAMES
from sampler_server.core.cog.official_files import (
    ConceptImages,
    OfficialLevels,
    parse_concepts_split_file,
    parse_levels_file,
)
from sampler_server.core.cog.official_levels import (
    build_official_split,
    check_files,
    level_sizes,
    levels_fingerprint,
    resolve_concepts,
)
from sampler_server.core.cog.splits import CogSplit, SplitRequest, records_by_wnid, split_sizes
from sampler_server.errors import InputFormatError, InvalidArgument, NotFound
from sampler_server.quoting import quoted

FILES_CACHE = 4
RESOLVED_CACHE = 8
LEVELS_FIELD = "levels_file"
SPLIT_FIELD = "concepts_split_file"


@dataclass(frozen=True)
class CogFileSet:
    """The files a request names: a levels file, and optionally a concepts split file."""

    levels: OfficialLevels
    images: ConceptImages | None


class CogFiles:
    """Loads, checks and caches the files; builds levels and splits from them over a store.

    ``data_dir`` resolves relative paths; ``fields`` names the two inputs in messages
    (the request's fields, or the CLI's flags)."""

    def __init__(self, data_dir: Path | None, fields: tuple[str, str] = (LEVELS_FIELD, SPLIT_FIELD)) -> None:
        self.data_dir = data_dir
        self.fields = fields
        self._lock = threading.Lock()
        self._parsed: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._resolved: collections.OrderedDict[tuple[Any, ...], dict[str, tuple[np.ndarray, np.ndarray]]] = \
            collections.OrderedDict()

    def _path(self, text: str, field: str) -> Path:
        path = Path(text)
        if not path.is_absolute():
            if self.data_dir is None:
                raise InvalidArgument(f"{field}: got {quoted(text)}, expected an absolute path (no data directory "
                                      "to resolve a relative one)")
            path = self.data_dir / path
        if not path.is_file():
            raise NotFound(f"{field}: {quoted(text)} is not a file on the server (absolute, or relative to its data "
                           "directory)")
        return path

    def _load(self, text: str, field: str, parse: Callable[..., Any]) -> Any:
        path = self._path(text, field)
        try:
            stat = path.stat()
        except OSError as error:
            raise InputFormatError(f"{field} {text}", f"unreadable ({error.strerror})") from None
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, parse)
        with self._lock:
            cached = self._parsed.get(key)
            if cached is not None:
                self._parsed.move_to_end(key)
                return cached
            try:
                data = path.read_bytes()
            except OSError as error:
                raise InputFormatError(f"{field} {text}", f"unreadable ({error.strerror})") from None
            parsed = parse(data, source=f"{field} {text}")
            self._parsed[key] = parsed
            while len(self._parsed) > FILES_CACHE:
                self._parsed.popitem(last=False)
            return parsed

    def load(self, levels_file: str, concepts_split_file: str) -> CogFileSet | None:
        """The files a request names; None when it names none (our computed levels)."""
        levels_field, split_field = self.fields
        if not levels_file:
            if concepts_split_file:
                raise InvalidArgument(f"{split_field}: given without {levels_field}; the split file's images are of "
                                      "the levels file's concepts, name both")
            return None
        levels = self._load(levels_file, levels_field, parse_levels_file)
        images = self._load(concepts_split_file, split_field, parse_concepts_split_file) if concepts_split_file \
            else None
        return CogFileSet(levels, images)

    def _resolved_level(self, store: Any, files: CogFileSet, level: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        assert files.images is not None
        key = (store.name, store.manifest.fingerprint, files.images.sha256, files.levels.sha256, level)
        with self._lock:
            cached = self._resolved.get(key)
            if cached is not None:
                self._resolved.move_to_end(key)
                return cached
        records = records_by_wnid(store.manifest.classes)
        resolved = resolve_concepts(files.images, files.levels.concepts(level), records, store.reader.origins,
                                    store.name)
        with self._lock:
            self._resolved[key] = resolved
            while len(self._resolved) > RESOLVED_CACHE:
                self._resolved.popitem(last=False)
        return resolved

    def split(self, store: Any, files: CogFileSet, request: SplitRequest,
              make_split: Callable[..., CogSplit] = CogSplit) -> CogSplit:
        """``request``'s split (L1..L5) with the files' concepts and images, over ``store``
        (a served IN-21K store: ``name``, ``manifest``, ``reader``)."""
        if request.level not in LEVEL_NAMES:
            raise InvalidArgument(f"level: got {request.level} with {self.fields[0]}, expected one of "
                                  f"{', '.join(LEVEL_NAMES)} (the files define L1..L5; IN-1K takes none)")
        manifest = store.manifest
        check_files(files.levels, files.images, [c.wnid for c in manifest.classes if c.wnid], store.name,
                    [request.level])
        resolved = self._resolved_level(store, files, request.level) if files.images is not None else None
        return build_official_split(manifest.fingerprint, files.levels, files.images, request,
                                    records_by_wnid(manifest.classes), resolved, make_split)

    def summaries(self, store: Any, files: CogFileSet) -> tuple[list[dict[str, Any]], str]:
        """Each level's summary (name, wnids, train and test sizes) and the levels' fingerprint;
        every concept must be in the store (and the split file)."""
        counts = {c.wnid: c.count for c in store.manifest.classes if c.wnid}
        check_files(files.levels, files.images, list(counts), store.name)
        out = []
        for name in LEVEL_NAMES:
            train, test = level_sizes(files.levels, files.images, name, lambda wnid: split_sizes(counts[wnid]))
            out.append({"level": name, "wnids": list(files.levels.concepts(name)), "train_size": train,
                        "test_size": test})
        return out, levels_fingerprint(files.levels, files.images)

