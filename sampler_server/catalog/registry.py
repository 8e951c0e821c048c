"""The stores a server serves and their sampler specs, loaded once at start-up.

Only manifests are read at start (images stay in LMDB). A store is addressed by its
directory name; its episodes depend on its SOURCE kind and content, so two stores
of one source packed with different ``--raw-size`` serve identical episodes.
WordNet-split stores (ILSVRC) get their spec on first use, cached per benchmark
variant: every request that picks or reports classes by split names its variant
(``preset``: md-v1, the default, or md-v2), because only these stores' class splits
differ between the two. The split comes from the file the pack computed beside the
manifest (``store.wordnet_split``: milliseconds, no WordNet graph). A store without
it (packed before it existed) is named in one warning at start-up; a file that fails
its checks (damaged, another format, other classes) is refused with one error line
when first read. Either way the split is built from WordNet on the first request that
needs it (about a second for 1000 classes; concurrent requests wait for the one
build): the episodes are the same, only slower to start.

A request may name a store (its directory name) or a source kind (``omniglot``);
``StoreRegistry.get`` is the one place that resolves either.

Shards (``pack imagenet21k --shard I/N``, ``store.shards``) are served as ONE store
named by their base name (``imagenet21k``), whose manifest is the merged one and whose
reader reads across them (``store.sharded_reader``); the shards themselves are not
listed. A shard group that does not merge (a shard missing or unreadable, shards of
different counts or inputs) is quarantined under its base name with that one-line
reason: never served in part. So is a group whose base name is also a single store's
directory (each shard is then quarantined under its own name, and the single store
served).

A store that cannot be read safely is quarantined at start-up, not served, and the
others are: an unreadable or invalid manifest, a data file that is not LMDB, shorter
than its LMDB pages or than the manifest records (a truncated copy). Each is logged
as one line; a request naming it (by store name, or by a source kind only it has)
is FAILED_PRECONDITION with that line (the store exists, its state forbids serving;
NOT_FOUND would suggest a typo). Stores packed before record checksums (layout 1)
are served with one warning each: their records cannot be verified.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sampler_server.core.hierarchy.imagenet import ImageNetVariant
from sampler_server.core.hierarchy.precomputed import SplitFileError, VariantSplit
from sampler_server.core.md.imagenet_spec import (
    imagenet_spec,
    needs_wordnet_split,
    read_precomputed,
    spec_from_split,
)
from sampler_server.core.md.presets import (
    IMAGENET_SPLIT,
    Benchmark,
    benchmark_sources,
)
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, SamplerError
from sampler_server.quoting import quoted
from sampler_server.store.manifest import Manifest
from sampler_server.store.naming import StoreName, pick_store
from sampler_server.store.reader import StoreReader, find_stores_in
from sampler_server.store.sharded_reader import ShardedReader
from sampler_server.store.shards import group_stores
from sampler_server.store.wordnet_split import SPLIT_FILE_NAME, has_split_file, read_split_file

log = logging.getLogger("sampler_server.service")  # the server's log: these lines are its start-up and quarantines


@dataclass(frozen=True)
class QuarantinedStore:
    """A store found under the data directory that is not served, and why."""

    name: str
    reason: str
    source: str | None = None


@dataclass(frozen=True)
class ServedStore:
    name: str
    reader: StoreReader | ShardedReader

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


class StoreRegistry:
    def __init__(self, stores: Sequence[ServedStore], quarantined: Sequence[QuarantinedStore] = ()) -> None:
        self.stores = {store.name: store for store in stores}
        self.quarantined: Mapping[str, QuarantinedStore] = {q.name: q for q in quarantined}
        self._specs: dict[tuple[str, str], DatasetSpec] = {}
        self._building: dict[tuple[str, str], futures.Future[DatasetSpec]] = {}
        self._refused_split_files: set[str] = set()
        self.data_dir: Path | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_data_dir(cls, data_dir: Path | Sequence[Path]) -> "StoreRegistry":
        """Every store under ``data_dir`` (one directory, or several served together, the
        first resolving request paths) that can be read safely; the others quarantined.

        Raises:
            NotFound: no store at all, or none that can be served (naming why).
            InvalidArgument: two stores of one name in two of the directories.
        """
        data_dirs = [Path(d) for d in data_dir] if isinstance(data_dir, (list, tuple)) else [Path(data_dir)]
        where = ", ".join(map(str, data_dirs))
        stores: list[ServedStore] = []
        quarantined: list[QuarantinedStore] = []

        def refuse(name: str, reason: str, source: str | None) -> None:
            quarantined.append(QuarantinedStore(name, reason, source))
            log.error("store %r quarantined: %s", name, reason)

        readers: dict[str, StoreReader] = {}
        unreadable: dict[str, str] = {}  # store directory -> why (a shard among them breaks its group)
        for path in find_stores_in(data_dirs):
            reader: StoreReader | None = None
            try:
                reader = StoreReader(path)
                reader.check_data()
            except SamplerError as error:
                unreadable[path.name] = str(error)
                if reader is None:
                    refuse(path.name, str(error), None)
                    continue
            readers[path.name] = reader
        grouped = group_stores({name: reader.manifest for name, reader in readers.items()})
        for name, reason in grouped.refused.items():
            refuse(name, reason, readers[name].manifest.source)
        for name in grouped.single:
            reader = readers[name]
            if name in unreadable:
                refuse(name, unreadable[name], reader.manifest.source)
                continue
            if needs_wordnet_split(reader.manifest) and not has_split_file(reader.directory):
                log.warning(
                    "store %r has no precomputed WordNet split (%s: packed before it existed, or WordNet does not "
                    "know its classes): its first episode request builds it from WordNet (about a second); repack "
                    "it with the same `sampler-server pack` command to precompute it (same episodes and "
                    "fingerprint)", name, SPLIT_FILE_NAME,
                )
            if not reader.manifest.verifiable:
                log.warning(
                    "store %r was packed before record checksums (record layout %d): its records cannot be "
                    "verified; repack it with the same `sampler-server pack` command (same episodes and "
                    "fingerprint)", name, reader.manifest.record_layout,
                )
            stores.append(ServedStore(name, reader))
        for base, shards in grouped.groups.items():
            source = next(iter(shards.values())).source
            if base in grouped.single:
                for name in shards:
                    refuse(name, f"store {name!r} is a shard of {base!r}, which is also the name of a single store "
                           f"here; remove the shards or that store", source)
                continue
            try:
                broken = {name: unreadable[name] for name in shards if name in unreadable}
                if broken:
                    name, reason = next(iter(broken.items()))
                    raise FailedPrecondition(f"sharded store {base!r}: shard {name!r} cannot be read ({reason}); "
                                             "its other shards are not served either")
                sharded = ShardedReader(base, [readers[name] for name in sorted(shards)])
            except SamplerError as error:
                refuse(base, str(error), source)
                continue
            stores.append(ServedStore(base, sharded))
        if not stores:
            if quarantined:
                reasons = "; ".join(q.reason for q in quarantined)
                raise NotFound(f"{where}: no store can be served ({reasons})")
            raise NotFound(f"{where}: no packed stores (run `sampler-server pack` first)")
        registry = cls(stores, quarantined)
        registry.data_dir = data_dirs[0]  # where request paths relative to the data directory resolve
        return registry

    def quarantine(self, name: str, reason: str) -> bool:
        """Stop serving a store found unreadable while serving (e.g. its data file was
        truncated under the running server); False if it was not served. The maps are
        replaced, not changed in place, so requests reading them meanwhile are safe."""
        with self._lock:
            store = self.stores.get(name)
            if store is None:
                return False
            self.stores = {key: value for key, value in self.stores.items() if key != name}
            self.quarantined = {**self.quarantined, name: QuarantinedStore(name, reason, store.source)}
            self._specs = {key: spec for key, spec in self._specs.items() if key[0] != name}
        log.error("store %r quarantined while serving: %s", name, reason)
        return True

    def get(self, name: str, image_size: int | None = None, resize: str | None = None) -> ServedStore:
        """The store a request names: a store name or a source kind (``store.naming``).

        Raises:
            FailedPrecondition: ``name`` is a quarantined store (or a source kind that only
                quarantined stores have).
            NotFound: nothing of that name is served.
        """
        broken = self.quarantined.get(name)
        if broken is not None:
            raise FailedPrecondition(f"store {name!r} is quarantined and not served: {broken.reason}")
        names = [StoreName.of(s.name, s.source, s.manifest.pack_options) for s in self.stores.values()]
        try:
            return self.stores[pick_store(names, name, image_size, resize).name]
        except NotFound:
            of_kind = [q for q in self.quarantined.values() if q.source == name]
            if of_kind:
                raise FailedPrecondition(
                    f"source {name!r}: its only store {of_kind[0].name!r} is quarantined and not served: "
                    f"{of_kind[0].reason}"
                ) from None
            raise

    def spec(self, name: str, preset: Benchmark | str = Benchmark.MD_V1) -> DatasetSpec:
        """The sampler spec of a store; WordNet-split stores get the class splits of ``preset``.
        Built once per (store, variant): a request arriving while it is built waits for it."""
        store = self.get(name)
        benchmark = parse_preset(preset)
        key = (store.name, IMAGENET_SPLIT[benchmark] if needs_wordnet_split(store.manifest) else "")
        with self._lock:
            spec = self._specs.get(key)
            if spec is not None:
                return spec
            building = self._building.get(key)
            if building is None:
                building = self._building[key] = futures.Future()
                mine = True
            else:
                mine = False
        if not mine:
            return building.result()
        try:
            spec = self._build_spec(store, key[1])
        except BaseException as error:
            with self._lock:
                self._building.pop(key, None)  # a later request tries again
            building.set_exception(error)
            raise
        with self._lock:
            if key[0] in self.stores:  # not quarantined meanwhile
                self._specs[key] = spec
            self._building.pop(key, None)
        building.set_result(spec)
        return spec

    def _build_spec(self, store: ServedStore, variant: str) -> DatasetSpec:
        if not variant:
            return DatasetSpec.from_manifest(store.manifest)
        precomputed = self._precomputed_split(store)
        if precomputed is not None:
            return spec_from_split(store.manifest, precomputed[ImageNetVariant(variant)])
        # the WordNet graph (and networkx) load only here: a store without a usable split file
        return imagenet_spec(store.manifest, variant=variant)

    def _precomputed_split(self, store: ServedStore) -> dict[ImageNetVariant, VariantSplit] | None:
        """The store's split file, verified; None (logged once per store) when it has none or it is refused."""
        directory = getattr(store.reader, "directory", None)  # stores read across shards have none
        if directory is None:
            return None
        where = f"store {store.name!r}: {SPLIT_FILE_NAME}"
        try:
            blob = read_split_file(directory)
            return None if blob is None else read_precomputed(store.manifest, blob, where=where)
        except (OSError, SplitFileError) as error:
            reason = f"{where}: unreadable ({error.strerror or error})" if isinstance(error, OSError) else str(error)
            with self._lock:
                first = store.name not in self._refused_split_files
                self._refused_split_files.add(store.name)
            if first:
                log.error("%s; not used: the split is built from WordNet instead (same episodes; repack the store "
                          "to replace the file)", reason)
            return None

    def resolve(
        self, names: Sequence[str], preset: str, split: Split, image_size: int, resize: str | None = None
    ) -> tuple[dict[str, DatasetSpec], dict[str, ServedStore]]:
        """(spec by source kind, store by source kind) for a request's sources (store names
        or source kinds) or, when it names none, its preset's sources for ``split``."""
        if not names and not preset:
            raise InvalidArgument("request: got neither sources nor a preset, expected sources, a preset (md-v1 or "
                                  "md-v2: its sources for the split), or both (those sources with its class splits)")
        benchmark = parse_preset(preset)
        if not names:
            names = benchmark_sources(benchmark, split)
        specs: dict[str, DatasetSpec] = {}
        stores: dict[str, ServedStore] = {}
        for name in names:
            store = self.get(name, image_size, resize)
            if store.source in stores:
                raise InvalidArgument(
                    f"sources: got {stores[store.source].name!r} and {quoted(name)}, both of source {store.source!r}; "
                    "expected one store per source"
                )
            specs[store.source] = self.spec(store.name, benchmark)
            stores[store.source] = store
        return specs, stores


def parse_preset(preset: Benchmark | str) -> Benchmark:
    """The benchmark variant whose class splits apply; empty means md-v1."""
    if isinstance(preset, Benchmark):
        return preset
    if not preset:
        return Benchmark.MD_V1
    try:
        return Benchmark(preset)
    except ValueError:
        allowed = ", ".join(b.value for b in Benchmark)
        raise InvalidArgument(f"preset: got {quoted(preset)}, expected one of {allowed} (empty = md-v1)") from None
