"""The ImageNet-CoG plots: top-1 against the level and against N, error bars = std over seeds.

The two views the CoG paper draws (Figs. 3, 4, 10, 11):
- ``cog_levels_all.png``: accuracy against the level (IN-1K, L1..L5), one line per run,
  for N = all; ``cog_levels_N<n>.png`` the same for each few-shot N when asked;
- ``cog_shots_<run>.png``: accuracy against N (1, 2, ..., 128, then all, on a log2
  axis as the paper puts it), one line per level, for each run with few-shot results;
- with a baseline, ``cog_levels_all_relative.png`` (and per N when asked): each other
  run's mean minus the baseline's, in points, with the baseline as the zero line (the
  paper's relative plots); its error bars are the run's own std over seeds.

Error bars are the population standard deviation over seeds of ``cog.report`` (none for
a single seed); a cell a run lacks leaves a gap in its line, never a made-up point.
"""

from __future__ import annotations

import math
from pathlib import Path

from sampler_server.metrics.plotting import file_safe_name, finish_axes  # first: it selects the file backend
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

from sampler_server.metrics.cog.report import SHOTS_ALL, CogReport  # noqa: E402
from sampler_server.metrics.cog.results import shots_name  # noqa: E402

FIGURE_SIZE = (6, 4)  # inches, at DPI below: 600 x 400 pixels
DPI = 100


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


def plot_levels(report: CogReport, shots: int, path: Path, relative: bool = False) -> Path:
    """Accuracy (or, ``relative``, accuracy minus the baseline's) against the level for N = ``shots``."""
    figure, axes = plt.subplots(figsize=FIGURE_SIZE, dpi=DPI)
    positions = range(len(report.levels))
    runs = [run for run in report.blocks if not relative or run != report.baseline]
    for run in runs:
        points = [_point(report, run, (level, shots), relative) for level in report.levels]
        axes.errorbar(positions, [p[0] for p in points], yerr=[p[1] for p in points], marker="o", markersize=4,
                      capsize=3, label=run)
    axes.set_xticks(list(positions))
    axes.set_xticklabels(report.levels)
    if relative:
        axes.axhline(0.0, color="black", linewidth=0.8, label=f"{report.baseline} (baseline)")
        ylabel = "top-1 minus baseline (points)"
        title = f"CoG accuracy relative to {report.baseline}, N={shots_name(shots)}"
    else:
        ylabel, title = "top-1 accuracy (%)", f"CoG accuracy vs level, N={shots_name(shots)}"
    return finish_axes(axes, figure, "level", ylabel, title, path)


def plot_shots(report: CogReport, run: str, path: Path) -> Path:
    """Accuracy against N (log2 axis, "all" last) for one run, one line per level."""
    figure, axes = plt.subplots(figsize=FIGURE_SIZE, dpi=DPI)
    few = [shots for shots in report.shots if shots != SHOTS_ALL]
    columns = few + [SHOTS_ALL]
    positions = [math.log2(shots) for shots in few] + [math.log2(few[-1]) + 1 if few else 0.0]
    for level in report.levels:
        points = [_point(report, run, (level, shots), False) for shots in columns]
        if all(math.isnan(p[0]) for p in points):
            continue
        axes.errorbar(positions, [p[0] for p in points], yerr=[p[1] for p in points], marker="o", markersize=4,
                      capsize=3, label=level)
    axes.set_xticks(positions)
    axes.set_xticklabels([shots_name(shots) for shots in columns])
    return finish_axes(axes, figure, "N (training images per concept)", "top-1 accuracy (%)",
                   f"{run}: CoG accuracy vs N", path)


def write_cog_plots(report: CogReport, directory: Path, per_shots: bool = False) -> list[Path]:
    """The plots of the module docstring in ``directory``; ``per_shots`` adds the
    accuracy-vs-level plots of each few-shot N. Nothing for a report without results."""
    directory.mkdir(parents=True, exist_ok=True)
    if not report.levels:
        return []
    chosen = [shots for shots in report.shots if shots == SHOTS_ALL or per_shots]
    written = []
    for shots in chosen:
        suffix = shots_name(shots) if shots == SHOTS_ALL else f"N{shots}"
        written.append(plot_levels(report, shots, directory / f"cog_levels_{suffix}.png"))
        if report.baseline is not None and len(report.blocks) > 1:
            written.append(plot_levels(report, shots, directory / f"cog_levels_{suffix}_relative.png", relative=True))
    if len(report.shots) > 1:  # some few-shot N: an accuracy-vs-N line has more than one point
        for run in report.blocks:
            if report.cells[run]:
                written.append(plot_shots(report, run, directory / f"cog_shots_{file_safe_name(run)}.png"))
    return written
