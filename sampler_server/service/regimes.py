"""Data regimes served (control baselines): ``GetRegime`` and the regime parts of ``StreamTaskBatches``.

A regime of a VTAB task is defined by the pure core (``core.regimes``): the first n of a
keyed, class-covering order of the task's "train" split, split into train and val. This
module only reads the task's listings through the VTAB handlers (the same store choice,
cache and errors as every VTAB RPC) and hands them to ``core.regimes.build_regime``.

Parts a batch stream may name with ``regime`` > 0: "train" and "val" (as ``GetRegime``
lists them) and "trainval", the whole regime (its train part, then its val part: the
regime order), which the transfer trainers' final fit uses. Each part is shuffled under
its own key (task, n, regime seed, part), so the batches of two regimes or of a regime
and the task's own split never share an order; the part's fingerprint is the regime
fingerprint (``split_fingerprint`` of each batch), as ``sampler-server regime --json``
prints it for train and val.

A ``GetRegime`` request naming a ``target`` (a numeric per-record attribute of the store)
also gets its regression blind guess (``core.regimes.regime_regression``) under ``loss``
("l2", the default, or "l1"), as ``sampler-server regime --target --loss`` prints it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sampler_server.core.regimes import POOL_SPLIT, REGIME_SPLITS, TEST_SPLIT, RegimeSplit, build_regime
from sampler_server.core.regimes import RegressionLoss, parse_loss, regime_fingerprint, regime_regression
from sampler_server.core.vtab import Task, get_task
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted
from sampler_server.store.vtab_records import TfdsRecords
from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb

if TYPE_CHECKING:
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
    shuffle_split: str
    """The split name the batch shuffle is keyed on: distinct per (n, seed, part)."""
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]
    fingerprint: str


class RegimeHandlers:
    """``GetRegime`` and the regime listings of ``StreamTaskBatches`` over one servicer's VTAB handlers."""

    def __init__(self, vtab: "VtabHandlers") -> None:
        self.vtab = vtab

    def regime(self, task: Task, records: TfdsRecords, n: int, seed: int, split: str) -> RegimeSplit:
        """Part ``split`` ("train" or "val") of regime ``n`` (0: the task's description) for ``seed``."""
        pool = self.vtab.listing(records, task, POOL_SPLIT)
        test = self.vtab.listing(records, task, TEST_SPLIT)
        return _cached_regime(records, pool.store_fingerprint, task.name, pool.num_classes, pool.record_ids,
                              pool.labels, test.labels, n, seed, split)

    def get_regime(self, request: pb.RegimeRequest) -> pb.Regime:
        if request.loss and not request.target:
            raise InvalidArgument(f"loss: got {quoted(request.loss)} without a target, expected a target "
                                  "(a numeric attribute of the store) with it")
        loss = parse_loss(request.loss or RegressionLoss.L2.value) if request.target else None
        task = get_task(request.task)
        records = self.vtab.store_for(task, request.store)
        regime = self.regime(task, records, request.n, request.seed, request.split)
        regression = None
        if loss is not None:
            pool = self.vtab.listing(records, task, POOL_SPLIT)
            test = self.vtab.listing(records, task, TEST_SPLIT)
            guess = regime_regression(
                task=task.name, store_fingerprint=pool.store_fingerprint, pool_labels=pool.labels,
                pool_targets=records.numeric_attribute(request.target, pool.record_ids),
                test_targets=records.numeric_attribute(request.target, test.record_ids),
                n=request.n, seed=request.seed, loss=loss)
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
            default_regimes=regime.default_regimes, store=records.manifest.name, regression=regression)

    def part(self, task: Task, records: TfdsRecords, n: int, seed: int, split: str) -> RegimePart:
        """The records a batch stream serves for ``split`` of regime ``n`` (n >= 1)."""
        if split not in STREAM_PARTS:
            raise InvalidArgument(f"split: got {quoted(split)} with regime {n}, expected one of "
                                  f"{', '.join(STREAM_PARTS)} (parts of the regime)")
        if split == WHOLE:
            train = self.regime(task, records, n, seed, "train")
            val = self.regime(task, records, n, seed, "val")
            ids, labels = train.record_ids + val.record_ids, train.labels + val.labels
            fingerprint = regime_fingerprint(train.store_fingerprint, task.name, n, train.seed, WHOLE, ids, labels)
        else:
            regime = self.regime(task, records, n, seed, split)
            ids, labels, fingerprint = regime.record_ids, regime.labels, regime.fingerprint
        return RegimePart(task.name, n, seed, split, f"regime/{n}/{seed}/{split}", ids, labels, fingerprint)


def check_regime_request(request: pb.StreamTaskBatchesRequest) -> None:
    """A regime seed needs a regime: one line naming both fields."""
    if not request.regime and request.regime_seed:
        raise InvalidArgument(f"regime_seed: got {request.regime_seed} with regime 0, expected a regime n >= 1 "
                              "(regime 0 streams the task's own split)")


@functools.lru_cache(maxsize=64)
def _cached_regime(records: TfdsRecords, store_fingerprint: str, task: str, num_classes: int,
                   pool_ids: tuple[int, ...], pool_labels: tuple[int, ...], test_labels: tuple[int, ...],
                   n: int, seed: int, split: str) -> RegimeSplit:
    return build_regime(task=task, store_fingerprint=store_fingerprint, num_classes=num_classes,
                        pool_record_ids=pool_ids, pool_labels=pool_labels, test_labels=test_labels,
                        n=n, seed=seed, split=split)
