"""The metrics RPCs: ``ReportMetrics`` stores checked reports, ``GetReport`` builds a table.

Both read the report registry (``metrics.registry``): each protocol's parser checks its
reports, each table builds and renders itself, and this module only adds what belongs
to the server: the request limit, the caller's ownership of the runs it writes (one
transaction per request, whatever protocols it mixes) and of the runs it reads (another
team's run reads exactly as an unknown one).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping
from typing import Any

from sampler_server.catalog.replay import EpisodeReplayer
from sampler_server.catalog.tasks import TaskCatalog
from sampler_server.errors import InvalidArgument, NotFound, ResourceExhausted
from sampler_server.metrics import registry
from sampler_server.metrics.baselines.report import blind_risk
from sampler_server.metrics.store import MetricsStore
from sampler_server.quoting import quoted
from sampler_server.service import auth
from sampler_server.service.telemetry import Telemetry
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


class ServedContext:
    """What report parsers and tables need from the server (``registry.ReportContext``): its
    episodes replayed from the served stores, and a task's blind guess over the served labels
    (listings cached by the task catalog)."""

    def __init__(self, replayer: EpisodeReplayer, tasks: TaskCatalog) -> None:
        self.replayer = replayer
        self.tasks = tasks

    def episode(self, request: pb.EpisodeRequest | Mapping[str, Any], seed: int, index: int) -> Any:
        return self.replayer.episode(request, seed, index)

    def blind_risk(self, task: str) -> float:
        return blind_risk(task, self.tasks.handle(task).listing)


class MetricsHandlers:
    """``ReportMetrics`` and ``GetReport`` over one metrics store."""

    def __init__(self, metrics: MetricsStore, max_reports_per_request: int, context: registry.ReportContext,
                 telemetry: Telemetry | None = None) -> None:
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.metrics = metrics
        self.max_reports_per_request = max_reports_per_request
        self.context = context

    def report_metrics(self, request: pb.ReportMetricsRequest) -> pb.ReportMetricsResponse:
        try:
            written = self._write(request)
        except Exception:
            self._count(request, [None] * len(request.reports))
            raise
        self._count(request, written)
        return pb.ReportMetricsResponse(stored=sum(written), duplicates=len(written) - sum(written))

    def _count(self, request: pb.ReportMetricsRequest, written: list[bool | None]) -> None:
        """Each report's outcome (stored, duplicate, or refused with its request) by protocol:
        ``written`` in the order the reports were parsed (``registry.parse_reports``: protocol
        by protocol, in registration order)."""
        if not self.telemetry.enabled:
            return
        order = {protocol.id: rank for rank, protocol in enumerate(registry.protocols())}
        parsed = sorted((r.protocol for r in request.reports), key=lambda p: order.get(p, len(order)))
        counts = collections.Counter(
            (protocol if protocol in order else "other", "refused" if outcome is None else "stored" if outcome
             else "duplicate") for protocol, outcome in zip(parsed, written))
        for (protocol, outcome), count in counts.items():
            self.telemetry.reports(protocol, outcome, count)

    def _write(self, request: pb.ReportMetricsRequest) -> list[bool]:
        """The request's reports checked and written in one transaction: per parsed report,
        True when stored, False for a duplicate."""
        if len(request.reports) > self.max_reports_per_request:
            raise ResourceExhausted(
                f"reports: got {len(request.reports)}, the server accepts at most "
                f"{self.max_reports_per_request} per request"
            )
        if request.run_config_json:
            try:
                json.loads(request.run_config_json)
            except json.JSONDecodeError as error:
                raise InvalidArgument(f"run_config_json: not valid JSON ({error})") from None
        results = registry.parse_reports(request.reports, self.context)
        caller = auth.current_caller()  # None: no tokens, no owners; read tokens never get here
        owner, admin = caller and caller.name, caller is not None and caller.role is auth.Role.ADMIN
        # one transaction for the whole request, whatever protocols it mixes (metrics.store)
        return self.metrics.write_batch(results, request.run_config_json, owner=owner, admin=admin)

    def get_report(self, request: pb.GetReportRequest) -> pb.GetReportResponse:
        query = registry.query_from_wire(request)
        self._check_readable(query)
        table = registry.table(request.table)
        registry.check_query(table, query, registry.Entry.WIRE)
        report = table.build(self.metrics, query, self.context)
        return pb.GetReportResponse(text=registry.render(table, report, query, self.metrics))

    def _check_readable(self, query: registry.ReportQuery) -> None:
        """NOT_FOUND for a run the caller may not read, worded as for a run that does not exist."""
        caller = auth.current_caller()
        if caller is None or caller.reads_every_run:
            return
        for run_id in registry.run_ids_named(query):
            try:
                owner = self.metrics.run_owner(run_id)
            except NotFound:
                owner = None
            if owner != caller.name:  # another team's run reads exactly as an unknown one
                raise NotFound(f"run {quoted(run_id)} has no reports")
