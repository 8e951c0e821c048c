"""The Sampler servicer: unpack, call the core and the assembler, pack.

Each stream keeps a few episodes in flight: sampled, and their pixels being decoded
by the worker pool while the current one is packed and sent, so decoding overlaps
serialisation and transport and the workers never wait for the network. Stream count
and message size are bounded by the server's limits; a request beyond them gets
RESOURCE_EXHAUSTED while every other stream carries on.

A request carrying an accepted same-host token (``service.shared_memory``) gets its
pixel replies in shared-memory segments: the same replies, built under
``messages.pixels_to``, with the pixels in a segment the reply names. Such a reply is
taken by its client when the client maps the segment, not when gRPC takes the small
message, so the stream waits for that before counting it sent.
"""

from __future__ import annotations

import collections
import concurrent.futures as futures
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format

from sampler_server.assembly.assembler import Assembler, PendingImages
from sampler_server.core.md.batches import BatchSampler
from sampler_server.core.md.presets import benchmark_sources
from sampler_server.core.md.episode import Episode
from sampler_server.core.md.multisource import MultiSourceSampler
from sampler_server.errors import InvalidArgument, NotFound, ResourceExhausted, SamplerError
from sampler_server.metrics.store import MetricsStore, StoredReport
from sampler_server.quoting import quoted
from sampler_server.service import auth, handlers, messages, status
from sampler_server.service.admission import LookaheadBudget, StreamAdmission, StreamSlot, client_of
from sampler_server.service.calibrated_reports import CALIBRATED_TABLE, render_calibrated_table
from sampler_server.service.cog import CogHandlers
from sampler_server.service.cog_reports import COG_TABLE, PROTOCOL_COG, cog_result, render_cog_table
from sampler_server.service.registry import StoreRegistry, parse_preset
from sampler_server.service.replay import EpisodeReplayer
from sampler_server.service.shared_memory import SameHostTransport, StreamSegments
from sampler_server.service.vtab import PROTOCOL_VTAB_TASK, TABLES, VtabHandlers
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

log = logging.getLogger("sampler_server.service")

PROTOCOL_MD_EPISODE = "md-episode"
MAX_STREAM_COUNT = 10_000_000


