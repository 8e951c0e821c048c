"""Data regimes of a VTAB task: n training examples, nested across n, split into train and val.

Definitions (shared by the ``regime`` command, ``GetRegime`` and the calibrated report):

- The pool is the task's ``POOL_SPLIT`` ("train") records in split order, the test the
  task's ``TEST_SPLIT`` ("test"). Only the pool's labels enter the order below.
- Three samplings (``SAMPLINGS``). Two are keyed orders of the pool (``pool_order``): a
  legacy ``RandomState`` from the one seeding helper (protocol ``vtab_regime``, source
  ``"<store fingerprint>/<task>"``, split train, index 0) draws a permutation P of the pool
  positions;
  - ``uniform`` (the default; an empty name on the wire): the order is P itself, so regime n
    is a uniform random subsample of n examples of the pool, as the control-baselines paper
    "randomly sub-samples" its training data (../shared/seeds/003_a37aa9789a22a6ef.txt);
  - ``one-per-class-first`` (named ``stratified`` until scikit-learn's split took that name):
    the same RandomState then draws a permutation of the classes present in the pool
    (sorted labels); the order starts with one example of each present class, the classes
    in that keyed order, each class represented by its first position in P; the rest of
    the pool follows in P's order.
  For these, regime n is the first n positions of the order, so for one seed and sampling
  the regime of n lies inside the regime of every larger n; a one-per-class-first regime of
  n >= (classes present) holds every class present in the pool (a uniform one need not).
  Its val part is the last ``val_count(n)`` = floor(``VAL_FRACTION`` n) (at least 1 when
  n >= 2, none when n < 2) positions of the regime, its train part the first
  n - val_count(n). One-per-class-first, when n >= 2 x classes, val_count(n) <= 0.2 n <=
  n - classes, so the class-covering head stays in train and every class of the regime is
  in its train part. Both parts are listed in the order's order.
  - ``stratified``: scikit-learn's ``StratifiedShuffleSplit`` as the reference calls it
    (``stratified.stratified_split``: ``train_size`` n - val_count(n), ``test_size``
    val_count(n), ``random_state`` the seed itself, not keyed on store or task): each part
    keeps the pool's class proportions, both are listed in sklearn's order, and regimes are
    drawn per n, not nested. sklearn refuses a val part smaller than the number of classes
    (n below about 5 x classes), a class with one example in the pool and a seed above
    2**32 - 1 (one ``InvalidArgument`` line).
- Default regimes (``default_regimes``): ``DEFAULT_REGIME_COUNT`` values spaced
  geometrically from ``MIN_PER_CLASS`` x classes to the pool size (both ends included,
  the low end capped at the pool size), rounded half up, deduplicated, ascending.
- A regression target (``regime_regression``): the regression blind guess of the
  regime's train part (n = 0: the whole pool), whichever part is listed, on the test split.
- The fingerprint of a regime split hashes (store fingerprint, task, n, seed, split,
  sampling, ordered record ids, labels); a one-per-class-first one leaves the sampling out,
  so it keeps the fingerprint it had (as "stratified") before uniform sampling existed.

Everything is a pure function of the pool's labels (and record ids for the listing),
the store fingerprint, the task, n, the seed, the sampling and the split: no input
order, process, hash seed or NumPy release changes a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sampler_common.splits import REGIME
from sampler_server.core.hashing import FieldHasher
from sampler_server.core.baselines.blind import BlindGuess, RegressionBlindGuess, RegressionLoss, blind_guess
from sampler_server.core.baselines.blind import regression_blind_guess
from sampler_server.core.baselines.stratified import stratified_split
from sampler_server.core.seeding import Protocol, check_seed_and_index, derive_rng
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.quoting import quoted

POOL_SPLIT = "train"
"""The task split regimes are drawn from."""
TEST_SPLIT = "test"
"""The task split every regime is tested on (and the blind guess scored on)."""
REGIME_SPLITS = REGIME.names
"""A regime's parts ("train", "val"), as ``sampler_common.splits.REGIME`` names them for every layer."""
VAL_FRACTION = 0.2
MIN_PER_CLASS = 2
"""The smallest default regime holds this many examples per class."""
DEFAULT_REGIME_COUNT = 6
UNIFORM = "uniform"
STRATIFIED = "stratified"
ONE_PER_CLASS_FIRST = "one-per-class-first"
SAMPLINGS = (UNIFORM, STRATIFIED, ONE_PER_CLASS_FIRST)
"""How a regime's n examples are drawn: a uniform random subsample (the paper's), scikit-learn's
``StratifiedShuffleSplit`` (the reference's ``--stratified``), or one per class first."""
ORDERED_SAMPLINGS = (UNIFORM, ONE_PER_CLASS_FIRST)
"""The samplings whose regimes are prefixes of one keyed pool order (nested across n)."""
DEFAULT_SAMPLING = UNIFORM


