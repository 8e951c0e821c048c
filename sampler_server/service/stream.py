"""The stream engine under every handler: admission, the window, lookahead, packing, sending.

Each stream keeps a few replies in flight: sampled, and their pixels being decoded by
the worker pool while the current one is packed and sent, so decoding overlaps
serialisation and transport and the workers never wait for the network. Stream count
and message size are bounded by the server's limits (``service.limits``); a request
beyond them gets RESOURCE_EXHAUSTED while every other stream carries on. What a stream
prepares ahead is charged to the server's lookahead budget through its own ledger
(``service.lookahead``), which gives every byte back however the stream ends.

A handler of any protocol (``service.md``, ``service.vtab``, ``service.cog``) checks its
request, turns an index into a ``Prepared`` reply (``StreamEngine.prepared_images``: the
stored bytes or decoded pixels of its records) and hands ``StreamEngine.stream`` that
function with the window it checked (``stream_window``); the engine does the rest, the
same way for every protocol.

A request carrying an accepted same-host token (``service.shared_memory``) gets its
pixel replies in shared-memory segments: the same replies, built under
``messages.pixels_to``, with the pixels in a segment the reply names. Such a reply is
taken by its client when the client maps the segment, not when gRPC takes the small
message, so the stream waits for that before counting it sent.
"""

from __future__ import annotations

import collections
import concurrent.futures as futures
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from sampler_server.assembly.assembler import Assembler, PendingImages
from sampler_server.catalog.wire_values import ImageRequest
from sampler_server.errors import InvalidArgument, ResourceExhausted, SamplerError, field_checks
from sampler_server.service import auth, handlers, messages, status
from sampler_server.service.admission import LookaheadBudget, StreamAdmission, StreamSlot, client_of
from sampler_server.service.limits import ServiceLimits
from sampler_server.service.lookahead import Lookahead
from sampler_server.service.shared_memory import SameHostTransport, StreamSegments
from sampler_server.service.telemetry import COG, MD, MESSAGE, SAME_HOST, VTAB, Telemetry
from sampler_common.checks import check_stream_count
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

log = logging.getLogger("sampler_server.service")

STREAM_KINDS = {"episodes": MD, "batches": MD, "task-batches": VTAB, "task-episode": VTAB, "cog-batches": COG}
"""Each stream kind (``StreamEngine.admit``) and its protocol, as the server's metrics name it."""


class Prepared:
    """An episode or batch sampled, its images not yet read. ``start`` begins reading or
    decoding them; then ``finish`` waits and returns the serialised reply (``header``
    plus images; a stream may still set ``header.last``) and ``discard`` frees what the
    images hold if the stream ends first. ``nbytes`` is what it holds once started:
    exact for pixels, an estimate for encoded images until started. ``store`` and
    ``images``: where its images come from and how many (the server's metrics)."""

    def __init__(self, header: Any, nbytes: int,
                 begin: Callable[[], tuple[Callable[[], bytes], PendingImages | None, int]],
                 store: str = "", images: int = 0) -> None:
        self.header = header
        self.nbytes = nbytes
        self.store = store
        self.images = images
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


@dataclass(frozen=True)
class ImageSlot:
    """Where a reply carries one group of images: its pixel tensor field, or (encoded) its
    ``EncodedImages`` field."""

    pixels: str
    encoded: str


IMAGES = ImageSlot("images", "encoded")  # every batch and chunk reply
SUPPORT = ImageSlot("support_images", "support_encoded")  # an episode's
QUERY = ImageSlot("query_images", "query_encoded")


class StreamEnd:
    """Runs once per stream: frees its slot, ends its same-host segments (unlinking the
    unread ones unless its client may still read them) and writes its one log line."""

    def __init__(self, slot: StreamSlot, label: str, peer: str, segments: StreamSegments | None = None,
                 kind: str = "episodes", telemetry: Telemetry | None = None) -> None:
        self.slot = slot
        self.segments = segments
        self.kind = kind
        self.protocol = STREAM_KINDS.get(kind, MD)
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.telemetry.stream_opened(self.protocol)
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
        self.telemetry.stream_closed(self.protocol)
        if self.segments is not None:
            self.segments.end(reclaim=not self.read_on)
        log.info("%s sent=%d %.2fs %s peer=%s", self.label, self.sent, time.perf_counter() - self._started,
                 self.outcome, self._peer)


