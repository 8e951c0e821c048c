"""The "held" table's registration (no report protocol of its own: it reads every one's keys)."""

from __future__ import annotations

from typing import Any

from sampler_server.metrics import registry
from sampler_server.metrics.held.report import build_held_report, render_held_report
from sampler_server.metrics.store import MetricsStore


def _build(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> dict[str, Any]:
    return build_held_report(store, list(query.run_ids))


PROTOCOLS: tuple[registry.ReportProtocol, ...] = ()
TABLES = (
    registry.ReportTable(
        name="held",
        help="what the server holds of each run: its configuration and the keys of its MD episodes, VTAB and CoG "
        "results (use --format json; a run with nothing is null), for clients that resume",
        build=_build,
        render=render_held_report,
        compares_runs=False,  # read by resuming clients; a run it lacks is null, not compared
    ),
)
