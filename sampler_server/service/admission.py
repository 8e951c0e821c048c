"""Who may open a stream, and what ends a stream nobody reads.

In gRPC's threaded server a streaming handler keeps its thread while a send waits on
flow control, so a client that opens streams and never reads them can hold every
thread. The server therefore runs ``max_streams`` stream threads plus a reserve for
unary calls and health checks (``service.server``), and this module admits streams
before any work: at most ``max_streams`` in all and ``max_streams_per_client`` per
client (its peer host, or its token name where tokens are configured); the next one
gets RESOURCE_EXHAUSTED with a retry hint at once. Each admitted stream reports its
progress (a message accepted by the transport). A watchdog asks a stream that made
none for ``shed_seconds`` to drop what it prepared ahead (its lookahead, prepared
again identically when the client reads), and cancels a stream that made none for
``idle_seconds``, which frees its thread and what gRPC holds for it.

Memory is bounded server-wide, not only per stream. A stream prepares episodes ahead
of their turn only while the server's ``LookaheadBudget`` has room (otherwise it
prepares each one when its turn comes). A reply handed to gRPC stays in memory (our
bytes and the transport's copy) until its client takes it, so replies being sent are
bounded too: before packing its next reply a stream waits for room in ``send_bytes``
(a same-host stream once it is packed, for its message alone where its pixels went in a
segment: the same-host budget bounds those), and while any stream waits, the streams whose send has been stuck longest (each for
more than ``STALL_SECONDS``: their clients do not read) are cancelled to make room.
Clients reopen a cancelled stream at its next index, as after an idle cancel.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sampler_server.errors import ResourceExhausted
from sampler_server.service.telemetry import Telemetry

log = logging.getLogger("sampler_server.service")

RETRY_AFTER_SECONDS = 5
STALL_SECONDS = 1.0  # a send stuck this long, while others wait for room, is a client that does not read


def client_of(peer: str) -> str:
    """The client a peer string names, without its port: ``ipv4:127.0.0.1:5123`` -> ``ipv4:127.0.0.1``."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer  # unix sockets and others: the whole peer


@dataclass(eq=False)
class StreamSlot:
    """One admitted stream; ``progress()`` after each message, ``release()`` once at the end."""

    client: str
    cancel: Callable[[], None]
    admission: "StreamAdmission"
    last_progress: float = 0.0
    sending_since: float | None = None  # a reply is with gRPC since then, not yet taken
    send_charge: int = 0  # bytes of the send budget held for the reply being sent
    cancelled: bool = False
    shed: Callable[[], int] | None = None  # set by the stream: drops its prepared lookahead
    shed_done: bool = False
    released: bool = field(default=False, repr=False)

    def sending(self) -> None:
        """The reply this stream holds room for goes to gRPC now."""
        self.sending_since = self.admission.clock()

    def progress(self) -> None:
        """gRPC took the reply: the room it held is free again."""
        self.last_progress = self.admission.clock()
        self.sending_since = None
        self.shed_done = False
        self.admission.release_send(self)

    def release(self) -> None:
        self.admission._release(self)


