"""`sampler-server report --card`: every table of the runs side by side with the stored
numbers, tables without results left out with one line and the runs a table lacks named
in one line, one self-contained HTML page with a table of contents and each table's plots
folded, checked in a real browser (Debian's headless Chromium: with 18 MD plots the VTAB
table still starts within two screens), the plots written, one-line refusals."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from PIL import Image
from conftest import generate_fixture, pack_fixture
from prerequisites import missing

from sampler_server.cli.main import main
from clients.protocols.md import EpisodeSpec
from sampler_server.cli.report_cmd import StoresContext
from sampler_server.core.vtab import TASKS
from sampler_server.core.vtab.presets import VtabBenchmark, vtab_groups
from sampler_server.metrics import card
from sampler_server.metrics.store import CogResult, MetricsStore, StoredReport, TaskResult
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

CHROMIUM_OPT_OUT = "SAMPLER_TESTS_WITHOUT_CHROMIUM"
SEED = 3
EPISODES = 6
MD_ACCURACY = {"card-a": lambda i: 0.80 + 0.02 * (i % 3), "card-b": lambda i: 0.60 + 0.05 * (i % 2)}
PARTIAL_VTAB = ("cifar100", "eurosat", "clevr_count")  # card-b: one task of each group
COG = {(level, shots): [0.70 - 0.05 * k - (0.2 if shots else 0.0) + 0.01 * seed for seed in (1, 2, 3)]
       for k, level in enumerate(("IN-1K", "L1", "L2", "L3", "L4", "L5")) for shots in (0, 8)}
NAMES = list(TASKS)
TASK = "source:folder"  # the served image folder as a control-baselines task
SCRATCH, MAX, MODEL = {10: 0.2, 40: 0.6}, 0.9, {10: 0.5, 40: 0.8}  # top-1 per regime


def _vtab_accuracy(index: int) -> float:
    return (index + 1) / 20  # 5%, 10%, ..., 95% in TASKS order


@pytest.fixture(scope="module")
def metrics(served, tmp_path_factory) -> Path:
    """A metrics file with two model runs (card-a: every protocol, card-b: MD and three VTAB
    tasks) and the scratch and max runs of one task; the MD reports name real episodes of
    the served store, so the card recomputes and checks them."""
    path = tmp_path_factory.mktemp("card") / "metrics.sqlite"
    store = MetricsStore(path)
    context = StoresContext(served.data)
    request = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TEST, seed=SEED)
    stored_request = json_format.MessageToDict(request, preserving_proto_field_name=True)
    for run, accuracy in MD_ACCURACY.items():
        reports = []
        for index in range(EPISODES):
            episode = context.episode(request, SEED, index)
            reports.append(StoredReport(run_id=run, protocol="md-episode", source=episode.source, split="test",
                                        index=index, seed=SEED, fingerprint=episode.fingerprint,
                                        metrics={"accuracy": accuracy(index)}, request=stored_request))
        store.add(reports, run_config_json=json.dumps({"run": run}))
    store.add_task_results([TaskResult("card-a", task, "test", _vtab_accuracy(i), 1000) for i, task in enumerate(TASKS)])
    store.add_task_results([TaskResult("card-b", task, "test", 0.4, 500) for task in PARTIAL_VTAB])
    store.add_cog_results([CogResult("card-a", level, shots, seed, accuracy, 5000)
                           for (level, shots), accuracies in COG.items()
                           for seed, accuracy in enumerate(accuracies, start=1)])
    store.add_task_results([TaskResult("max", TASK, "test", MAX, 100, role="max")])
    store.add_task_results([TaskResult("scratch", TASK, "test", top1, 100, regime=n, regime_seed=1, role="scratch")
                            for n, top1 in SCRATCH.items()])
    store.add_task_results([TaskResult("card-a", TASK, "test", top1, 100, regime=n, regime_seed=1)
                            for n, top1 in MODEL.items()])
    store.close()
    return path


@pytest.fixture(scope="module")
def written(served, metrics, tmp_path_factory) -> dict:
    """One card of both runs with --html and --plots: its markdown, HTML file and plots folder."""
    folder = tmp_path_factory.mktemp("card-out")
    argv = ["report", "--card", "--data", str(served.data), "--metrics", str(metrics), "--run", "card-a",
            "--run", "card-b", "--html", str(folder / "card.html"), "--plots", str(folder / "plots")]
    code, out = _main(argv)
    assert code == 0
    return {"out": out, "html": folder / "card.html", "plots": folder / "plots"}


def _main(argv: list[str]) -> tuple[int, str]:
    """Run the command, capturing stdout without capsys (module fixtures have none)."""
    import contextlib
    import io

    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        code = main(argv)
    return code, stream.getvalue()


def _section(out: str, title: str) -> str:
    """The text of a shown table from its heading to the next one."""
    start = out.index(f"## {title}\n")
    end = out.find("\n## ", start + 1)
    return out[start:] if end < 0 else out[start:end]


def _rows(text: str, key: int = 2) -> dict[tuple[str, ...], list[str]]:
    """Markdown rows keyed by their first ``key`` cells."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows[tuple(cells[:key])] = cells
    return rows


