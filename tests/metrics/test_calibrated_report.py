"""The calibrated report over stored results: cR and CCI equal hand-computed values on
synthetic risks (a curve below the diagonal, one crossing it with a negative cR, one
above it), the JSON of the issue, table and markdown, both plots, and one-line errors."""

from __future__ import annotations

import json

import pytest

from sampler_server.core.baselines.calibration import RiskEntry, calibrate
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound
from sampler_server.metrics.baselines.plots import mean_by_n, write_calibrated_plots
from sampler_server.metrics.baselines.report import build_calibrated_report, render_calibrated_report
from sampler_server.metrics.store import MetricsStore, TaskResult

BLIND, MAX = 0.9, 0.1  # R_blind - R_max = 0.8
SCRATCH = {10: 0.74, 20: 0.5, 40: 0.26}  # cR_scratch 0.8, 0.5, 0.2
BELOW = {10: 0.34, 20: 0.26, 40: 0.18}  # cR 0.3, 0.2, 0.1: CCI (0.06 + 0.12) / 0.3 = 0.6
ABOVE = {10: 0.9, 20: 0.58, 40: 0.34}  # cR 1.0, 0.6, 0.3: CCI (-0.045 - 0.03) / 0.3 = -0.25
CROSSING = {10: 0.02, 20: (0.5, 0.66), 40: 0.58}  # cR -0.1, 0.6 (mean of two seeds), 0.6: crosses the diagonal


def _add(store, run, role, task, risks):
    results = []
    for n, risk in risks.items():
        for seed, value in enumerate(risk if isinstance(risk, tuple) else (risk,), start=1):
            results.append(TaskResult(run, task, "test", 1 - value, 1000, regime=n, regime_seed=seed, role=role))
    store.add_task_results(results)


