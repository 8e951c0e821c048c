"""The VTAB-1k table and the VTAB+MD aggregate, from stored task results and MD episode reports.

VTAB-1k (Zhai et al., Sec. 3): a run's score on a task is its top-1 test accuracy;
a group's score is the unweighted mean over its tasks, and the overall score the
unweighted mean over all tasks (not over the three group means).

VTAB+MD (Dumoulin et al., Sec. 3): the MD-v2 average is the mean over MD-v2 test
sources of each source's mean query accuracy over its test episodes of MD-v2
(``md.report.episode_preset``: episodes of another preset are counted apart and never
averaged in); beside it the VTAB-v2 average and its natural / specialized / structured
averages, then the per-source and per-task detail. Averages, not ranks, as that paper
reports them. A column is a run; an ``evaluate`` run's MD-v2 learners
(``RUN/md-v2/<learner>``) asked for with its ``RUN/vtab`` each take that run's VTAB-v2
side, one column per learner headed by its learner (``tables.column_labels``).

Missing results. Both papers define a score over the benchmark's full task (or
source) list; a mean over fewer is not that score and not comparable with one. We
still print it, over the tasks the run has, so a run in progress can be followed,
but flag it: ``*`` and ``(have/of)`` in text, ``complete: false`` with the missing
names in JSON. A group with no task at all has no mean (``-`` / ``null``). Stored
tasks outside the benchmark (DTD under VTAB-v2) are listed as ignored, never counted.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sampler_server.core.vtab.presets import VTAB_MD_PLAN, VtabBenchmark, VtabMdPlan, vtab_groups
from sampler_server.core.vtab.splits import check_split
from sampler_server.core.vtab.tasks import Group
from sampler_server.metrics.md.report import episode_preset
from sampler_server.metrics.ranks import Estimate, estimate
from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.tables import (
    check_format, check_runs, column_labels, estimate_cell, learner_of, render_grid,
)
from sampler_server.metrics.vtab.results import TaskResult
from sampler_common import protocols


@dataclass(frozen=True)
class PartialMean:
    """An unweighted mean over the names a run has out of those a benchmark lists."""

    mean: float | None  # None when the run has none of them
    have: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing

    def cell(self) -> str:
        if self.mean is None:
            return "-"
        text = f"{100 * self.mean:.2f}"
        return text if self.complete else f"{text} * ({len(self.have)}/{len(self.have) + len(self.missing)})"

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "complete": self.complete, "count": len(self.have),
                "of": len(self.have) + len(self.missing), "missing": list(self.missing)}


def partial_mean(values: Mapping[str, float], names: Sequence[str]) -> PartialMean:
    """The mean of ``values`` over ``names`` it has (see the module docstring on missing ones)."""
    have = tuple(n for n in names if n in values)
    missing = tuple(n for n in names if n not in values)
    mean = math.fsum(values[n] for n in have) / len(have) if have else None
    return PartialMean(mean, have, missing)


@dataclass(frozen=True)
class VtabScore:
    """One run on one VTAB benchmark: per-task top-1, group means and the overall mean."""

    run: str
    benchmark: VtabBenchmark
    accuracy: dict[str, float]  # benchmark task -> top-1, the tasks the run has
    examples: dict[str, int]
    groups: dict[Group, PartialMean]
    overall: PartialMean
    ignored: tuple[str, ...]  # stored tasks outside the benchmark


def vtab_score(run: str, results: Sequence[TaskResult], benchmark: VtabBenchmark | str) -> VtabScore:
    """Score ``results`` (one run, one split) on ``benchmark``."""
    chosen = VtabBenchmark.parse(benchmark)
    groups = vtab_groups(chosen)
    listed = [name for names in groups.values() for name in names]
    by_task = {r.task: r for r in results}
    accuracy = {name: float(by_task[name].accuracy) for name in listed if name in by_task}
    return VtabScore(
        run=run,
        benchmark=chosen,
        accuracy=accuracy,
        examples={name: by_task[name].examples for name in accuracy},
        groups={group: partial_mean(accuracy, names) for group, names in groups.items()},
        overall=partial_mean(accuracy, listed),
        ignored=tuple(sorted(set(by_task) - set(listed))),
    )


@dataclass
class VtabReport:
    runs: list[str]
    benchmark: VtabBenchmark
    split: str
    configs: dict[str, dict[str, Any]]
    scores: dict[str, VtabScore]


def build_vtab_report(
    store: MetricsStore, run_ids: Sequence[str], benchmark: VtabBenchmark | str = VtabBenchmark.VTAB_V1,
    split: str = "test",
) -> VtabReport:
    """The VTAB table of ``run_ids`` on ``benchmark`` from their ``split`` results.

    Raises:
        InvalidArgument: no runs, a run given twice, an unknown benchmark or split.
        NotFound: a run the store does not have.
    """
    check_runs(run_ids)
    chosen = VtabBenchmark.parse(benchmark)
    check_split(split)
    report = VtabReport(runs=list(run_ids), benchmark=chosen, split=split, configs={}, scores={})
    for run in run_ids:
        report.configs[run] = store.run_config(run)  # NotFound names an unknown run
        report.scores[run] = vtab_score(run, store.task_results(run, split=split), chosen)
    return report


def _task_cell(score: VtabScore, task: str) -> str:
    if task not in score.accuracy:
        return "-"
    return f"{100 * score.accuracy[task]:.2f} ({score.examples[task]})"


def _vtab_rows(scores: Sequence[VtabScore], benchmark: VtabBenchmark) -> list[list[str]]:
    rows = []
    for group, names in vtab_groups(benchmark).items():
        rows += [[group.value, name] + [_task_cell(s, name) for s in scores] for name in names]
        rows.append([group.value, "mean"] + [s.groups[group].cell() for s in scores])
    rows.append([benchmark.value, "mean"] + [s.overall.cell() for s in scores])
    return rows


def _missing_notes(scores: Sequence[VtabScore], what: str) -> list[str]:
    notes = []
    for score in scores:
        if score.overall.missing:
            notes.append(f"  {score.run} lacks {what}: {', '.join(score.overall.missing)}")
        if score.ignored:
            notes.append(f"  {score.run}: {', '.join(score.ignored)} not in {score.benchmark.value}, not counted")
    return notes


_MEAN_NOTE = ("means: unweighted over tasks (overall: over all tasks, not over groups); * (have/of): the run lacks "
              "some of the benchmark's tasks, so the mean is over those it has and not comparable with a complete one")


def render_vtab_report(report: VtabReport, fmt: str = "table") -> str:
    """The VTAB table as ``fmt`` (one of ``tables.FORMATS``)."""
    check_format(fmt)
    if fmt == "json":
        return json.dumps(vtab_report_json(report), indent=1)
    scores = [report.scores[run] for run in report.runs]
    notes = [f"top-1: {report.split} accuracy (%) (examples evaluated); benchmark {report.benchmark.value}",
             _MEAN_NOTE] + _missing_notes(scores, "tasks")
    return render_grid(["group", "task"] + report.runs, _vtab_rows(scores, report.benchmark), notes, fmt)


def _score_json(score: VtabScore) -> dict[str, Any]:
    return {
        "tasks": {task: {"accuracy": acc, "examples": score.examples[task]} for task, acc in score.accuracy.items()},
        "groups": {group.value: mean.to_json() for group, mean in score.groups.items()},
        "overall": score.overall.to_json(),
        "ignored": list(score.ignored),
    }


def vtab_report_json(report: VtabReport) -> dict[str, Any]:
    return {
        "benchmark": report.benchmark.value,
        "split": report.split,
        "runs": report.runs,
        "configs": report.configs,
        "scores": {run: _score_json(report.scores[run]) for run in report.runs},
    }


# ---- VTAB+MD ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MdScore:
    """One run on the MD part of VTAB+MD: per-source estimates and their unweighted mean."""

    sources: dict[str, Estimate]  # plan test source -> query accuracy over its test episodes
    overall: PartialMean
    ignored: tuple[str, ...]  # test-split sources reported outside the plan
    other_presets: dict[str, int] = field(default_factory=dict)  # preset -> test episodes of it, not counted


@dataclass
class VtabMdReport:
    """``runs`` are the columns: each its MD run's id, its VTAB side ``vtab_runs[run]``'s."""

    runs: list[str]
    plan: VtabMdPlan
    configs: dict[str, dict[str, Any]]
    md: dict[str, MdScore] = field(default_factory=dict)
    vtab: dict[str, VtabScore] = field(default_factory=dict)
    vtab_runs: dict[str, str] = field(default_factory=dict)  # column -> the run whose VTAB results it shows
    learners: dict[str, str | None] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # column -> its heading
    labels_note: str = ""


def md_score(accuracies: Mapping[str, Sequence[float]], sources: Sequence[str],
             other_presets: Mapping[str, int] | None = None) -> MdScore:
    """Per-source mean accuracy over episodes, then the mean over ``sources`` the run has."""
    estimates = {source: estimate(accuracies[source]) for source in sources if accuracies.get(source)}
    return MdScore(
        sources=estimates,
        overall=partial_mean({s: e.mean for s, e in estimates.items()}, sources),
        ignored=tuple(sorted(s for s in accuracies if s not in sources)),
        other_presets=dict(sorted((other_presets or {}).items())),
    )


def vtab_partner(run: str, run_ids: Sequence[str], md_benchmark: str) -> str | None:
    """The ``RUN/vtab`` among ``run_ids`` of an ``evaluate`` MD run ``RUN/<md_benchmark>/<learner>``."""
    parts = run.rsplit("/", 2)
    if len(parts) < 3 or parts[1] != md_benchmark:
        return None
    partner = f"{parts[0]}/vtab"
    return partner if partner in run_ids else None


def build_vtab_md_report(store: MetricsStore, run_ids: Sequence[str], plan: VtabMdPlan = VTAB_MD_PLAN) -> VtabMdReport:
    """The VTAB+MD aggregate of ``run_ids``: MD episode reports of the plan's benchmark and
    test split, and VTAB task results of its query split. A run ``RUN/md-v2/<learner>``
    without VTAB results of its own takes those of ``RUN/vtab`` when that run is asked for
    too; ``RUN/vtab`` then has no column of its own unless it has MD-v2 episodes.

    Raises:
        InvalidArgument: no runs or a run given twice.
        NotFound: a run the store does not have.
    """
    check_runs(run_ids)
    configs, md, vtab = {}, {}, {}
    for run in run_ids:
        configs[run] = store.run_config(run)  # NotFound names an unknown run
        accuracies: dict[str, list[float]] = defaultdict(list)
        others: dict[str, int] = defaultdict(int)
        for stored in store.reports(run):
            if stored.protocol != protocols.MD or stored.split != plan.md_test_split.value \
                    or "accuracy" not in stored.metrics:
                continue
            if episode_preset(stored) != plan.md_benchmark.value:
                others[episode_preset(stored)] += 1
                continue
            accuracies[stored.source].append(float(stored.metrics["accuracy"]))
        md[run] = md_score(accuracies, plan.md_test_sources, others)
        vtab[run] = vtab_score(run, store.task_results(run, split=plan.vtab_query_split), plan.vtab_benchmark)
    partners = {run: vtab_partner(run, run_ids, plan.md_benchmark.value) for run in run_ids if not vtab[run].accuracy}
    partners = {run: partner for run, partner in partners.items() if partner is not None}
    taken = {partner for partner in partners.values() if not md[partner].sources}
    columns = [run for run in run_ids if run not in taken]
    report = VtabMdReport(runs=columns, plan=plan, configs={run: configs[run] for run in columns})
    for run in columns:
        report.vtab_runs[run] = partners.get(run, run)
        report.md[run], report.vtab[run] = md[run], vtab[report.vtab_runs[run]]
    report.learners = {run: learner_of(configs[run]) for run in columns}
    report.labels, report.labels_note = column_labels(columns, report.learners)
    return report


def vtab_md_runs(report: VtabMdReport) -> list[str]:
    """The runs behind the columns with an MD side (their MD run, then its VTAB run), in column order."""
    runs: list[str] = []
    for column in report.runs:
        if report.md[column].sources:
            runs += [run for run in (column, report.vtab_runs[column]) if run not in runs]
    return runs


def render_vtab_md_report(report: VtabMdReport, fmt: str = "table") -> str:
    """The VTAB+MD aggregate, then per-source and per-task detail, as ``fmt``."""
    check_format(fmt)
    if fmt == "json":
        return json.dumps(vtab_md_report_json(report), indent=1)
    plan, runs = report.plan, report.runs
    md_name, vtab_name = plan.md_benchmark.value, plan.vtab_benchmark.value
    paired = {run: vtab_run for run, vtab_run in report.vtab_runs.items() if vtab_run != run}
    scores = [report.vtab[run] for run in runs]
    rows = [["aggregate", md_name] + [report.md[run].overall.cell() for run in runs]]
    rows.append(["aggregate", vtab_name] + [s.overall.cell() for s in scores])
    rows += [["aggregate", f"{vtab_name} {group.value}"] + [s.groups[group].cell() for s in scores] for group in Group]
    for source in plan.md_test_sources:
        rows.append([md_name, source] + [
            estimate_cell(report.md[run].sources[source]) if source in report.md[run].sources else "-" for run in runs
        ])
    for group, names in vtab_groups(plan.vtab_benchmark).items():
        rows += [[f"{vtab_name} {group.value}", name] + [_task_cell(s, name) for s in scores] for name in names]
    notes = [
        f"{md_name}: mean over its {len(plan.md_test_sources)} test sources of the mean query accuracy (%) over "
        f"{plan.md_test_split.value} episodes; a source cell is mean ± 95% CI (episodes)",
        f"{vtab_name}: {plan.vtab_query_split} top-1 (%) (examples) of each task as one full-way episode "
        f"(support {plan.vtab_support_split}); group and overall means unweighted over tasks",
        "* (have/of): the run lacks some sources or tasks; that mean is over those it has, not comparable with a "
        "complete one",
    ]
    for run in runs:
        md = report.md[run]
        if md.overall.missing:
            notes.append(f"  {run} lacks {md_name} sources: {', '.join(md.overall.missing)}")
        if md.ignored:
            notes.append(f"  {run}: {', '.join(md.ignored)}: outside the {md_name} test sources, not counted")
        for preset, count in md.other_presets.items():
            notes.append(f"  {run}: {count} {preset} test episodes, not counted ({md_name} only)")
    notes += _missing_notes(list({score.run: score for score in scores}.values()), f"{vtab_name} tasks")
    if paired:
        notes.append(f"{vtab_name} side of " + ", ".join(f"{report.labels.get(run, run)}: {vtab_run}"
                                                      for run, vtab_run in paired.items()))
    if report.labels_note:
        notes.append(report.labels_note)
    header = ["part", "source / task"] + [report.labels.get(run, run) for run in runs]
    return render_grid(header, rows, notes, fmt)


def vtab_md_report_json(report: VtabMdReport) -> dict[str, Any]:
    plan = report.plan
    return {
        "plan": {
            "md_benchmark": plan.md_benchmark.value, "md_test_split": plan.md_test_split.value,
            "md_test_sources": list(plan.md_test_sources), "md_validation_split": plan.md_validation_split.value,
            "md_validation_sources": list(plan.md_validation_sources), "vtab_benchmark": plan.vtab_benchmark.value,
            "vtab_support_split": plan.vtab_support_split, "vtab_query_split": plan.vtab_query_split,
            "vtab_tasks": list(plan.vtab_tasks),
        },
        "runs": report.runs,
        "configs": report.configs,
        "learners": report.learners,
        "labels": report.labels,
        "scores": {
            run: {
                "vtab_run": report.vtab_runs.get(run, run),
                "md": {
                    "sources": {s: {"mean_accuracy": e.mean, "ci95": e.ci95, "episodes": e.episodes}
                                for s, e in report.md[run].sources.items()},
                    "overall": report.md[run].overall.to_json(),
                    "ignored": list(report.md[run].ignored),
                    "other_presets": report.md[run].other_presets,
                },
                "vtab": _score_json(report.vtab[run]),
            }
            for run in report.runs
        },
    }