def _md_cell(values: list[float]) -> str:
    n = len(values)
    mean = sum(values) / n
    ci = 1.96 * math.sqrt(sum((v - mean) ** 2 for v in values) / n) / math.sqrt(n)  # np.std: ddof = 0, as MD
    return f"{100 * mean:.2f} ± {100 * ci:.2f} ({n})"


def test_the_markdown_card_has_every_table_with_the_stored_numbers_side_by_side(served, written):
    out = written["out"]
    assert out.startswith("# Report card: card-a, card-b\n")
    # the contents: one line linking each table shown, before the first
    contents = next(line for line in out.splitlines() if line.startswith("Contents: "))
    assert out.index(contents) < out.index("\n## ")
    assert contents == ("Contents: [Meta-Dataset](#meta-dataset) · [VTAB-1k](#vtab-1k) · "
                        "[ImageNet-CoG](#imagenet-cog) · [Calibrated (control baselines)](#calibrated-control-baselines)")
    md = _section(out, "Meta-Dataset")
    assert "| source | card-a | card-b | chance |" in md
    row = next(cells for key, cells in _rows(md).items() if key[0].endswith("/test"))
    a = [MD_ACCURACY["card-a"](i) for i in range(EPISODES)]
    b = [MD_ACCURACY["card-b"](i) for i in range(EPISODES)]
    assert row[1:3] == [f"{_md_cell(a)} [rank 1]", f"{_md_cell(b)} [rank 2]"]
    assert "fingerprints: every reported episode matches its recomputed composition" in md

    vtab = _rows(_section(out, "VTAB-1k"))
    assert vtab[("group", "task")] == ["group", "task", "card-a", "card-b"]
    assert vtab[("natural", "cifar100")][2:] == ["10.00 (1000)", "40.00 (500)"]
    assert vtab[("structured", "dmlab")][2:] == [f"{100 * _vtab_accuracy(NAMES.index('dmlab')):.2f} (1000)", "-"]
    groups = vtab_groups(VtabBenchmark.VTAB_V1)  # the paper's task -> group assignment
    assert [len(names) for names in groups.values()] == [7, 4, 8]
    for group, names in groups.items():
        mean = sum(_vtab_accuracy(NAMES.index(name)) for name in names) / len(names)
        assert vtab[(group.value, "mean")][2:] == [f"{100 * mean:.2f}", f"40.00 * (1/{len(names)})"]
    assert vtab[("vtab-v1", "mean")][2:] == ["50.00", "40.00 * (3/19)"]

    cog_text = _section(out, "ImageNet-CoG")
    assert "\nno ImageNet-CoG results (not in this table): card-b\n" in cog_text
    cog = _rows(cog_text)
    assert cog[("run", "level")] == ["run", "level", "N=all", "N=8"]
    for (level, shots), accuracies in COG.items():
        mean = sum(accuracies) / 3
        std = math.sqrt(sum((x - mean) ** 2 for x in accuracies) / 3)
        assert cog[("card-a", level)][2 + (shots == 8)] == f"{100 * mean:.2f} ± {100 * std:.2f} (3)"
    assert ("card-b", "IN-1K") not in cog

    calibrated_text = _section(out, "Calibrated (control baselines)")
    assert "control runs: scratch (scratch), max (max)" in calibrated_text
    assert "\nno VTAB results at a data regime (not in this table): card-b\n" in calibrated_text
    blind, max_risk = StoresContext(served.data).blind_risk(TASK), 1 - MAX
    rows = {(cells[1], cells[2]): cells for cells in _rows(calibrated_text, key=3).values() if cells[0] == TASK}
    for n, top1 in MODEL.items():
        cr = (1 - top1 - max_risk) / (blind - max_risk)
        cr_scratch = (1 - SCRATCH[n] - max_risk) / (blind - max_risk)
        assert rows[("card-a", str(n))][4:] == [f"{100 * (1 - top1):.2f}", f"{cr:+.3f}", f"{cr_scratch:+.3f}"]
    assert rows[("blind guess", "-")][4] == f"{100 * blind:.2f}"
    assert ("card-a", "CCI") in rows


