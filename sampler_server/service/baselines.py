"""The control baselines served: ``GetRegime`` and the regime parts of ``StreamTaskBatches``.

A regime of a task is defined by the pure core (``core.baselines``): the first n of a
keyed order of the task's "train" split, split into train and val (80/20). The order is
uniform (the paper's random subsample; also an empty name, as before samplings existed)
unless the request's ``sampling`` (``GetRegime``) or ``regime_sampling``
(``StreamTaskBatches``) is "one-per-class-first" (one example per class first), or the
regime is "stratified": scikit-learn's ``StratifiedShuffleSplit`` of the pool into the
train and val parts, as the control-baselines reference draws it (``core.baselines``); the
reply's ``Regime.sampling`` names it, and it enters the regime fingerprint. This
module only reads the task's listings through the task catalog (``catalog.tasks``: the same
store choice, cache and errors as every VTAB RPC) and hands them to
``core.baselines.build_regime``. A task is a VTAB task or ``source:<store>``, any packed
classification source that is not a TFDS store; ``TaskHandle`` hides the difference.

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
from dataclasses import dataclass

from sampler_server.catalog.tasks import TaskCatalog, TaskHandle
from sampler_server.core.baselines import DEFAULT_SAMPLING, POOL_SPLIT, REGIME_SPLITS, TEST_SPLIT, RegimeSplit
from sampler_server.core.baselines import RegressionLoss, build_regime, check_sampling, parse_loss, regime_fingerprint
from sampler_server.core.baselines import regime_regression
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

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


class BaselineHandlers:
    """``GetRegime`` and the regime listings of ``StreamTaskBatches`` over the tasks of ``tasks``."""

    def __init__(self, tasks: TaskCatalog) -> None:
        self.tasks = tasks

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
        task = self.tasks.handle(request.task, request.store)
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
