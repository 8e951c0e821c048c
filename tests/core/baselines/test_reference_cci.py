"""CCI as the control-baselines reference computes it (EPFL-VILAB/transfer-controls,
``Plotting-Example.ipynb``: ``get_calibrated_risk``, ``get_cci``; rules in words in
../shared/reference/control_baselines/README.md): only the scratch risk is averaged over
seeds, every (n, seed) of the model is its own point, in (n, seed) order. The seed-mean
variant stays under ``cci_seeds="mean"``.

A hand-built two-seed case where the two differ, through the core and through the
calibrated report over stored results (the reference's own results file: test_calibrate_cli.py)."""

from __future__ import annotations

import pytest

from sampler_server.core.baselines.calibration import RiskEntry, calibrate
from sampler_server.errors import InvalidArgument
from sampler_server.metrics.baselines.report import build_calibrated_report, render_calibrated_report
from sampler_server.metrics.store import MetricsStore, TaskResult

# R_blind 1, R_max 0: cR = risk. (n, seed) -> risk.
SCRATCH = {(10, 0): 0.9, (10, 1): 0.7, (100, 0): 0.5, (100, 1): 0.3}  # cR_scratch(10) 0.8, (100) 0.4
MODEL = {(10, 0): 0.5, (10, 1): 0.1, (100, 0): 0.3, (100, 1): 0.1}
# The reference's points in (n, seed) order: (0.8, 0.5), (0.8, 0.1), (0.4, 0.3), (0.4, 0.1).
# Only the middle segment has width: dx = -0.4, x - y from 0.7 to 0.1: area -0.4 * 0.4 = -0.16;
# under x: -0.4 * (0.8 + 0.4) / 2 = -0.24. CCI = 0.16 / 0.24 = 2/3.
REFERENCE_CCI = 2 / 3
# Seed means first: (0.8, 0.3), (0.4, 0.2): x - y 0.5, 0.2: area 0.4 * 0.35 = 0.14; / 0.24 = 7/12.
MEAN_CCI = 7 / 12


def _entries() -> list[RiskEntry]:
    entries = [RiskEntry("t", "blind", 1.0), RiskEntry("t", "max", 0.0, "max")]
    entries += [RiskEntry("t", "scratch", risk, "scr", n, seed) for (n, seed), risk in SCRATCH.items()]
    entries += [RiskEntry("t", "model", risk, "m", n, seed) for (n, seed), risk in MODEL.items()]
    return entries


def test_default_cci_is_the_reference_notebooks_on_two_seeds():
    result = calibrate(_entries())
    run = result["tasks"]["t"]["runs"]["m"]
    assert result["cci_seeds"] == "points"
    assert run["cci"] == pytest.approx(REFERENCE_CCI, abs=1e-12)
    assert [(r["n"], r["seed"]) for r in run["regimes"]] == [(10, 0), (10, 1), (100, 0), (100, 1)]
    assert [r["cR_scratch"] for r in run["regimes"]] == pytest.approx([0.8, 0.8, 0.4, 0.4])
    assert [r["cR"] for r in run["regimes"]] == pytest.approx([0.5, 0.1, 0.3, 0.1])
    mean = calibrate(_entries(), cci_seeds="mean")
    assert mean["cci_seeds"] == "mean"
    assert mean["tasks"]["t"]["runs"]["m"]["cci"] == pytest.approx(MEAN_CCI, abs=1e-12)
    assert [r["risk"] for r in mean["tasks"]["t"]["runs"]["m"]["regimes"]] == pytest.approx([0.3, 0.2])


def test_input_order_does_not_change_the_reference_cci():
    assert calibrate(_entries()[::-1]) == calibrate(_entries())


def test_the_calibrated_report_over_stored_results_is_the_reference_cci(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    store.add_task_results([TaskResult("max", "dtd", "test", 1.0, 100, role="max")])
    for run, role, risks in (("scr", "scratch", SCRATCH), ("m", "model", MODEL)):
        store.add_task_results([TaskResult(run, "dtd", "test", 1 - risk, 100, regime=n, regime_seed=seed, role=role)
                                for (n, seed), risk in risks.items()])
    report = build_calibrated_report(store, ["m"], "scr", "max", lambda task: 1.0)
    assert report.calibration["tasks"]["dtd"]["runs"]["m"]["cci"] == pytest.approx(REFERENCE_CCI, abs=1e-9)
    text = render_calibrated_report(report, "markdown")
    assert "| dtd | m | CCI |  |  | +0.6667 |  |" in text
    assert "| dtd | m | 10 | 1 | 10.00 | +0.100 | +0.800 |" in text
    assert "| dtd | scr (scratch) | 100 | mean | 40.00 | +0.400 | - |" in text
    assert "CCI (--cci-seeds points, the reference notebook's)" in text
    mean = build_calibrated_report(store, ["m"], "scr", "max", lambda task: 1.0, cci_seeds="mean")
    assert mean.calibration["tasks"]["dtd"]["runs"]["m"]["cci"] == pytest.approx(MEAN_CCI, abs=1e-9)
    assert "CCI (--cci-seeds mean)" in render_calibrated_report(mean, "table")
    with pytest.raises(InvalidArgument, match="^cci_seeds: got 'avg', expected one of points, mean$"):
        build_calibrated_report(store, ["m"], "scr", "max", lambda task: 1.0, cci_seeds="avg")