def stream_window(
    start: int, count: int, step: int, last_index: int = messages.MAX_INDEX, why: str = ""
) -> tuple[int, int, int]:
    """Check a stream's window against the last index it may reach, naming the fields sent."""
    if start > last_index:
        raise InvalidArgument(f"start_index: got {start}, expected 0 to {last_index}{why}")
    with field_checks():
        check_stream_count(count)
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


class StreamEngine:
    """What every stream of one server shares: its assembler, limits, admission, lookahead
    budget, same-host transport and draining flag (set when the server shuts down)."""

    def __init__(self, assembler: Assembler, limits: ServiceLimits, admission: StreamAdmission,
                 lookahead_budget: LookaheadBudget, same_host: SameHostTransport, draining: threading.Event,
                 telemetry: Telemetry | None = None) -> None:
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.assembler = assembler
        self.limits = limits
        self.admission = admission
        self.lookahead_budget = lookahead_budget
        self.same_host = same_host
        self.draining = draining

    # ---- replies ---------------------------------------------------------------------

    def record_bytes(self, store: str) -> int:
        """A store's mean record size (data file over records): what an encoded image
        is charged against the stream budgets before it is read."""
        reader = self.assembler.readers[store]
        return max(1, reader.data_bytes() // max(1, reader.num_records))

    def check_message(self, images: ImageRequest, count: int, what: str, hint: str = "") -> None:
        """RESOURCE_EXHAUSTED when ``count`` decoded images would not fit one message; ``what``
        names the request's part that asks for them (e.g. "batch_size 64")."""
        limit = self.limits.max_message_bytes
        pixel_bytes = count * images.size * images.size * 3
        if not images.encoded and pixel_bytes > limit:
            self.telemetry.refused("max_message")
            raise ResourceExhausted(f"{what} at image_size {images.size} needs {pixel_bytes} bytes; the server's "
                                    f"message limit is {limit}{hint}")

    def prepared_images(self, header: Any, store: str, images: ImageRequest,
                        groups: Sequence[tuple[ImageSlot, list[int]]]) -> Prepared:
        """``header`` with the images of ``groups`` (records of ``store``, each group in its slot):
        their stored bytes (``images.encoded``) or their pixels, decoded by the worker pool
        once started. A reply without records carries empty pixel tensors."""
        ids = [record for _, group in groups for record in group]
        if not ids:
            for slot, _ in groups:
                messages.fill_tensor(getattr(header, slot.pixels), np.zeros((0, images.size, images.size, 3), np.uint8))

            def nothing() -> tuple[Callable[[], bytes], None, int]:
                return header.SerializeToString, None, header.ByteSize()

            return Prepared(header, 0, nothing, store)
        assembler = self.assembler
        if images.encoded:
            def read() -> tuple[Callable[[], bytes], None, int]:
                for slot, group in groups:
                    getattr(header, slot.encoded).CopyFrom(messages.encoded_images(assembler.encoded(store, group)))
                return header.SerializeToString, None, header.ByteSize()

            return Prepared(header, self.record_bytes(store) * len(ids), read, store, len(ids))
        fields = [header.DESCRIPTOR.fields_by_name[slot.pixels].number for slot, _ in groups]
        counts = [len(group) for _, group in groups]
        pixel_bytes = len(ids) * images.size * images.size * 3

        def decode() -> tuple[Callable[[], bytes], PendingImages, int]:
            pending = assembler.submit(store, ids, images.size, images.resize)
            return (lambda: messages.pixels_reply(header, fields, pending, counts, images.size)), pending, pixel_bytes

        return Prepared(header, pixel_bytes, decode, store, len(ids))

    def finished(self, prepared: Prepared, protocol: str, segments: StreamSegments | None) -> tuple[bytes, str]:
        """``prepared``'s serialised reply, built under ``segments`` (a same-host stream's, or
        None), and its transport (read only where metrics are on); its assembly and decode
        times recorded."""
        started = time.perf_counter()
        with messages.pixels_to(segments):
            reply = prepared.finish()
        transport = MESSAGE
        if self.telemetry.enabled:
            if segments is not None and segments.holds(reply):
                transport = SAME_HOST
            pending = prepared.pending
            self.telemetry.assembled(protocol, prepared.store, transport, time.perf_counter() - started,
                                     pending.decode_seconds if pending is not None else None)
        return reply, transport

    def sent(self, prepared: Prepared, reply: bytes, protocol: str, episode: bool, transport: str) -> None:
        """Count a reply gRPC took: the message, and its pixels when they went in shared memory."""
        nbytes = len(reply) + (prepared.nbytes if transport == SAME_HOST else 0)
        self.telemetry.reply_sent(protocol, prepared.store, episode, prepared.images, nbytes, transport)

    def reply(self, prepared: Prepared, images: pb.ImageOptions, protocol: str = MD, episode: bool = True) -> bytes:
        """One reply outside a stream (a unary call): serialised, its pixels in a same-host
        segment where the request's token is accepted."""
        segments = self.same_host.stream(images.same_host_token)
        try:
            reply, transport = self.finished(prepared.start(), protocol, segments)
            self.sent(prepared, reply, protocol, episode, transport)  # a unary reply: counted when built
            return reply
        finally:
            if segments is not None:
                segments.end(reclaim=False)  # its client maps it on receipt; else the timeout reclaims it

    # ---- streams ---------------------------------------------------------------------

    def admit(self, context: grpc.ServicerContext, kind: str, images: pb.ImageOptions | None = None) -> StreamEnd:
        """A stream slot, taken before any work (RESOURCE_EXHAUSTED when none is free). The
        slot is released and the stream logged when the RPC ends for any reason: a
        cancelled stream's generator may never be resumed, so ``finally`` is not enough.
        ``images``: the request's image options (their same-host token, if any)."""
        self.admission.start()  # the idle-stream watchdog, once
        caller = auth.current_caller()  # where tokens are used, a client is its token
        client = f"token:{caller.name}" if caller is not None else client_of(context.peer())
        slot = self.admission.admit(client, context.cancel)
        segments = self.same_host.stream(images.same_host_token) if images is not None else None
        end = StreamEnd(slot, f"stream {kind}", context.peer(), segments, kind, self.telemetry)
        if not context.add_callback(end):
            end()  # the RPC already ended
        return end

    def stream(
        self,
        end: StreamEnd,
        prepare: Callable[[int], Prepared],
        start: int,
        count: int,
        step: int,
        label: str,
        last_index: int = messages.MAX_INDEX,
    ) -> Iterator[Any]:
        """The replies of indices ``start``, ``start + step``, ... (``count`` of them, 0: up to
        ``last_index``), each built by ``prepare``, within the server's budgets."""
        end.label += f" {label} start={start} step={step} count={count or 'unbounded'}"
        if end.segments is not None:
            end.label += " same-host"
        final_index = start + (count - 1) * step if count else None
        yield from _Stream(self, end, prepare, _indices(start, count, step, last_index), final_index).replies()


class _Stream:
    """One stream's state: the indices still to send, the episodes it started ahead and
    their share of the lookahead budget (``lookahead.Lookahead``), the reply packed beside
    the one being sent, and whether a send is under way (the watchdog sheds only then)."""

    def __init__(self, engine: StreamEngine, end: StreamEnd, prepare: Callable[[int], Prepared],
                 indices: Iterator[int], final_index: int | None) -> None:
        self.engine = engine
        self.end = end
        self.prepare = prepare
        self.indices = indices
        self.final_index = final_index
        self.segments = end.segments
        self.lookahead: Lookahead[Prepared] = Lookahead(engine.lookahead_budget, engine.limits.lookahead)
        # due before any index not yet taken: (index, sampled episode, or None to sample again)
        self.waiting: collections.deque[tuple[int, Prepared | None]] = collections.deque()
        # One thread per stream packs the next reply (waits for its pixels, copies them
        # into the message) while gRPC sends the current one. The packed copy is memory
        # beside the episode's pixels, so it is charged to the lookahead budget too: with
        # no room, the next reply is packed when its turn comes.
        self.packer = futures.ThreadPoolExecutor(1, thread_name_prefix="pack")
        self.packing: futures.Future | None = None
        # While the thread is blocked sending to a client that reads nothing, the watchdog
        # may shed what this stream prepared ahead (decoded pixels, a packed reply); the
        # same indices are prepared again, identically, once the client reads.
        self.state = threading.Lock()
        self.sending = False
        end.slot.shed = self.shed

    def finish(self, prepared: Prepared) -> bytes:
        return self.engine.finished(prepared, self.end.protocol, self.segments)[0]

    def drop_packing(self) -> None:
        """Drop the reply packed ahead, once its builder is done (it owns its buffers until
        then), with its same-host segment and its charge."""
        packing = self.packing
        if packing is not None:
            futures.wait([packing])
            if self.segments is not None and not packing.cancelled() and packing.exception() is None:
                self.segments.discard(packing.result())
            self.packing = None
        self.lookahead.drop_packed()

    def shed(self) -> int:
        """The watchdog's call while the client reads nothing: drop what was prepared ahead
        (only while a send is under way, once per send); how many episodes were dropped."""
        with self.state:
            if not self.sending:
                return 0
            self.drop_packing()
            dropped = self.lookahead.shed()
            self.waiting.extendleft(reversed([(index, None) for index in dropped]))
            return len(dropped)

    def gone(self) -> bool:
        return self.end.slot.released or self.engine.draining.is_set()

    def next_planned(self) -> tuple[int, Prepared] | None:
        """The next episode, sampled (cheap) but not started: its size is known before
        any memory is spent on its images."""
        if self.waiting:
            index, prepared = self.waiting.popleft()
        else:
            taken = next(self.indices, None)
            if taken is None:
                return None
            index, prepared = taken, None
        if prepared is None:
            prepared = self.prepare(index)
            if index == self.final_index:
                prepared.header.last = True
        return index, prepared

    def fill(self) -> None:
        """Start episodes ahead, up to the lookahead, while the server's budget has room."""
        while not self.lookahead.full:
            planned = self.next_planned()
            if planned is None:
                return
            if not self.lookahead.start_ahead(*planned):
                self.waiting.appendleft(planned)
                return

    def due(self) -> tuple[int, int] | None:
        """The index whose turn has come and its size (started ahead, or sampled now); None
        when every index was sent."""
        self.fill()
        head = self.lookahead.head()
        if head is not None:
            return head.index, head.item.nbytes
        planned = self.next_planned()
        if planned is None:
            return None
        self.waiting.appendleft(planned)
        return planned[0], planned[1].nbytes

    def next_reply(self) -> tuple[bytes, Prepared]:
        """The reply whose turn has come (and its episode), its episode started now if it was
        not ahead; then the next reply is packed ahead where the budget has room."""
        lookahead = self.lookahead
        if not len(lookahead):  # its turn has come: started now, whatever the lookahead budget
            index, prepared = self.waiting.popleft()
            assert prepared is not None, "due() samples the episode it names"
            lookahead.start_due(index, prepared)
        prepared = lookahead.take_head()
        reply = self.packing.result() if self.packing is not None else self.finish(prepared)
        self.packing = None
        lookahead.handed_over()  # from here the send budget holds it
        self.fill()
        head = lookahead.head()
        if head is not None and lookahead.take_packed(head.item.nbytes):
            self.packing = self.packer.submit(self.finish, head.item)
        return reply, prepared

    def replies(self) -> Iterator[Any]:
        end, engine = self.end, self.engine
        try:
            while True:
                due = self.due()
                if due is None:
                    break
                if self.segments is None:  # room for the reply before it is packed: its pixels go in the message
                    engine.admission.wait_for_room(end.slot, due[1], self.gone)
                if end.slot.released:
                    return  # the call ended while this stream waited for room
                if engine.draining.is_set():
                    raise status.Unavailable(f"server is shutting down; resume at index {due[0]}")
                reply, prepared = self.next_reply()
                if self.segments is not None:
                    # Room for what gRPC keeps: the message alone where the pixels went in a segment
                    # (the same-host budget bounds those), the whole reply where they did not fit.
                    # Charged the pixels, a stream whose client maps slowly held the send budget
                    # against every other stream until it was cancelled as stalled.
                    engine.admission.wait_for_room(end.slot, len(reply), self.gone)
                    if end.slot.released:
                        self.segments.discard(reply)
                        return
                with self.state:
                    self.sending = True
                end.slot.sending()
                yield handlers.SendOnce(reply)  # gRPC keeps what it sent while it asks for the next
                transport = MESSAGE
                if self.segments is not None:  # a same-host reply is taken when its client maps it
                    if self.segments.sent(reply):
                        transport = SAME_HOST
                    self.segments.wait(self.gone)
                engine.sent(prepared, reply, end.protocol, end.kind == "episodes", transport)
                del reply, prepared
                end.sent += 1
                end.slot.progress()
                with self.state:
                    self.sending = False
            end.outcome = "ok"
            end.read_on = True
        except BaseException as error:
            end.outcome = getattr(error, "code", lambda: None)() or type(error).__name__
            end.read_on = isinstance(error, SamplerError)  # its client reads what was sent, then the status
            raise
        finally:
            with self.state:
                self.sending = False  # no shedding from here on
            self.drop_packing()
            self.packer.shutdown(wait=False)
            self.lookahead.close()
            engine.admission.release_send(end.slot)
            end()