@pytest.fixture()
def store(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    store.add_task_results([TaskResult("max", task, "test", 1 - MAX, 1000, role="max")
                            for task in ("cifar100", "svhn")])
    for task in ("cifar100", "svhn"):
        _add(store, "scratch", "scratch", task, SCRATCH)
    _add(store, "below", "model", "cifar100", BELOW)
    _add(store, "above", "model", "cifar100", ABOVE)
    _add(store, "crossing", "model", "cifar100", CROSSING)
    _add(store, "crossing", "model", "svhn", {10: 0.5, 80: 0.2})  # one shared regime: CCI undefined
    store.add_task_results([TaskResult("below", "cifar100", "test", 0.95, 1000)])  # regime 0: not calibrated
    store.add_task_results([TaskResult("below", "cifar100", "val200", 0.1, 200, regime=10, regime_seed=1)])
    return store


def _report(store, runs=("below", "above", "crossing"), scratch="scratch", max_run="max", blind=BLIND,
            cci_seeds="points"):
    return build_calibrated_report(store, list(runs), scratch, max_run, lambda task: blind, cci_seeds)


def test_cr_and_cci_equal_hand_computed_values(store):
    data = _report(store, cci_seeds="mean").calibration
    cifar = data["tasks"]["cifar100"]
    assert (cifar["blind_risk"], cifar["max_risk"]) == (BLIND, pytest.approx(MAX))
    runs = cifar["runs"]
    assert [r["n"] for r in runs["below"]["regimes"]] == [10, 20, 40]
    assert [r["cR"] for r in runs["below"]["regimes"]] == pytest.approx([0.3, 0.2, 0.1])
    assert [r["cR_scratch"] for r in runs["below"]["regimes"]] == pytest.approx([0.8, 0.5, 0.2])
    assert runs["below"]["cci"] == pytest.approx(0.6)
    assert [r["cR"] for r in runs["above"]["regimes"]] == pytest.approx([1.0, 0.6, 0.3])
    assert runs["above"]["cci"] == pytest.approx(-0.25)
    # crossing: points (0.2, 0.6), (0.5, 0.6), (0.8, -0.1): x - y = -0.4, -0.1, 0.9
    assert [r["risk"] for r in runs["crossing"]["regimes"]] == pytest.approx([0.02, 0.58, 0.58])
    assert [r["cR"] for r in runs["crossing"]["regimes"]] == pytest.approx([-0.1, 0.6, 0.6])
    assert runs["crossing"]["cci"] == pytest.approx((0.3 * (-0.5) / 2 + 0.3 * 0.8 / 2) / 0.3)
    svhn = data["tasks"]["svhn"]["runs"]["crossing"]
    assert [r["cR_scratch"] for r in svhn["regimes"]] == [pytest.approx(0.8), None] and svhn["cci"] is None


def test_per_seed_points_by_default(store):
    """The reference's CCI: each (n, seed) of crossing its own point, in (n, seed) order:
    (0.8, -0.1), (0.5, 0.5), (0.5, 0.7), (0.2, 0.6); x - y 0.9, 0, -0.2, -0.4: area
    -0.3 * 0.45 + 0 - 0.3 * -0.3 = -0.045 over -0.3 under x: 0.15."""
    data = _report(store).calibration
    crossing = data["tasks"]["cifar100"]["runs"]["crossing"]
    assert [(r["n"], r["seed"]) for r in crossing["regimes"]] == [(10, 1), (20, 1), (20, 2), (40, 1)]
    assert [r["cR"] for r in crossing["regimes"]] == pytest.approx([-0.1, 0.5, 0.7, 0.6])
    assert [r["cR_scratch"] for r in crossing["regimes"]] == pytest.approx([0.8, 0.5, 0.5, 0.2])
    assert crossing["cci"] == pytest.approx(0.15)
    assert data["tasks"]["cifar100"]["runs"]["below"]["cci"] == pytest.approx(0.6)
    assert data["tasks"]["svhn"]["runs"]["crossing"]["cci"] is None  # n=80 has no scratch value


def test_the_json_is_the_issues_and_equals_calibrate_on_the_same_entries(store):
    report = _report(store)
    data = json.loads(render_calibrated_report(report, "json"))
    assert list(data) == ["tasks", "cci_seeds"] and sorted(data["tasks"]) == ["cifar100", "svhn"]
    for value in data["tasks"].values():
        assert list(value) == ["blind_risk", "max_risk", "runs"]
        for run in value["runs"].values():
            assert list(run) == ["cci", "regimes"]
            assert all(list(r) == ["n", "seed", "risk", "cR", "cR_scratch"] for r in run["regimes"])
    entries = [RiskEntry("cifar100", "blind", BLIND), RiskEntry("svhn", "blind", BLIND),
               RiskEntry("cifar100", "max", 1 - (1 - MAX), "max"), RiskEntry("svhn", "max", 1 - (1 - MAX), "max")]
    for task in ("cifar100", "svhn"):
        entries += [RiskEntry(task, "scratch", 1 - (1 - r), "scratch", n, 1) for n, r in SCRATCH.items()]
    for run, risks in (("below", BELOW), ("above", ABOVE)):
        entries += [RiskEntry("cifar100", "model", 1 - (1 - r), run, n, 1) for n, r in risks.items()]
    entries += [RiskEntry("cifar100", "model", 1 - (1 - 0.02), "crossing", 10, 1),
                RiskEntry("cifar100", "model", 1 - (1 - 0.5), "crossing", 20, 1),
                RiskEntry("cifar100", "model", 1 - (1 - 0.66), "crossing", 20, 2),
                RiskEntry("cifar100", "model", 1 - (1 - 0.58), "crossing", 40, 1),
                RiskEntry("svhn", "model", 1 - (1 - 0.5), "crossing", 10, 1),
                RiskEntry("svhn", "model", 1 - (1 - 0.2), "crossing", 80, 1)]
    assert data == json.loads(json.dumps(calibrate(entries)))
    mean = json.loads(render_calibrated_report(_report(store, cci_seeds="mean"), "json"))
    assert mean == json.loads(json.dumps(calibrate(entries, cci_seeds="mean")))


def test_table_and_markdown_show_every_row_and_the_notes(store):
    report = _report(store)
    text = render_calibrated_report(report, "markdown")
    assert "| task | run | n | seed | R (%) | cR | cR scratch |" in text
    assert "| cifar100 | blind guess | - | - | 90.00 | +1.000 | - |" in text
    assert "| cifar100 | max (max) | all | - | 10.00 | +0.000 | - |" in text
    assert "| cifar100 | scratch (scratch) | 20 | mean | 50.00 | +0.500 | - |" in text
    assert "| cifar100 | below | 10 | 1 | 34.00 | +0.300 | +0.800 |" in text
    assert "| cifar100 | below | CCI |  |  | +0.6000 |  |" in text
    assert "| cifar100 | above | CCI |  |  | -0.2500 |  |" in text
    assert "| cifar100 | crossing | 20 | 2 | 66.00 | +0.700 | +0.500 |" in text
    assert "| svhn | crossing | 80 | 1 | 20.00 | +0.125 | - |" in text
    assert "| svhn | crossing | CCI |  |  | undefined |  |" in text
    assert "task cifar100 n=10 seed 1: cR -0.1000 < 0: run crossing beats the max run (reported as is)" in text
    assert "task svhn run crossing: CCI undefined (no scratch value at n=80)" in text
    assert "CCI (--cci-seeds points, the reference notebook's)" in text
    assert "crossing on cifar100 at n=20 (2 seeds)" in text
    assert "below: cifar100 without a regime (the usual training split) is not calibrated" in text
    table = render_calibrated_report(report, "table")
    assert table.splitlines()[0].split() == ["task", "run", "n", "seed", "R", "(%)", "cR", "cR", "scratch"]
    mean = render_calibrated_report(_report(store, cci_seeds="mean"), "markdown")
    assert "| cifar100 | crossing | 20 | mean | 58.00 | +0.600 | +0.500 |" in mean
    assert "CCI (--cci-seeds mean)" in mean and "mean risk over regime seeds: crossing on cifar100 at n=20" in mean


def test_plots_draw_the_mean_over_seeds_at_each_n_as_the_reference_plot_does(store):
    crossing = _report(store).calibration["tasks"]["cifar100"]["runs"]["crossing"]["regimes"]
    assert mean_by_n(crossing) == [(10, pytest.approx(0.8), pytest.approx(-0.1)),
                                   (20, pytest.approx(0.5), pytest.approx(0.6)),
                                   (40, pytest.approx(0.2), pytest.approx(0.6))]


def test_both_plots_of_each_task_are_written(store, tmp_path):
    written = write_calibrated_plots(_report(store), tmp_path / "plots")
    assert sorted(p.name for p in written) == ["calibrated_n_cifar100.png", "calibrated_n_svhn.png",
                                               "calibrated_scratch_cifar100.png", "calibrated_scratch_svhn.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"runs": ()}, InvalidArgument, "run: none given"),
    ({"runs": ("below", "below")}, InvalidArgument, "run: 'below' given twice"),
    ({"runs": ("scratch",)}, InvalidArgument, "run: 'scratch' is also the scratch run"),
    ({"scratch": "max"}, InvalidArgument, "max: 'max' is also the scratch run"),
    ({"runs": ("above",), "scratch": "below"}, FailedPrecondition,
     "scratch: 'below' is a model run, expected a scratch run"),
    ({"runs": ("above",), "max_run": "scratch", "scratch": "below"}, FailedPrecondition,
     "max: 'scratch' is a scratch run"),
    ({"runs": ("max",), "max_run": "below"}, FailedPrecondition, "max: 'below' is a model run"),
    ({"runs": ("nobody",)}, NotFound, "run 'nobody' has no reports"),
    ({"blind": 1 - (1 - MAX)}, InvalidArgument, "task cifar100: the blind-guess risk equals the max run's risk"),
])
def test_bad_input_is_one_line(store, kwargs, error, message):
    with pytest.raises(error) as caught:
        _report(store, **kwargs)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_task_without_a_max_or_scratch_result_is_named(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite")
    store.add_task_results([TaskResult("max", "cifar100", "test", 0.9, 1000, role="max")])
    _add(store, "scratch", "scratch", "cifar100", SCRATCH)
    _add(store, "model", "model", "cifar100", BELOW)
    _add(store, "model", "model", "dtd", BELOW)
    with pytest.raises(FailedPrecondition, match="^task dtd: max run 'max' has no test result for it"):
        _report(store, runs=("model",))
    store.add_task_results([TaskResult("max", "dtd", "test", 0.9, 1000, role="max")])
    with pytest.raises(FailedPrecondition, match="^task dtd: scratch run 'scratch' has no test result at any regime"):
        _report(store, runs=("model",))
