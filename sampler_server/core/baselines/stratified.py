"""The stratified regime draw: scikit-learn's ``StratifiedShuffleSplit``, as the reference calls it.

The control-baselines reference (EPFL-VILAB/transfer-controls, ``run_cls.sh --stratified``
with ``data/cifar100.py``) draws a regime of n = n_train + n_val images of one pool with a
single ``StratifiedShuffleSplit(n_splits=1, train_size=n_train, test_size=n_val,
random_state=data_seed)`` over the pool's labels (4,860 and 1,215 of 6,075: 80/20) and
takes its first split's train indices as the regime's train part and its test indices as
its val part. ``stratified_split`` makes that same call, with the pool's labels as ``y`` (X
only gives the length), so the indices are sklearn's, in sklearn's order.

Determinism: the result is a pure function of the labels, n_train, n_val, the seed and the
scikit-learn release, which ``pyproject.toml`` pins (its RNG is the legacy ``RandomState``
seeded with the seed itself, as ``random_state=data_seed`` is in the reference; tests pin a
draw so a release that moves it fails). The seed is not hashed with the store or task:
that is the reference's semantics. What sklearn refuses (a val part smaller than the
number of classes, a class with one example, a seed above 2**32 - 1) is one
``InvalidArgument`` line naming the task and n.
"""

from __future__ import annotations

import numpy as np

from sampler_server.errors import InvalidArgument

MAX_RANDOM_STATE = 2**32 - 1
"""The largest seed sklearn's ``random_state`` (a legacy ``RandomState`` seed) takes."""


def check_random_state_seed(seed: int) -> int:
    """``seed`` when sklearn takes it as ``random_state``, else one line naming the range."""
    if not 0 <= seed <= MAX_RANDOM_STATE:
        raise InvalidArgument(f"seed: got {seed} with sampling stratified, expected 0 to {MAX_RANDOM_STATE} "
                              "(scikit-learn's random_state)")
    return int(seed)


def stratified_split(labels: np.ndarray, *, task: str, n_train: int, n_val: int,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) pool positions: the first split of ``StratifiedShuffleSplit(n_splits=1,
    train_size=n_train, test_size=n_val, random_state=seed)`` over ``labels``, in sklearn's order.

    Args:
        labels: the pool's labels in pool order (1-D integers).
        task: named in errors.
        n_train, n_val: the regime's train and val counts (n = n_train + n_val <= len(labels)).
        seed: 0 <= seed <= 2**32 - 1, sklearn's ``random_state``.

    Raises:
        InvalidArgument: what sklearn refuses, as one line naming the task, n and the counts.
    """
    from sklearn.model_selection import StratifiedShuffleSplit  # the server's [server] extra; loaded on use

    seed = check_random_state_seed(seed)
    where = f"task {task}: regime n={n_train + n_val} drawn stratified ({n_train} train, {n_val} val)"
    if n_train < 1 or n_val < 1:
        raise InvalidArgument(f"{where}: expected n >= 2 (a train and a val part)")
    splitter = StratifiedShuffleSplit(n_splits=1, train_size=n_train, test_size=n_val, random_state=seed)
    try:
        train, val = next(splitter.split(np.zeros(len(labels)), labels))
    except ValueError as error:
        reason = " ".join(str(error).split())
        raise InvalidArgument(f"{where}: {reason}") from None
    return np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)


__all__ = ["MAX_RANDOM_STATE", "check_random_state_seed", "stratified_split"]
