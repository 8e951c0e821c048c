"""The demo's framework-parity rows: agreement means each accuracy inside the other's 95% CI."""

from __future__ import annotations

import math

from hypothesis import given, strategies as st

from sampler_server.cli import demo_parity
from sampler_server.cli.demo_parity import ParityRow

unit = st.floats(0.0, 1.0, allow_nan=False)


@given(unit, unit, unit, unit)
def test_agreement_is_symmetric_and_is_the_difference_within_its_interval(a, ci_a, b, ci_b):
    row, swapped = ParityRow("md", "x", (a, ci_a), (b, ci_b)), ParityRow("md", "x", (b, ci_b), (a, ci_a))
    assert row.agree == swapped.agree
    assert row.difference[0] == -swapped.difference[0] and row.difference[1] == swapped.difference[1]
    assert row.agree == (abs(a - b) <= math.sqrt(ci_a ** 2 + ci_b ** 2) + 1e-12)
    if abs(a - b) <= min(ci_a, ci_b):  # each inside the other's interval: agreement
        assert row.agree


def test_the_issue_figures_disagree_and_close_runs_agree():
    # the demo before framework parity: dtd/test 86.1 ± 2.0 (torch) vs 90.8 ± 1.7 (tf)
    assert not ParityRow("md", "dtd", (0.861, 0.020), (0.908, 0.017)).agree
    assert ParityRow("md", "dtd", (0.861, 0.020), (0.866, 0.019)).agree


def test_rows_of_each_leg_come_from_the_summaries():
    md = demo_parity.md_rows({"eval": {"dtd": {"mean_accuracy": 0.5, "ci95": 0.1}}},
                             {"eval": {"dtd": {"mean_accuracy": 0.55, "ci95": 0.08}}})
    assert md == [ParityRow("md", "dtd", (0.5, 0.1), (0.55, 0.08))] and md[0].agree
    vtab = demo_parity.vtab_rows({"tasks": {"svhn": {"test_accuracy": 0.5, "test_examples": 100}}},
                                 {"tasks": {"svhn": {"test_accuracy": 0.9, "test_examples": 100}}})
    assert math.isclose(vtab[0].torch[1], 1.959963984540054 * 0.05) and not vtab[0].agree
    cog = demo_parity.cog_rows(
        {"levels": {"L1": {"results": [{"shots": 0, "seed": 1, "accuracy": 0.4, "test_examples": 50},
                                       {"shots": 0, "seed": 2, "accuracy": 0.6, "test_examples": 50},
                                       {"shots": 1, "seed": 1, "accuracy": 0.1, "test_examples": 50}]}}},
        {"levels": {"L1": {"results": [{"shots": 0, "seed": 1, "accuracy": 0.5, "test_examples": 50}]}}})
    assert cog[0].torch == (0.5, demo_parity.binomial_ci95(0.5, 100)) and cog[0].agree


def test_render_counts_agreement():
    text = demo_parity.render([ParityRow("md", "dtd", (0.861, 0.020), (0.908, 0.017)),
                               ParityRow("vtab", "svhn", (0.5, 0.1), (0.5, 0.1))])
    assert "86.10 ± 2.00" in text and "90.80 ± 1.70" in text and "+4.70 ± 2.62" in text and " NO" in text
    assert text.splitlines()[-1].startswith("1 of 2 rows agree: the difference within its 95% CI")