@dataclass(frozen=True)
class ServiceLimits:
    max_message_bytes: int = 512 << 20
    max_streams: int = 64
    max_streams_per_client: int = 64  # a client is a peer host (or a token name where tokens are used)
    stream_idle_seconds: float = 120.0  # a stream whose client reads nothing this long is cancelled
    stream_shed_seconds: float = 5.0  # ... and after this long, it drops the episodes it prepared ahead
    lookahead_bytes: int = 16 << 20  # episodes prepared ahead of their turn, all streams together (126 px MD: ~14 MB each)
    send_bytes: int = 16 << 20  # replies with gRPC, not yet taken by their clients, all streams together
    max_reports_per_request: int = 10_000
    lookahead: int = 3  # episodes of a stream being decoded while one is sent
    shm_bytes: int = 128 << 20  # same-host segments tracked (not taken, held, or released for reuse); 0 = off
    shm_release_seconds: float = 60.0  # a segment not taken, or held, this long is unlinked


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
        self.vtab = VtabHandlers(self)
        self.cog = CogHandlers(self)

    def store_unreadable(self, store: str, reason: str) -> None:
        """Quarantine a store whose data file became unreadable, and tell health."""
        if self.registry.quarantine(store, reason) and self.on_quarantine is not None:
            self.on_quarantine(store)

    # ---- sources -------------------------------------------------------------------

    def _summary(self, name: str, preset: str) -> pb.SourceSummary:
        store = self.registry.get(name)
        manifest = store.manifest
        benchmark = parse_preset(preset)
        spec = self.registry.spec(store.name, benchmark)
        counts = {split: len(spec.classes_in(split)) for split in messages.Split}
        return pb.SourceSummary(
            name=store.name,
            source=manifest.source,
            fingerprint=manifest.fingerprint,
            num_records=manifest.num_records,
            train_classes=counts[messages.Split.TRAIN],
            valid_classes=counts[messages.Split.VALID],
            test_classes=counts[messages.Split.TEST],
            hierarchy=manifest.hierarchy or "",
            raw_size=store.raw_size or 0,
            preset=benchmark.value,
            raw_resize=messages.raw_resize_to_wire(store.manifest.pack_options),
        )

    @status.unary
    def ListSources(self, request: pb.ListSourcesRequest, context: grpc.ServicerContext) -> pb.ListSourcesResponse:
        response = pb.ListSourcesResponse(
            sources=[self._summary(name, request.preset) for name in sorted(self.registry.stores)]
        )
        if request.split != pb.SPLIT_UNSPECIFIED:
            split = messages.split_from_wire(request.split, "split")
            kinds = benchmark_sources(parse_preset(request.preset), split)
            for kind in kinds:
                self.registry.get(kind)  # NOT_FOUND names what is served
            response.preset_sources[:] = kinds
        return response

    @status.unary
    def DescribeSource(self, request: pb.DescribeSourceRequest, context: grpc.ServicerContext) -> pb.SourceDescription:
        store = self.registry.get(request.name)
        spec = self.registry.spec(store.name, parse_preset(request.preset))
        return pb.SourceDescription(
            summary=self._summary(store.name, request.preset),
            classes=[
                pb.ClassDescription(class_id=c.id, name=c.name, split=messages.split_to_wire(c.split),
                                    num_records=c.count, wnid=c.wnid or "", group=c.group or "")
                for c in spec.classes
            ],
        )

    @status.unary
    def OfferSameHost(self, request: pb.SameHostRequest, context: grpc.ServicerContext) -> pb.SameHostOffer:
        name, reason = self.same_host.offer()
        return pb.SameHostOffer(probe_segment=name, reason=reason)

    # ---- episodes ------------------------------------------------------------------

    def _record_bytes(self, store: str) -> int:
        """A store's mean record size (data file over records): what an encoded image
        is charged against the stream budgets before it is read."""
        reader = self.assembler.readers[store]
        return max(1, reader.data_bytes() // max(1, reader.num_records))

    def _episode_source(self, request: pb.EpisodeRequest) -> tuple[Callable[[int], "Prepared"], str]:
        """For this request (validated up front): index -> a function that packs that episode."""
        split = messages.split_from_wire(request.split, "request.split")
        images = messages.images_from_wire(request.images)
        config = messages.config_from_wire(request.config)
        specs, stores = self.registry.resolve(list(request.sources), request.preset, split, images.size,
                                              images.resize.value)
        sampler = MultiSourceSampler(specs, list(specs), split, config)
        seed = request.seed
        preset = parse_preset(request.preset).value
        names = {kind: [c.name for c in spec.classes] for kind, spec in specs.items()}
        wnids = {kind: [c.wnid for c in spec.classes] for kind, spec in specs.items()}
        limit = self.limits.max_message_bytes

        def prepare(index: int) -> Prepared:
            """Sample now and start decoding; ``finish`` waits and encodes the reply."""
            episode = sampler.sample(seed, index)
            store = stores[episode.source]
            header = messages.episode_header(episode, names[episode.source], wnids[episode.source], images)
            header.preset = preset
            support_ids = list(header.support_record_ids)
            query_ids = list(header.query_record_ids)
            if images.encoded:
                def read() -> tuple[Callable[[], bytes], None, int]:
                    header.support_encoded.CopyFrom(
                        messages.encoded_images(self.assembler.encoded(store.name, support_ids)))
                    header.query_encoded.CopyFrom(messages.encoded_images(self.assembler.encoded(store.name, query_ids)))
                    return header.SerializeToString, None, header.ByteSize()

                return Prepared(header, self._record_bytes(store.name) * len(support_ids + query_ids), read)
            pixel_bytes = (len(support_ids) + len(query_ids)) * images.size * images.size * 3
            if pixel_bytes > limit:
                raise ResourceExhausted(
                    f"episode {index} would carry {pixel_bytes} bytes of pixels at image_size {images.size}; "
                    f"the server's message limit is {limit} bytes (request a smaller image_size or fewer shots)"
                )
            fields = [messages.SUPPORT_IMAGES, messages.QUERY_IMAGES]
            counts = [len(support_ids), len(query_ids)]

            def decode() -> tuple[Callable[[], bytes], PendingImages, int]:
                pending = self.assembler.submit(store.name, support_ids + query_ids, images.size, images.resize)
                return (lambda: messages.pixels_reply(header, fields, pending, counts, images.size)), pending, pixel_bytes

            return Prepared(header, pixel_bytes, decode)

        label = ",".join(sorted(s.name for s in stores.values())) + f" {split.value} seed={seed}"
        return prepare, label

    def _admit(self, context: grpc.ServicerContext, kind: str, images: pb.ImageOptions | None = None) -> "_StreamEnd":
        """A stream slot, taken before any work (RESOURCE_EXHAUSTED when none is free). The
        slot is released and the stream logged when the RPC ends for any reason: a
        cancelled stream's generator may never be resumed, so ``finally`` is not enough.
        ``images``: the request's image options (their same-host token, if any)."""
        self.admission.start()  # the idle-stream watchdog, once
        caller = auth.current_caller()  # where tokens are used, a client is its token
        client = f"token:{caller.name}" if caller is not None else client_of(context.peer())
        slot = self.admission.admit(client, context.cancel)
        segments = self.same_host.stream(images.same_host_token) if images is not None else None
        end = _StreamEnd(slot, f"stream {kind}", context.peer(), segments)
        if not context.add_callback(end):
            end()  # the RPC already ended
        return end

    def _stream(
        self,
        end: "_StreamEnd",
        prepare: Callable[[int], "Prepared"],
        start: int,
        count: int,
        step: int,
        label: str,
        last_index: int = messages.MAX_INDEX,
    ) -> Iterator[Any]:
        end.label += f" {label} start={start} step={step} count={count or 'unbounded'}"
        if end.segments is not None:
            end.label += " same-host"
        budget = self.lookahead_budget
        segments = end.segments

        def finish(prepared: Prepared) -> bytes:
            with messages.pixels_to(segments):
                return prepared.finish()

        # started episodes, in order: [index, prepared, bytes charged to the lookahead budget]
        in_flight: collections.deque[list[Any]] = collections.deque()
        # due before any index not yet taken: (index, sampled episode, or None to sample again)
        waiting: collections.deque[tuple[int, Prepared | None]] = collections.deque()
        final_index = start + (count - 1) * step if count else None
        # One thread per stream packs the next reply (waits for its pixels, copies them
        # into the message) while gRPC sends the current one. The packed copy is memory
        # beside the episode's pixels, so it is charged to the lookahead budget too: with
        # no room, the next reply is packed when its turn comes.
        packer = futures.ThreadPoolExecutor(1, thread_name_prefix="pack")
        packing: futures.Future | None = None
        packing_charge = 0
        # While the thread is blocked sending to a client that reads nothing, the watchdog
        # may shed what this stream prepared ahead (decoded pixels, a packed reply); the
        # same indices are prepared again, identically, once the client reads.
        state = threading.Lock()
        sending = shed_done = False

        def drop_packing() -> None:
            nonlocal packing, packing_charge
            if packing is not None:
                futures.wait([packing])  # it owns its buffers until done; its reply is dropped
                if segments is not None and not packing.cancelled() and packing.exception() is None:
                    segments.discard(packing.result())  # ... and so is its segment
                packing = None
            budget.give(packing_charge)
            packing_charge = 0

        def shed() -> int:
            nonlocal shed_done
            with state:
                if not sending or shed_done:
                    return 0
                drop_packing()
                for entry in in_flight:
                    entry[1].discard()
                    budget.give(entry[2])
                    entry[2] = 0
                shed_done = True
                return len(in_flight)

        end.slot.shed = shed

        def gone() -> bool:
            return end.slot.released or self.draining.is_set()

        def next_planned() -> tuple[int, Prepared] | None:
            """The next episode, sampled (cheap) but not started: its size is known before
            any memory is spent on its images."""
            if waiting:
                index, prepared = waiting.popleft()
            else:
                index, prepared = next(indices, None), None
                if index is None:
                    return None
            if prepared is None:
                prepared = prepare(index)
                if index == final_index:
                    prepared.header.last = True
            return index, prepared

        def begin(index: int, prepared: Prepared, charged: int) -> None:
            try:
                prepared.start()
            except BaseException:
                budget.give(charged)
                raise
            if charged:  # an encoded episode's estimate becomes its size
                budget.give(charged - prepared.nbytes)
                charged = prepared.nbytes
            in_flight.append([index, prepared, charged])

        def fill() -> None:
            """Start episodes ahead, up to the lookahead, while the server's budget has room."""
            while len(in_flight) < self.limits.lookahead:
                planned = next_planned()
                if planned is None:
                    return
                if not budget.try_take(planned[1].nbytes):
                    waiting.appendleft(planned)
                    return
                begin(*planned, planned[1].nbytes)

        try:
            indices = _indices(start, count, step, last_index)
            while True:
                fill()
                if in_flight:
                    due, nbytes = in_flight[0][0], in_flight[0][1].nbytes
                else:
                    planned = next_planned()
                    if planned is None:
                        break
                    waiting.appendleft(planned)
                    due, nbytes = planned[0], planned[1].nbytes
                self.admission.wait_for_room(end.slot, nbytes, gone)
                if end.slot.released:
                    return  # the call ended while this stream waited for room
                if self.draining.is_set():
                    raise status.Unavailable(f"server is shutting down; resume at index {due}")
                if not in_flight:  # its turn has come: started now, whatever the lookahead budget
                    begin(*waiting.popleft(), 0)
                _, prepared, charged = in_flight.popleft()
                reply = packing.result() if packing is not None else finish(prepared)
                packing = None
                budget.give(charged + packing_charge)  # from here the send budget holds it
                packing_charge = 0
                fill()
                if in_flight and budget.try_take(in_flight[0][1].nbytes):
                    packing_charge = in_flight[0][1].nbytes
                    packing = packer.submit(finish, in_flight[0][1])
                with state:
                    sending = True
                end.slot.sending()
                yield handlers.SendOnce(reply)  # gRPC keeps what it sent while it asks for the next
                if segments is not None:  # a same-host reply is taken when its client maps it
                    segments.sent(reply)
                    segments.wait(gone)
                del reply
                end.sent += 1
                end.slot.progress()
                with state:
                    sending = False
                    if shed_done:
                        shed_done = False
                        waiting.extendleft(reversed([(entry[0], None) for entry in in_flight]))
                        in_flight.clear()
            end.outcome = "ok"
            end.read_on = True
        except BaseException as error:
            end.outcome = getattr(error, "code", lambda: None)() or type(error).__name__
            end.read_on = isinstance(error, SamplerError)  # its client reads what was sent, then the status
            raise
        finally:
            with state:
                sending = False  # no shedding from here on
            drop_packing()
            packer.shutdown(wait=False)
            for entry in in_flight:
                entry[1].discard()
                budget.give(entry[2])
            in_flight.clear()
            self.admission.release_send(end.slot)
            end()

    @status.streaming
    def StreamEpisodes(self, request: pb.StreamEpisodesRequest, context: grpc.ServicerContext) -> Iterator[pb.Episode]:
        end = self._admit(context, "episodes", request.request.images)
        start, count, step = _stream_window(request.start_index, request.count, request.index_step)
        prepare, label = self._episode_source(request.request)
        yield from self._stream(end, prepare, start, count, step, label)

    @status.unary
    def GetEpisode(self, request: pb.GetEpisodeRequest, context: grpc.ServicerContext) -> pb.Episode:
        if request.index > messages.MAX_INDEX:
            raise InvalidArgument(f"index: got {request.index}, expected 0 to {messages.MAX_INDEX}")
        prepare, _ = self._episode_source(request.request)
        segments = self.same_host.stream(request.request.images.same_host_token)
        try:
            with messages.pixels_to(segments):
                return prepare(request.index).start().finish()  # serialised bytes (see handlers)
        finally:
            if segments is not None:
                segments.end(reclaim=False)  # its client maps it on receipt; else the timeout reclaims it

    # ---- plain batches ---------------------------------------------------------------

    @status.streaming
    def StreamBatches(self, request: pb.StreamBatchesRequest, context: grpc.ServicerContext) -> Iterator[pb.Batch]:
        end = self._admit(context, "batches", request.images)
        split = messages.split_from_wire(request.split, "split")
        images = messages.images_from_wire(request.images)
        benchmark = parse_preset(request.preset)
        store = self.registry.get(request.source, images.size, images.resize.value)
        sampler = BatchSampler(self.registry.spec(store.name, benchmark), split, request.batch_size,
                               preset=benchmark.value)
        last_index = (messages.MAX_INDEX + 1) // sampler.batch_size - 1  # its last position fits an int64
        start, count, step = _stream_window(request.start_index, request.count, request.index_step, last_index,
                                            f" (the last batch at batch_size {sampler.batch_size})")
        seed = request.seed
        pixel_bytes = request.batch_size * images.size * images.size * 3
        if not images.encoded and pixel_bytes > self.limits.max_message_bytes:
            raise ResourceExhausted(
                f"batch_size {request.batch_size} at image_size {images.size} needs {pixel_bytes} bytes; "
                f"the server's message limit is {self.limits.max_message_bytes}"
            )

        def prepare(index: int) -> Prepared:
            batch = sampler.sample(seed, index)
            header = pb.Batch(
                source=store.name, split=request.split, seed=seed, index=index, epoch=batch.epoch,
                fingerprint=batch.fingerprint, record_ids=batch.record_ids, num_classes=batch.num_classes,
                preset=benchmark.value,
            )
            messages.fill_tensor(header.labels, np.asarray(batch.labels, dtype=np.int64))
            if images.encoded:
                def read() -> tuple[Callable[[], bytes], None, int]:
                    header.encoded.CopyFrom(messages.encoded_images(self.assembler.encoded(store.name, batch.record_ids)))
                    return header.SerializeToString, None, header.ByteSize()

                return Prepared(header, self._record_bytes(store.name) * len(batch.record_ids), read)
            fields, counts = [messages.BATCH_IMAGES], [len(batch.record_ids)]
            pixel_bytes = len(batch.record_ids) * images.size * images.size * 3

            def decode() -> tuple[Callable[[], bytes], PendingImages, int]:
                pending = self.assembler.submit(store.name, batch.record_ids, images.size, images.resize)
                return (lambda: messages.pixels_reply(header, fields, pending, counts, images.size)), pending, pixel_bytes

            return Prepared(header, pixel_bytes, decode)

        label = f"{store.name} {split.value} seed={seed} batch_size={request.batch_size}"
        yield from self._stream(end, prepare, start, count, step, label, last_index)

    # ---- VTAB-1k (service.vtab) ----------------------------------------------------------

    @status.unary
    def ListTasks(self, request: pb.ListTasksRequest, context: grpc.ServicerContext) -> pb.ListTasksResponse:
        return self.vtab.list_tasks(request)

    @status.streaming
    def StreamTaskBatches(self, request: pb.StreamTaskBatchesRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        end = self._admit(context, "task-batches", request.images)
        yield from self.vtab.stream_task_batches(request, end)

    @status.streaming
    def StreamTaskEpisode(self, request: pb.StreamTaskEpisodeRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        end = self._admit(context, "task-episode", request.images)
        yield from self.vtab.stream_task_episode(request, end)

    @status.unary
    def GetRegime(self, request: pb.RegimeRequest, context: grpc.ServicerContext) -> pb.Regime:
        return self.vtab.regimes.get_regime(request)  # control baselines (service.regimes)

    # ---- ImageNet-CoG (service.cog) ------------------------------------------------------

    @status.unary
    def ListCogLevels(self, request: pb.ListCogLevelsRequest, context: grpc.ServicerContext) -> pb.ListCogLevelsResponse:
        return self.cog.list_levels(request)

    @status.unary
    def GetCogSplit(self, request: pb.CogSplitRequest, context: grpc.ServicerContext) -> pb.CogSplit:
        return self.cog.get_split(request)

    @status.streaming
    def StreamCogBatches(self, request: pb.StreamCogBatchesRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        end = self._admit(context, "cog-batches", request.images)
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
        protocols = (PROTOCOL_MD_EPISODE, PROTOCOL_VTAB_TASK, PROTOCOL_COG)
        for report in request.reports:
            if report.protocol not in protocols:
                raise InvalidArgument(f"reports.protocol: got {quoted(report.protocol)}, expected one of "
                                      f"{', '.join(map(repr, protocols))}")
        episodes = [r for r in request.reports if r.protocol == PROTOCOL_MD_EPISODE]
        tasks = [self.vtab.task_result(r) for r in request.reports if r.protocol == PROTOCOL_VTAB_TASK]
        cogs = [cog_result(r) for r in request.reports if r.protocol == PROTOCOL_COG]
        checked = [self._checked_report(report) for report in episodes]
        caller = auth.current_caller()  # None: no tokens, no owners; read tokens never get here
        owner, admin = caller and caller.name, caller is not None and caller.role is auth.Role.ADMIN
        # one transaction for the whole request, whatever protocols it mixes (metrics.store)
        stored, duplicates = self.metrics.add_batch([*checked, *tasks, *cogs], request.run_config_json, owner=owner,
                                                    admin=admin)
        return pb.ReportMetricsResponse(stored=stored, duplicates=duplicates)

    def _checked_report(self, report: pb.MetricReport) -> StoredReport:
        if report.protocol != PROTOCOL_MD_EPISODE:
            raise InvalidArgument(f"reports.protocol: got {quoted(report.protocol)}, expected "
                                  f"{PROTOCOL_MD_EPISODE!r} or {PROTOCOL_VTAB_TASK!r}")
        split = messages.split_from_wire(report.split, "reports.split")
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
        from sampler_server.metrics.report import build_report, render_report

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
            return pb.GetReportResponse(text=render_calibrated_table(self.metrics, request, self.vtab))
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


class Prepared:
    """An episode or batch sampled, its images not yet read. ``start`` begins reading or
    decoding them; then ``finish`` waits and returns the serialised reply (``header``
    plus images; a stream may still set ``header.last``) and ``discard`` frees what the
    images hold if the stream ends first. ``nbytes`` is what it holds once started:
    exact for pixels, an estimate for encoded images until started."""

    def __init__(self, header: Any, nbytes: int,
                 begin: Callable[[], tuple[Callable[[], bytes], PendingImages | None, int]]) -> None:
        self.header = header
        self.nbytes = nbytes
        self._begin = begin
        self._finish: Callable[[], bytes] | None = None
        self.pending: PendingImages | None = None

    @property
    def started(self) -> bool:
        return self._finish is not None

    def start(self) -> "Prepared":
        if self._finish is None:
            self._finish, self.pending, self.nbytes = self._begin()
        return self

    def finish(self) -> bytes:
        return self.start()._finish()  # type: ignore[misc]

    def discard(self) -> None:
        if self.pending is not None:
            self.pending.discard()


class _StreamEnd:
    """Runs once per stream: frees its slot, ends its same-host segments (unlinking the
    unread ones unless its client may still read them) and writes its one log line."""

    def __init__(self, slot: StreamSlot, label: str, peer: str, segments: StreamSegments | None = None) -> None:
        self.slot = slot
        self.segments = segments
        self.read_on = False  # the stream ended with a status its client reads after the replies sent
        self.label = label
        self._peer = peer
        self._lock = threading.Lock()
        self._done = False
        self._started = time.perf_counter()
        self.sent = 0
        self.outcome = "cancelled"

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self.slot.release()
        if self.segments is not None:
            self.segments.end(reclaim=not self.read_on)
        log.info("%s sent=%d %.2fs %s peer=%s", self.label, self.sent, time.perf_counter() - self._started,
                 self.outcome, self._peer)


def _stream_window(
    start: int, count: int, step: int, last_index: int = messages.MAX_INDEX, why: str = ""
) -> tuple[int, int, int]:
    """Check a stream's window against the last index it may reach, naming the fields sent."""
    if start > last_index:
        raise InvalidArgument(f"start_index: got {start}, expected 0 to {last_index}{why}")
    if count > MAX_STREAM_COUNT:
        raise InvalidArgument(f"count: got {count}, expected 0 (unbounded) to {MAX_STREAM_COUNT}")
    step = step or 1
    if count and start + (count - 1) * step > last_index:
        raise InvalidArgument(
            f"start_index + (count - 1) * index_step: got {start} + ({count} - 1) * {step} = "
            f"{start + (count - 1) * step}, expected at most {last_index}{why}"
        )
    return start, count, step


def _indices(start: int, count: int, step: int, last_index: int = messages.MAX_INDEX) -> Iterator[int]:
    index = start
    produced = 0
    while not count or produced < count:
        if index > last_index:
            return
        yield index
        index += step
        produced += 1
