"""Regimes as the control-baselines paper samples them: a uniform random subsample of n
examples of the pool ("randomly sub-sample", ../shared/seeds/003_a37aa9789a22a6ef.txt),
nested across n for one seed; the class-covering draw (named "stratified" until scikit-learn's
split took that name) stays as ``sampling="one-per-class-first"`` with the fingerprints it had before."""

from __future__ import annotations

import numpy as np
import pytest

from sampler_server.core.baselines import build_regime, pool_order, regime_positions
from sampler_server.core.seeding import Protocol, derive_rng
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument

KEY = "sha256:abc/cifar100"
RARE = 0  # the one example of class 1 in an otherwise single-class pool
IMBALANCED = [1] + [0] * 99


def _kwargs(**extra):
    ids = list(range(100, 140))
    labels = [i % 4 for i in range(40)]
    return dict(task="t", store_fingerprint="sha256:s", num_classes=4, pool_record_ids=ids, pool_labels=labels,
                test_labels=[0, 1, 2, 3], n=20, seed=3, split="train", **extra)


def test_the_default_regime_is_a_uniform_subsample_not_one_per_class_first():
    """A pool of 99 examples of class 0 and one of class 1: a uniform regime of 2 holds the rare
    example with probability 2/100 (4 of 200 seeds expected), the one-per-class-first draw always."""
    uniform = [RARE in np.concatenate(regime_positions(IMBALANCED, task="t", key=KEY, n=2, seed=seed))
               for seed in range(200)]
    assert sum(uniform) <= 15  # binomial(200, 0.02): P(> 15) < 1e-5; the seeds are fixed, so this never flakes
    first = [RARE in np.concatenate(regime_positions(IMBALANCED, task="t", key=KEY, n=2, seed=seed,
                                                          sampling="one-per-class-first"))
                  for seed in range(200)]
    assert sum(first) == 200


def test_each_position_is_equally_likely():
    """Over 2000 seeds every position of a 20-example pool is in the regime of 5 about 5/20 of the time."""
    labels = [i % 2 for i in range(20)]
    counts = np.zeros(20)
    for seed in range(2000):
        train, val = regime_positions(labels, task="t", key=KEY, n=5, seed=seed)
        counts[np.concatenate([train, val])] += 1
    assert counts.sum() == 2000 * 5
    assert np.all(np.abs(counts / 2000 - 0.25) < 0.04)  # sd 0.0097: 4 sd


def test_the_uniform_order_is_the_keyed_legacy_permutation():
    """The first draw of the regime's legacy RandomState (core.seeding), nothing else."""
    labels = [i % 5 for i in range(60)]
    expected = derive_rng(7, Protocol.VTAB_REGIME, KEY, Split.TRAIN, 0).permutation(60)
    assert pool_order(labels, key=KEY, seed=7).tolist() == expected.tolist()
    train, val = regime_positions(labels, task="t", key=KEY, n=10, seed=7)
    assert train.tolist() + val.tolist() == expected[:10].tolist() and len(val) == 2


def test_fingerprints_name_the_sampling_and_one_per_class_first_keeps_its_old_ones():
    first = build_regime(**_kwargs(sampling="one-per-class-first"))
    uniform = build_regime(**_kwargs())
    assert (uniform.sampling, first.sampling) == ("uniform", "one-per-class-first")
    # Pinned before sampling existed (commit ea020f9, then named stratified): the records and fingerprint.
    assert first.record_ids == (130, 105, 111, 136, 108, 128, 123, 124, 110, 126, 127, 107, 115, 117, 109, 118)
    assert first.fingerprint == "sha256:5ff86c6469f8f797a2ed3fc1de59a501b072f1561d035501255a94bec3ab0c50"
    assert uniform.fingerprint != first.fingerprint
    assert uniform.to_json()["sampling"] == "uniform"


def test_an_unknown_sampling_is_one_line():
    with pytest.raises(InvalidArgument,
                       match="^sampling: got 'random', expected one of uniform, stratified, one-per-class-first$"):
        build_regime(**_kwargs(sampling="random"))
