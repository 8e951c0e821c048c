"""Average rank with statistical ties, as Meta-Dataset's Appendix .5 defines it, and its
95% interval as the reference computes it (NumPy's ``np.std``, ddof = 0)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import require_reference

from sampler_server.metrics.ranks import Estimate, average_ranks, estimate, ranks_for_source, tied

MD_PAPER = Path("..") / "seeds" / "002_72b7f4db231bcc11.txt"  # the Meta-Dataset paper, beside ../shared/reference
TABLE_1 = {  # the paper's Table 1, "Avg. rank" rows: k-NN, Finetune, MatchingNet, ProtoNet, fo-MAML, RelationNet, Proto-MAML
    "(a) Models trained on ILSVRC-2012 only.": [5.7, 2.9, 4.65, 2.65, 3.7, 6.55, 1.85],
    "(b) Models trained on all datasets.": [5.05, 3.6, 4.95, 2.85, 4.25, 5.8, 1.5],
}
MODELS = ["k-NN", "Finetune", "MatchingNet", "ProtoNet", "fo-MAML", "RelationNet", "Proto-MAML"]
EPISODES = 600  # each of Table 2's means is over 600 test episodes


def test_estimate_is_mean_and_standard_error():
    e = estimate([0.2, 0.4, 0.6, 0.8])
    assert e.mean == pytest.approx(0.5)
    assert e.std_error == pytest.approx(math.sqrt(((0.3**2 + 0.1**2) * 2 / 4) / 4))
    assert e.episodes == 4


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=50))
def test_the_interval_is_the_references_numpy_formula(accuracies):
    """``np.std(accs) * 1.96 / np.sqrt(len(accs))`` (the reference's ``Trainer.evaluate``;
    ../shared/reference/md_learners.md, section 4): the population deviation, ddof = 0."""
    reference = float(np.std(accuracies)) * 1.96 / math.sqrt(len(accuracies))
    assert estimate(accuracies).ci95 == pytest.approx(reference, rel=1e-9, abs=1e-15)


def _table_2() -> dict[str, dict[str, dict[str, tuple[float, float, float]]]]:
    """The paper's Table 2: setting -> source -> model -> (mean %, CI %, the rank it prints)."""
    text = require_reference(MD_PAPER).read_text(encoding="utf-8")
    cell = re.compile(r"([\d.]+) \\pm ([\d.]+) \(([\d.]+)\)")
    tables = {}
    for setting in TABLE_1:
        block = text[text.index(setting):]
        block = block[:block.index("Avg. rank")]
        rows = {}
        for line in block.splitlines():
            cells = cell.findall(line)
            if cells:
                assert len(cells) == len(MODELS), line
                rows[line.split("\t")[0]] = {model: tuple(map(float, found)) for model, found in zip(MODELS, cells)}
        tables[setting] = rows
    return tables


def test_the_papers_table_2_gives_its_table_1_average_ranks_exactly():
    """Each source's means and CIs of Table 2 (standard error = CI / 1.96) ranked by this
    module give the ranks Table 2 prints beside them, and their mean over the ten test
    sources is Table 1's average rank, to the paper's two decimals."""
    tables = _table_2()
    for setting, expected in TABLE_1.items():
        rows = tables[setting]
        assert len(rows) == 10 and "ILSVRC" in rows and "MSCOCO" in rows, sorted(rows)
        per_source = {source: {model: Estimate(mean, ci / 1.96, EPISODES) for model, (mean, ci, _) in cells.items()}
                      for source, cells in rows.items()}
        for source, results in per_source.items():
            assert ranks_for_source(results) == {model: rank for model, (_, _, rank) in rows[source].items()}, source
        ranks, common = average_ranks(per_source)
        assert len(common) == 10
        assert [round(ranks[model], 2) for model in MODELS] == expected, setting


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
    assert half == pytest.approx(1.96 * float(np.std(values)) / 2)  # NumPy's default ddof = 0, as MD
    assert (mean, half) == (pytest.approx(0.5), pytest.approx(1.96 * estimate(values).std_error))
    assert estimate(values).ci95 == pytest.approx(half)
    # one episode: no interval (None, never 0.0 or NaN); it ties only with an equal mean
    assert mean_ci95([0.7]) == (0.7, None)
    assert estimate([0.7]).std_error is None and estimate([0.7]).ci95 is None
    assert tied(estimate([0.7]), estimate([0.7])) and not tied(estimate([0.7]), estimate([0.6, 0.61]))
    with pytest.raises(ValueError, match="values: got none"):
        mean_ci95([])
