"""Stratified regimes are scikit-learn's ``StratifiedShuffleSplit`` itself, called as the
control-baselines reference calls it (EPFL-VILAB/transfer-controls ``data/cifar100.py`` with
``run_cls.sh --stratified``: ``n_splits=1``, ``train_size`` and ``test_size`` the regime's
train and val counts, ``random_state`` the data seed, the pool's labels as ``y``): the same
indices, in sklearn's order, for several pools (balanced and imbalanced), n and seeds."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import StratifiedShuffleSplit

from sampler_server.core.baselines import build_regime, pool_order, regime_positions, val_count
from sampler_server.errors import InvalidArgument

KEY = "sha256:abc/cifar100"
BALANCED = [i % 4 for i in range(80)]
IMBALANCED = [0] * 60 + [1] * 25 + [2] * 10 + [3] * 5  # 60/25/10/5: proportions, not one per class
SHUFFLED = np.random.RandomState(5).permutation([c for c in range(7) for _ in range(3 + 4 * c)]).tolist()


def _sklearn(labels, n, seed):
    split = StratifiedShuffleSplit(n_splits=1, train_size=n - val_count(n), test_size=val_count(n),
                                   random_state=seed)
    return next(split.split(np.zeros(len(labels)), labels))


@pytest.mark.parametrize("labels, sizes", [
    (BALANCED, (20, 40, 80)),
    (IMBALANCED, (20, 37, 50, 100)),
    (SHUFFLED, (35, 60, 91, 105)),
])
@pytest.mark.parametrize("seed", [0, 1, 7, 2**32 - 1])
def test_stratified_regimes_are_sklearns_stratified_shuffle_split(labels, sizes, seed):
    for n in sizes:
        train, val = regime_positions(labels, task="t", key=KEY, n=n, seed=seed, sampling="stratified")
        expected_train, expected_val = _sklearn(labels, n, seed)
        assert train.tolist() == expected_train.tolist(), (n, seed)
        assert val.tolist() == expected_val.tolist(), (n, seed)


def test_the_reference_regime_of_6075_splits_4860_and_1215():
    """run_cls.sh: --max_images_train 4860 --max_images_val 1215 of n = 6075, i.e. 80/20."""
    assert (6075 - val_count(6075), val_count(6075)) == (4860, 1215)
    labels = [i % 100 for i in range(7000)]
    train, val = regime_positions(labels, task="t", key=KEY, n=6075, seed=1, sampling="stratified")
    expected_train, expected_val = _sklearn(labels, 6075, 1)
    assert (len(train), len(val)) == (4860, 1215)
    assert train.tolist() == expected_train.tolist() and val.tolist() == expected_val.tolist()


def test_a_stratified_regime_keeps_the_pools_class_proportions():
    train, val = regime_positions(IMBALANCED, task="t", key=KEY, n=50, seed=3, sampling="stratified")
    labels = np.asarray(IMBALANCED)
    assert np.bincount(labels[train], minlength=4).tolist() == [24, 10, 4, 2]
    assert np.bincount(labels[val], minlength=4).tolist() == [6, 2, 1, 1]


def test_the_records_and_the_blind_guess_follow_sklearns_indices():
    ids = np.arange(1000, 1100)
    kwargs = dict(task="t", store_fingerprint="sha256:s", num_classes=4, pool_record_ids=ids.tolist(),
                  pool_labels=IMBALANCED, test_labels=[0, 1, 2, 3], n=40, seed=9, sampling="stratified")
    train, val = build_regime(split="train", **kwargs), build_regime(split="val", **kwargs)
    expected_train, expected_val = _sklearn(IMBALANCED, 40, 9)
    assert train.record_ids == tuple(ids[expected_train].tolist())
    assert val.record_ids == tuple(ids[expected_val].tolist())
    assert train.blind.label == 0 and train.sampling == "stratified"
    assert train.fingerprint != build_regime(split="train", **{**kwargs, "sampling": "uniform"}).fingerprint


def test_pinned_stratified_regime():
    """scikit-learn's draw, pinned (scikit-learn==1.9.1, pyproject.toml): a release that moves it fails here."""
    train, val = regime_positions(SHUFFLED, task="t", key=KEY, n=40, seed=0, sampling="stratified")
    assert train.tolist() == PINNED_TRAIN and val.tolist() == PINNED_VAL


PINNED_TRAIN = [3, 22, 69, 20, 97, 54, 64, 103, 104, 88, 2, 73, 99, 102, 75, 18, 78, 56, 48, 92, 100, 24, 77, 86, 71,
                37, 44, 62, 31, 93, 21, 43]
PINNED_VAL = [89, 65, 67, 39, 23, 57, 82, 7]


def test_the_seed_is_the_random_state_not_keyed_on_the_store_or_task():
    first = regime_positions(BALANCED, task="t", key=KEY, n=20, seed=4, sampling="stratified")
    other = regime_positions(BALANCED, task="u", key="sha256:abd/x", n=20, seed=4, sampling="stratified")
    assert [a.tolist() for a in first] == [b.tolist() for b in other]


@pytest.mark.parametrize("labels, n, seed, message", [
    (BALANCED, 10, 0, r"^task t: regime n=10 drawn stratified \(8 train, 2 val\): The test_size = 2 should be "
                      r"greater or equal to the number of classes = 4$"),
    (BALANCED, 1, 0, r"^task t: regime n=1 drawn stratified \(1 train, 0 val\): expected n >= 2"),
    ([0] * 30 + [1], 20, 0, r"^task t: regime n=20 drawn stratified \(16 train, 4 val\): The least populated "
                            r"classes in y have only 1 member"),
    (BALANCED, 40, 2**32, r"^seed: got 4294967296 with sampling stratified, expected 0 to 4294967295 "),
])
def test_what_sklearn_refuses_is_one_line(labels, n, seed, message):
    with pytest.raises(InvalidArgument, match=message):
        regime_positions(labels, task="t", key=KEY, n=n, seed=seed, sampling="stratified")


def test_stratified_regimes_have_no_pool_order():
    """sklearn's split is drawn per n, so it is no prefix of one order (nor nested across n)."""
    with pytest.raises(InvalidArgument, match="^sampling: got 'stratified', expected one of uniform, "
                                              "one-per-class-first"):
        pool_order(BALANCED, key=KEY, seed=0, sampling="stratified")
