"""Meta-Dataset's registration: the "md-episode" report parser and the "md" table.

A report names its episode by (request, seed, index); the parser recomputes that episode
through the context and refuses a report whose fingerprint or source differs from it,
so a stored report always describes an episode the stores give.
"""

from __future__ import annotations

from pathlib import Path
from google.protobuf import json_format

from sampler_server.catalog.wire_values import split_from_wire
from sampler_server.errors import FailedPrecondition, InvalidArgument, SamplerError
from sampler_server.metrics import registry
from sampler_server.metrics.md.report import Report, build_report, render_report
from sampler_server.metrics.store import MetricsStore, StoredReport
from sampler_server.quoting import quoted
from sampler_common import protocols
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


def parse_episode_report(report: pb.MetricReport, context: registry.ReportContext) -> StoredReport:
    """The stored report of an "md-episode" report, its episode recomputed and compared."""
    split = split_from_wire(report.split, "reports.split")
    if report.request.split != report.split:
        raise InvalidArgument("reports.request.split must equal reports.split")
    episode = context.episode(report.request, report.seed, report.index)
    if episode.fingerprint != report.fingerprint:
        raise InvalidArgument(
            f"reports.fingerprint: {report.fingerprint[:16]}... does not match episode {report.index} of that "
            f"request (expected {episode.fingerprint[:16]}...); was it computed on another store or config?"
        )
    if report.source != episode.source:
        raise InvalidArgument(f"reports.source: got {quoted(report.source)}, the episode is from {episode.source!r}")
    if not report.metrics:
        raise InvalidArgument("reports.metrics: empty; expected at least one metric (e.g. accuracy)")
    request_json = json_format.MessageToDict(report.request, preserving_proto_field_name=True)
    return StoredReport(
        run_id=report.run_id, protocol=report.protocol, source=episode.source, split=split.value,
        index=report.index, seed=report.seed, fingerprint=report.fingerprint, metrics=dict(report.metrics),
        request=request_json, predicted=tuple(report.predicted_labels),
    )


def _build(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> Report:
    return build_report(store, list(query.run_ids), context)


def _plot(report: Report, directory: Path, query: registry.ReportQuery) -> list[Path]:
    from sampler_server.metrics.md.plots import write_plots

    return write_plots(report, directory)


def _failure(report: Report) -> SamplerError | None:
    if not report.mismatches:
        return None
    return FailedPrecondition(f"{len(report.mismatches)} reported episodes do not match the stores' episodes "
                              f"(first: {report.mismatches[0]})")


PROTOCOLS = (registry.ReportProtocol(protocols.MD, parse_episode_report),)
TABLES = (
    registry.ReportTable(
        name="md",
        help="Meta-Dataset episodes",  # `report --table` adds "(default md)" from default=True
        build=_build,
        render=render_report,
        wire_ignores=("vtab_benchmark", "vtab_split"),
        plot=_plot,
        failure=_failure,
        needs_stores="episodes are recomputed from the packed stores",
        default=True,
    ),
)
