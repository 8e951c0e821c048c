"""The Sampler servicer: the table of RPCs, each delegated to its protocol's handlers.

Meta-Dataset (``service.md``), VTAB-1k (``service.vtab``), the control baselines
(``service.baselines``) and ImageNet-CoG (``service.cog``) each unpack their requests
and pack their replies; every stream runs on the one stream engine (``service.stream``),
which bounds streams, messages and memory the same way for all. The status decorators
here map the project's errors to gRPC codes (``service.status``). The metrics RPCs
check reports and build report tables (``metrics``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf import json_format

from sampler_server.assembly.assembler import Assembler
from sampler_server.catalog.cog import CogCatalog
from sampler_server.catalog.cog_files import CogFiles
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.replay import EpisodeReplayer
from sampler_server.catalog.tasks import TaskCatalog
from sampler_server.catalog.wire_values import split_from_wire
from sampler_server.core.md.episode import Episode
from sampler_server.errors import InvalidArgument, NotFound, ResourceExhausted
from sampler_server.metrics.store import MetricsStore, StoredReport
from sampler_server.quoting import quoted
from sampler_server.service import auth, status
from sampler_server.service.admission import LookaheadBudget, StreamAdmission
from sampler_server.service.baselines import BaselineHandlers
from sampler_server.service.calibrated_reports import CALIBRATED_TABLE, render_calibrated_table
from sampler_server.service.cog import CogHandlers
from sampler_server.service.cog_reports import COG_TABLE, cog_result, render_cog_table
from sampler_server.service.limits import ServiceLimits
from sampler_server.service.md import MdHandlers
from sampler_server.service.shared_memory import SameHostTransport
from sampler_server.service.stream import StreamEngine
from sampler_server.service.vtab import TABLES, VtabHandlers
from sampler_common import protocols
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


class SamplerServicer(pb_grpc.SamplerServicer):
    def __init__(
        self,
        registry: StoreRegistry,
        assembler: Assembler,
        metrics: MetricsStore,
        limits: ServiceLimits = ServiceLimits(),
    ) -> None:
        self.registry = registry
        self.assembler = assembler
        self.metrics = metrics
        self.limits = limits
        self.replayer = EpisodeReplayer(registry)
        self.draining = threading.Event()
        self.admission = StreamAdmission(limits.max_streams, limits.max_streams_per_client,
                                         limits.stream_idle_seconds, shed_seconds=limits.stream_shed_seconds,
                                         send_bytes=limits.send_bytes)
        self.lookahead_budget = LookaheadBudget(limits.lookahead_bytes)
        self.same_host = SameHostTransport(limits.shm_bytes, limits.shm_release_seconds)
        self.on_quarantine: Callable[[str], None] | None = None  # the server sets its health here
        self.streams = StreamEngine(assembler, limits, self.admission, self.lookahead_budget, self.same_host,
                                    self.draining)
        self.tasks = TaskCatalog(registry)
        self.md = MdHandlers(registry, self.streams)
        self.baselines = BaselineHandlers(self.tasks)
        self.vtab = VtabHandlers(self.tasks, self.streams, self.baselines)
        # naver/cog's files named by a request: absolute, or relative to the data directory
        self.cog = CogHandlers(CogCatalog(registry, CogFiles(registry.data_dir), "the server"), self.streams)

    def store_unreadable(self, store: str, reason: str) -> None:
        """Quarantine a store whose data file became unreadable, and tell health."""
        if self.registry.quarantine(store, reason) and self.on_quarantine is not None:
            self.on_quarantine(store)

    # ---- Meta-Dataset (service.md) ---------------------------------------------------

    @status.unary
    def ListSources(self, request: pb.ListSourcesRequest, context: grpc.ServicerContext) -> pb.ListSourcesResponse:
        return self.md.list_sources(request)

    @status.unary
    def DescribeSource(self, request: pb.DescribeSourceRequest, context: grpc.ServicerContext) -> pb.SourceDescription:
        return self.md.describe_source(request)

    @status.streaming
    def StreamEpisodes(self, request: pb.StreamEpisodesRequest, context: grpc.ServicerContext) -> Iterator[pb.Episode]:
        end = self.streams.admit(context, "episodes", request.request.images)
        yield from self.md.stream_episodes(request, end)

    @status.unary
    def GetEpisode(self, request: pb.GetEpisodeRequest, context: grpc.ServicerContext) -> pb.Episode:
        return self.md.get_episode(request)  # serialised bytes (see service.handlers)

    @status.streaming
    def StreamBatches(self, request: pb.StreamBatchesRequest, context: grpc.ServicerContext) -> Iterator[pb.Batch]:
        end = self.streams.admit(context, "batches", request.images)
        yield from self.md.stream_batches(request, end)

    # ---- same host (service.shared_memory) ---------------------------------------------

    @status.unary
    def OfferSameHost(self, request: pb.SameHostRequest, context: grpc.ServicerContext) -> pb.SameHostOffer:
        name, reason = self.same_host.offer()
        return pb.SameHostOffer(probe_segment=name, reason=reason)

    # ---- VTAB-1k (service.vtab) ----------------------------------------------------------

    @status.unary
    def ListTasks(self, request: pb.ListTasksRequest, context: grpc.ServicerContext) -> pb.ListTasksResponse:
        return self.vtab.list_tasks(request)

    @status.streaming
    def StreamTaskBatches(self, request: pb.StreamTaskBatchesRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        end = self.streams.admit(context, "task-batches", request.images)
        yield from self.vtab.stream_task_batches(request, end)

    @status.streaming
    def StreamTaskEpisode(self, request: pb.StreamTaskEpisodeRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        end = self.streams.admit(context, "task-episode", request.images)
        yield from self.vtab.stream_task_episode(request, end)

    # ---- control baselines (service.baselines) ---------------------------------------------

    @status.unary
    def GetRegime(self, request: pb.RegimeRequest, context: grpc.ServicerContext) -> pb.Regime:
        return self.baselines.get_regime(request)

    # ---- ImageNet-CoG (service.cog) ------------------------------------------------------

    @status.unary
    def ListCogLevels(self, request: pb.ListCogLevelsRequest, context: grpc.ServicerContext) -> pb.ListCogLevelsResponse:
        return self.cog.list_levels(request)

    @status.unary
    def GetCogSplit(self, request: pb.CogSplitRequest, context: grpc.ServicerContext) -> pb.CogSplit:
        return self.cog.get_split(request)

    @status.streaming
    def StreamCogBatches(self, request: pb.StreamCogBatchesRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        end = self.streams.admit(context, "cog-batches", request.images)
        yield from self.cog.stream_batches(request, end)

    # ---- metrics -------------------------------------------------------------------

    @status.unary
    def ReportMetrics(self, request: pb.ReportMetricsRequest, context: grpc.ServicerContext) -> pb.ReportMetricsResponse:
        if len(request.reports) > self.limits.max_reports_per_request:
            raise ResourceExhausted(
                f"reports: got {len(request.reports)}, the server accepts at most "
                f"{self.limits.max_reports_per_request} per request"
            )
        if request.run_config_json:
            try:
                json.loads(request.run_config_json)
            except json.JSONDecodeError as error:
                raise InvalidArgument(f"run_config_json: not valid JSON ({error})") from None
        for report in request.reports:
            if report.protocol not in protocols.REPORT_PROTOCOLS:
                raise InvalidArgument(f"reports.protocol: got {quoted(report.protocol)}, expected one of "
                                      f"{', '.join(map(repr, protocols.REPORT_PROTOCOLS))}")
        episodes = [r for r in request.reports if r.protocol == protocols.MD]
        tasks = [self.vtab.task_result(r) for r in request.reports if r.protocol == protocols.VTAB]
        cogs = [cog_result(r) for r in request.reports if r.protocol == protocols.COG]
        checked = [self._checked_report(report) for report in episodes]
        caller = auth.current_caller()  # None: no tokens, no owners; read tokens never get here
        owner, admin = caller and caller.name, caller is not None and caller.role is auth.Role.ADMIN
        # one transaction for the whole request, whatever protocols it mixes (metrics.store)
        stored, duplicates = self.metrics.add_batch([*checked, *tasks, *cogs], request.run_config_json, owner=owner,
                                                    admin=admin)
        return pb.ReportMetricsResponse(stored=stored, duplicates=duplicates)

    def _checked_report(self, report: pb.MetricReport) -> StoredReport:
        if report.protocol != protocols.MD:
            raise InvalidArgument(f"reports.protocol: got {quoted(report.protocol)}, expected "
                                  f"{protocols.MD!r} or {protocols.VTAB!r}")
        split = split_from_wire(report.split, "reports.split")
        if report.request.split != report.split:
            raise InvalidArgument("reports.request.split must equal reports.split")
        episode = self._episode_for(report.request, report.seed, report.index)
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

    def _episode_for(self, request: pb.EpisodeRequest, seed: int, index: int) -> Episode:
        return self.replayer.episode(request, seed, index)

    @status.unary
    def GetReport(self, request: pb.GetReportRequest, context: grpc.ServicerContext) -> pb.GetReportResponse:
        from sampler_server.metrics.md.report import build_report, render_report

        caller = auth.current_caller()
        if caller is not None and not caller.reads_every_run:
            controls = [request.baseline_run, request.scratch_run, request.max_run]
            for run_id in [*request.run_ids, *[run for run in controls if run]]:
                try:
                    owner = self.metrics.run_owner(run_id)
                except NotFound:
                    owner = None
                if owner != caller.name:  # another team's run reads exactly as an unknown one
                    raise NotFound(f"run {quoted(run_id)} has no reports")
        tables = (*TABLES, COG_TABLE, CALIBRATED_TABLE)
        if request.table not in ("", *tables):
            raise InvalidArgument(f"table: got {quoted(request.table)}, expected one of {', '.join(tables)}")
        if request.table == CALIBRATED_TABLE:  # control baselines (service.calibrated_reports)
            return pb.GetReportResponse(text=render_calibrated_table(self.metrics, request, self.tasks))
        for name in ("scratch_run", "max_run", "cci_seeds"):
            if getattr(request, name):
                raise InvalidArgument(f"{name}: only with table {CALIBRATED_TABLE!r} "
                                      f"(got table {quoted(request.table or 'md')})")
        if request.baseline_run and request.table != COG_TABLE:
            raise InvalidArgument(f"baseline_run: only with table {COG_TABLE!r} "
                                  f"(got table {quoted(request.table or 'md')})")
        if request.table == COG_TABLE:
            return pb.GetReportResponse(text=render_cog_table(self.metrics, request))
        if request.table in ("vtab", "vtab-md"):
            return pb.GetReportResponse(text=self.vtab.render_table(self.metrics, request))
        report = build_report(self.metrics, list(request.run_ids), self.replayer)
        return pb.GetReportResponse(text=render_report(report, request.format or "table"))
