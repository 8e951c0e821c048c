"""The robustness plots Meta-Dataset recommends (Appendix .1): accuracy against the
episode's ways, and per-class precision against the class's shots, one line per run
with a 95% confidence band, per source and over all sources; in percent, as the table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from sampler_server.metrics.plotting import file_safe_name  # first: it selects matplotlib's file backend
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from sampler_common.intervals import mean_ci95  # noqa: E402
from sampler_server.metrics.md.report import ClassPoint, EpisodePoint, Report  # noqa: E402

SHOT_BINS = (1, 2, 3, 4, 5, 6, 8, 11, 16, 21, 31, 51, 101)


def _bin_of_shots(shots: int) -> int:
    for low, high in zip(SHOT_BINS, SHOT_BINS[1:]):
        if low <= shots < high:
            return low
    return SHOT_BINS[-1]


def _series(points: Iterable[tuple[str, int, float]]) -> dict[str, list[tuple[int, float, float]]]:
    grouped: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run, x, y in points:
        grouped[run][x].append(y)
    out = {}
    for run, by_x in grouped.items():
        rows = []
        for x in sorted(by_x):
            mean, half_width = mean_ci95(by_x[x])
            # one episode has no interval: NaN leaves a gap in the band rather than claim certainty
            rows.append((x, mean, math.nan if half_width is None else half_width))
        out[run] = rows
    return out


def _plot(series: dict[str, list[tuple[int, float, float]]], xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    """One line per run with its 95% band, in percent (as the MD table), on whole-number x ticks."""
    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    for run, rows in sorted(series.items()):
        xs = [r[0] for r in rows]
        means = [100 * r[1] for r in rows]
        axes.plot(xs, means, marker="o", markersize=3, label=run)
        axes.fill_between(xs, [100 * (m - c) for _, m, c in rows], [100 * (m + c) for _, m, c in rows], alpha=0.2)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # ways and shot bins are counts
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.set_ylim(0, 100)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def write_plots(report: Report, directory: Path) -> list[Path]:
    """ways_<source>.png, shots_<source>.png and the same over all sources."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    sources = sorted({p.source for p in report.episodes})
    for source in sources + [None]:
        label = source or "all sources"
        episodes: list[EpisodePoint] = [p for p in report.episodes if source is None or p.source == source]
        classes: list[ClassPoint] = [p for p in report.classes if source is None or p.source == source]
        suffix = file_safe_name(source) if source else "all"
        if episodes:
            series = _series((p.run, p.ways, p.accuracy) for p in episodes)
            written.append(_plot(series, "ways", "query accuracy (%)", f"accuracy vs ways ({label})",
                                 directory / f"ways_{suffix}.png"))
        if classes:
            series = _series((p.run, _bin_of_shots(p.shots), p.precision) for p in classes)
            written.append(_plot(series, "shots (bin start)", "class precision (%)", f"precision vs shots ({label})",
                                 directory / f"shots_{suffix}.png"))
    return written
