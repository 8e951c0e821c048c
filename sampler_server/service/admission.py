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
``idle_seconds``, which frees its thread and what gRPC holds for it. So a stream
whose client stopped reading holds, after ``shed_seconds``, only the messages gRPC
already accepted; a reading stream holds at most the servicer's lookahead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sampler_server.errors import ResourceExhausted

log = logging.getLogger("sampler_server.service")

RETRY_AFTER_SECONDS = 5


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
    cancelled: bool = False
    shed: Callable[[], int] | None = None  # set by the stream: drops its prepared lookahead
    shed_done: bool = False
    released: bool = field(default=False, repr=False)

    def progress(self) -> None:
        self.last_progress = self.admission.clock()
        self.shed_done = False

    def release(self) -> None:
        self.admission._release(self)


class StreamAdmission:
    def __init__(self, max_streams: int, max_streams_per_client: int, idle_seconds: float,
                 clock: Callable[[], float] = time.monotonic, shed_seconds: float | None = None) -> None:
        self.max_streams = max_streams
        self.shed_seconds = idle_seconds if shed_seconds is None else min(shed_seconds, idle_seconds)
        self.max_streams_per_client = max_streams_per_client
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._slots: set[StreamSlot] = set()
        self._per_client: dict[str, int] = {}
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    @property
    def open_streams(self) -> int:
        with self._lock:
            return len(self._slots)

    def admit(self, client: str, cancel: Callable[[], None]) -> StreamSlot:
        """A slot for a new stream of ``client``, or ResourceExhausted naming the limit hit."""
        with self._lock:
            if len(self._slots) >= self.max_streams:
                raise ResourceExhausted(
                    f"the server already serves {self.max_streams} streams (its --max-streams); "
                    f"retry in {RETRY_AFTER_SECONDS} s"
                )
            if self._per_client.get(client, 0) >= self.max_streams_per_client:
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
        return len(idle)

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
