"""The "held" table: what the server holds of each run, machine-readable, so a client that
was stopped part way (``python -m clients.torch|tf evaluate``) resumes where it stopped.

For every run asked: its configuration (as stored with its first report) and the keys of
its results, no values: Meta-Dataset episodes as (source, split, seed) with their indices
as sorted half-open ranges ``[[start, stop], ...]``, VTAB task results as (task, split,
regime, regime seed, role), ImageNet-CoG results as (level, shots, seed). A run with no
reports is ``null`` rather than an error: "nothing held" is the answer a resuming client
needs. JSON is its format (``table`` and ``markdown`` give one count line per run).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sampler_server.errors import NotFound
from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.tables import check_format, check_runs, render_grid


def index_ranges(indices: Sequence[int]) -> list[list[int]]:
    """Sorted distinct ``indices`` as half-open ranges: [0, 1, 2, 5] -> [[0, 3], [5, 6]]."""
    ranges: list[list[int]] = []
    for index in sorted(set(indices)):
        if ranges and ranges[-1][1] == index:
            ranges[-1][1] = index + 1
        else:
            ranges.append([index, index + 1])
    return ranges


def held_run(store: MetricsStore, run_id: str) -> dict[str, Any] | None:
    """One run's configuration and result keys; None when the server holds nothing of it."""
    try:
        config = store.run_config(run_id)
    except NotFound:
        return None
    episodes: dict[tuple[str, str, int], list[int]] = {}
    for report in store.reports(run_id):
        episodes.setdefault((report.source, report.split, report.seed), []).append(report.index)
    md = [{"source": source, "split": split, "seed": seed, "indices": index_ranges(indices)}
          for (source, split, seed), indices in sorted(episodes.items())]
    vtab = [{"task": r.task, "split": r.split, "regime": r.regime, "regime_seed": r.regime_seed, "role": r.role}
            for r in store.task_results(run_id, regime=None)]
    cog = [{"level": r.level, "shots": r.shots, "seed": r.seed} for r in store.cog_results(run_id)]
    return {"config": config, "md": md, "vtab": vtab, "cog": cog}


def build_held_report(store: MetricsStore, run_ids: Sequence[str]) -> dict[str, Any]:
    check_runs(run_ids)
    return {"runs": {run_id: held_run(store, run_id) for run_id in run_ids}}


def render_held_report(report: dict[str, Any], fmt: str) -> str:
    if check_format(fmt) == "json":
        return json.dumps(report, sort_keys=True)
    rows = []
    for run_id, held in report["runs"].items():
        if held is None:
            rows.append([run_id, "-", "-", "-"])
        else:
            episodes = sum(stop - start for part in held["md"] for start, stop in part["indices"])
            rows.append([run_id, str(episodes), str(len(held["vtab"])), str(len(held["cog"]))])
    return render_grid(["run", "MD episodes", "VTAB results", "CoG results"], rows, [], fmt)
