"""The control baselines' "calibrated" table as the servicer calls it until it delegates its
metrics RPCs to ``service.metrics``; the rules are the report registry's
(``metrics.baselines.protocol``). This module goes when the servicer wires ``MetricsHandlers``."""

from __future__ import annotations

from typing import Any

from sampler_server.metrics import registry
from sampler_server.metrics.baselines.report import blind_risk
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

CALIBRATED_TABLE = "calibrated"


class _TaskLabels:
    def __init__(self, tasks: Any) -> None:
        self.tasks = tasks

    def blind_risk(self, task: str) -> float:
        return blind_risk(task, self.tasks.handle(task).listing)


def render_calibrated_table(metrics: Any, request: pb.GetReportRequest, tasks: Any) -> str:
    """The calibrated table of ``request`` over the served tasks (``tasks.handle(name).listing``)."""
    table, query = registry.table(CALIBRATED_TABLE), registry.query_from_wire(request)
    registry.check_query(table, query, registry.Entry.WIRE)
    return table.render(table.build(metrics, query, _TaskLabels(tasks)), query.format)  # type: ignore[arg-type]
