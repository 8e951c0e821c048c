"""VTAB-1k and VTAB+MD tables: numbers worked out by hand, every format, the bar plot, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.core.vtab import TASKS
from sampler_server.errors import InvalidArgument, NotFound
from sampler_server.metrics.tables import FORMATS
from sampler_server.metrics.store import MetricsStore, StoredReport, TaskResult
from sampler_server.metrics.vtab.plots import write_vtab_plots
from sampler_server.metrics.vtab.report import (
    build_vtab_md_report,
    build_vtab_report,
    render_vtab_md_report,
    render_vtab_report,
)

# A partial run: two natural tasks (one of them DTD), one specialized, none structured.
PARTIAL = {"cifar100": 0.50, "dtd": 0.70, "eurosat": 0.90}


def _full_accuracy(index: int) -> float:
    return (index + 1) / 20  # 0.05, 0.10, ..., 0.95 in TASKS order


def _episode(run, source, index, accuracy, split="test", preset="md-v2"):
    """An MD episode report as the server stores it: its request names the preset (md-v1 when empty)."""
    request = {"sources": [source], "split": f"SPLIT_{split.upper()}", "seed": "1"}
    return StoredReport(run_id=run, protocol="md-episode", source=source, split=split, index=index, seed=1,
                        fingerprint=f"fp-{source}-{index}", metrics={"accuracy": accuracy},
                        request={**request, "preset": preset} if preset != "md-v1" else request)


@pytest.fixture()
def store(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    store.add_task_results(
        [TaskResult("full", name, "test", _full_accuracy(i), 1000 + i) for i, name in enumerate(TASKS)],
        run_config_json='{"method": "linear probe"}',
    )
    store.add_task_results([TaskResult("partial", task, "test", acc, 500) for task, acc in PARTIAL.items()])
    store.add_task_results([TaskResult("partial", "cifar100", "val200", 0.25, 200)])
    # MD-v2 test sources: aircraft 0.4, 0.6 (mean 0.5); omniglot 0.9; every other source 0.6 over one
    # episode; ilsvrc_2012 is no MD-v2 test source and a valid-split episode is no test episode.
    episodes = [_episode("full", "aircraft", 0, 0.4), _episode("full", "aircraft", 1, 0.6),
                _episode("full", "omniglot", 0, 0.9), _episode("full", "ilsvrc_2012", 0, 0.1),
                _episode("full", "omniglot", 5, 0.0, split="valid")]
    episodes += [_episode("full", s, 0, 0.6) for s in ("cu_birds", "dtd", "fungi", "mscoco", "quickdraw",
                                                       "traffic_sign")]
    store.add(episodes)
    store.add([_episode("partial", "aircraft", 0, 0.3)])
    return store


def test_vtab_v1_means_by_hand(store):
    report = build_vtab_report(store, ["full", "partial"], "vtab-v1")
    full = report.scores["full"]
    # natural = tasks 1..7, specialized 8..11, structured 12..19 (of 20ths)
    assert full.groups["natural"].mean == pytest.approx(sum(range(1, 8)) / 7 / 20)
    assert full.groups["specialized"].mean == pytest.approx(sum(range(8, 12)) / 4 / 20)
    assert full.groups["structured"].mean == pytest.approx(sum(range(12, 20)) / 8 / 20)
    assert full.overall.mean == pytest.approx(sum(range(1, 20)) / 19 / 20) == pytest.approx(0.5)
    assert full.overall.complete and full.ignored == ()
    partial = report.scores["partial"]
    assert partial.groups["natural"].mean == pytest.approx(0.6)  # (0.5 + 0.7) / 2, over the two it has
    assert partial.groups["natural"].missing == ("caltech101", "flowers102", "pets", "sun397", "svhn")
    assert partial.groups["structured"].mean is None
    assert partial.overall.mean == pytest.approx(0.7)  # over tasks, not the mean of group means (0.75)
    assert not partial.overall.complete and len(partial.overall.missing) == 16


def test_vtab_v2_leaves_dtd_out(store):
    report = build_vtab_report(store, ["full", "partial"], "vtab-v2")
    full = report.scores["full"]
    assert "dtd" not in full.accuracy and full.ignored == ("dtd",)
    v2_values = [_full_accuracy(i) for i, name in enumerate(TASKS) if name != "dtd"]
    assert full.overall.mean == pytest.approx(sum(v2_values) / 18) and full.overall.complete
    assert full.groups["natural"].mean == pytest.approx((1 + 2 + 4 + 5 + 6 + 7) / 6 / 20)
    assert report.scores["partial"].groups["natural"].mean == pytest.approx(0.5)
    assert report.scores["partial"].overall.mean == pytest.approx(0.7)  # (0.5 + 0.9) / 2


def test_another_split_is_another_table(store):
    report = build_vtab_report(store, ["partial"], "vtab-v1", split="val200")
    assert report.scores["partial"].accuracy == {"cifar100": 0.25}


def test_vtab_md_aggregate_by_hand(store):
    report = build_vtab_md_report(store, ["full", "partial"])
    md = report.md["full"]
    assert md.sources["aircraft"].mean == pytest.approx(0.5) and md.sources["aircraft"].episodes == 2
    # mean of per-source means: (0.5 + 0.9 + 6 x 0.6) / 8, not the mean over the 9 test episodes (0.61)
    assert md.overall.mean == pytest.approx((0.5 + 0.9 + 6 * 0.6) / 8) == pytest.approx(0.625)
    assert md.overall.complete
    assert md.ignored == ("ilsvrc_2012",)
    assert report.vtab["full"].benchmark.value == "vtab-v2" and report.vtab["full"].ignored == ("dtd",)
    partial = report.md["partial"]
    assert partial.overall.mean == pytest.approx(0.3) and len(partial.overall.missing) == 7


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_the_numbers(store, fmt):
    vtab = render_vtab_report(build_vtab_report(store, ["full", "partial"], "vtab-v1"), fmt)
    both = render_vtab_md_report(build_vtab_md_report(store, ["full", "partial"]), fmt)
    if fmt == "json":
        data = json.loads(vtab)
        assert data["scores"]["full"]["overall"] == {"mean": pytest.approx(0.5), "complete": True, "count": 19,
                                                     "of": 19, "missing": []}
        assert data["scores"]["partial"]["groups"]["structured"]["mean"] is None
        assert data["configs"]["full"] == {"method": "linear probe"}
        combined = json.loads(both)
        assert combined["plan"]["vtab_benchmark"] == "vtab-v2" and "dtd" not in combined["plan"]["vtab_tasks"]
        assert combined["scores"]["full"]["md"]["overall"]["mean"] == pytest.approx(0.625)
        assert combined["scores"]["full"]["md"]["sources"]["aircraft"]["episodes"] == 2
        return
    if fmt == "markdown":
        assert vtab.startswith("| group | task | full | partial |\n|---|---|---|---|")
    assert "50.00" in vtab  # full's vtab-v1 mean
    assert "70.00 * (3/19)" in vtab and "60.00 * (2/7)" in vtab  # partial's flagged means
    assert "partial lacks tasks: caltech101" in vtab
    assert "62.50" in both  # full's md-v2 mean
    assert "50.00 ± 13.86 (2)" in both  # aircraft: 1.96 x population sd 0.1 / sqrt 2 (ddof = 0, as MD)
    assert "full: ilsvrc_2012: outside the md-v2 test sources, not counted" in both
    assert "full: dtd not in vtab-v2, not counted" in both


def test_errors_name_the_input(store):
    with pytest.raises(InvalidArgument, match="^VTAB benchmark: got 'vtab-v9'"):
        build_vtab_report(store, ["full"], "vtab-v9")
    with pytest.raises(InvalidArgument, match="^run: 'full' given twice$"):
        build_vtab_md_report(store, ["full", "full"])
    with pytest.raises(NotFound, match="^run 'nope' has no reports$"):
        build_vtab_report(store, ["nope"])
    with pytest.raises(InvalidArgument, match="^format: got 'csv'"):
        render_vtab_report(build_vtab_report(store, ["full"]), "csv")


def test_bar_plot_png(store, tmp_path):
    scores = build_vtab_report(store, ["full", "partial"]).scores
    written = write_vtab_plots(scores, tmp_path / "plots")
    assert [p.name for p in written] == ["vtab_full.png", "vtab_partial.png"]
    for path in written:
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size == (1000, 400)
            assert np.asarray(image.convert("L")).std() > 5


def test_cli_vtab_tables_and_plots(store, tmp_path, capsys):
    metrics = str(store.path)
    assert main(["report", "--metrics", metrics, "--table", "vtab", "--run", "full", "--run", "partial",
                 "--vtab-benchmark", "vtab-v2", "--plots", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "vtab-v2      mean" in out and "plots: 2 PNG files" in out
    assert sorted(p.name for p in (tmp_path / "p").glob("*.png")) == ["vtab_full.png", "vtab_partial.png"]
    assert main(["report", "--metrics", metrics, "--table", "vtab-md", "--run", "full", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scores"]["full"]["md"]["overall"]["mean"] == pytest.approx(0.625)
    assert main(["report", "--data", str(tmp_path), "--table", "vtab", "--vtab-split", "val200",
                 "--run", "partial", "--format", "markdown"]) == 0  # DATA/metrics.sqlite
    assert "| natural | cifar100 | 25.00 (200) |" in capsys.readouterr().out


def test_cli_refusals_are_one_line(store, tmp_path, capsys):
    metrics = str(store.path)
    assert main(["report", "--metrics", metrics, "--table", "vtab-md", "--vtab-benchmark", "vtab-v1",
                 "--run", "full"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sampler-server report: error: --vtab-benchmark: only with --table vtab (--table vtab-md uses its own "
        "fixed plan)")
    assert main(["report", "--metrics", metrics, "--run", "full"]) == 2  # md table without --data
    assert "--data: required for --table md" in capsys.readouterr().err
    assert main(["report", "--table", "vtab", "--run", "full"]) == 2
    assert "--metrics or --data: neither given" in capsys.readouterr().err
    assert main(["report", "--metrics", str(tmp_path / "none.sqlite"), "--table", "vtab", "--run", "full"]) == 2
    assert "none.sqlite: no metrics database" in capsys.readouterr().err
    assert main(["report", "--metrics", metrics, "--table", "vtab", "--run", "ghost"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