def check_sampling(sampling: str, field: str = "sampling") -> str:
    """``sampling`` when it is one of ``SAMPLINGS``, else one line naming ``field`` and the values."""
    if sampling not in SAMPLINGS:
        raise InvalidArgument(f"{field}: got {quoted(sampling)}, expected one of {', '.join(SAMPLINGS)}")
    return sampling


def check_regime_split(split: str, field: str = "split") -> str:
    """The regime part ``split`` names: "train", or "val" (also spelled "valid" or "validation");
    else an ``InvalidArgument`` listing the accepted names."""
    with field_checks():
        return REGIME.canonical(split, field)


def check_seed(seed: int) -> int:
    """``seed`` as an int when it lies in [0, 2**64 - 1], else ``InvalidArgument``."""
    check_seed_and_index(seed, 0)
    return int(seed)


def check_regime_size(task: str, n: int, pool_size: int) -> int:
    """``n`` when 1 <= n <= pool_size; else one line naming the task, n and the pool's size."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidArgument(f"task {task}: regime n must be a positive integer, got {n!r}")
    if n > pool_size:
        raise InvalidArgument(f"task {task}: regime n={n} is larger than its {POOL_SPLIT} split "
                              f"({pool_size} examples)")
    return int(n)


def _labels(labels: Sequence[int] | np.ndarray) -> np.ndarray:
    array = np.asarray(labels, dtype=np.int64)
    if array.ndim != 1:
        raise InvalidArgument(f"labels: expected a flat sequence, got shape {array.shape}")
    return array


def pool_order(labels: Sequence[int] | np.ndarray, *, key: str, seed: int,
               sampling: str = DEFAULT_SAMPLING) -> np.ndarray:
    """The keyed order of the pool (uniform, or class-covering for one-per-class-first): a
    permutation of ``range(len(labels))``. A stratified regime has none (it is drawn per n).

    Args:
        labels: the pool's labels in pool (split) order.
        key: ``regime_key(store_fingerprint, task)``.
        seed: the regime seed, 0 <= seed <= 2**64 - 1.
        sampling: "uniform" or "one-per-class-first" (see the module).
    """
    array = _labels(labels)
    if check_sampling(sampling) not in ORDERED_SAMPLINGS:
        raise InvalidArgument(f"sampling: got {quoted(sampling)}, expected one of {', '.join(ORDERED_SAMPLINGS)} "
                              "(a stratified regime is drawn per n, not a prefix of one order)")
    if not key:
        raise InvalidArgument("key: empty; regimes are keyed on '<store fingerprint>/<task>'")
    rng = derive_rng(check_seed(seed), Protocol.VTAB_REGIME, key, Split.TRAIN, 0)
    if not len(array):
        return np.zeros(0, dtype=np.int64)
    permutation = rng.permutation(len(array)).astype(np.int64)
    if sampling == UNIFORM:
        return permutation
    classes = np.unique(array)
    class_order = classes[rng.permutation(len(classes))]
    permuted_labels = array[permutation]
    _, first = np.unique(permuted_labels, return_index=True)  # first position in P of each sorted class
    representative = dict(zip(classes.tolist(), permutation[first].tolist()))
    head = np.array([representative[c] for c in class_order.tolist()], dtype=np.int64)
    in_head = np.zeros(len(array), dtype=bool)
    in_head[head] = True
    return np.concatenate([head, permutation[~in_head[permutation]]])


def regime_key(store_fingerprint: str, task: str) -> str:
    """The seeding source of a task's regimes: its store's content and the task's name."""
    if not store_fingerprint or not task:
        raise InvalidArgument(f"regime key: store fingerprint and task must be non-empty, got "
                              f"{quoted(store_fingerprint)} and {quoted(task)}")
    return f"{store_fingerprint}/{task}"


