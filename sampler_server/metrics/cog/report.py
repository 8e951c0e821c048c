"""The ImageNet-CoG table: top-1 per level and N, over seeds, and relative to a baseline run.

What the CoG paper reports (Sec. 3.4.3 and supplementary C, Tabs. 5-10): for each
level (IN-1K, then L1..L5) and each number N of training images per concept (all,
and the few-shot 1, 2, ..., 128), the test top-1 of the linear classifier, as the
mean over the seeds (5 in the protocol) with the standard deviation beside it. The
standard deviation is the population one (divisor n), as the reference
implementation's ``print_results.py`` computes it (numpy's default); over a single
seed there is none, and none is shown (not a misleading 0).

Relative accuracy. The paper "mostly plots accuracy relative to a baseline model"
(Sec. 3.4.3; Figs. 3(b)-(e), 4(d)-(f), 11: relative to ResNet50) so that differences
are easier to grasp and each level's own range does not hide the trend. It reads
those plots as differences in points (Sec. 4.2.2: "a consistent 3-4% accuracy gain
over ResNet50" read off Fig. 4(f); Sec. 4.2.1: gains "over the baseline" that shrink
from IN-1K to L5), so relative accuracy here is the run's mean top-1 minus the
baseline's mean top-1 in the same cell (same level, same N), in percentage points:
positive where the run beats the baseline. Where the baseline lacks that cell there is
no relative value (``Δ -``); where the two means are over different seed sets the
value is flagged (``*``), since each seed draws its own few-shot subset and
validation split.

Layout. One block of rows per run (the baseline's block first when it is not among
the runs), one row per level any shown run has, one column per N any shown run has
("all" always first, since it is the benchmark's headline number). A cell the run
lacks is ``-``, never filled in. Text and markdown give percent with two decimals and
the seed count; JSON gives fractions (as the other tables' JSON), every seed's
accuracy, and the relative value as a fraction too.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sampler_server.metrics.cog.results import CogResult, cog_levels, shots_name
from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.tables import check_format, check_runs, render_grid

SHOTS_ALL = 0


@dataclass(frozen=True)
class CogCell:
    """One (level, N) of one run: its accuracy under each seed it reported."""

    level: str
    shots: int
    seeds: tuple[int, ...]  # ascending
    accuracies: tuple[float, ...]  # top-1 in [0, 1], in the order of ``seeds``

    @property
    def mean(self) -> float:
        return math.fsum(self.accuracies) / len(self.accuracies)

    @property
    def std(self) -> float | None:
        """Population standard deviation over seeds (divisor n); None for one seed."""
        if len(self.accuracies) < 2:
            return None
        mean = self.mean
        return math.sqrt(math.fsum((a - mean) ** 2 for a in self.accuracies) / len(self.accuracies))

    def cell(self) -> str:
        std = self.std
        spread = "" if std is None else f" ± {100 * std:.2f}"
        return f"{100 * self.mean:.2f}{spread} ({len(self.seeds)})"


@dataclass(frozen=True)
class Relative:
    """A cell against the baseline's same cell: ``delta`` = run mean - baseline mean."""

    delta: float
    same_seeds: bool
    baseline_seeds: tuple[int, ...]

    def cell(self) -> str:
        return f"Δ {100 * self.delta:+.2f}{'' if self.same_seeds else '*'}"


def cog_cells(results: Sequence[CogResult]) -> dict[tuple[str, int], CogCell]:
    """A run's results grouped by (level, shots), seeds ascending."""
    grouped: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for result in results:
        grouped[(result.level, result.shots)][result.seed] = float(result.accuracy)
    return {
        key: CogCell(key[0], key[1], tuple(sorted(by_seed)), tuple(by_seed[s] for s in sorted(by_seed)))
        for key, by_seed in grouped.items()
    }


def relative(cell: CogCell, baseline: CogCell | None) -> Relative | None:
    """``cell`` against ``baseline`` (None when the baseline lacks that cell)."""
    if baseline is None:
        return None
    return Relative(cell.mean - baseline.mean, cell.seeds == baseline.seeds, baseline.seeds)


