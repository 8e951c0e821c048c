"""cR and CCI against hand-computed values; the calibration JSON's keys; bad input."""

from __future__ import annotations

import json

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.baselines.calibration import (
    POINT_KEYS,
    REGIME_KEYS,
    RUN_KEYS,
    TASK_KEYS,
    calibrate,
    calibrated_risk,
    cci,
    cci_in_order,
    notes,
    parse_entries,
)
from sampler_server.errors import InvalidArgument

# R_blind 0.9, R_max 0.1: cR = (R - 0.1) / 0.8. Scratch at n = 10, 100, 1000 has
# cR_scratch 0.8, 0.5, 0.2 (risks 0.74, 0.5, 0.26).
SCRATCH = {10: 0.74, 100: 0.5, 1000: 0.26}
RUNS = {
    # cR 0.4, 0.25, 0.1 (below the diagonal): x - y = 0.1, 0.25, 0.4 over x = 0.2, 0.5, 0.8
    # area 0.3 (0.1 + 0.25) / 2 + 0.3 (0.25 + 0.4) / 2 = 0.15; under the diagonal 0.3: CCI 0.5
    "below": ({10: 0.42, 100: 0.3, 1000: 0.18}, [0.4, 0.25, 0.1], 0.5),
    # cR 0.6, 0.5, 0.3 (crossing): x - y = -0.1, 0, 0.2: area -0.015 + 0.03 = 0.015: CCI 0.05
    "crossing": ({10: 0.58, 100: 0.5, 1000: 0.34}, [0.6, 0.5, 0.3], 0.05),
    # cR 1.0, 0.7, 0.4 (above): x - y = -0.2 over the width 0.6: area -0.12: CCI -0.4
    "above": ({10: 0.9, 100: 0.66, 1000: 0.42}, [1.0, 0.7, 0.4], -0.4),
    # at the max level everywhere: CCI 1
    "max-level": ({10: 0.1, 100: 0.1, 1000: 0.1}, [0.0, 0.0, 0.0], 1.0),
}


def _entries(task="eurosat"):
    items = [{"task": task, "role": "blind", "risk": 0.9}, {"task": task, "role": "max", "run": "big", "risk": 0.1}]
    items += [{"task": task, "n": n, "role": "scratch", "run": "scr", "risk": r} for n, r in SCRATCH.items()]
    for run, (risks, _, _) in RUNS.items():
        items += [{"task": task, "n": n, "role": "model", "run": run, "risk": r} for n, r in risks.items()]
    return items


def test_hand_computed_cr_and_cci():
    result = calibrate(parse_entries(_entries()))
    task = result["tasks"]["eurosat"]
    assert task["blind_risk"] == 0.9 and task["max_risk"] == 0.1
    assert list(task["runs"]) == sorted(RUNS)
    for run, (risks, crs, expected_cci) in RUNS.items():
        entry = task["runs"][run]
        assert [r["n"] for r in entry["regimes"]] == [10, 100, 1000]
        assert [r["risk"] for r in entry["regimes"]] == [risks[n] for n in (10, 100, 1000)]
        assert [r["cR"] for r in entry["regimes"]] == pytest.approx(crs, abs=1e-12)
        assert [r["cR_scratch"] for r in entry["regimes"]] == pytest.approx([0.8, 0.5, 0.2], abs=1e-12)
        assert entry["cci"] == pytest.approx(expected_cci, abs=1e-12), run


@pytest.mark.parametrize(("cci_seeds", "keys"), [("points", POINT_KEYS), ("mean", REGIME_KEYS)])
def test_json_keys_are_stable(cci_seeds, keys):
    result = json.loads(json.dumps(calibrate(parse_entries(_entries()), cci_seeds=cci_seeds)))
    assert list(result) == ["tasks", "cci_seeds"] and result["cci_seeds"] == cci_seeds
    task = result["tasks"]["eurosat"]
    assert tuple(task) == TASK_KEYS == ("blind_risk", "max_risk", "runs")
    for entry in task["runs"].values():
        assert tuple(entry) == RUN_KEYS == ("cci", "regimes")
        for regime in entry["regimes"]:
            assert tuple(regime) == keys
    assert POINT_KEYS == ("n", "seed", "risk", "cR", "cR_scratch") and REGIME_KEYS == ("n", "risk", "cR", "cR_scratch")


def test_input_order_does_not_matter_and_tasks_sort():
    items = _entries("eurosat") + _entries("cifar100")
    assert calibrate(parse_entries(items)) == calibrate(parse_entries(items[::-1]))
    assert list(calibrate(parse_entries(items))["tasks"]) == ["cifar100", "eurosat"]


