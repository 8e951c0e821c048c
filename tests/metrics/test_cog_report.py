"""The ImageNet-CoG table and plots: means and standard deviations over seeds computed by
hand, differences from a baseline run, missing cells left missing, `report --table cog`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.errors import InvalidArgument, NotFound
from sampler_server.metrics.cog.plots import write_cog_plots
from sampler_server.metrics.cog.report import build_cog_report, render_cog_report
from sampler_server.metrics.store import CogResult, MetricsStore

# (run, level, shots) -> accuracy per seed 1, 2, ... (or {seed: accuracy})
RESULTS = {
    ("model", "L1", 0): [0.70, 0.72, 0.71, 0.69, 0.73],
    ("model", "IN-1K", 0): [0.80, 0.80, 0.81, 0.79, 0.80],
    ("model", "L1", 8): [0.40, 0.42, 0.47],
    ("model", "L5", 128): [0.30],
    ("r50", "L1", 0): [0.65, 0.67, 0.66, 0.64, 0.68],
    ("r50", "IN-1K", 0): [0.76] * 5,
    ("r50", "L1", 8): [0.41] * 5,
    ("r50", "L3", 0): [0.50, 0.52],
    ("other", "L1", 0): {2: 0.60, 4: 0.62},
}


@pytest.fixture
def metrics(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    for (run, level, shots), accuracies in RESULTS.items():
        by_seed = accuracies if isinstance(accuracies, dict) else dict(enumerate(accuracies, start=1))
        store.add_cog_results([CogResult(run, level, shots, seed, accuracy, 50_000) for seed, accuracy in
                               by_seed.items()], run_config_json=json.dumps({"backbone": run}))
    return store


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    """Markdown rows keyed by (run, level)."""
    rows = {}
    for line in text.splitlines()[2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_cells_are_mean_and_population_std_over_seeds(metrics):
    report = build_cog_report(metrics, ["model"])
    assert report.levels == ("IN-1K", "L1", "L5") and report.shots == (0, 8, 128)
    data = json.loads(render_cog_report(report, "json"))
    cells = data["scores"]["model"]["cells"]
    # L1, all: mean 0.71; squared deviations 1e-4 + 1e-4 + 0 + 4e-4 + 4e-4 = 1e-3, / 5 seeds
    assert cells["L1"]["all"]["mean"] == pytest.approx(0.71, abs=1e-12)
    assert cells["L1"]["all"]["std"] == pytest.approx(math.sqrt(1e-3 / 5), abs=1e-12)
    assert cells["L1"]["all"]["seeds"] == [1, 2, 3, 4, 5]
    assert cells["L1"]["all"]["accuracies"] == [0.70, 0.72, 0.71, 0.69, 0.73]
    # IN-1K, all: mean 0.80, squared deviations 2e-4 in all
    assert cells["IN-1K"]["all"]["std"] == pytest.approx(math.sqrt(2e-4 / 5), abs=1e-12)
    # L1, N=8 over three seeds: mean 0.43, squared deviations 9e-4 + 1e-4 + 16e-4
    assert cells["L1"]["8"]["mean"] == pytest.approx(0.43, abs=1e-12)
    assert cells["L1"]["8"]["std"] == pytest.approx(math.sqrt(26e-4 / 3), abs=1e-12)
    assert cells["L5"] == {"128": {"seeds": [1], "accuracies": [0.30], "mean": 0.30, "std": None}}
    assert "L3" not in cells and data["shots"] == ["all", "8", "128"] and data["baseline"] is None
    assert data["configs"] == {"model": {"backbone": "model"}}
    rows = _rows(render_cog_report(report, "markdown"))
    assert rows == {
        ("model", "IN-1K"): ["80.00 ± 0.63 (5)", "-", "-"],
        ("model", "L1"): ["71.00 ± 1.41 (5)", "43.00 ± 2.94 (3)", "-"],
        ("model", "L5"): ["-", "-", "30.00 (1)"],  # one seed: no spread to show
    }
    text = render_cog_report(report, "table")
    assert text.splitlines()[0].split() == ["run", "level", "N=all", "N=8", "N=128"]
    assert "population, divisor n" in text and "Δ" not in text


def test_relative_to_a_baseline_is_the_difference_of_means_in_points(metrics):
    report = build_cog_report(metrics, ["model", "other"], baseline="r50")
    assert report.blocks == ["r50", "model", "other"] and report.levels == ("IN-1K", "L1", "L3", "L5")
    rows = _rows(render_cog_report(report, "markdown"))
    assert rows[("r50 (baseline)", "L1")] == ["66.00 ± 1.41 (5)", "41.00 ± 0.00 (5)", "-"]
    assert rows[("r50 (baseline)", "L3")] == ["51.00 ± 1.00 (2)", "-", "-"]
    assert rows[("model", "IN-1K")] == ["80.00 ± 0.63 (5) Δ +4.00", "-", "-"]
    assert rows[("model", "L1")] == ["71.00 ± 1.41 (5) Δ +5.00", "43.00 ± 2.94 (3) Δ +2.00*", "-"]
    assert rows[("model", "L3")] == ["-", "-", "-"]  # the baseline has L3; the run has not: nothing invented
    assert rows[("model", "L5")] == ["-", "-", "30.00 (1) Δ -"]  # the baseline lacks L5
    assert rows[("other", "L1")] == ["61.00 ± 1.00 (2) Δ -5.00*", "-", "-"]
    data = json.loads(render_cog_report(report, "json"))
    cells = data["scores"]["model"]["cells"]
    assert cells["L1"]["all"]["relative"]["delta"] == pytest.approx(0.71 - 0.66, abs=1e-12)
    assert cells["L1"]["all"]["relative"]["same_seeds"] is True
    assert cells["L1"]["8"]["relative"] == {"delta": pytest.approx(0.02, abs=1e-12), "same_seeds": False,
                                            "baseline_seeds": [1, 2, 3, 4, 5]}
    assert cells["L5"]["128"]["relative"] is None
    assert "relative" not in data["scores"]["r50"]["cells"]["L1"]["all"]
    assert data["runs"] == ["model", "other"] and data["baseline"] == "r50"
    # the baseline asked for as a run too: shown once, in place, with no difference from itself
    again = build_cog_report(metrics, ["model", "r50"], baseline="r50")
    assert again.blocks == ["model", "r50"]
    assert _rows(render_cog_report(again, "markdown"))[("r50 (baseline)", "L1")][0] == "66.00 ± 1.41 (5)"


def test_bad_requests_name_the_input(metrics):
    with pytest.raises(NotFound, match="^run 'nope' has no reports$"):
        build_cog_report(metrics, ["model"], baseline="nope")
    with pytest.raises(NotFound, match="^run 'nope' has no reports$"):
        build_cog_report(metrics, ["nope"])
    with pytest.raises(InvalidArgument, match="^run: 'model' given twice$"):
        build_cog_report(metrics, ["model", "model"])
    with pytest.raises(InvalidArgument, match="^format: got 'csv', expected one of table, markdown, json$"):
        render_cog_report(build_cog_report(metrics, ["model"]), "csv")


def test_a_run_without_cog_results_is_said_so(metrics):
    metrics.set_run_config("md-only", "{}")
    report = build_cog_report(metrics, ["md-only"])
    assert report.levels == () and report.shots == (0,)
    assert "md-only has no CoG results" in render_cog_report(report)
    assert write_cog_plots(report, metrics.path.parent / "empty") == []


def _check_png(path, size=(600, 400)):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size == size
        assert np.asarray(image.convert("L")).std() > 5  # something was drawn


def test_plots_per_level_per_n_and_relative(metrics, tmp_path):
    report = build_cog_report(metrics, ["model"], baseline="r50")
    written = write_cog_plots(report, tmp_path / "plots", per_shots=True)
    assert [p.name for p in written] == [
        "cog_levels_all.png", "cog_levels_all_relative.png", "cog_levels_N8.png", "cog_levels_N8_relative.png",
        "cog_levels_N128.png", "cog_levels_N128_relative.png", "cog_shots_r50.png", "cog_shots_model.png",
    ]
    for path in written:
        _check_png(path)
    plain = write_cog_plots(build_cog_report(metrics, ["r50"]), tmp_path / "plain")
    assert [p.name for p in plain] == ["cog_levels_all.png", "cog_shots_r50.png"]


def test_report_command_table_cog_with_baseline_and_plots(metrics, tmp_path, capsys):
    path = str(metrics.path)
    assert main(["report", "--metrics", path, "--table", "cog", "--run", "model", "--baseline", "r50",
                 "--format", "markdown", "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    assert "| model | L1 | 71.00 ± 1.41 (5) Δ +5.00 | 43.00 ± 2.94 (3) Δ +2.00* | - |" in out
    assert "plots: 4 PNG files in" in out
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "cog_levels_all.png", "cog_levels_all_relative.png", "cog_shots_model.png", "cog_shots_r50.png"]
    assert main(["report", "--metrics", path, "--table", "cog", "--run", "model", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["scores"]["model"]["cells"]["L5"]["128"]["mean"] == 0.30


@pytest.mark.parametrize(("argv", "message"), [
    (["--table", "vtab", "--baseline", "r50"], "--baseline: only with --table cog (got --table vtab)"),
    (["--baseline", "r50"], "--baseline: only with --table cog (got --table md)"),
    (["--table", "cog", "--plots-per-n"], "--plots-per-n: only with --plots DIR"),
    (["--table", "cog", "--baseline", "nope"], "run 'nope' has no reports"),
])
def test_report_command_refusals_are_one_line(metrics, capsys, argv, message):
    assert main(["report", "--metrics", str(metrics.path), "--run", "model", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
