"""Tasks over packed stores: VTAB tasks over TFDS stores and ``source:<store>`` tasks.

A task is a VTAB task (``core.vtab``) over the store holding its TFDS dataset, or
``source:<store>``: any packed classification source that is not a TFDS store
(``core.baselines.sources``: class ids as labels, fixed held-out "train", "val",
"trainval" and "test" splits). ``TaskHandle`` hides the difference from its users: the
VTAB and baselines handlers of the service, and the CLI's ``regime`` and ``report``,
list, batch and cut regimes from either through it.

``pick_tfds_store`` is the one rule choosing the store of a VTAB task, for the server
(over the stores it serves) and the CLI (over the stores of ``--data``): the store
named, which must hold the task's dataset, else the first by name holding it in a
version the task reads. Split listings hold only ids and labels (8 + 8 bytes per
example) and are cached per (store, task, split).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sampler_server.catalog.registry import StoreRegistry
from sampler_server.core.baselines.sources import SOURCE_SPLITS, SourceSplit, is_source_task, split_source, store_of
from sampler_server.core.vtab import SPLITS, TASKS, Task, get_task
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, SamplerError
from sampler_server.quoting import quoted
from sampler_server.store.manifest import load_manifest
from sampler_server.store.reader import find_stores
from sampler_server.store.vtab_records import SplitListing, TfdsRecords, is_tfds_store, list_split, version_matches

SERVED = "on the server"
"""``where`` of the server's messages: the stores it serves."""
LISTINGS_CACHE = 64
SOURCE_SPLITS_CACHE = 32


class Listing(Protocol):
    """What a split listing offers, VTAB (``SplitListing``) or source (``SourceSplit``)."""

    store_fingerprint: str
    num_classes: int
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class TaskHandle:
    """A task as its users see it: its name, classes, serving store and split listings."""

    name: str
    num_classes: int
    store: str
    """The store serving its images (a store name: never re-resolved by image size)."""
    splits: tuple[str, ...]
    listing: Callable[[str], Listing]
    records: TfdsRecords | None = None
    """The TFDS side file of a VTAB task (numeric attributes, record locations); None for a source."""
    task: Task | None = None

    def check_split(self, split: str, field: str = "split") -> str:
        if split not in self.splits:
            raise InvalidArgument(f"{field}: got {quoted(split)} for task {self.name}, expected one of "
                                  f"{', '.join(self.splits)}")
        return split


# ---- VTAB tasks over TFDS stores ----------------------------------------------------------


def tfds_stores_in(data: Path) -> list[TfdsRecords]:
    """Every TFDS (VTAB) store under ``data`` (a data directory or one store), sorted by name;
    only manifests and side files are read."""
    out = []
    for path in find_stores(data):
        manifest = load_manifest(path)
        if is_tfds_store(manifest):
            out.append(TfdsRecords(path, manifest))
    return out


def served_task_names(stores: Sequence[TfdsRecords]) -> list[str]:
    """The VTAB tasks ``stores`` hold the dataset of, in a version each task reads, sorted."""
    held = {(r.name, r.version) for r in stores}
    return sorted(t.name for t in TASKS.values()
                  if any(n == t.tfds_name and version_matches(v, t.version) for n, v in held))


def tasks_of(records: TfdsRecords) -> list[Task]:
    """The VTAB tasks over one TFDS store (its dataset, in a version each reads), in registry order."""
    return [t for t in TASKS.values() if t.tfds_name == records.name and version_matches(records.version, t.version)]


def split_availability(task: Task, records: TfdsRecords) -> tuple[dict[str, int], dict[str, str]]:
    """VTAB split -> example count, and the splits this store cannot carve (with why)."""
    counts, unavailable = {}, {}
    for split in SPLITS:
        try:
            counts[split] = len(records.examples(task, split))
        except SamplerError as error:
            unavailable[split] = str(error)
    return counts, unavailable


def pick_tfds_store(stores: Sequence[TfdsRecords], task: Task, wanted: str | None = None, *,
                    where: str = SERVED, field: str = "store") -> TfdsRecords:
    """The store of ``stores`` (sorted by name) serving ``task``: ``wanted`` if given, else the
    first holding its dataset in a version it reads. ``where`` says where the stores are in
    messages ("on the server", "in DIR"); ``field`` names the store's input.

    Raises:
        NotFound: no store ``wanted``, or none holding the task's dataset in a version it reads.
        FailedPrecondition: ``wanted`` holds another dataset or version.
    """
    if wanted:
        for records in stores:
            if records.manifest.name == wanted:
                records.check_task(task)
                return records
        raise NotFound(f"{field}: no TFDS store {quoted(wanted)} {where}; TFDS stores: "
                       f"{', '.join(r.manifest.name for r in stores) or 'none'}")
    fitting = [r for r in stores if r.name == task.tfds_name and version_matches(r.version, task.version)]
    if fitting:
        return fitting[0]
    others = "".join(f"; store {r.manifest.name!r} holds {r.name}:{r.version}"
                     for r in stores if r.name == task.tfds_name)
    raise NotFound(f"task {task.name}: no store {where} holds TFDS dataset {task.tfds_name!r} in a version it "
                   f"reads ({task.builder}){others} (pack it with `sampler-server pack vtab --tfds-name "
                   f"{task.tfds_name}`); tasks {where}: {', '.join(served_task_names(stores)) or 'none'}")


