"""The Meta-Dataset table and the robustness data, from stored reports.

Per run and source: mean query accuracy, its 95% confidence interval over episodes
(``intervals.mean_ci95``: 1.96 x population standard deviation / sqrt(n), NumPy's
ddof = 0, as MD's reference computes it; none for a single episode) and the episode
count; with several runs, each run's rank per test source and its average rank over the
test sources every run reports (``ranks``: ties by the paper's 95% test against the best
remaining run; rows of other splits, such as ImageNet's validation episodes, are shown
but never ranked, as MD's Table 1 leaves "ILSVRC (valid)" out). One table holds the
episodes of one preset (``episode_preset``: the benchmark whose class splits the episode
request named): runs of md-v1 and md-v2 are refused together, their ranks would compare
other test classes. Each run's column is headed by its learner (``tables.column_labels``,
from its configuration: ``evaluate``'s ``learner``, a trainer's ``model`` and
``eval_learner``). Given an ``EpisodeReplayer``, each
reported episode's composition is recomputed from its request, seed and index: its
fingerprint is checked against the stored one, and ways / shots / query labels feed
the robustness analyses (accuracy against ways, per-class precision against shots).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sampler_server.core.md.presets import Benchmark
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument
from sampler_server.metrics.ranks import Estimate, average_ranks, estimate, ranks_for_source
from sampler_server.metrics.store import MetricsStore, StoredReport
from sampler_server.metrics.tables import (
    check_format, check_runs, column_labels, estimate_cell, learner_of, render_grid,
)

DEFAULT_PRESET = Benchmark.MD_V1.value
"""The preset the server samples for an episode request that names none."""

RANKED_SPLIT = Split.TEST.value
"""The split whose sources are ranked (MD's average rank is over its test datasets)."""


def episode_preset(stored: StoredReport) -> str:
    """The preset (md-v1, md-v2) whose class splits the reported episode was sampled from:
    its request's, the server's default where the request names none."""
    return str(stored.request.get("preset") or DEFAULT_PRESET)


def presets_of(reports: Iterable[StoredReport]) -> tuple[str, ...]:
    """The presets of ``reports`` (MD episode reports), sorted."""
    return tuple(sorted({episode_preset(stored) for stored in reports}))


def runs_by_preset(store: MetricsStore, run_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Preset -> the runs (in ``run_ids`` order) with MD episode reports of it, presets sorted;
    a run with none is under no preset."""
    return _by_preset({run: presets_of(store.reports(run)) for run in run_ids})


def _by_preset(presets: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    found = sorted({preset for run_presets in presets.values() for preset in run_presets})
    return {preset: tuple(run for run, run_presets in presets.items() if preset in run_presets) for preset in found}


def check_one_preset(by_preset: Mapping[str, Sequence[str]]) -> str | None:
    """The one preset of ``by_preset`` (None for none); ``InvalidArgument`` naming each
    preset's runs where there are several."""
    if len(by_preset) > 1:
        listed = "; ".join(f"{preset}: {', '.join(runs)}" for preset, runs in by_preset.items())
        raise InvalidArgument(f"run: episodes of several presets ({listed}); an MD table ranks the runs of one "
                              f"preset, one of {', '.join(by_preset)}: ask for those runs alone")
    return next(iter(by_preset), None)


@dataclass(frozen=True)
class EpisodePoint:
    run: str
    source: str
    split: str
    ways: int
    accuracy: float


@dataclass(frozen=True)
class ClassPoint:
    run: str
    source: str
    shots: int
    precision: float


@dataclass
class Report:
    runs: list[str]
    configs: dict[str, dict[str, Any]]
    accuracy: dict[str, dict[str, Estimate]]  # source key -> run -> estimate
    loss: dict[str, dict[str, float]]
    source_ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    average_rank: dict[str, float] = field(default_factory=dict)
    ranked_sources: list[str] = field(default_factory=list)
    episodes: list[EpisodePoint] = field(default_factory=list)
    classes: list[ClassPoint] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    checked: bool = False
    chance: dict[str, float] = field(default_factory=dict)  # source key -> mean of 1 / ways
    preset: str | None = None  # the preset of every run's episodes (None: no episodes)
    learners: dict[str, str | None] = field(default_factory=dict)  # run -> learner its configuration names
    labels: dict[str, str] = field(default_factory=dict)  # run -> its column heading
    labels_note: str = ""


OWN_IMAGES = "image_folder"  # the kind of every store packed from a user's own folder: it names no dataset


def row_source(stored: Any) -> str:
    """The source a report's row names: its kind, except for a store of a user's own images,
    named as its request named it (the store as served; every such store is an image_folder)."""
    if stored.source == OWN_IMAGES:
        named = list((stored.request or {}).get("sources") or ())
        if len(named) == 1 and isinstance(named[0], str) and named[0]:
            return named[0]
    return stored.source


def build_report(store: MetricsStore, run_ids: Sequence[str], replayer: Any | None = None) -> Report:
    check_runs(run_ids)
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    losses: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    report = Report(runs=list(run_ids), configs={}, accuracy={}, loss={}, checked=replayer is not None)
    stored_by_run = {}
    for run in run_ids:
        report.configs[run] = store.run_config(run)  # NotFound names an unknown run
        stored_by_run[run] = list(store.reports(run))
    report.preset = check_one_preset(_by_preset({run: presets_of(reports) for run, reports in stored_by_run.items()}))
    for run, reports in stored_by_run.items():
        for stored in reports:
            key = f"{row_source(stored)}/{stored.split}"
            if "accuracy" in stored.metrics:
                values[key][run].append(float(stored.metrics["accuracy"]))
            if "loss" in stored.metrics:
                losses[key][run].append(float(stored.metrics["loss"]))
            if replayer is not None:
                _analyse(report, replayer, stored)
    report.learners = {run: learner_of(report.configs[run]) for run in run_ids}
    report.labels, report.labels_note = column_labels(list(run_ids), report.learners)
    report.accuracy = {key: {run: estimate(v) for run, v in runs.items()} for key, runs in sorted(values.items())}
    chance: dict[str, list[float]] = defaultdict(list)
    for point in report.episodes:
        chance[f"{point.source}/{point.split}"].append(1.0 / point.ways)
    report.chance = {key: sum(v) / len(v) for key, v in sorted(chance.items())}
    report.loss = {key: {run: sum(v) / len(v) for run, v in runs.items()} for key, runs in sorted(losses.items())}
    if len(run_ids) > 1:
        ranked = {key: results for key, results in report.accuracy.items()  # the sources every run reports
                  if key.endswith("/" + RANKED_SPLIT) and len(results) == len(run_ids)}
        report.source_ranks = {key: ranks_for_source(results) for key, results in ranked.items()}
        if ranked:
            report.average_rank, report.ranked_sources = average_ranks(ranked)
    return report


def _analyse(report: Report, replayer: Any, stored: Any) -> None:
    source = row_source(stored)
    try:
        episode = replayer.episode(stored.request, stored.seed, stored.index)
    except Exception as error:  # a store or request that no longer resolves
        report.mismatches.append(f"{stored.run_id} {source} episode {stored.index}: cannot recompute ({error})")
        return
    if episode.fingerprint != stored.fingerprint:
        report.mismatches.append(
            f"{stored.run_id} {source} episode {stored.index}: stored fingerprint {stored.fingerprint[:12]}... "
            f"does not match the episode the store now gives ({episode.fingerprint[:12]}...)"
        )
        return
    if "accuracy" in stored.metrics:
        report.episodes.append(
            EpisodePoint(stored.run_id, source, stored.split, episode.ways, float(stored.metrics["accuracy"]))
        )
    predicted = list(stored.predicted)
    truth = [label for label, ids in enumerate(episode.query) for _ in ids]
    if len(predicted) != len(truth):
        return
    for label in range(episode.ways):
        chosen = [t for p, t in zip(predicted, truth) if p == label]
        if chosen:
            precision = sum(1 for t in chosen if t == label) / len(chosen)
            report.classes.append(ClassPoint(stored.run_id, source, len(episode.support[label]), precision))


def render_report(report: Report, fmt: str = "table") -> str:
    if check_format(fmt) == "json":
        return json.dumps(report_json(report), indent=1)
    with_chance = bool(report.chance)
    header = ["source"] + [report.labels.get(run, run) for run in report.runs] + (["chance"] if with_chance else [])
    rows = []
    for key, results in report.accuracy.items():
        row = [key]
        for run in report.runs:
            if run not in results:
                row.append("-")
                continue
            cell = estimate_cell(results[run])
            if report.source_ranks.get(key):
                cell += f" [rank {report.source_ranks[key][run]:g}]"
            row.append(cell)
        if with_chance:
            row.append(f"{100 * report.chance[key]:.2f}" if key in report.chance else "-")
        rows.append(row)
    if report.average_rank:
        rows.append([f"average rank ({len(report.ranked_sources)} sources)"]
                    + [f"{report.average_rank[run]:.2f}" for run in report.runs] + ([""] if with_chance else []))
    notes = ["accuracy: mean query accuracy (%) ± 95% confidence interval (episodes)"
             + (f"; preset {report.preset}" if report.preset else "")]
    if report.source_ranks:
        notes.append(f"rank: per {RANKED_SPLIT} source, MD's rule: the best remaining run and every run whose "
                     "mean is within 1.96 x sqrt(se1^2 + se2^2) of it share the mean of their places; average "
                     f"rank over the {RANKED_SPLIT} sources every run reports (other splits are not ranked)")
    elif len(report.runs) > 1:
        notes.append(f"rank: none, no {RANKED_SPLIT} source is reported by every run")
    if report.labels_note:
        notes.append(report.labels_note)
    if with_chance:
        notes.append("chance: mean over the evaluated episodes of 1 / ways (%)")
    if report.checked:
        notes.append(f"fingerprints: {len(report.mismatches)} mismatches" if report.mismatches
                     else "fingerprints: every reported episode matches its recomputed composition")
    notes += [f"  {m}" for m in report.mismatches[:10]]
    return render_grid(header, rows, notes, fmt)


def report_json(report: Report) -> dict[str, Any]:
    def estimate_json(e: Estimate) -> dict[str, Any]:
        return {"mean_accuracy": e.mean, "ci95": e.ci95, "episodes": e.episodes}

    return {
        "runs": report.runs,
        "configs": report.configs,
        "preset": report.preset,
        "learners": report.learners,
        "labels": report.labels,
        "sources": {
            key: {run: {**estimate_json(e), "mean_loss": report.loss.get(key, {}).get(run),
                        "rank": report.source_ranks.get(key, {}).get(run)}
                  for run, e in results.items()}
            for key, results in report.accuracy.items()
        },
        "average_rank": report.average_rank,
        "ranked_sources": report.ranked_sources,
        "chance": report.chance,
        "fingerprint_mismatches": report.mismatches,
        "fingerprints_checked": report.checked,
    }
