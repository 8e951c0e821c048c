"""``sampler-server calibrate --input FILE``: the JSON of core.baselines.calibration, the table, errors."""

from __future__ import annotations

import io
import json
import re

import pytest
from conftest import require_reference

from sampler_server.cli.main import main

RESULTS = [
    {"task": "eurosat", "role": "blind", "risk": 0.9},
    {"task": "eurosat", "role": "max", "run": "big", "risk": 0.1},
    {"task": "eurosat", "n": 10, "role": "scratch", "run": "scr", "risk": 0.74},
    {"task": "eurosat", "n": 100, "role": "scratch", "run": "scr", "risk": 0.26},
    {"task": "eurosat", "n": 10, "role": "model", "run": "sup", "risk": 0.42},
    {"task": "eurosat", "n": 100, "role": "model", "run": "sup", "risk": 0.02},
]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_output(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS))
    code, out, err = _run(capsys, "calibrate", "--input", path, "--json")
    assert code == 0, err
    result = json.loads(out)
    task = result["tasks"]["eurosat"]
    assert (task["blind_risk"], task["max_risk"]) == (0.9, 0.1)
    run = task["runs"]["sup"]
    assert [r["n"] for r in run["regimes"]] == [10, 100]
    assert [r["cR"] for r in run["regimes"]] == pytest.approx([0.4, -0.1])
    assert [r["cR_scratch"] for r in run["regimes"]] == pytest.approx([0.8, 0.2])
    # points (0.2, -0.1), (0.8, 0.4): area of x - y = 0.6 (0.3 + 0.4) / 2 = 0.21; of x 0.6 (1.0) / 2 = 0.3
    assert run["cci"] == pytest.approx(0.7)


def test_table_with_the_negative_cr_note_and_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(RESULTS)))
    code, out, err = _run(capsys, "calibrate", "--input", "-")
    assert code == 0, err
    assert "eurosat: R_blind 0.9000, R_max 0.1000" in out
    assert "sup                       100      0   0.0200  -0.1000     0.2000" in out
    assert "sup                  CCI 0.7000 (points)" in out
    assert out.startswith("CCI (--cci-seeds points, the reference notebook's)")
    assert "note: task eurosat n=100 seed 0: cR -0.1000 < 0: run sup beats the max run (reported as is)" in out


@pytest.mark.parametrize(("results", "message"), [
    ([r for r in RESULTS if r["role"] != "max"], "task eurosat: no max run (an entry with role 'max')"),
    ([r for r in RESULTS if r["role"] != "scratch"], "task eurosat: no scratch run (entries with role 'scratch')"),
    ([dict(r, risk=0.1) if r["role"] == "blind" else r for r in RESULTS],
     "task eurosat: the blind-guess risk equals the max run's risk (0.1); cR is undefined"),
])
def test_bad_calibrations_exit_2_naming_the_task(tmp_path, capsys, results, message):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    code, out, err = _run(capsys, "calibrate", "--input", path, "--json")
    assert (code, out, err) == (2, "", f"sampler-server calibrate: error: {message}\n")


def test_unreadable_inputs(tmp_path, capsys):
    code, _, err = _run(capsys, "calibrate", "--input", tmp_path / "none.json")
    assert code == 2 and err == f"sampler-server calibrate: error: --input: no file {tmp_path / 'none.json'}\n"
    (tmp_path / "bad.json").write_text("[{")
    code, _, err = _run(capsys, "calibrate", "--input", tmp_path / "bad.json")
    assert code == 2 and "neither JSON" in err and "nor the reference's results CSV" in err and err.count("\n") == 1


def _readme_ccis() -> dict[tuple[str, str], float | None]:
    """(domain, method) -> CCI of ../shared/reference/control_baselines/README.md's table."""
    text = require_reference("control_baselines/README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\w+) \| (\S+) \| ([+-]\d\.\d{4}|undefined) \|$", text, re.MULTILINE)
    return {(domain, method): None if value == "undefined" else float(value) for domain, method, value in rows}


def test_the_reference_csv_gives_every_cci_of_the_reference_notebook(capsys):
    """``calibrate --input ssl-results.csv --json``: every domain and method's CCI equals the
    value the reference notebook gives (the README's table, 4 decimals), undefined as null."""
    expected = _readme_ccis()
    assert len(expected) == 43 and expected[("normal", "swav")] == 0.2968
    code, out, err = _run(capsys, "calibrate", "--input",
                          require_reference("control_baselines/ssl-results.csv"), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert list(result) == ["tasks", "cci_seeds"] and result["cci_seeds"] == "points"
    got = {}
    for domain, task in result["tasks"].items():
        assert list(task) == ["blind_risk", "max_risk", "runs"]
        for method, run in task["runs"].items():
            assert list(run) == ["cci", "regimes"]
            assert all(list(r) == ["n", "seed", "risk", "cR", "cR_scratch"] for r in run["regimes"])
            got[(domain, method)] = None if run["cci"] is None else round(run["cci"], 4)
    assert got == expected


def test_the_reference_csv_with_cci_seeds_mean_and_the_table(capsys):
    path = require_reference("control_baselines/ssl-results.csv")
    code, out, err = _run(capsys, "calibrate", "--input", path, "--json", "--cci-seeds", "mean")
    assert code == 0, err
    result = json.loads(out)
    assert result["cci_seeds"] == "mean"
    assert round(result["tasks"]["normal"]["runs"]["swav"]["cci"], 4) == 0.3225  # the seed-mean variant
    assert all("seed" not in r for r in result["tasks"]["normal"]["runs"]["swav"]["regimes"])
    code, out, err = _run(capsys, "calibrate", "--input", path)
    assert code == 0, err
    assert "  swav                 CCI 0.2968 (points)" in out
    assert "  moco_task            CCI undefined (points)" in out
    assert "note: task imgnet_cls run moco_task: CCI undefined (a single point)" in out
    assert "note: task imgnet_cls run scratch_orig: CCI undefined (no scratch value at n=12600, 126000)" in out


def test_json_entries_may_carry_seeds(tmp_path, capsys):
    results = RESULTS + [dict(r, seed=1, risk=r["risk"] + 0.08) for r in RESULTS if r["role"] == "model"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    code, out, err = _run(capsys, "calibrate", "--input", path, "--json")
    assert code == 0, err
    run = json.loads(out)["tasks"]["eurosat"]["runs"]["sup"]
    assert [(r["n"], r["seed"]) for r in run["regimes"]] == [(10, 0), (10, 1), (100, 0), (100, 1)]
    # points (0.8, 0.4), (0.8, 0.5), (0.2, -0.1), (0.2, 0.0): only (0.8, 0.5) -> (0.2, -0.1) has width:
    # x - y 0.3 -> 0.3: area -0.6 * 0.3 = -0.18; under x: -0.6 * 0.5 = -0.3: CCI 0.6
    assert run["cci"] == pytest.approx(0.6)
    path.write_text(json.dumps(results + [results[-1]]))
    code, out, err = _run(capsys, "calibrate", "--input", path, "--json")
    assert code == 2 and "task eurosat: run sup has two risks at regime n=100 seed 1" in err
