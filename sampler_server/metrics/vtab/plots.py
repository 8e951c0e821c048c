"""Per-run VTAB bar plots: each task's top-1 coloured by group, with the group and overall means.

One PNG per run (``vtab_<run>.png``, 1000 x 400 pixels), the figure VTAB draws per
method so a reader sees at a glance which group a score comes from. Tasks a run lacks
keep their place on the axis with no bar, so two runs' plots line up. Each score is one
split's top-1 per task, so there is no band or error bar to name; accuracy in percent and
the legend outside the axes, as every plot (``plotting``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sampler_server.core.vtab.presets import vtab_groups
from sampler_server.core.vtab.tasks import Group
from sampler_server.metrics.plotting import file_safe_name, legend_outside, new_figure, percent_label, write_figure
from sampler_server.metrics.vtab.report import VtabScore

GROUP_COLOURS = {Group.NATURAL: "tab:green", Group.SPECIALIZED: "tab:purple", Group.STRUCTURED: "tab:orange"}
FIGURE_SIZE = (10, 4)  # inches, at plotting.DPI: 1000 x 400 pixels
GROUP_MEAN = "dashed: group mean"


def vtab_score_figure(score: VtabScore) -> Figure:
    """``score``'s bars (top-1 in percent per task, coloured by group) with the group and overall means."""
    figure, axes = new_figure(FIGURE_SIZE)
    position = 0
    labels: list[str] = []
    group_means = False
    for group, names in vtab_groups(score.benchmark).items():
        start = position
        legend: str | None = group.value  # on the group's first bar only
        for name in names:
            if name in score.accuracy:
                axes.bar(position, 100 * score.accuracy[name], color=GROUP_COLOURS[group], label=legend)
                legend = None
            labels.append(name)
            position += 1
        mean = score.groups[group]
        if mean.mean is not None:  # the group's mean as a line over its own bars
            axes.hlines(100 * mean.mean, start - 0.4, position - 0.6, colors=GROUP_COLOURS[group], linestyles="dashed")
            group_means = True
    if score.overall.mean is not None:
        flag = "" if score.overall.complete else f" * ({len(score.overall.have)}/{len(labels)} tasks)"
        axes.axhline(100 * score.overall.mean, color="black", linewidth=0.8,
                     label=f"{score.benchmark.value} mean {100 * score.overall.mean:.1f}{flag}")
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    axes.set_xlim(-0.6, len(labels) - 0.4)
    axes.set_ylim(0, 100)
    axes.set_ylabel(percent_label("top-1 accuracy"))
    axes.set_title(f"{score.run} on {score.benchmark.value}")
    axes.grid(axis="y", alpha=0.3)
    extra = [Line2D([], [], color="grey", linestyle="dashed", label=GROUP_MEAN)] if group_means else []
    legend_outside(axes, extra)
    return figure


def write_vtab_plots(scores: Mapping[str, VtabScore], directory: Path) -> list[Path]:
    """``vtab_<run>.png`` for each run in ``scores``, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_figure(vtab_score_figure(score), directory / f"vtab_{file_safe_name(run)}.png")
            for run, score in scores.items()]
