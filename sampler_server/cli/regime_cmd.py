"""``sampler-server regime``: one data regime of a task, its records, labels and blind guess.

A task is a VTAB task or ``source:<store>``, any packed classification source, split into
fixed held-out train/val/test parts (``core.baselines.sources``; its store is opened as
``serve`` opens it, sharded sources merged).

Reads manifests and the stores' TFDS side files only (never an image): the task's
"train" split is the pool and its "test" split scores the blind guess, both listed as
``sampler-server vtab split`` lists them (``store.vtab_records``); the regime itself is
``core.baselines.build_regime``: the first n of a uniform random order of the pool (the
paper's random subsample), with ``--regime-sampling one-per-class-first`` of the
class-covering order (one example per class first), or with ``--regime-sampling
stratified`` scikit-learn's ``StratifiedShuffleSplit`` into train and val parts (80/20),
as the control-baselines reference draws it. ``--n 0`` lists no records: it prints the task's pool size,
default regimes and the blind guess of the whole pool (the R_blind of calibrated reports).
``--target ATTR [--loss l2|l1]`` adds the regression blind guess of a numeric per-record
attribute of the store (``core.baselines.regime_regression``): the mean (l2) or median (l1)
of the regime's train-part values, scored by mean squared or absolute error on the test split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sampler_common.checks import check_seed
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.tasks import TaskHandle, pick_tfds_store, source_handle, tfds_stores_in
from sampler_server.core.baselines import (
    DEFAULT_SAMPLING,
    POOL_SPLIT,
    TEST_SPLIT,
    RegimeSplit,
    RegressionBlindGuess,
    RegressionLoss,
    SAMPLINGS,
    build_regime,
    check_regime_split,
    check_sampling,
    parse_loss,
    regime_regression,
)
from sampler_server.core.baselines.sources import is_source_task
from sampler_server.core.vtab import TASKS, get_task
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.quoting import quoted
from sampler_server.store.vtab_records import list_split


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "regime", help="one data regime of a VTAB task: records, labels, blind guess (no images read)",
        description="Regime N of TASK for SEED: the first N examples of a keyed uniform random order of the "
        "task's train split (a uniform random subsample, nested across N; --regime-sampling one-per-class-first: one "
        "example per class first), split 80/20 into train and val (--regime-sampling stratified: scikit-learn's "
        "StratifiedShuffleSplit into the two, random_state SEED, as the control-baselines reference draws it); with "
        "its fingerprint, the blind "
        "guess of its train part on the task's test split and the task's default regimes. "
        "--n 0 lists only the task's default regimes and the whole train split's blind guess.",
    )
    parser.add_argument("--data", required=True, type=Path, help="data directory (or one store)")
    parser.add_argument("--task", required=True, help="task name: " + ", ".join(TASKS) + "; or source:STORE, any "
                        "packed classification source (fixed held-out train/val/test splits)")
    parser.add_argument("--n", required=True, type=int, help="examples in the regime (0: only the defaults)")
    parser.add_argument("--seed", required=True, type=int, help="regime seed, 0 to 2**64-1")
    parser.add_argument("--split", default="train", help="part of the regime: train (default) or val "
                        "(also valid, validation)")
    parser.add_argument("--regime-sampling", default=DEFAULT_SAMPLING, metavar="|".join(SAMPLINGS),
                        help="how the N examples are drawn: uniform (default: a uniform random subsample of the train "
                        "split, nested across N), stratified (scikit-learn's StratifiedShuffleSplit, train_size 80%% "
                        "and test_size 20%% of N, random_state SEED: the control-baselines reference's --stratified; "
                        "each part keeps the split's class proportions; needs a val part of at least one example "
                        "per class) or one-per-class-first (one example per class first, then uniform)")
    parser.add_argument("--store", help="store name when several hold the task's dataset (default: first by name)")
    parser.add_argument("--target", help="a numeric per-record attribute of the store (e.g. label_x_position): "
                        "also print its regression blind guess")
    parser.add_argument("--loss", help="with --target: l2 (the mean, scored by mean squared error; default) or "
                        "l1 (the median, scored by mean absolute error)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def check_target(target: str | None, loss: str | None) -> RegressionLoss | None:
    """The loss of a regression target (l2 when not given); None without a target."""
    if not target:
        if loss is not None:
            raise InvalidArgument(f"--loss: got {quoted(loss)} without --target, expected --target ATTR with it")
        if target is not None:
            raise InvalidArgument("--target: empty, expected a numeric attribute of the store")
        return None
    return parse_loss(RegressionLoss.L2.value if loss is None else loss, "--loss")


def load_regime(data: Path, task_name: str, n: int, seed: int, split: str, store: str | None = None,
                target: str | None = None, loss: str | None = None,
                sampling: str = DEFAULT_SAMPLING) -> tuple[RegimeSplit, Any, str, RegressionBlindGuess | None]:
    """The regime (drawn by ``sampling``), the pool's listing (for record locations), the store's
    name and, with a ``target``, its regression blind guess under ``loss``."""
    chosen_loss = check_target(target, loss)
    check_sampling(sampling, "--regime-sampling")
    split = check_regime_split(split)  # the names and aliases the client and the server accept
    with field_checks():
        check_seed(seed)
    if n < 0:
        raise InvalidArgument(f"--n: got {n}, expected an integer >= 0 (0: only the default regimes)")
    if is_source_task(task_name):
        return _load_source_regime(data, task_name, n, seed, split, store, target, sampling)
    task = get_task(task_name)
    records = pick_tfds_store(tfds_stores_in(data), task, store, where=f"in {data}", field="--store")
    pool = list_split(records, task, POOL_SPLIT)
    test = list_split(records, task, TEST_SPLIT)
    regime = build_regime(
        task=task.name, store_fingerprint=pool.store_fingerprint, num_classes=pool.num_classes,
        pool_record_ids=pool.record_ids, pool_labels=pool.labels, test_labels=test.labels,
        n=n, seed=seed, split=split, sampling=sampling,
    )
    regression = None
    if target and chosen_loss is not None:
        regression = regime_regression(
            task=task.name, store_fingerprint=pool.store_fingerprint, pool_labels=pool.labels,
            pool_targets=records.numeric_attribute(target, pool.record_ids, "--target"),
            test_targets=records.numeric_attribute(target, test.record_ids, "--target"),
            n=n, seed=seed, loss=chosen_loss, sampling=sampling,
        )
    return regime, pool, pool.store, regression


def source_task_handle(data: Path, task: str) -> TaskHandle:
    """The ``source:<store>`` task over the stores in ``data`` (``catalog.tasks``), opened as
    ``serve`` opens them (sharded sources merged, broken stores refused)."""
    return source_handle(StoreRegistry.from_data_dir(data), task)


def _load_source_regime(data: Path, task_name: str, n: int, seed: int, split: str, store: str | None,
                        target: str | None, sampling: str) -> tuple[RegimeSplit, Any, str, None]:
    if target:
        raise InvalidArgument(f"--target: got {quoted(target)} for task {task_name}, but a packed source's records "
                              "carry no numeric attributes (regression targets are attributes of a VTAB task's "
                              "TFDS store)")
    task = source_task_handle(data, task_name)
    if store and store != task.store:
        raise InvalidArgument(f"--store: got {quoted(store)} with task {task_name}, which names its store")
    pool, test = task.listing(POOL_SPLIT), task.listing(TEST_SPLIT)
    regime = build_regime(
        task=task.name, store_fingerprint=pool.store_fingerprint, num_classes=pool.num_classes,
        pool_record_ids=pool.record_ids, pool_labels=pool.labels, test_labels=test.labels,
        n=n, seed=seed, split=split, sampling=sampling,
    )
    return regime, pool, task.store, None


def regression_json(target: str, guess: RegressionBlindGuess) -> dict[str, Any]:
    """The ``regression`` entry of ``--json`` (the fields of the wire's ``RegressionBlindGuess``)."""
    return {"target": target, "loss": guess.loss.value, "prediction": guess.prediction, "test_risk": guess.risk,
            "test_examples": guess.test_examples}


def regime_json(regime: RegimeSplit, pool: Any, store: str) -> dict[str, Any]:
    """The ``--json`` document: ``RegimeSplit.to_json`` plus the store and the records."""
    out = regime.to_json()
    out["store"] = store
    if not hasattr(pool, "locations"):  # a packed source: a record is its id and class
        out["records"] = [{"record_id": record_id, "label": label}
                          for record_id, label in zip(regime.record_ids, regime.labels)]
        return out
    out["records"] = [
        {"record_id": record_id, "tfds_split": pool.locations[p][0], "tfds_index": pool.locations[p][1],
         "label": label}
        for p, record_id, label in zip(regime.positions, regime.record_ids, regime.labels)
    ]
    return out


def run(args: argparse.Namespace) -> int:
    regime, pool, store, regression = load_regime(args.data, args.task, args.n, args.seed, args.split, args.store,
                                                  args.target, args.loss, args.regime_sampling)
    if args.json:
        document = regime_json(regime, pool, store)
        if regression is not None:
            document["regression"] = regression_json(args.target, regression)
        print(json.dumps(document, indent=1))
        return 0
    blind = regime.blind
    defaults = ", ".join(map(str, regime.default_regimes))
    print(f"{regime.task}: pool {POOL_SPLIT} {regime.pool_size} records, {regime.num_classes} classes, "
          f"store {store}; default regimes {defaults}")
    whose = "whole train split" if regime.n == 0 else f"regime {regime.n} train part"
    print(f"blind guess ({whose}): label {blind.label}, test accuracy {blind.test_accuracy:.4f}, "
          f"error {blind.test_error:.4f} over {blind.test_examples} test examples")
    if regression is not None:
        estimate, risk = ("mean", "mean squared error") if regression.loss is RegressionLoss.L2 else (
            "median", "mean absolute error")
        print(f"regression blind guess ({whose}): target {args.target}, loss {regression.loss.value}, "
              f"prediction ({estimate}) {regression.prediction:.6g}, test risk ({risk}) {regression.risk:.6g} "
              f"over {regression.test_examples} test examples")
    if regime.n == 0:
        return 0
    print(f"regime n={regime.n} seed {regime.seed} ({regime.sampling}) {regime.split}: "
          f"{len(regime.record_ids)} records, "
          f"fingerprint {regime.fingerprint}")
    for row in regime_json(regime, pool, store)["records"]:
        where = f"  {row['tfds_split']}[{row['tfds_index']}]" if "tfds_split" in row else ""
        print(f"{row['record_id']:>9}{where}  {row['label']}")
    return 0
