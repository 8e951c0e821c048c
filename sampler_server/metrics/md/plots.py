"""The robustness plots Meta-Dataset recommends (Appendix .1): accuracy against the
episode's ways, and per-class precision against the class's shots, one line per run
with its 95% confidence band, per source and over all sources; in percent, as the table.

The band is ``intervals.mean_ci95`` over the values at each x (episode accuracies for
ways, class precisions for shots): 1.96 x population standard deviation / sqrt(n), none for a
single value (a gap in the band). A point made of fewer than ``plotting.FEW`` values is
drawn hollow with its n (``plotting`` holds the conventions every plot shares).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from sampler_common.intervals import mean_ci95
from sampler_server.metrics.md.report import ClassPoint, EpisodePoint, Report
from sampler_server.metrics.plotting import (FEW, band_handle, few_handle, file_safe_name, finish_axes, integer_ticks,
                                             mark_few, new_figure, percent_label, write_figure)

SHOT_BINS = (1, 2, 3, 4, 5, 6, 8, 11, 16, 21, 31, 51, 101)
FIGURE_SIZE = (6, 4)  # inches, at plotting.DPI: 600 x 400 pixels


@dataclass(frozen=True)
class SeriesPoint:
    """One point of a run's line: the mean at ``x``, its 95% half-width (NaN for one value), n."""

    x: int
    mean: float
    half_width: float
    count: int


def _bin_of_shots(shots: int) -> int:
    for low, high in zip(SHOT_BINS, SHOT_BINS[1:]):
        if low <= shots < high:
            return low
    return SHOT_BINS[-1]


def series(points: Iterable[tuple[str, int, float]]) -> dict[str, list[SeriesPoint]]:
    """(run, x, value) triples as each run's points, x ascending, with mean, 95% half-width and n."""
    grouped: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run, x, y in points:
        grouped[run][x].append(y)
    out = {}
    for run, by_x in grouped.items():
        rows = []
        for x in sorted(by_x):
            mean, half_width = mean_ci95(by_x[x])
            # one value has no interval: NaN leaves a gap in the band rather than claim certainty
            rows.append(SeriesPoint(x, mean, math.nan if half_width is None else half_width, len(by_x[x])))
        out[run] = rows
    return out


def robustness_figure(lines: dict[str, list[SeriesPoint]], xlabel: str, quantity: str, title: str,
                      unit: str) -> Figure:
    """One line per run with its 95% band, in percent, on whole-number x ticks; ``unit``
    names what each point averages: "episodes", or "classes" (one class's precision in one episode)."""
    figure, axes = new_figure(FIGURE_SIZE)
    any_few = False
    for run, rows in sorted(lines.items()):
        xs = [r.x for r in rows]
        means = [100 * r.mean for r in rows]
        full = [i for i, r in enumerate(rows) if r.count >= FEW]
        line = axes.plot(xs, means, marker="o", markersize=4, markevery=full, label=run)[0]
        colour = line.get_color()
        axes.fill_between(xs, [100 * (r.mean - r.half_width) for r in rows],
                          [100 * (r.mean + r.half_width) for r in rows], color=colour, alpha=0.2)
        any_few |= mark_few(axes, xs, means, [r.count for r in rows], colour)
    axes.use_sticky_edges = False  # the bands would pin the end points to the axes' edges
    integer_ticks(axes, [r.x for rows in lines.values() for r in rows])  # ways and shot bins are counts
    axes.set_ylim(0, 100)
    extra = [band_handle(f"95% CI over {unit}")] + ([few_handle(unit)] if any_few else [])
    finish_axes(axes, xlabel, percent_label(quantity), title, extra)
    return figure


def md_figures(report: Report) -> Iterator[tuple[str, Figure]]:
    """(file name, figure): ways_<source>.png and shots_<source>.png per source, then the
    same over all sources (``_all``); a plot with no points is not made."""
    sources = sorted({p.source for p in report.episodes})
    for source in sources + [None]:
        label = source or "all sources"
        episodes: list[EpisodePoint] = [p for p in report.episodes if source is None or p.source == source]
        classes: list[ClassPoint] = [p for p in report.classes if source is None or p.source == source]
        suffix = file_safe_name(source) if source else "all"
        if episodes:
            yield f"ways_{suffix}.png", robustness_figure(
                series((p.run, p.ways, p.accuracy) for p in episodes), "ways", "query accuracy",
                f"accuracy vs ways ({label})", "episodes")
        if classes:
            yield f"shots_{suffix}.png", robustness_figure(
                series((p.run, _bin_of_shots(p.shots), p.precision) for p in classes), "shots (bin start)",
                "class precision", f"precision vs shots ({label})", "classes")


def write_plots(report: Report, directory: Path) -> list[Path]:
    """The figures of ``md_figures`` as PNGs in ``directory`` (created); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_figure(figure, directory / name) for name, figure in md_figures(report)]