def test_negative_cr_is_kept_with_a_note_and_missing_scratch_regimes():
    items = _entries()[:5] + [
        {"task": "eurosat", "n": 10, "role": "model", "run": "m", "risk": 0.02},
        {"task": "eurosat", "n": 50, "role": "model", "run": "m", "risk": 0.3},
        {"task": "eurosat", "n": 100, "role": "model", "run": "m", "risk": 0.3},
    ]
    for cci_seeds in ("points", "mean"):
        entry = calibrate(parse_entries(items), cci_seeds=cci_seeds)["tasks"]["eurosat"]["runs"]["m"]
        assert entry["regimes"][0]["cR"] == pytest.approx(-0.1)
        seed = {"seed": 0} if cci_seeds == "points" else {}
        assert entry["regimes"][1] == {"n": 50, **seed, "risk": 0.3, "cR": pytest.approx(0.25), "cR_scratch": None}
    # points (the reference): a point whose n has no scratch value makes the CCI undefined
    points = calibrate(parse_entries(items))
    assert points["tasks"]["eurosat"]["runs"]["m"]["cci"] is None
    lines = notes(points)
    assert any("n=10 seed 0: cR -0.1000 < 0" in line for line in lines)
    assert "task eurosat run m: CCI undefined (no scratch value at n=50)" in lines
    # mean: that regime is left out; n=10 and n=100 remain: (0.8, -0.1), (0.5, 0.25)
    mean = calibrate(parse_entries(items), cci_seeds="mean")
    assert mean["tasks"]["eurosat"]["runs"]["m"]["cci"] == pytest.approx(
        (0.3 * (0.9 + 0.25) / 2) / (0.3 * 1.3 / 2))
    with pytest.raises(InvalidArgument, match="^cci_seeds: got 'median', expected one of points, mean$"):
        calibrate(parse_entries(items), cci_seeds="median")


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.floats(-2, 2), st.floats(-2, 2)), min_size=2, max_size=8))
def test_cci_is_one_at_the_max_level_and_zero_on_the_diagonal(points):
    xs = sorted({round(x, 3) for x, _ in points})
    if len(xs) < 2 or sum((b - a) * (a + b) for a, b in zip(xs, xs[1:])) == 0:
        return
    assert cci([(x, x) for x in xs]) == 0.0
    assert cci([(x, 0.0) for x in xs]) == pytest.approx(1.0)


def test_calibrated_risk_and_degenerate_values():
    assert calibrated_risk(0.5, blind_risk=0.9, max_risk=0.1) == pytest.approx(0.5)
    with pytest.raises(InvalidArgument, match="task t: the blind-guess risk equals the max run's risk"):
        calibrated_risk(0.5, blind_risk=0.3, max_risk=0.3, task="t")
    assert cci([(0.5, 0.1)]) is None and cci([(0.5, 0.1), (0.5, 0.2)]) is None
    assert cci_in_order([(0.5, 0.1)]) is None and cci_in_order([(0.5, 0.1), (0.5, 0.2)]) is None
    assert cci_in_order([(0.8, 0.1), (None, 0.2)]) is None


@pytest.mark.parametrize(("drop", "message"), [
    ("blind", "task eurosat: no blind-guess risk"),
    ("max", "task eurosat: no max run"),
    ("scratch", "task eurosat: no scratch run"),
])
def test_missing_roles_name_the_task(drop, message):
    items = [item for item in _entries() if item["role"] != drop]
    with pytest.raises(InvalidArgument, match=message):
        calibrate(parse_entries(items))


def test_degenerate_blind_equal_max_names_the_task():
    items = [dict(item, risk=0.1) if item["role"] == "blind" else item for item in _entries()]
    with pytest.raises(InvalidArgument, match=r"task eurosat: the blind-guess risk equals the max run's risk \(0.1\)"):
        calibrate(parse_entries(items))


@pytest.mark.parametrize(("items", "message"), [
    ({"a": 1}, "expected a JSON list"),
    ([3], "entry 0: expected an object"),
    ([{"task": "t", "role": "best", "risk": 1}], "role got 'best', expected one of model, scratch, max, blind"),
    ([{"task": "t", "role": "max", "run": "r", "risk": 1, "n": 5}], "unknown keys 'n'"),
    ([{"task": "t", "role": "model", "run": "r", "risk": 1}], "missing n"),
    ([{"task": "t", "role": "model", "run": "r", "n": 0, "risk": 1}], "n got 0, expected a positive integer"),
    ([{"task": "t", "role": "model", "run": "r", "n": 2, "risk": "x"}], "risk: got 'x', expected a finite number"),
    ([{"task": "", "role": "blind", "risk": 1}], "task got '', expected a non-empty name"),
])
def test_bad_entries(items, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_entries(items)


def test_repeated_values():
    items = _entries() + [{"task": "eurosat", "n": 10, "role": "model", "run": "below", "risk": 0.5}]
    with pytest.raises(InvalidArgument, match="run below has two risks at regime n=10"):
        calibrate(parse_entries(items))
    items = _entries() + [{"task": "eurosat", "n": 10, "role": "scratch", "run": "other", "risk": 0.5}]
    with pytest.raises(InvalidArgument, match="2 scratch runs"):
        calibrate(parse_entries(items))
    items = _entries() + [{"task": "eurosat", "role": "max", "run": "big2", "risk": 0.2}]
    with pytest.raises(InvalidArgument, match="2 max entries"):
        calibrate(parse_entries(items))