@functools.lru_cache(maxsize=LISTINGS_CACHE)
def _cached_listing(records: TfdsRecords, task: str, split: str) -> SplitListing:
    return list_split(records, get_task(task), split)


# ---- source:<store> tasks ------------------------------------------------------------------


def source_handle(registry: StoreRegistry, name: str) -> TaskHandle:
    """The handle of ``source:<store>`` over ``registry`` (the server's, or one the CLI opens on
    ``--data``): NOT_FOUND naming the sources served, FAILED_PRECONDITION for a TFDS store (its
    VTAB tasks are the tasks) or a quarantined one."""
    wanted = store_of(name)
    sources = sorted(n for n, s in registry.stores.items() if not is_tfds_store(s.manifest))
    try:
        store = registry.get(wanted)
    except NotFound:
        raise NotFound(f"task {name}: no store {quoted(wanted)} is served; source tasks: "
                       f"{', '.join('source:' + n for n in sources) or 'none'}") from None
    manifest = store.manifest
    if is_tfds_store(manifest):
        raise FailedPrecondition(f"task {name}: store {manifest.name!r} holds a TFDS dataset; its VTAB tasks "
                                 "(ListTasks) are the tasks over it")
    ranges = tuple((info.start, info.count) for info in manifest.classes)
    if not ranges:
        raise FailedPrecondition(f"task {name}: store {manifest.name!r} has no classes")
    return TaskHandle(
        name=name, num_classes=len(ranges), store=manifest.name, splits=SOURCE_SPLITS,
        listing=lambda split: _cached_source_split(manifest.name, manifest.fingerprint, ranges,
                                                   _check_source_split(name, split)))


def _check_source_split(task: str, split: str) -> str:
    if split not in SOURCE_SPLITS:
        raise InvalidArgument(f"split: got {quoted(split)} for task {task}, expected one of "
                              f"{', '.join(SOURCE_SPLITS)} (the held-out splits of a packed source)")
    return split


@functools.lru_cache(maxsize=SOURCE_SPLITS_CACHE)
def _cached_source_split(store: str, fingerprint: str, ranges: tuple[tuple[int, int], ...],
                         split: str) -> SourceSplit:
    return split_source(store=store, store_fingerprint=fingerprint, class_ranges=ranges, split=split)


# ---- the tasks a registry serves -----------------------------------------------------------


class TaskCatalog:
    """The tasks over one registry's stores (the server's): its TFDS stores (each side file
    opened once), the store of a task, handles and cached listings."""

    def __init__(self, registry: StoreRegistry) -> None:
        self.registry = registry
        self._lock = threading.Lock()
        self._records: dict[str, TfdsRecords] = {}

    def tfds_stores(self) -> list[TfdsRecords]:
        """Every served TFDS store, sorted by name (its side file opened once)."""
        out = []
        for name in sorted(self.registry.stores):
            store = self.registry.stores[name]
            if not is_tfds_store(store.manifest):
                continue
            with self._lock:
                if name not in self._records:
                    self._records[name] = TfdsRecords(store.reader.directory, store.manifest)
                out.append(self._records[name])
        return out

    def store_for(self, task: Task, wanted: str = "") -> TfdsRecords:
        """The served store of ``task`` (``pick_tfds_store``)."""
        return pick_tfds_store(self.tfds_stores(), task, wanted)

    def served_tasks(self) -> list[str]:
        return served_task_names(self.tfds_stores())

    def handle(self, name: str, store: str = "") -> TaskHandle:
        """A VTAB task (over the store named, else the first holding its dataset) or ``source:<store>``."""
        if is_source_task(name):
            handle = source_handle(self.registry, name)
            if store and store != handle.store:
                raise InvalidArgument(f"store: got {quoted(store)} with task {name}, which names its store "
                                      f"({handle.store!r}); leave store empty")
            return handle
        task = get_task(name)
        records = self.store_for(task, store)
        return TaskHandle(name=task.name, num_classes=task.num_classes, store=records.manifest.name, splits=SPLITS,
                          listing=lambda split: self.listing(records, task, split), records=records, task=task)

    @staticmethod
    def listing(records: TfdsRecords, task: Task, split: str) -> SplitListing:
        """The split's ids and labels (cached); FAILED_PRECONDITION when these sizes cannot carve it."""
        try:
            return _cached_listing(records, task.name, split)
        except InvalidArgument as error:
            raise FailedPrecondition(f"split {split!r} of task {task.name} is not available in store "
                                     f"{records.manifest.name!r}: {error}") from None
