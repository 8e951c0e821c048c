"""The demo's tables, each rendered to text for ``DemoConsole.table`` (terminal and log).

One function per table, each reading the server's metrics database (and, for the MD
table, the packed stores, to check every reported episode against its recomputed
composition) or the trainers' JSON summaries; plots are written beside and named in one
line. A table to come (a leg of its own) adds a function here and one entry in
``demo_cmd.TABLES``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sampler_server.errors import FailedPrecondition


def md_table(metrics: Any, store: Path, runs: Sequence[str], plots_dir: Path) -> str:
    """The Meta-Dataset table of ``runs``, and its robustness plots."""
    from sampler_server.catalog.registry import StoreRegistry
    from sampler_server.catalog.replay import EpisodeReplayer
    from sampler_server.metrics.md.plots import write_plots
    from sampler_server.metrics.md.report import build_report, render_report

    report = build_report(metrics, list(runs), EpisodeReplayer(StoreRegistry.from_data_dir(store)))
    plots = write_plots(report, plots_dir)
    return render_report(report, "table") + f"\nplots: {len(plots)} PNG files in {plots_dir}"


def vtab_table(metrics: Any, runs: Sequence[str]) -> str:
    from sampler_server.metrics.vtab.report import build_vtab_report, render_vtab_report

    return render_vtab_report(build_vtab_report(metrics, list(runs)), "table")


def calibrated_table(metrics: Any, store: Path, model: str, scratch: str, best: str, plots_dir: Path) -> str:
    """The calibrated table of the control baselines' model run against its scratch and max runs, and its plots."""
    from sampler_server.cli.report_cmd import blind_risks_from_data
    from sampler_server.metrics.baselines.plots import write_calibrated_plots
    from sampler_server.metrics.baselines.report import build_calibrated_report, render_calibrated_report

    report = build_calibrated_report(metrics, [model], scratch, best, blind_risks_from_data(store))
    plots = write_calibrated_plots(report, plots_dir)
    return render_calibrated_report(report, "table") + f"\ncalibrated plots: {len(plots)} PNG files in {plots_dir}"


def cog_table(metrics: Any, runs: Sequence[str], plots_dir: Path, levels: str = "") -> str:
    """The CoG table with the first run as the baseline, its plots, and the levels it was computed on (one line)."""
    from sampler_server.metrics.cog.plots import write_cog_plots
    from sampler_server.metrics.cog.report import build_cog_report, render_cog_report

    report = build_cog_report(metrics, list(runs), baseline=runs[0])
    plots = write_cog_plots(report, plots_dir)
    return render_cog_report(report, "table") + f"\nCoG plots: {len(plots)} PNG files in {plots_dir}" + (
        f"\n{levels}" if levels else "")


def levels_line(levels: Any) -> str:
    """The CoG levels (``core.cog.CogLevels``) in one line: how many concepts were eligible,
    each level's Lin similarity to IN-1K, the fingerprint (``cog levels`` prints them in full)."""
    ranges = ", ".join(f"{level.name} {level.similarity_range[0]:.2f}..{level.similarity_range[1]:.2f}"
                       for level in levels.levels)
    return (f"levels: {len(levels.eligible)} of {levels.num_concepts} concepts eligible; Lin similarity to IN-1K "
            f"{ranges}; fingerprint {levels.fingerprint[:16]}")


def parity_table(summaries: Path) -> str:
    """Every leg's torch and tf rows side by side with their 95% CIs, from the trainers'
    JSON summaries ``summaries/<leg>-<framework>.json`` (``demo_parity``)."""
    from sampler_server.cli import demo_parity

    legs = {"md": demo_parity.md_rows, "vtab": demo_parity.vtab_rows, "cog": demo_parity.cog_rows}
    rows = []
    for leg, rows_of in legs.items():
        paths = [summaries / f"{leg}-{framework}.json" for framework in ("torch", "tf")]
        if all(path.is_file() for path in paths):
            rows += rows_of(*(json.loads(path.read_text()) for path in paths))
    return demo_parity.render(rows)


def card_command(store: Path, workdir: Path, runs: Sequence[str]) -> list[str]:
    """``report --card`` of ``runs``, as markdown, with its HTML page and plots under ``workdir``."""
    command = ["report", "--card", "--data", str(store)]
    for run in runs:
        command += ["--run", run]
    return command + ["--html", str(workdir / "card.html"), "--plots", str(workdir / "plots-card")]


NOT_IN_TABLE = re.compile(r"^no .+ \(not in this table\): .+$")


def card_for_terminal(text: str, shown: dict[str, str]) -> str:
    """The card less what the terminal shows already: a section whose table was printed
    above (``shown``: section title -> where, e.g. the calibrated table of the control
    baselines, the same rows) becomes one line saying so, and the lines naming the runs a
    table leaves out (``no ... (not in this table): <runs>``) go; ``card.md`` and the log keep it whole."""
    parts = re.split(r"(?m)^(?=## )", text)
    kept = []
    for part in parts:
        title = part.split("\n", 1)[0][3:] if part.startswith("## ") else None
        if title in shown:
            kept.append(f"## {title}\n\nthe same table as {shown[title]} above (here in full: card.md)\n\n")
            continue
        kept.append("\n".join(line for line in part.split("\n") if not NOT_IN_TABLE.match(line)))
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def card(store: Path, workdir: Path, runs: Sequence[str]) -> str:
    """The report card (``card_command``), as ``sampler-server report`` prints it, under its command line."""
    from sampler_server.cli.main import main as cli_main

    command = card_command(store, workdir, runs)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = cli_main(command)
    if status != 0:
        raise FailedPrecondition(f"the report card could not be made (status {status}): {printed.getvalue()[-300:]}")
    return "$ sampler-server " + " ".join(command) + "\n" + printed.getvalue()
