"""The CoG report entry points the servicer calls until it delegates its metrics RPCs to
``service.metrics``; the rules are the report registry's (``metrics.cog.protocol``).
This module goes when the servicer wires ``MetricsHandlers``."""

from __future__ import annotations

from typing import Any

from sampler_server.metrics import registry
from sampler_server.metrics.cog.protocol import parse_cog_report
from sampler_server.metrics.cog.results import CogResult
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

COG_TABLE = "cog"


def cog_result(report: pb.MetricReport) -> CogResult:
    """The checked result a cog report carries (``metrics.cog.protocol.parse_cog_report``)."""
    return parse_cog_report(report, None)  # type: ignore[arg-type]  # a cog report needs no context


def render_cog_table(metrics: Any, request: pb.GetReportRequest) -> str:
    """The "cog" table of ``request``, as ``service.metrics.MetricsHandlers.get_report`` builds it."""
    table, query = registry.table(COG_TABLE), registry.query_from_wire(request)
    registry.check_query(table, query, registry.Entry.WIRE)
    return table.render(table.build(metrics, query, None), query.format)  # type: ignore[arg-type]
