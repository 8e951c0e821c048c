"""The Sampler servicer: the table of RPCs, each delegated to its protocol's handlers.

Meta-Dataset (``service.md``), VTAB-1k (``service.vtab``), the control baselines
(``service.baselines``) and ImageNet-CoG (``service.cog``) each unpack their requests
and pack their replies; every stream runs on the one stream engine (``service.stream``),
which bounds streams, messages and memory the same way for all. The status decorators
here map the project's errors to gRPC codes (``service.status``). The metrics RPCs
check reports and build report tables (``metrics``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from sampler_server.assembly.assembler import Assembler
from sampler_server.catalog.cog import CogCatalog
from sampler_server.catalog.cog_files import CogFiles
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.replay import EpisodeReplayer
from sampler_server.catalog.tasks import TaskCatalog
from sampler_server.metrics.store import MetricsStore
from sampler_server.service import status
from sampler_server.service.admission import LookaheadBudget, StreamAdmission
from sampler_server.service.baselines import BaselineHandlers
from sampler_server.service.cog import CogHandlers
from sampler_server.service.limits import ServiceLimits
from sampler_server.service.md import MdHandlers
from sampler_server.service.metrics import MetricsHandlers, ServedContext
from sampler_server.service.shared_memory import SameHostTransport
from sampler_server.service.stream import StreamEngine
from sampler_server.service.telemetry import Telemetry, store_named
from sampler_server.service.vtab import VtabHandlers
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


class SamplerServicer(pb_grpc.SamplerServicer):
    def __init__(
        self,
        registry: StoreRegistry,
        assembler: Assembler,
        metrics: MetricsStore,
        limits: ServiceLimits = ServiceLimits(),
        telemetry: Telemetry | None = None,
    ) -> None:
        self.telemetry = telemetry if telemetry is not None else Telemetry()  # the server's metrics (unbound: off)
        self.registry = registry
        self.assembler = assembler
        self.metrics = metrics
        self.limits = limits
        self.replayer = EpisodeReplayer(registry)
        self.draining = threading.Event()
        self.admission = StreamAdmission(limits.max_streams, limits.max_streams_per_client,
                                         limits.stream_idle_seconds, shed_seconds=limits.stream_shed_seconds,
                                         send_bytes=limits.send_bytes)
        self.admission.telemetry = self.telemetry
        self.lookahead_budget = LookaheadBudget(limits.lookahead_bytes)
        self.same_host = SameHostTransport(limits.shm_bytes, limits.shm_release_seconds)
        self.on_quarantine: Callable[[str], None] | None = None  # the server sets its health here
        self.streams = StreamEngine(assembler, limits, self.admission, self.lookahead_budget, self.same_host,
                                    self.draining, self.telemetry)
        self.tasks = TaskCatalog(registry)
        self.md = MdHandlers(registry, self.streams)
        self.baselines = BaselineHandlers(self.tasks)
        self.vtab = VtabHandlers(self.tasks, self.streams, self.baselines)
        # naver/cog's files named by a request: absolute, or relative to the data directory
        self.cog = CogHandlers(CogCatalog(registry, CogFiles(registry.data_dir), "the server"), self.streams)
        # reports: checked and tabled by each protocol's registration (metrics.registry)
        self.reports = MetricsHandlers(metrics, limits.max_reports_per_request, ServedContext(self.replayer, self.tasks),
                                       self.telemetry)

    def store_unreadable(self, store: str, reason: str) -> None:
        """Quarantine a store whose data file became unreadable, and tell health."""
        if self.registry.quarantine(store, reason):
            self.telemetry.quarantined(store, "serving")
            if self.on_quarantine is not None:
                self.on_quarantine(store)

    def data_lost(self, error: Exception) -> None:
        """A call answered DATA_LOSS: counted under the store its message names."""
        self.telemetry.data_loss(getattr(error, "store", None) or store_named(str(error)))

    # ---- Meta-Dataset (service.md) ---------------------------------------------------

    @status.unary
    def ListSources(self, request: pb.ListSourcesRequest, context: grpc.ServicerContext) -> pb.ListSourcesResponse:
        reply = self.md.list_sources(request)
        reply.server.lookahead_bytes = self.limits.lookahead_bytes
        reply.server.decode_workers = self.assembler.workers
        return reply

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
        return self.reports.report_metrics(request)

    @status.unary
    def GetReport(self, request: pb.GetReportRequest, context: grpc.ServicerContext) -> pb.GetReportResponse:
        return self.reports.get_report(request)
