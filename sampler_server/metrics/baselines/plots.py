"""The two plots of the control-baselines paper, one pair per task of a calibrated report.

- ``calibrated_n_<task>.png``: cR against n (training examples, log axis), one line per
  model run and the scratch run's curve (dashed), with the 0 (maximal supervision) and
  1 (blind guess) lines;
- ``calibrated_scratch_<task>.png``: each model run's cR_f against cR_scratch at the
  regimes both have, with the diagonal (no better than scratch); below it is better.

A run with several seeds at one n is drawn as the reference notebook's seaborn
``lineplot`` draws it: one line through the mean cR over its seeds at each n (each seed's
point shown as a small dot, named in the legend). A regime a run lacks leaves no point,
never a made-up one. cR is a fraction by definition (0 = maximal supervision, 1 = blind
guess), not an accuracy, so its axes stay unitless; the legend stands right of the axes
(``plotting``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from sampler_server.metrics.baselines.report import CalibratedReport
from sampler_server.metrics.plotting import file_safe_name, finish_axes, new_figure, write_figure

FIGURE_SIZE = (6, 4)  # inches, at plotting.DPI: 600 x 400 pixels
SEED_DOTS = "dot: one seed (line: mean)"


def mean_by_n(regimes: list[dict]) -> list[tuple[float, float | None, float]]:
    """(n, cR_scratch, mean cR over the seeds at n) per n, ascending (per-seed or mean entries alike)."""
    by_n: dict[float, list[dict]] = {}
    for regime in regimes:
        by_n.setdefault(regime["n"], []).append(regime)
    return [(n, entries[0]["cR_scratch"], sum(e["cR"] for e in entries) / len(entries))
            for n, entries in sorted(by_n.items())]


def cr_against_n_figure(report: CalibratedReport, task: str) -> Figure:
    """cR against n (log axis, ticks at the regimes): the model runs, the scratch curve, the 0 and 1 lines."""
    value = report.calibration["tasks"][task]
    figure, axes = new_figure(FIGURE_SIZE)
    axes.axhline(1.0, color="grey", linewidth=1, linestyle=":", label="blind guess (cR = 1)")
    axes.axhline(0.0, color="black", linewidth=1, linestyle=":", label=f"max: {report.max_run} (cR = 0)")
    curve = report.scratch_curves[task]
    axes.plot([n for n, _, _ in curve], [cr for _, _, cr in curve], marker="s", linestyle="--", color="grey",
              label=f"scratch: {report.scratch_run}")
    dots = False
    for run, calibrated in value["runs"].items():
        regimes = calibrated["regimes"]
        curve = mean_by_n(regimes)
        line = axes.plot([n for n, _, _ in curve], [cr for _, _, cr in curve], marker="o", label=run)[0]
        if len(curve) < len(regimes):
            axes.scatter([r["n"] for r in regimes], [r["cR"] for r in regimes], s=8, color=line.get_color())
            dots = True
    axes.set_xscale("log")
    regimes_n = sorted({n for n, _, _ in report.scratch_curves[task]}
                       | {r["n"] for c in value["runs"].values() for r in c["regimes"]})
    axes.set_xticks(regimes_n, [str(n) for n in regimes_n])  # the regimes themselves, not 2x10^1
    axes.xaxis.set_minor_locator(NullLocator())
    extra = [Line2D([], [], color="grey", marker="o", markersize=3, linestyle="none", label=SEED_DOTS)] if dots else []
    finish_axes(axes, "n (training examples, log scale)", "calibrated risk cR", f"{task}: cR against n", extra)
    return figure


def cr_against_scratch_figure(report: CalibratedReport, task: str) -> Figure:
    """cR_f against cR_scratch with the diagonal."""
    value = report.calibration["tasks"][task]
    figure, axes = new_figure(FIGURE_SIZE)
    xs = [r["cR_scratch"] for c in value["runs"].values() for r in c["regimes"] if r["cR_scratch"] is not None]
    ys = [r["cR"] for c in value["runs"].values() for r in c["regimes"] if r["cR_scratch"] is not None]
    low, high = min([0.0, *xs, *ys]), max([1.0, *xs, *ys])
    axes.plot([low, high], [low, high], color="grey", linewidth=1, linestyle="--", label="diagonal (= scratch)")
    for run, calibrated in value["runs"].items():
        points = sorted((x, y) for _, x, y in mean_by_n(calibrated["regimes"]) if x is not None)
        cci = calibrated["cci"]
        label = f"{run} (CCI {cci:+.3f})" if cci is not None else f"{run} (CCI undefined)"
        axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
    finish_axes(axes, f"cR_scratch ({report.scratch_run})", "cR_f (mean over seeds at each n)",
                f"{task}: cR_f against cR_scratch")
    return figure


def calibrated_figures(report: CalibratedReport) -> Iterator[tuple[str, Figure]]:
    """(file name, figure): both plots of every task."""
    for task in report.tasks:
        name = file_safe_name(task)
        yield f"calibrated_n_{name}.png", cr_against_n_figure(report, task)
        yield f"calibrated_scratch_{name}.png", cr_against_scratch_figure(report, task)


def write_calibrated_plots(report: CalibratedReport, directory: Path) -> list[Path]:
    """Both plots of every task into ``directory`` (created); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_figure(figure, directory / name) for name, figure in calibrated_figures(report)]