def test_a_protocol_without_reports_is_one_line_and_no_table(served, metrics, capsys):
    assert main(["report", "--card", "--metrics", str(metrics), "--run", "card-b"]) == 0
    out = capsys.readouterr().out
    assert "ImageNet-CoG: left out, no ImageNet-CoG results for card-b.\n" in out
    assert "Calibrated (control baselines): left out, it needs --data (" in out
    assert "## ImageNet-CoG" not in out and "## Calibrated" not in out and "N=all" not in out
    assert "## Meta-Dataset" in out and "## VTAB-1k" in out
    assert "fingerprints not checked: without --data the reported episodes are not recomputed" in out
    # a run with no MD and no VTAB either: those two are one line each too
    assert main(["report", "--card", "--metrics", str(metrics), "--run", "scratch"]) == 0
    out = capsys.readouterr().out
    assert "Meta-Dataset: left out, no Meta-Dataset episode reports for scratch." in out
    assert "VTAB-1k: left out, no VTAB-1k task results for scratch." in out
    assert "##" not in out


def test_the_runs_a_table_lacks_are_named_in_one_line(metrics, capsys):
    assert main(["report", "--card", "--metrics", str(metrics), "--run", "card-a", "--run", "card-b",
                 "--run", "scratch"]) == 0
    out = capsys.readouterr().out
    lacking = [line for line in out.splitlines() if "(not in this table)" in line]
    assert "no ImageNet-CoG results (not in this table): card-b, scratch" in lacking
    assert "no Meta-Dataset episode reports (not in this table): scratch" in lacking
    assert len(lacking) == len({line.split(" (not in this table)")[0] for line in lacking})  # one line a table


def test_the_html_is_self_contained_and_embeds_the_plots_written(written):
    page = written["html"].read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "url(" not in page and "@import" not in page  # nothing fetched from CSS either
    sources = re.findall(r'<img src="([^"]+)"', page)
    pngs = {path.name: path.read_bytes() for path in sorted(written["plots"].glob("*.png"))}
    assert {"ways_all.png", "vtab_card-a.png", "vtab_card-b.png", "cog_levels_all.png",
            "calibrated_n_source_folder.png", "calibrated_scratch_source_folder.png"} <= set(pngs)
    assert len(sources) == len(pngs)
    embedded = []
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        embedded.append(base64.b64decode(source.removeprefix("data:image/png;base64,"), validate=True))
    assert sorted(embedded) == sorted(pngs.values())  # exactly the PNGs --plots wrote
    for title in ("Meta-Dataset", "VTAB-1k", "ImageNet-CoG", "Calibrated (control baselines)"):
        assert f"<h2>{title}</h2>" in page
    # a table of contents above the first table links each table's section; the plots folded under their table
    toc = re.search(r'<nav class="toc">(.*?)</nav>', page)
    assert toc is not None and toc.start() < page.index("<section")
    links = re.findall(r'<a href="#([^"]+)">([^<]+)</a>', toc.group(1))
    titles = ["Meta-Dataset", "VTAB-1k", "ImageNet-CoG", "Calibrated (control baselines)"]
    assert [title for _, title in links] == titles
    assert re.findall(r'<section id="([^"]+)">', page) == [anchor for anchor, _ in links]
    assert ("vtab-1k", "VTAB-1k") in links
    folded = re.findall(r"<details[^>]*>(.*?)</details>", page, flags=re.S)
    assert len(folded) == 4 and all(block.count("<img ") for block in folded)  # each table's plots, one block
    assert sum(block.count("<img ") for block in folded) == len(sources)
    assert "<details class=\"plots\">" in page and not re.search(r"<details[^>]*\bopen", page)  # closed till clicked
    assert "<td class=\"number\">10.00 (1000)</td>" in page  # a VTAB cell, in % as the table
    assert f"plots in {written['plots']}: " in written["out"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        missing(CHROMIUM_OPT_OUT, "Chromium is not installed (make chromium installs it: apt-get install chromium)")
    return found


MANY_SOURCES = ("aircraft", "cu_birds", "dtd", "fungi", "image_folder", "omniglot", "quickdraw", "vgg_flower")
"""The issue's card: 2 x (8 sources + all) = 18 MD plots above the VTAB table (plots are per
source kind: eight kinds' default fixtures, whose train splits have 3 classes or more)."""
SCREEN = (1200, 900)  # the browser's viewport: the screenshot holds the first two screens
TOC_COLOUR, VTAB_COLOUR = (0, 200, 0), (255, 0, 255)  # painted on in the test's copy of the page


@pytest.fixture(scope="module")
def many_plots_card(tmp_path_factory) -> Path:
    """The card (HTML) of two runs with MD episodes on eight sources (predictions kept:
    ways and shots plots for each source and over all), VTAB-1k results and CoG results."""
    root = tmp_path_factory.mktemp("many-plots")
    for kind in MANY_SOURCES:
        pack_fixture(generate_fixture(kind, root), root / "data", name=kind)
    context = StoresContext(root / "data")
    store = MetricsStore(root / "metrics.sqlite")
    for r, run in enumerate(("many-a", "many-b")):
        reports = []
        for kind in MANY_SOURCES:
            for index in range(4):
                request = EpisodeSpec(sources=(kind,), split="train", seed=SEED, image_size=16,
                                      ways=2 + index % 2).to_request()
                episode = context.episode(request, SEED, index)
                truth = [label for label, ids in enumerate(episode.query) for _ in ids]
                wrong = (index + r) % 3
                predicted = [(t + 1) % episode.ways for t in truth[:wrong]] + truth[wrong:]
                reports.append(StoredReport(
                    run_id=run, protocol="md-episode", source=episode.source, split="train", index=index, seed=SEED,
                    fingerprint=episode.fingerprint, metrics={"accuracy": (len(truth) - wrong) / len(truth)},
                    request=json_format.MessageToDict(request), predicted=tuple(predicted)))
        store.add(reports, run_config_json=json.dumps({"run": run}))
        store.add_task_results([TaskResult(run, task, "test", _vtab_accuracy(i), 1000) for i, task in enumerate(TASKS)])
    store.add_cog_results([CogResult("many-a", level, shots, seed, accuracy, 5000)
                           for (level, shots), accuracies in COG.items()
                           for seed, accuracy in enumerate(accuracies, start=1)])
    store.close()
    page = root / "card.html"
    code, out = _main(["report", "--card", "--data", str(root / "data"), "--metrics", str(root / "metrics.sqlite"),
                       "--run", "many-a", "--run", "many-b", "--html", str(page)])
    assert code == 0, out
    return page


def _screenshot(browser: str, page: Path, folder: Path) -> np.ndarray:
    """The first two screens (``SCREEN``) of ``page`` in headless Chromium, as RGB pixels."""
    shot = folder / f"{page.stem}.png"
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={folder}",
         f"--screenshot={shot}", f"--window-size={SCREEN[0]},{2 * SCREEN[1]}", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(folder)},
    )
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (SCREEN[0], 2 * SCREEN[1])
        return np.asarray(image.convert("RGB"))


