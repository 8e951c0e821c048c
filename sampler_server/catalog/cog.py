"""ImageNet-CoG level splits over packed stores: the one resolution of a split request.

The server's ``GetCogSplit``/``StreamCogBatches`` and ``sampler-server cog split`` both ask a
``CogCatalog`` (over the server's registry, or one opened on ``--data``), so they give the
same records and fingerprint for the same request. Levels L1..L5 come from the IN-21K
store's class counts (all its shards as one store, ``core.cog.levels``) and are cached per
(store content, level_size, min_images): computing them walks WordNet. IN-1K is the
ILSVRC store's classes, tested on its validation partition. A request naming naver/cog's
files (``catalog.cog_files``) takes L1..L5 and their images from them. Splits hold only
ids and labels (16 bytes per image) and are cached in a small LRU.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from sampler_server.catalog.cog_files import CogFiles
from sampler_server.catalog.registry import ServedStore, StoreRegistry
from sampler_server.core.cog import SEEN_LEVEL
from sampler_server.core.cog.levels import CogLevels, compute_levels
from sampler_server.core.cog.splits import (
    CogSplit,
    SplitRequest,
    build_split,
    held_out_test,
    level_source,
    missing_store,
    records_by_wnid,
    seen_concepts,
)
from sampler_server.errors import NotFound

SPLIT_CACHE = 8  # a trainer works on one level at a time: its train, val and test splits
LEVELS_CACHE = 4  # level configurations kept (a request may name any: the cache stays bounded)


class CogCatalog:
    """CoG levels and splits over ``registry``'s stores. ``files`` reads naver/cog's files (its
    data directory resolves relative paths); ``where`` names the stores' place in messages
    ("the server", "--data DIR")."""

    def __init__(self, registry: StoreRegistry, files: CogFiles, where: str) -> None:
        self.registry = registry
        self.files = files
        self.where = where
        self._lock = threading.Lock()
        self._levels: collections.OrderedDict[tuple[str, int, int], CogLevels] = collections.OrderedDict()
        self._splits: collections.OrderedDict[tuple[Any, ...], CogSplit] = collections.OrderedDict()

    def store(self, source: str) -> ServedStore | None:
        """The store of a source kind (IN-21K: all shards as one), None if there is none.
        A store quarantined is FAILED_PRECONDITION, as for every other request."""
        try:
            return self.registry.get(source)
        except NotFound:
            return None

    def levels(self, store: ServedStore, level_size: int, min_images: int) -> CogLevels:
        """Levels L1..L5 computed from ``store``'s class counts (cached)."""
        key = (store.manifest.fingerprint, level_size, min_images)
        with self._lock:
            cached = self._levels.get(key)
            if cached is not None:
                self._levels.move_to_end(key)
                return cached
        counts = {c.wnid: c.count for c in store.manifest.classes if c.wnid}
        levels = compute_levels(counts, level_size=level_size, min_images=min_images, source=f"store {store.name}")
        with self._lock:
            self._levels[key] = levels
            while len(self._levels) > LEVELS_CACHE:
                self._levels.popitem(last=False)
        return levels

    def split(self, request: SplitRequest, level_size: int, min_images: int, levels_file: str = "",
              concepts_split_file: str = "") -> tuple[CogSplit, ServedStore]:
        """The split ``request`` names, and the store serving its images. ``levels_file`` and
        ``concepts_split_file`` (naver/cog's) define L1..L5 where given; IN-1K takes none."""
        store = self.store(level_source(request.level))
        if store is None:
            raise missing_store(request.level, self.where)
        if request.level != SEEN_LEVEL and (levels_file or concepts_split_file):
            files = self.files.load(levels_file, concepts_split_file)
            assert files is not None
            return self.files.split(store, files, request), store
        manifest = store.manifest
        # IN-1K tests on the store's validation partition: none is FAILED_PRECONDITION, never train images
        held_out = held_out_test(manifest, store.name) if request.level == SEEN_LEVEL else None
        key = (store.name, manifest.fingerprint, held_out and held_out.fingerprint, request, level_size, min_images)
        with self._lock:
            if key in self._splits:
                self._splits.move_to_end(key)
                return self._splits[key], store
        if request.level == SEEN_LEVEL:
            concepts = seen_concepts(manifest.classes)
        else:
            concepts = self.levels(store, level_size, min_images).level(request.level).concepts
        split = build_split(manifest.fingerprint, records_by_wnid(manifest.classes), concepts, request,
                            level_size=level_size, min_images=min_images, held_out=held_out)
        with self._lock:
            self._splits[key] = split
            while len(self._splits) > SPLIT_CACHE:
                self._splits.popitem(last=False)
        return split, store
