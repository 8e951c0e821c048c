"""The ImageNet-CoG plots: top-1 against the level and against N, error bars = std over seeds.

The two views the CoG paper draws (Figs. 3, 4, 10, 11):
- ``cog_levels_all.png``: accuracy against the level (IN-1K, L1..L5), one line per run,
  for N = all; ``cog_levels_N<n>.png`` the same for each few-shot N when asked;
- ``cog_shots_<run>.png``: accuracy against N (1, 2, ..., 128, then all, on a log2
  axis as the paper puts it), one line per level, for each run with few-shot results;
- with a baseline, ``cog_levels_all_relative.png`` (and per N when asked): each other
  run's mean minus the baseline's, in percentage points, with the baseline as the zero
  line (the paper's relative plots); its error bars are the run's own std over seeds.

Error bars are the population standard deviation over seeds of ``cog.report`` (none for
a single seed), named so in the legend; a cell a run lacks leaves a gap in its line,
never a made-up point. Accuracy in percent, the legend outside the axes (``plotting``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from matplotlib.figure import Figure

from sampler_server.metrics.cog.report import SHOTS_ALL, CogReport
from sampler_server.metrics.cog.results import shots_name
from sampler_server.metrics.plotting import (error_bar_handle, file_safe_name, finish_axes, new_figure, percent_label,
                                             write_figure)

FIGURE_SIZE = (6, 4)  # inches, at plotting.DPI: 600 x 400 pixels
STD_LABEL = "error bar: std over seeds"  # population std, as the table


def _point(report: CogReport, run: str, key: tuple[str, int], relative: bool) -> tuple[float, float]:
    """(y, error) in percent for one cell; NaN where there is nothing to draw."""
    cell = report.cells[run].get(key)
    if cell is None:
        return math.nan, math.nan
    error = math.nan if cell.std is None else 100 * cell.std
    if not relative:
        return 100 * cell.mean, error
    versus = report.relative(run, key)
    return (math.nan, math.nan) if versus is None else (100 * versus.delta, error)


def _has_bars(errors: list[float]) -> bool:
    return any(not math.isnan(error) for error in errors)


def levels_figure(report: CogReport, shots: int, relative: bool = False) -> Figure:
    """Accuracy (or, ``relative``, accuracy minus the baseline's) against the level for N = ``shots``."""
    figure, axes = new_figure(FIGURE_SIZE)
    positions = range(len(report.levels))
    runs = [run for run in report.blocks if not relative or run != report.baseline]
    bars = False
    for run in runs:
        points = [_point(report, run, (level, shots), relative) for level in report.levels]
        errors = [p[1] for p in points]
        axes.errorbar(positions, [p[0] for p in points], yerr=errors, marker="o", markersize=4, capsize=3, label=run)
        bars |= _has_bars(errors)
    axes.set_xticks(list(positions))
    axes.set_xticklabels(report.levels)
    if relative:
        axes.axhline(0.0, color="black", linewidth=0.8, label=f"{report.baseline} (baseline)")
        ylabel = "top-1 minus baseline (% points)"
        title = f"CoG accuracy relative to {report.baseline}, N={shots_name(shots)}"
        bar_label = "error bar: run's std over seeds"
    else:
        ylabel, bar_label = percent_label("top-1 accuracy"), STD_LABEL
        title = f"CoG accuracy vs level, N={shots_name(shots)}"
    finish_axes(axes, "level", ylabel, title, [error_bar_handle(bar_label)] if bars else [])
    return figure


def shots_figure(report: CogReport, run: str) -> Figure:
    """Accuracy against N (log2 axis, ticks at the N measured, "all" last) for one run, one line per level."""
    figure, axes = new_figure(FIGURE_SIZE)
    few = [shots for shots in report.shots if shots != SHOTS_ALL]
    columns = few + [SHOTS_ALL]
    positions = [math.log2(shots) for shots in few] + [math.log2(few[-1]) + 1 if few else 0.0]
    bars = False
    for level in report.levels:
        points = [_point(report, run, (level, shots), False) for shots in columns]
        if all(math.isnan(p[0]) for p in points):
            continue
        errors = [p[1] for p in points]
        axes.errorbar(positions, [p[0] for p in points], yerr=errors, marker="o", markersize=4, capsize=3,
                      label=level)
        bars |= _has_bars(errors)
    axes.set_xticks(positions)
    axes.set_xticklabels([shots_name(shots) for shots in columns])
    finish_axes(axes, "N (training images per concept, log scale)", percent_label("top-1 accuracy"),
                f"{run}: CoG accuracy vs N", [error_bar_handle(STD_LABEL)] if bars else [])
    return figure


def cog_figures(report: CogReport, per_shots: bool = False) -> Iterator[tuple[str, Figure]]:
    """(file name, figure) of the plots of the module docstring; ``per_shots`` adds the
    accuracy-vs-level plots of each few-shot N. Nothing for a report without results."""
    if not report.levels:
        return
    chosen = [shots for shots in report.shots if shots == SHOTS_ALL or per_shots]
    for shots in chosen:
        suffix = shots_name(shots) if shots == SHOTS_ALL else f"N{shots}"
        yield f"cog_levels_{suffix}.png", levels_figure(report, shots)
        if report.baseline is not None and len(report.blocks) > 1:
            yield f"cog_levels_{suffix}_relative.png", levels_figure(report, shots, relative=True)
    if len(report.shots) > 1:  # some few-shot N: an accuracy-vs-N line has more than one point
        for run in report.blocks:
            if report.cells[run]:
                yield f"cog_shots_{file_safe_name(run)}.png", shots_figure(report, run)


def write_cog_plots(report: CogReport, directory: Path, per_shots: bool = False) -> list[Path]:
    """The figures of ``cog_figures`` as PNGs in ``directory`` (created); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_figure(figure, directory / name) for name, figure in cog_figures(report, per_shots)]