class StreamAdmission:
    def __init__(self, max_streams: int, max_streams_per_client: int, idle_seconds: float,
                 clock: Callable[[], float] = time.monotonic, shed_seconds: float | None = None,
                 send_bytes: int = 32 << 20) -> None:
        self.max_streams = max_streams
        self.send_bytes = send_bytes
        self._send_used = 0
        self.shed_seconds = idle_seconds if shed_seconds is None else min(shed_seconds, idle_seconds)
        self.max_streams_per_client = max_streams_per_client
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._queue: collections.deque[object] = collections.deque()  # streams waiting for room, in order
        self._slots: set[StreamSlot] = set()
        self._per_client: dict[str, int] = {}
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.telemetry = Telemetry()  # the server's (service.telemetry): refusals and cancellations

    @property
    def open_streams(self) -> int:
        with self._lock:
            return len(self._slots)

    @property
    def send_used(self) -> int:
        """Bytes of the send budget held now."""
        return self._send_used

    def admit(self, client: str, cancel: Callable[[], None]) -> StreamSlot:
        """A slot for a new stream of ``client``, or ResourceExhausted naming the limit hit."""
        with self._lock:
            if len(self._slots) >= self.max_streams:
                self.telemetry.refused("max_streams")
                raise ResourceExhausted(
                    f"the server already serves {self.max_streams} streams (its --max-streams); "
                    f"retry in {RETRY_AFTER_SECONDS} s"
                )
            if self._per_client.get(client, 0) >= self.max_streams_per_client:
                self.telemetry.refused("max_streams_per_client")
                raise ResourceExhausted(
                    f"client {client} already has {self.max_streams_per_client} open streams "
                    f"(the server's --max-streams-per-client); close one or retry in {RETRY_AFTER_SECONDS} s"
                )
            slot = StreamSlot(client, cancel, self, self.clock())
            self._slots.add(slot)
            self._per_client[client] = self._per_client.get(client, 0) + 1
            return slot

    def _release(self, slot: StreamSlot) -> None:
        with self._lock:
            if slot.released:
                return
            slot.released = True
            self._slots.discard(slot)
            self._free_room(slot)
            left = self._per_client[slot.client] - 1
            if left:
                self._per_client[slot.client] = left
            else:
                del self._per_client[slot.client]

    def shed_idle(self) -> int:
        """Ask every stream idle for longer than ``shed_seconds`` to drop its prepared
        lookahead (once per idle spell); how many episodes were dropped."""
        now = self.clock()
        with self._lock:
            idle = [s for s in self._slots if not s.shed_done and s.shed is not None
                    and now - s.last_progress > self.shed_seconds]
            for slot in idle:
                slot.shed_done = True
        return sum(slot.shed() for slot in idle if slot.shed is not None)

    def cancel_idle(self) -> int:
        """Cancel every stream idle for longer than ``idle_seconds``; how many were cancelled."""
        now = self.clock()
        with self._lock:
            idle = [s for s in self._slots if not s.cancelled and now - s.last_progress > self.idle_seconds]
            for slot in idle:
                slot.cancelled = True
        for slot in idle:
            log.warning("stream of %s made no progress for %.0f s (its client does not read): cancelled",
                        slot.client, now - slot.last_progress)
            slot.cancel()
        self.telemetry.cancelled("idle", len(idle))
        return len(idle)

    def wait_for_room(self, slot: StreamSlot, nbytes: int, gone: Callable[[], bool]) -> None:
        """Hold ``nbytes`` of the send budget for ``slot``'s next reply, waiting while the
        budget is full (one reply always fits an empty budget) and cancelling stalled
        streams to make room. Returns early, holding nothing, once ``gone()``."""
        ticket = object()
        with self._room:
            self._queue.append(ticket)  # first come, first served: a reading stream is not starved
            try:
                while self._queue[0] is not ticket or (
                        self._send_used and self._send_used + nbytes > self.send_bytes):
                    if gone():
                        return
                    if self._queue[0] is ticket:
                        victims = self._stalled_victims(self._send_used + nbytes - self.send_bytes)
                        if victims:
                            self._room.release()
                            try:
                                self._cancel_stalled(victims)
                            finally:
                                self._room.acquire()
                            continue
                    self._room.wait(0.1)
                self._send_used += nbytes
                slot.send_charge += nbytes
            finally:
                self._queue.remove(ticket)
                self._room.notify_all()

    def release_send(self, slot: StreamSlot) -> None:
        with self._room:
            self._free_room(slot)

    def _free_room(self, slot: StreamSlot) -> None:
        if slot.send_charge:
            self._send_used -= slot.send_charge
            slot.send_charge = 0
            self._room.notify_all()

    def _stalled_victims(self, needed: int) -> list[tuple[StreamSlot, float]]:
        """Streams stuck in a send for more than STALL_SECONDS, longest first, until their
        room covers ``needed``; their room is freed now (cancelling frees gRPC's copy)."""
        now = self.clock()
        stalled = sorted((s for s in self._slots if s.sending_since is not None and not s.cancelled
                          and s.send_charge and now - s.sending_since > STALL_SECONDS),
                         key=lambda s: s.sending_since)
        victims = []
        for slot in stalled:
            if needed <= 0:
                break
            needed -= slot.send_charge
            self._free_room(slot)
            slot.cancelled = True
            victims.append((slot, now - slot.sending_since))
        return victims

    def _cancel_stalled(self, victims: list[tuple[StreamSlot, float]]) -> None:
        for slot, waited in victims:
            log.warning("stream of %s stuck %.1f s sending to a client that does not read, while other streams "
                        "wait for room (the server's --send-mb %d): cancelled", slot.client, waited,
                        self.send_bytes >> 20)
            slot.cancel()
        self.telemetry.cancelled("stalled", len(victims))

    def start(self) -> None:
        if self._watchdog is None:
            period = max(0.05, min(1.0, self.shed_seconds / 4))

            def watch() -> None:
                while not self._stop.wait(period):
                    try:
                        self.shed_idle()
                        self.cancel_idle()
                    except Exception:  # the watchdog must outlive any one stream's failure
                        log.exception("stream watchdog")

            self._watchdog = threading.Thread(target=watch, name="stream-watchdog", daemon=True)
            self._watchdog.start()

    def stop(self) -> None:
        self._stop.set()


class LookaheadBudget:
    """Bytes of episodes prepared ahead of their turn, server-wide. ``try_take`` never
    waits: a stream refused prepares its next episode when its turn comes instead."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used = 0
        self._lock = threading.Lock()

    def try_take(self, nbytes: int) -> bool:
        with self._lock:
            if self.used and self.used + nbytes > self.limit_bytes:
                return False
            self.used += nbytes
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes
