"""Data regimes served (control baselines): ``GetRegime`` and the regime parts of ``StreamTaskBatches``.

A regime of a task is defined by the pure core (``core.baselines``): the first n of a
keyed order of the task's "train" split, split into train and val. The order is uniform
(the paper's random subsample) unless the request's ``sampling`` (``GetRegime``) or
``regime_sampling`` (``StreamTaskBatches``) is "stratified" (one example per class
first); the reply's ``Regime.sampling`` names it, and it enters the regime fingerprint. This
module only reads the task's listings through the VTAB handlers (the same store choice,
cache and errors as every VTAB RPC) and hands them to ``core.baselines.build_regime``.

A task is a VTAB task or ``source:<store>``, any packed classification source that is not
a TFDS store (``core.baselines.sources``: class ids as labels, fixed held-out "train", "val",
"trainval" and "test" splits). ``TaskHandle`` hides the difference from the RPCs: they list,
batch and cut regimes from either through it.

Parts a batch stream may name with ``regime`` > 0: "train" and "val" (as ``GetRegime``
lists them) and "trainval", the whole regime (its train part, then its val part: the
regime order), which the transfer trainers' final fit uses. Each part is shuffled under
its own key (task, n, regime seed, part), so the batches of two regimes or of a regime
and the task's own split never share an order; the part's fingerprint is the regime
fingerprint (``split_fingerprint`` of each batch), as ``sampler-server regime --json``
prints it for train and val.

A ``GetRegime`` request naming a ``target`` (a numeric per-record attribute of the store)
also gets its regression blind guess (``core.baselines.regime_regression``) under ``loss``
("l2", the default, or "l1"), as ``sampler-server regime --target --loss`` prints it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sampler_server.core.baselines import DEFAULT_SAMPLING, POOL_SPLIT, REGIME_SPLITS, TEST_SPLIT, RegimeSplit
from sampler_server.core.baselines import RegressionLoss, build_regime, check_sampling, parse_loss, regime_fingerprint
from sampler_server.core.baselines import regime_regression
from sampler_server.core.baselines.sources import SOURCE_SPLITS, SourceSplit, is_source_task, split_source, store_of
from sampler_server.core.vtab import Task, get_task
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound
from sampler_server.quoting import quoted
from sampler_server.store.vtab_records import TfdsRecords, is_tfds_store
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

if TYPE_CHECKING:
    from sampler_server.service.registry import StoreRegistry
    from sampler_server.service.vtab import VtabHandlers

WHOLE = "trainval"
STREAM_PARTS = (*REGIME_SPLITS, WHOLE)
"""The parts of a regime a batch stream serves: its train and val parts and the whole regime."""


@dataclass(frozen=True)
class RegimePart:
    """A part of a regime as a batch stream serves it: records in regime order and labels."""

    task: str
    n: int
    seed: int
    split: str
    sampling: str
    shuffle_split: str
    """The split name the batch shuffle is keyed on: distinct per (n, seed, part)."""
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]
    fingerprint: str
    num_classes: int


class Listing(Protocol):
    """What a split listing offers the RPCs, VTAB (``SplitListing``) or source (``SourceSplit``)."""

    store_fingerprint: str
    num_classes: int
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class TaskHandle:
    """A task as the RPCs use it: its name, classes, serving store and split listings."""

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


def source_handle(registry: "StoreRegistry", name: str) -> TaskHandle:
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


@functools.lru_cache(maxsize=32)
def _cached_source_split(store: str, fingerprint: str, ranges: tuple[tuple[int, int], ...],
                         split: str) -> SourceSplit:
    return split_source(store=store, store_fingerprint=fingerprint, class_ranges=ranges, split=split)


class RegimeHandlers:
    """``GetRegime`` and the regime listings of ``StreamTaskBatches`` over one servicer's VTAB handlers."""

    def __init__(self, vtab: "VtabHandlers") -> None:
        self.vtab = vtab

    def regime(self, task: TaskHandle, n: int, seed: int, split: str,
               sampling: str = DEFAULT_SAMPLING) -> RegimeSplit:
        """Part ``split`` ("train" or "val") of regime ``n`` (0: the task's description) for ``seed``,
        drawn by ``sampling``."""
        pool, test = task.listing(POOL_SPLIT), task.listing(TEST_SPLIT)
        return _cached_regime(pool.store_fingerprint, task.name, pool.num_classes, pool.record_ids,
                              pool.labels, test.labels, n, seed, split, sampling)

    def get_regime(self, request: pb.RegimeRequest) -> pb.Regime:
        if request.loss and not request.target:
            raise InvalidArgument(f"loss: got {quoted(request.loss)} without a target, expected a target "
                                  "(a numeric attribute of the store) with it")
        loss = parse_loss(request.loss or RegressionLoss.L2.value) if request.target else None
        sampling = check_sampling(request.sampling or DEFAULT_SAMPLING, "sampling")
        task = self.vtab.handle(request.task, request.store)
        regime = self.regime(task, request.n, request.seed, request.split, sampling)
        regression = None
        if loss is not None:
            if task.records is None:
                raise InvalidArgument(f"target: got {quoted(request.target)} for task {task.name}, but a packed "
                                      "source's records carry no numeric attributes (regression targets are "
                                      "attributes of a VTAB task's TFDS store)")
            pool, test = task.listing(POOL_SPLIT), task.listing(TEST_SPLIT)
            guess = regime_regression(
                task=task.name, store_fingerprint=pool.store_fingerprint, pool_labels=pool.labels,
                pool_targets=task.records.numeric_attribute(request.target, pool.record_ids),
                test_targets=task.records.numeric_attribute(request.target, test.record_ids),
                n=request.n, seed=request.seed, loss=loss, sampling=sampling)
            regression = pb.RegressionBlindGuess(target=request.target, loss=guess.loss.value,
                                                 prediction=guess.prediction, test_risk=guess.risk,
                                                 test_examples=guess.test_examples)
        blind = regime.blind
        return pb.Regime(
            task=task.name, n=regime.n, seed=regime.seed, split=regime.split, record_ids=regime.record_ids,
            labels=regime.labels, num_classes=regime.num_classes, fingerprint=regime.fingerprint,
            pool_split=regime.pool_split, pool_size=regime.pool_size,
            blind=pb.BlindGuess(label=blind.label, test_accuracy=blind.test_accuracy, test_error=blind.test_error,
                                test_examples=blind.test_examples),
            default_regimes=regime.default_regimes, store=task.store, regression=regression,
            sampling=regime.sampling)

    def part(self, task: TaskHandle, n: int, seed: int, split: str, sampling: str = "") -> RegimePart:
        """The records a batch stream serves for ``split`` of regime ``n`` (n >= 1) drawn by
        ``sampling`` (empty: the default, uniform)."""
        sampling = check_sampling(sampling or DEFAULT_SAMPLING, "regime_sampling")
        if split not in STREAM_PARTS:
            raise InvalidArgument(f"split: got {quoted(split)} with regime {n}, expected one of "
                                  f"{', '.join(STREAM_PARTS)} (parts of the regime)")
        if split == WHOLE:
            train = self.regime(task, n, seed, "train", sampling)
            val = self.regime(task, n, seed, "val", sampling)
            ids, labels = train.record_ids + val.record_ids, train.labels + val.labels
            fingerprint = regime_fingerprint(train.store_fingerprint, task.name, n, train.seed, WHOLE, ids, labels,
                                             sampling)
        else:
            regime = self.regime(task, n, seed, split, sampling)
            ids, labels, fingerprint = regime.record_ids, regime.labels, regime.fingerprint
        return RegimePart(task.name, n, seed, split, sampling, f"regime/{n}/{seed}/{split}", ids, labels, fingerprint,
                          task.num_classes)


def check_regime_request(request: pb.StreamTaskBatchesRequest) -> None:
    """A regime seed or sampling needs a regime, and a sampling is one of the known: one line naming
    the fields."""
    if not request.regime and request.regime_seed:
        raise InvalidArgument(f"regime_seed: got {request.regime_seed} with regime 0, expected a regime n >= 1 "
                              "(regime 0 streams the task's own split)")
    if request.regime_sampling:
        check_sampling(request.regime_sampling, "regime_sampling")
        if not request.regime:
            raise InvalidArgument(f"regime_sampling: got {quoted(request.regime_sampling)} with regime 0, expected "
                                  "a regime n >= 1 (regime 0 streams the task's own split)")


@functools.lru_cache(maxsize=64)
def _cached_regime(store_fingerprint: str, task: str, num_classes: int,
                   pool_ids: tuple[int, ...], pool_labels: tuple[int, ...], test_labels: tuple[int, ...],
                   n: int, seed: int, split: str, sampling: str) -> RegimeSplit:
    return build_regime(task=task, store_fingerprint=store_fingerprint, num_classes=num_classes,
                        pool_record_ids=pool_ids, pool_labels=pool_labels, test_labels=test_labels,
                        n=n, seed=seed, split=split, sampling=sampling)
