"""Per-run VTAB bar plots: each task's top-1 coloured by group, with the group and overall means.

One PNG per run (``vtab_<run>.png``, 1000 x 400 pixels), the figure VTAB draws per
method so a reader sees at a glance which group a score comes from. Tasks a run lacks
keep their place on the axis with no bar, so two runs' plots line up.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sampler_server.metrics.plotting import file_safe_name  # first: it selects matplotlib's file backend
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

from sampler_server.core.vtab.presets import vtab_groups  # noqa: E402
from sampler_server.core.vtab.tasks import Group  # noqa: E402
from sampler_server.metrics.vtab.report import VtabScore  # noqa: E402

GROUP_COLOURS = {Group.NATURAL: "tab:green", Group.SPECIALIZED: "tab:purple", Group.STRUCTURED: "tab:orange"}
FIGURE_SIZE = (10, 4)  # inches, at DPI below: 1000 x 400 pixels
DPI = 100


def plot_vtab_score(score: VtabScore, path: Path) -> Path:
    """Write ``score``'s bar plot to ``path`` (PNG) and return it."""
    figure, axes = plt.subplots(figsize=FIGURE_SIZE, dpi=DPI)
    position = 0
    labels: list[str] = []
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
    if score.overall.mean is not None:
        flag = "" if score.overall.complete else f" * ({len(score.overall.have)}/{len(labels)} tasks)"
        axes.axhline(100 * score.overall.mean, color="black", linewidth=0.8,
                     label=f"{score.benchmark.value} mean {100 * score.overall.mean:.1f}{flag}")
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    axes.set_xlim(-0.6, len(labels) - 0.4)
    axes.set_ylim(0, 100)
    axes.set_ylabel("top-1 accuracy (%)")
    axes.set_title(f"{score.run} on {score.benchmark.value}")
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def write_vtab_plots(scores: Mapping[str, VtabScore], directory: Path) -> list[Path]:
    """``vtab_<run>.png`` for each run in ``scores``, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return [plot_vtab_score(score, directory / f"vtab_{file_safe_name(run)}.png") for run, score in scores.items()]