def _rows_of(pixels: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    """The rows (y) where more than 100 pixels have ``colour``."""
    return np.flatnonzero((np.abs(pixels.astype(int) - colour).sum(axis=2) < 30).sum(axis=1) > 100)


@pytest.mark.slow
def test_the_card_renders_in_a_real_browser_with_its_contents_and_tables_first(many_plots_card, tmp_path):
    """Debian's headless Chromium opens the card of 18 MD plots (no network: everything is
    inline). The test's copy of the page paints the table of contents and the VTAB table
    (by the anchor the contents link) in colours of their own: the contents lie in the first
    screen and the VTAB table starts within the first two, the plots folded above it. With
    the plots unfolded (``<details open>``) the same screens show them, and the VTAB table
    lies far below: what folding them saves."""
    browser = _chromium()
    page = many_plots_card.read_text(encoding="utf-8")
    assert page.count("<img ") == 2 * (len(MANY_SOURCES) + 1) + 2 + 2  # MD: ways and shots each; VTAB: a run each; CoG
    assert 'href="#vtab-1k"' in page
    paint = (f"<style>nav.toc {{ background: rgb{TOC_COLOUR} !important; }} "
             f"#vtab-1k table, #vtab-1k td {{ background: rgb{VTAB_COLOUR} !important; }}</style></head>")
    folded, unfolded = tmp_path / "folded.html", tmp_path / "unfolded.html"
    folded.write_text(page.replace("</head>", paint, 1), encoding="utf-8")
    unfolded.write_text(page.replace("</head>", paint, 1).replace('<details class="plots">',
                                                                  '<details class="plots" open>'), encoding="utf-8")

    pixels = _screenshot(browser, folded, tmp_path)
    rgb = pixels.astype(np.uint32)  # each pixel's colour as one 24-bit integer: np.unique over rows took 6 s
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(colours) > 100, f"{len(colours)} colours: a blank or an error page"
    assert (pixels.min(axis=2) < 80).mean() > 0.005  # dark text drawn on the white page
    toc = _rows_of(pixels, TOC_COLOUR)
    assert toc.size and toc[0] < SCREEN[1], "no table of contents in the first screen"
    vtab = _rows_of(pixels, VTAB_COLOUR)
    assert vtab.size, f"the VTAB table does not start within the first two screens ({2 * SCREEN[1]} px)"
    assert toc[-1] < vtab[0]

    pixels = _screenshot(browser, unfolded, tmp_path)
    # matplotlib's first line colour (tab:blue) from the embedded MD plots: the data URIs decoded
    assert (np.abs(pixels.astype(int) - (31, 119, 180)).sum(axis=2) < 30).sum() > 200
    assert not _rows_of(pixels, VTAB_COLOUR).size, "unfolded, the 18 MD plots should push the VTAB table down"


def test_refusals_are_one_line(served, metrics, capsys):
    base = ["report", "--metrics", str(metrics), "--run", "card-a"]
    cases = [
        (["--card", "--table", "vtab"], "--table: not with --card (got --table vtab; the card shows every table)"),
        (["--card", "--format", "json"], "--format: not with --card (got --format json; the card is markdown"),
        (["--card", "--calibrate"], "--calibrate: not with --card"),
        (["--html", "x.html"], "--html: only with --card (the report card as one HTML file)"),
        (["--card", "--scratch", "scratch"], "--max: required with --scratch"),
        (["--card", "--plots-per-n"], "--plots-per-n: only with --plots DIR or --html FILE"),
        (["--card", "--scratch", "scratch", "--max", "max"], "--data: required for the calibrated table"),
        (["--card", "--run", "card-a"], "run: 'card-a' given twice"),
        (["--card", "--run", "nobody"], "run 'nobody' has no reports; "
                                        f"{metrics} has runs card-a, card-b, max, scratch"),
    ]
    for argv, message in cases:
        assert main([*base, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_the_controls_must_be_unambiguous_and_html_tables_group_their_rows():
    assert card.control_runs({"a": "model", "s": "scratch", "m": "max"}) == card.ControlRuns("s", "m")
    assert card.control_runs({"a": "model", "m": "max"}).missing == "no scratch run in the metrics database"
    two = card.control_runs({"s1": "scratch", "s2": "scratch", "m": "max"})
    assert (two.scratch, two.missing) == (None, "2 scratch runs (s1, s2); pick one with --scratch RUN")
    grid = "| group | task | r |\n|---|---|---|\n| g | t1 | 1.00 |\n| g | mean | 2.00 |\n| h | t2 | - |\n\na note"
    page = card.grid_html(grid)
    assert '<td class="group" rowspan="2">g</td>' in page and "<td>h</td>" in page
    assert '<tr class="summary"><td>mean</td><td class="number">2.00</td></tr>' in page
    assert "<li>a note</li>" in page


def test_a_checkpoint_evaluated_as_one_run_id_is_asked_for_by_that_id():
    from sampler_server.metrics.card import expand_runs

    known = ["ck/vtab", "ck/md-v1/prototypes", "ck/cog", "ck/md-v1/logreg", "ck-other", "scratch"]
    assert expand_runs(["ck"], known) == ("ck/cog", "ck/md-v1/logreg", "ck/md-v1/prototypes", "ck/vtab")
    assert expand_runs(["ck-other", "ck/vtab", "ck"], known) == (
        "ck-other", "ck/vtab", "ck/cog", "ck/md-v1/logreg", "ck/md-v1/prototypes")
    assert expand_runs(["scratch", "missing"], known) == ("scratch", "missing")  # missing: refused by name later


def test_each_runs_input_convention_is_one_line_saying_whose_it_is():
    def config(low: float, mean: list[float], std: list[float], source: str | None) -> dict:
        preprocessing = {"input_size": 84, "input_range": [low, 1.0], "mean": mean, "std": std}
        return {"preprocessing": {**preprocessing, **({"source": source} if source is not None else {})}}

    imagenet = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    lines = card.input_lines({
        "ck/md-v1/prototypes": config(0.0, *imagenet, "default"), "ck/vtab": config(0.0, *imagenet, "default"),
        "named": config(-1.0, [0.0] * 3, [1.0] * 3, "named backbone"), "old": config(-1.0, [0.0] * 3, [1.0] * 3, None),
        "no-config": None, "card-a": {"run": "card-a"}})
    assert lines == (
        "input of ck/md-v1/prototypes, ck/vtab: [0, 1], mean 0.485 0.456 0.406, std 0.229 0.224 0.225 (the default "
        "for a backbone that declares none)",
        "input of named: [-1, 1], mean 0 0 0, std 1 1 1 (declared by named backbone)",
        "input of old: [-1, 1], mean 0 0 0, std 1 1 1 (not recorded whose)")
