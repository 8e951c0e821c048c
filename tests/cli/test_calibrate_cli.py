"""``sampler-server calibrate --input FILE``: the JSON of core.regimes.calibration, the table, errors."""

from __future__ import annotations

import io
import json

import pytest

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
    assert "sup                       100   0.0200  -0.1000     0.2000" in out
    assert "sup                  CCI 0.7000" in out
    assert "note: task eurosat n=100: cR -0.1000 < 0: run sup beats the max run (reported as is)" in out


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
    assert code == 2 and "not JSON" in err and err.count("\n") == 1
