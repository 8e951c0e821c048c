"""Tables from stored reports: per source, mean query accuracy, its 95% confidence
interval over episodes (1.96 x sample standard deviation / sqrt(n), as Meta-Dataset
reports it) and the episode count."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sampler_server.errors import InvalidArgument
from sampler_server.metrics.store import MetricsStore

FORMATS = ("table", "markdown", "json")


@dataclass(frozen=True)
class SourceResult:
    source: str
    split: str
    mean: float
    ci95: float
    episodes: int


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, 1.96 * math.sqrt(variance) / math.sqrt(n)


def run_results(store: MetricsStore, run_id: str, metric: str = "accuracy") -> list[SourceResult]:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for report in store.reports(run_id):
        if metric in report.metrics:
            groups[(report.source, report.split)].append(float(report.metrics[metric]))
    results = []
    for (source, split), values in sorted(groups.items()):
        mean, ci = mean_ci95(values)
        results.append(SourceResult(source, split, mean, ci, len(values)))
    return results


def render_report(store: MetricsStore, run_ids: Sequence[str], fmt: str = "table") -> str:
    if fmt not in FORMATS:
        raise InvalidArgument(f"format: got {fmt!r}, expected one of {', '.join(FORMATS)}")
    if not run_ids:
        raise InvalidArgument("run_ids: empty; expected at least one run id")
    per_run = {run: run_results(store, run) for run in run_ids}
    if fmt == "json":
        return json.dumps(
            {run: [r.__dict__ for r in results] for run, results in per_run.items()}, indent=1, allow_nan=True
        )
    rows = []
    for run, results in per_run.items():
        for r in results:
            rows.append((run, r.source, r.split, f"{100 * r.mean:.2f} ± {100 * r.ci95:.2f}", str(r.episodes)))
    header = ("run", "source", "split", "accuracy (%)", "episodes")
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)
