"""Average rank with statistical ties, as Meta-Dataset's Appendix .5 defines it."""

from __future__ import annotations

import math

import pytest

from sampler_server.metrics.ranks import Estimate, average_ranks, estimate, ranks_for_source, tied


def test_estimate_is_mean_and_standard_error():
    e = estimate([0.2, 0.4, 0.6, 0.8])
    assert e.mean == pytest.approx(0.5)
    assert e.std_error == pytest.approx(math.sqrt(((0.3**2 + 0.1**2) * 2 / 3) / 4))
    assert e.episodes == 4


def test_constructed_example_with_ties():
    # A and B are within each other's confidence (tie), C is clearly worse, D ties C.
    results = {
        "A": Estimate(0.80, 0.01, 600),
        "B": Estimate(0.79, 0.01, 600),    # |0.01| <= 1.96 * sqrt(2) * 0.01 = 0.0277: tie with A
        "C": Estimate(0.60, 0.01, 600),
        "D": Estimate(0.585, 0.01, 600),   # tie with C
        "E": Estimate(0.40, 0.01, 600),
    }
    assert tied(results["A"], results["B"]) and not tied(results["B"], results["C"])
    assert ranks_for_source(results) == {"A": 1.5, "B": 1.5, "C": 3.5, "D": 3.5, "E": 5.0}


def test_two_models_sharing_the_best_accuracy_both_get_one_and_a_half():
    same = Estimate(0.5, 0.02, 600)
    assert ranks_for_source({"x": same, "y": same}) == {"x": 1.5, "y": 1.5}


def test_ties_are_grouped_from_the_leader_not_chained():
    # B ties A, C ties B but not A: C starts its own group.
    results = {"A": Estimate(0.70, 0.01, 600), "B": Estimate(0.68, 0.01, 600), "C": Estimate(0.66, 0.01, 600)}
    assert tied(results["A"], results["B"]) and tied(results["B"], results["C"]) and not tied(results["A"], results["C"])
    assert ranks_for_source(results) == {"A": 1.5, "B": 1.5, "C": 3.0}


def test_average_over_sources_reported_by_every_model():
    per_source = {
        "omniglot": {"p": Estimate(0.9, 0.001, 600), "q": Estimate(0.5, 0.001, 600)},
        "aircraft": {"p": Estimate(0.4, 0.001, 600), "q": Estimate(0.6, 0.001, 600)},
        "dtd": {"p": Estimate(0.4, 0.001, 600)},  # q missing: not averaged
    }
    ranks, common = average_ranks(per_source)
    assert common == ["aircraft", "omniglot"]
    assert ranks == {"p": 1.5, "q": 1.5}


def test_one_interval_convention_for_reports_ranks_and_trainers():
    from sampler_common.intervals import mean_ci95

    values = [0.2, 0.4, 0.6, 0.8]
    mean, half = mean_ci95(values)
    assert (mean, half) == (pytest.approx(0.5), pytest.approx(1.96 * estimate(values).std_error))
    assert estimate(values).ci95 == pytest.approx(half)
    # one episode: no interval (None, never 0.0 or NaN); it ties only with an equal mean
    assert mean_ci95([0.7]) == (0.7, None)
    assert estimate([0.7]).std_error is None and estimate([0.7]).ci95 is None
    assert tied(estimate([0.7]), estimate([0.7])) and not tied(estimate([0.7]), estimate([0.6, 0.61]))
    with pytest.raises(ValueError, match="values: got none"):
        mean_ci95([])
