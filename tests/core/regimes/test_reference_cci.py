"""CCI as the control-baselines reference computes it (EPFL-VILAB/transfer-controls,
``Plotting-Example.ipynb``: ``get_calibrated_risk``, ``get_cci``; rules in words in
../shared/reference/control_baselines/README.md): only the scratch risk is averaged over
seeds, every (n, seed) of the model is its own point, in (n, seed) order. The seed-mean
variant stays under ``cci_seeds="mean"``.

A hand-built two-seed case where the two differ, through the core and through the
calibrated report over stored results, and the reference's results CSV reader."""

from __future__ import annotations

import pytest

from sampler_server.core.regimes.calibration import RiskEntry, calibrate
from sampler_server.core.regimes.reference_csv import is_reference_csv, parse_reference_csv
from sampler_server.errors import InvalidArgument
from sampler_server.metrics.calibrated_report import build_calibrated_report, render_calibrated_report
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


CSV = """,domain,method,train_size,test_loss,seed
0,t,blind-guess,-1.0,1.0,-1.0
1,t,gold,-1.0,0.0,-1.0
2,t,scratch,10.0,0.9,0.0
3,t,scratch,10.0,0.7,1.0
4,t,scratch,100.0,0.5,0.0
5,t,scratch,100.0,0.3,1.0
6,t,m,10.0,0.5,0.0
7,t,m,10.0,0.1,1.0
8,t,m,100.0,0.2,0.0
9,t,m,100.0,0.4,0.0
10,t,m,100.0,0.1,1.0
11,t,one,10.0,0.5,0.0
12,t,odd,12.5,0.5,0.0
13,t,odd,100.0,0.5,0.0
"""


def test_the_reference_csv_reader():
    assert is_reference_csv(CSV) and is_reference_csv(CSV.replace(",domain", "domain", 1).replace("\n0,", "\n", 1))
    entries = parse_reference_csv(CSV)
    assert RiskEntry("t", "blind", 1.0) in entries and RiskEntry("t", "max", 0.0, "gold") in entries
    # two rows of m at (100, 0) are averaged (the notebook's groupby mean): the MODEL case again
    assert RiskEntry("t", "model", pytest.approx(0.3), "m", 100, 0) in entries
    result = calibrate(entries, scratch_cci=True)["tasks"]["t"]["runs"]
    assert result["m"]["cci"] == pytest.approx(REFERENCE_CCI)
    assert result["one"]["cci"] is None  # a single point
    assert result["odd"]["cci"] is None and result["odd"]["regimes"][0]["n"] == 12.5  # no scratch value at 12.5
    # the scratch method too, against its own seed mean: the middle segment's x - y goes 0.1 -> -0.1
    assert result["scratch"]["cci"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(("text", "message"), [
    ("a,b\n1,2\n", "input: not the reference's results CSV"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,10,x,0\n", "input row 1: test_loss got 'x', expected a number"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,10,0.5\n", "input row 1: 5 columns, expected 6"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,-1,0.5,0\n", "input row 1: train_size got '-1' for method m"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,10,0.5,0.5\n", "input row 1: seed got '0.5', expected an integer"),
    (",domain,method,train_size,test_loss,seed\n0,t,scratch,10,0.5,0\n1,t,scratch,10,0.4,0\n",
     "input row 2: a second scratch row of domain t at train_size 10, seed 0"),
])
def test_bad_reference_csv_is_one_line(text, message):
    with pytest.raises(InvalidArgument) as caught:
        parse_reference_csv(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