def val_count(n: int) -> int:
    """Examples of an n-example regime in its val part: floor(0.2 n), at least 1 when n >= 2."""
    if n < 2:
        return 0
    return max(1, math.floor(n * VAL_FRACTION))


def regime_positions(labels: Sequence[int] | np.ndarray, *, task: str, key: str, n: int,
                     seed: int, sampling: str = DEFAULT_SAMPLING) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) pool positions of regime n for ``seed`` and ``sampling``: each in pool-order
    order, or stratified, as sklearn's ``StratifiedShuffleSplit`` returns them."""
    array = _labels(labels)
    n = check_regime_size(task, n, len(array))
    if check_sampling(sampling) == STRATIFIED:
        return stratified_split(array, task=task, n_train=n - val_count(n), n_val=val_count(n), seed=seed)
    head = pool_order(array, key=key, seed=seed, sampling=sampling)[:n]
    cut = n - val_count(n)
    return head[:cut], head[cut:]


def default_regimes(num_classes: int, pool_size: int) -> tuple[int, ...]:
    """The task's default n values: see the module docstring; empty for an empty pool."""
    if num_classes < 1:
        raise InvalidArgument(f"num_classes: got {num_classes}, expected at least 1")
    if pool_size < 1:
        return ()
    low = min(MIN_PER_CLASS * num_classes, pool_size)
    if low == pool_size:
        return (pool_size,)
    ratio = pool_size / low
    values = {low, pool_size}
    for step in range(1, DEFAULT_REGIME_COUNT - 1):
        values.add(math.floor(low * ratio ** (step / (DEFAULT_REGIME_COUNT - 1)) + 0.5))
    return tuple(sorted(v for v in values if low <= v <= pool_size))


def regime_fingerprint(store_fingerprint: str, task: str, n: int, seed: int, split: str,
                       record_ids: Sequence[int], labels: Sequence[int], sampling: str = DEFAULT_SAMPLING) -> str:
    """Stable hash of a regime split's composition (see the module docstring)."""
    hasher = FieldHasher("sampler-server/regime-split/v1").text(store_fingerprint).text(task)
    hasher.integer(int(n)).integer(int(seed)).text(split)
    if check_sampling(sampling) != ONE_PER_CLASS_FIRST:  # the fingerprint it had (as stratified) before samplings
        hasher.text(sampling)
    return "sha256:" + hasher.integers(record_ids).integers(labels).hexdigest()


@dataclass(frozen=True)
class RegimeSplit:
    """One part (train or val) of regime n of a task, with its blind guess and the task's defaults.

    ``n == 0`` lists no records: it describes the task (pool size, default regimes) and the
    blind guess of the whole pool, the R_blind of calibrated reports.
    """

    task: str
    n: int
    seed: int
    split: str
    store_fingerprint: str
    num_classes: int
    pool_size: int
    positions: tuple[int, ...]
    """Pool positions of the records, in regime order (index the pool's listing with them)."""
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]
    blind: BlindGuess
    default_regimes: tuple[int, ...]
    sampling: str = DEFAULT_SAMPLING

    @property
    def pool_split(self) -> str:
        return POOL_SPLIT

    @property
    def fingerprint(self) -> str:
        return regime_fingerprint(self.store_fingerprint, self.task, self.n, self.seed, self.split,
                                  self.record_ids, self.labels, self.sampling)

    def to_json(self) -> dict[str, Any]:
        """Everything but the records (callers add them with their locations)."""
        return {
            "task": self.task, "n": self.n, "seed": self.seed, "split": self.split, "sampling": self.sampling,
            "store_fingerprint": self.store_fingerprint, "pool_split": POOL_SPLIT, "pool_size": self.pool_size,
            "num_classes": self.num_classes, "count": len(self.record_ids), "fingerprint": self.fingerprint,
            "blind": self.blind.to_json(), "default_regimes": list(self.default_regimes),
        }


