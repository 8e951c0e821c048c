"""The stores a server serves and their sampler specs, loaded once at start-up.

Only manifests are read at start (images stay in LMDB). A store is addressed by its
directory name; its episodes depend on its SOURCE kind and content, so two stores
of one source packed with different ``--raw-size`` serve identical episodes.
WordNet-split stores (ILSVRC) get their spec from the hierarchy on first use (it
needs the WordNet graph), cached per ImageNet variant.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sampler_server.core.sampling.presets import (
    IMAGENET_SPLIT,
    Benchmark,
    benchmark_sources,
)
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument, NotFound
from sampler_server.store.manifest import Manifest
from sampler_server.store.reader import StoreReader, find_stores


@dataclass(frozen=True)
class ServedStore:
    name: str
    reader: StoreReader

    @property
    def manifest(self) -> Manifest:
        return self.reader.manifest

    @property
    def source(self) -> str:
        return self.manifest.source

    @property
    def raw_size(self) -> int | None:
        value = self.manifest.pack_options.get("raw_size")
        return int(value) if value else None


def _needs_wordnet_split(manifest: Manifest) -> bool:
    """Every class has a wnid and none a split: the split comes from WordNet (ILSVRC)."""
    return bool(manifest.classes) and all(c.wnid and c.split is None for c in manifest.classes)


class StoreRegistry:
    def __init__(self, stores: Sequence[ServedStore]) -> None:
        self.stores = {store.name: store for store in stores}
        self._specs: dict[tuple[str, str], DatasetSpec] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> "StoreRegistry":
        stores = [ServedStore(path.name, StoreReader(path)) for path in find_stores(data_dir)]
        if not stores:
            raise NotFound(f"{data_dir}: no packed stores (run `sampler-server pack` first)")
        return cls(stores)

    def get(self, name: str) -> ServedStore:
        store = self.stores.get(name)
        if store is None:
            raise NotFound(f"source {name!r} is not served; served: {', '.join(sorted(self.stores))}")
        return store

    def spec(self, name: str, imagenet_variant: str = "md") -> DatasetSpec:
        store = self.get(name)
        key = (name, imagenet_variant if _needs_wordnet_split(store.manifest) else "")
        with self._lock:
            spec = self._specs.get(key)
        if spec is None:
            if key[1]:
                # WordNet and networkx load only when an ImageNet-like store is asked for:
                # start-up stays fast for every other store
                from sampler_server.core.imagenet_spec import imagenet_spec

                spec = imagenet_spec(store.manifest, variant=imagenet_variant)
            else:
                spec = DatasetSpec.from_manifest(store.manifest)
            with self._lock:
                self._specs[key] = spec
        return spec

    def resolve(
        self, names: Sequence[str], preset: str, split: Split, image_size: int
    ) -> tuple[dict[str, DatasetSpec], dict[str, ServedStore]]:
        """(spec by source kind, store by source kind) for a request's sources or preset."""
        if bool(names) == bool(preset):
            raise InvalidArgument("request: got " + ("both sources and a preset" if names else "neither sources nor a preset")
                                  + ", expected exactly one of them")
        variant = "md"
        if preset:
            benchmark = Benchmark.parse(preset)
            variant = IMAGENET_SPLIT[benchmark]
            names = [self._store_for_source(kind, image_size) for kind in benchmark_sources(benchmark, split)]
        specs: dict[str, DatasetSpec] = {}
        stores: dict[str, ServedStore] = {}
        for name in names:
            store = self.get(name)
            if store.source in stores:
                raise InvalidArgument(
                    f"sources: got {stores[store.source].name!r} and {name!r}, both of source {store.source!r}; "
                    "expected one store per source"
                )
            specs[store.source] = self.spec(name, variant)
            stores[store.source] = store
        return specs, stores

    def _store_for_source(self, kind: str, image_size: int) -> str:
        """The store of a source kind; one packed raw at the requested size is preferred."""
        candidates = sorted((s for s in self.stores.values() if s.source == kind), key=lambda s: s.name)
        if not candidates:
            raise NotFound(f"preset needs source {kind!r}, which is not served; served: {', '.join(sorted(self.stores))}")
        exact = [s for s in candidates if s.raw_size == image_size]
        encoded = [s for s in candidates if s.raw_size is None]
        return (exact or encoded or candidates)[0].name
