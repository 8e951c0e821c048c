"""The blind guess equals a direct computation from the labels (and targets)."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.baselines import RegressionLoss, blind_guess, regression_blind_guess
from sampler_server.errors import InvalidArgument

labels = st.lists(st.integers(0, 9), min_size=1, max_size=60)


@settings(max_examples=examples(100), deadline=None)
@given(train=labels, test=labels)
def test_blind_guess_equals_a_direct_count(train, test):
    counts = Counter(train)
    best = max(counts.values())
    label = min(c for c, k in counts.items() if k == best)
    guess = blind_guess(train, test)
    assert guess.label == label
    assert guess.test_accuracy == sum(1 for t in test if t == label) / len(test)
    assert guess.test_error == sum(1 for t in test if t != label) / len(test)
    assert guess.risk == guess.test_error and guess.test_examples == len(test)


def test_ties_take_the_lowest_label_and_order_does_not_matter():
    assert blind_guess([3, 1, 3, 1, 2], [1, 2]).label == 1
    assert blind_guess([1, 3, 1, 3, 2][::-1], [1, 2]).label == 1
    assert blind_guess([5, 5, 0], [5, 0, 0, 0]).test_accuracy == 0.25


def test_empty_inputs_name_the_task():
    with pytest.raises(InvalidArgument, match="task eurosat: the blind guess needs training labels"):
        blind_guess([], [1], task="eurosat")
    with pytest.raises(InvalidArgument, match="task eurosat: .*test split, which is empty"):
        blind_guess([1], [], task="eurosat")


floats = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=examples(100), deadline=None)
@given(train=floats, test=floats)
def test_regression_blind_guesses(train, test):
    l2 = regression_blind_guess(train, test, "l2")
    mean = statistics.fmean(train)
    assert l2.prediction == pytest.approx(mean, abs=1e-9)
    assert l2.risk == pytest.approx(statistics.fmean((t - mean) ** 2 for t in test), rel=1e-9, abs=1e-9)
    l1 = regression_blind_guess(train, test, RegressionLoss.L1)
    median = statistics.median(train)
    assert l1.prediction == pytest.approx(median)
    assert l1.risk == pytest.approx(statistics.fmean(abs(t - median) for t in test), rel=1e-9, abs=1e-9)


def test_regression_hand_values_and_errors():
    guess = regression_blind_guess([1.0, 2.0, 6.0], [0.0, 4.0], "l2")
    assert (guess.prediction, guess.risk) == (3.0, 5.0)
    guess = regression_blind_guess([1.0, 2.0, 6.0], [0.0, 4.0], "l1")
    assert (guess.prediction, guess.risk) == (2.0, 2.0)
    assert guess.to_json() == {"loss": "l1", "prediction": 2.0, "risk": 2.0, "test_examples": 2}
    with pytest.raises(InvalidArgument, match="loss: got 'l3', expected one of l2, l1"):
        regression_blind_guess([1.0], [1.0], "l3")
    with pytest.raises(InvalidArgument, match="finite"):
        regression_blind_guess([float("nan")], [1.0], "l2")