def build_regime(*, task: str, store_fingerprint: str, num_classes: int, pool_record_ids: Sequence[int],
                 pool_labels: Sequence[int], test_labels: Sequence[int], n: int, seed: int,
                 split: str, sampling: str = DEFAULT_SAMPLING) -> RegimeSplit:
    """Regime ``n`` (0: none, only the task's description) of ``task`` for ``seed``, part ``split``,
    drawn by ``sampling`` ("uniform", "stratified" or "one-per-class-first").

    Args:
        pool_record_ids, pool_labels: the task's "train" split in split order.
        test_labels: the task's "test" split labels (the blind guess is scored on them).

    Raises:
        InvalidArgument: a bad split, seed or sampling, pool ids and labels of different lengths,
            n above the pool's size (the message names the task), an empty pool or test split.
    """
    split = check_regime_split(split)
    check_sampling(sampling)
    seed = check_seed(seed)
    labels = _labels(pool_labels)
    ids = np.asarray(pool_record_ids, dtype=np.int64)
    if ids.shape != labels.shape:
        raise InvalidArgument(f"task {task}: {len(ids)} pool record ids for {len(labels)} labels")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidArgument(f"task {task}: regime n must be an integer >= 0, got {n!r}")
    if n == 0:
        positions = np.zeros(0, dtype=np.int64)
        guess = blind_guess(labels, test_labels, task=task)
    else:
        train, val = regime_positions(labels, task=task, key=regime_key(store_fingerprint, task), n=n, seed=seed,
                                      sampling=sampling)
        positions = train if split == "train" else val
        guess = blind_guess(labels[train], test_labels, task=task)
    return RegimeSplit(
        task=task, n=int(n), seed=seed, split=split, store_fingerprint=store_fingerprint,
        num_classes=int(num_classes), pool_size=len(labels), positions=tuple(int(p) for p in positions),
        record_ids=tuple(int(i) for i in ids[positions]), labels=tuple(int(v) for v in labels[positions]),
        blind=guess, default_regimes=default_regimes(num_classes, len(labels)), sampling=sampling,
    )


def regime_regression(*, task: str, store_fingerprint: str, pool_labels: Sequence[int] | np.ndarray,
                      pool_targets: Sequence[float] | np.ndarray, test_targets: Sequence[float] | np.ndarray,
                      n: int, seed: int, loss: RegressionLoss | str,
                      sampling: str = DEFAULT_SAMPLING) -> RegressionBlindGuess:
    """The regression blind guess of regime ``n``'s train part (0: the whole pool) for ``seed``.

    Args:
        pool_labels: the pool's labels in pool order (they fix the regime, as in ``build_regime``).
        pool_targets: the target of each pool record, in the same order; test_targets: of the test split.
        loss: "l2" (the mean, risk = mean squared error) or "l1" (the median, risk = mean absolute error).
    """
    labels = _labels(pool_labels)
    targets = np.asarray(pool_targets, dtype=np.float64)
    if targets.shape != labels.shape:
        raise InvalidArgument(f"task {task}: {len(targets)} pool targets for {len(labels)} labels")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidArgument(f"task {task}: regime n must be an integer >= 0, got {n!r}")
    if n == 0:
        train = np.arange(len(labels))
    else:
        train, _ = regime_positions(labels, task=task, key=regime_key(store_fingerprint, task), n=n, seed=seed,
                                    sampling=sampling)
    return regression_blind_guess(targets[train], test_targets, loss, task=task)


__all__ = [
    "DEFAULT_REGIME_COUNT",
    "DEFAULT_SAMPLING",
    "MIN_PER_CLASS",
    "ONE_PER_CLASS_FIRST",
    "ORDERED_SAMPLINGS",
    "POOL_SPLIT",
    "REGIME_SPLITS",
    "SAMPLINGS",
    "STRATIFIED",
    "TEST_SPLIT",
    "UNIFORM",
    "VAL_FRACTION",
    "RegimeSplit",
    "build_regime",
    "check_regime_size",
    "check_regime_split",
    "check_sampling",
    "check_seed",
    "default_regimes",
    "pool_order",
    "regime_fingerprint",
    "regime_key",
    "regime_positions",
    "regime_regression",
    "val_count",
]