@dataclass
class CogReport:
    runs: list[str]  # as asked, in order
    baseline: str | None
    configs: dict[str, dict[str, Any]]  # every shown run's, the baseline's included
    cells: dict[str, dict[tuple[str, int], CogCell]]  # likewise
    levels: tuple[str, ...]  # rows: levels any shown run has, IN-1K then L1..L5
    shots: tuple[int, ...]  # columns: 0 (all), then each few-shot N any shown run has, ascending

    @property
    def blocks(self) -> list[str]:
        """The runs in table order: the baseline first when it was not asked for as a run."""
        if self.baseline is not None and self.baseline not in self.runs:
            return [self.baseline, *self.runs]
        return list(self.runs)

    def relative(self, run: str, key: tuple[str, int]) -> Relative | None:
        """The run's cell against the baseline's; None without a baseline, for the baseline
        itself, or where either lacks the cell."""
        if self.baseline is None or run == self.baseline or key not in self.cells[run]:
            return None
        return relative(self.cells[run][key], self.cells[self.baseline].get(key))


def build_cog_report(store: MetricsStore, run_ids: Sequence[str], baseline: str | None = None) -> CogReport:
    """The CoG table of ``run_ids`` (and of ``baseline``, the run the others are compared with).

    Raises:
        InvalidArgument: no runs, or a run given twice.
        NotFound: a run (or the baseline) the store does not have.
    """
    check_runs(run_ids)
    report = CogReport(runs=list(run_ids), baseline=baseline or None, configs={}, cells={}, levels=(), shots=())
    for run in report.blocks:
        report.configs[run] = store.run_config(run)  # NotFound names an unknown run
        report.cells[run] = cog_cells(store.cog_results(run))
    present = {key for cells in report.cells.values() for key in cells}
    report.levels = tuple(level for level in cog_levels() if any(key[0] == level for key in present))
    report.shots = (SHOTS_ALL, *sorted({key[1] for key in present} - {SHOTS_ALL}))
    return report


def _cell_text(report: CogReport, run: str, key: tuple[str, int]) -> str:
    cell = report.cells[run].get(key)
    if cell is None:
        return "-"
    text = cell.cell()
    if report.baseline is None or run == report.baseline:
        return text
    versus = report.relative(run, key)
    return f"{text} {versus.cell() if versus is not None else 'Δ -'}"


def render_cog_report(report: CogReport, fmt: str = "table") -> str:
    """The CoG table as ``fmt`` (one of ``tables.FORMATS``)."""
    check_format(fmt)
    if fmt == "json":
        return json.dumps(cog_report_json(report), indent=1)
    rows = []
    for run in report.blocks:
        label = f"{run} (baseline)" if run == report.baseline else run
        rows += [[label, level] + [_cell_text(report, run, (level, shots)) for shots in report.shots]
                 for level in report.levels]
    notes = [
        "top-1: test accuracy (%) as mean ± standard deviation over seeds (population, divisor n) (seeds); "
        "N: training images per concept, all = the whole train split; -: no result",
    ]
    if report.baseline is not None:
        notes.append(
            f"Δ: the cell's mean minus baseline {report.baseline}'s mean in the same level and N, in percentage "
            "points (the CoG paper's relative accuracy); Δ -: the baseline has no result there; *: the two means "
            "are over different seeds")
    notes += [f"  {run} has no CoG results" for run in report.blocks if not report.cells[run]]
    header = ["run", "level"] + [f"N={shots_name(shots)}" for shots in report.shots]
    return render_grid(header, rows, notes, fmt)


def _cell_json(report: CogReport, run: str, cell: CogCell) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": list(cell.seeds), "accuracies": list(cell.accuracies), "mean": cell.mean,
                           "std": cell.std}
    if report.baseline is not None and run != report.baseline:
        versus = report.relative(run, (cell.level, cell.shots))
        out["relative"] = None if versus is None else {
            "delta": versus.delta, "same_seeds": versus.same_seeds, "baseline_seeds": list(versus.baseline_seeds)}
    return out


def cog_report_json(report: CogReport) -> dict[str, Any]:
    """Fractions throughout: ``mean`` and ``std`` (population; null for one seed) of top-1
    over seeds per ``cells[level][N]`` (N "all", "1", ...), and with a baseline each
    cell's ``relative.delta`` (run mean - baseline mean; null where the baseline lacks
    the cell)."""
    return {
        "runs": report.runs,
        "baseline": report.baseline,
        "levels": list(report.levels),
        "shots": [shots_name(shots) for shots in report.shots],
        "configs": report.configs,
        "scores": {
            run: {"cells": {
                level: {shots_name(shots): _cell_json(report, run, report.cells[run][(level, shots)])
                        for shots in report.shots if (level, shots) in report.cells[run]}
                for level in report.levels if any((level, s) in report.cells[run] for s in report.shots)
            }}
            for run in report.blocks
        },
    }
