"""What every report's plots share, so a paper can print any of them as is.

Conventions (each plot module builds its figures with these helpers):
- accuracy in percent on every accuracy axis, the unit in the label ("top-1 accuracy (%)");
- integer ticks on count axes (ways, shots, N): the counts themselves, never 7.5, and one
  tick at the value of an axis with one value;
- every band and error bar named in the legend by what it is ("95% CI over episodes",
  "std over seeds"), from the statistic the module computes;
- a point averaged over fewer than ``FEW`` values drawn hollow, its n written beside it,
  and the legend saying so;
- the legend right of the axes, never over the data; the figure keeps its size in
  pixels (constrained layout shrinks the axes to make room), so a card lays plots out
  by their declared size.

Figures are ``matplotlib.figure.Figure`` objects made without pyplot: a pure function
builds one from a report (testable on its artists), and ``write_figure`` is the only
place that touches a file. No pyplot means no global figure registry and no backend to
select on a machine without a display.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

FEW = 10
"""A point averaged over fewer values than this (episodes, class precisions) is drawn hollow with its n."""

DPI = 100
LEGEND_FONT_SIZE = 7


def file_safe_name(name: str) -> str:
    """``name`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def new_figure(size: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure of ``size`` inches at ``DPI`` with one axes, laid out so an outside legend fits."""
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    return figure, figure.add_subplot()


def percent_label(quantity: str) -> str:
    """The label of an accuracy axis: the quantity and its unit, e.g. "top-1 accuracy (%)"."""
    return f"{quantity} (%)"


def integer_ticks(axes: Axes, values: Sequence[float] = ()) -> None:
    """Whole-number x ticks on a count axis (ways, shots) drawn on a linear scale: one tick
    at the value where ``values`` (the x values drawn) hold one, never 4.8 ... 5.2 around it
    (``MaxNLocator(integer=True)`` alone falls back to fractions when fewer than two whole
    numbers lie in the view)."""
    distinct = sorted(set(values))
    if len(distinct) == 1:
        axes.set_xticks(distinct)
        return
    axes.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def band_handle(label: str) -> Patch:
    """A legend entry naming a shaded band (drawn in grey: each run's band has its line's colour)."""
    return Patch(facecolor="grey", alpha=0.2, label=label)


def error_bar_handle(label: str) -> Line2D:
    """A legend entry naming error bars (a grey vertical bar)."""
    return Line2D([], [], color="grey", marker="|", markersize=10, markeredgewidth=1.5, linestyle="none", label=label)


def few_handle(unit: str) -> Line2D:
    """A legend entry saying what a hollow point means, in ``unit`` (e.g. "episodes")."""
    return Line2D([], [], color="grey", marker="o", markersize=5, markerfacecolor="white", linestyle="none",
                  label=f"n < {FEW} {unit} (n shown)")


def mark_few(axes: Axes, xs: Sequence[float], ys: Sequence[float], counts: Sequence[int], colour: str) -> bool:
    """Hollow markers and an "n=k" note on the points of a line made of fewer than ``FEW``
    values; whether any point was marked (then the legend needs ``few_handle``)."""
    few = [(x, y, n) for x, y, n in zip(xs, ys, counts) if n < FEW]
    if not few:
        return False
    axes.plot([x for x, _, _ in few], [y for _, y, _ in few], linestyle="none", marker="o", markersize=5,
              markerfacecolor="white", markeredgecolor=colour, zorder=3)
    for x, y, n in few:
        axes.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=6,
                      color=colour)
    return True


def legend_outside(axes: Axes, extra: Sequence[Artist] = ()) -> None:
    """The legend right of the axes (its labelled artists, then ``extra`` entries naming
    bands, bars and marks), so it never covers data."""
    handles, labels = axes.get_legend_handles_labels()
    handles += list(extra)
    labels += [handle.get_label() for handle in extra]
    axes.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                fontsize=LEGEND_FONT_SIZE)


def finish_axes(axes: Axes, xlabel: str, ylabel: str, title: str, extra: Sequence[Artist] = ()) -> None:
    """Labels, title, grid and the outside legend of one plot."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    legend_outside(axes, extra)


def write_figure(figure: Figure, path: Path) -> Path:
    """``figure`` as a PNG at ``path`` (its declared size in pixels); the path."""
    figure.savefig(path, format="png")
    return path
