"""The same-host transport on the server: pixels in shared-memory segments, bounded.

Negotiation. ``offer()`` writes a probe segment holding a random token and names it in
the OfferSameHost reply. Only a client that can open this server's segments (same
host, same /dev/shm, same user) reads the token; it unlinks the probe, which proves it
can release segments too, and sends the token with its requests. ``accepts(token)``
holds for a token whose probe was unlinked by someone other than this server: across
hosts, across containers without a shared /dev/shm, or for another user, the probe
cannot be read, no token is sent and replies stay in the message.

Segments. A stream whose request carried an accepted token gets a ``StreamSegments``;
its pixel replies (``messages.pixels_reply`` under ``messages.pixels_to``) are written
into one fresh segment each, and the reply names it. The client maps the segment and
unlinks it: that is its release. Memory stays bounded:
- a server-wide budget (``budget_bytes``) of segments not yet released; a reply that
  does not fit goes in the message as usual (never a wait on other streams);
- per stream, after each reply is handed to gRPC the stream waits while ``ahead`` of
  the replies it sent are unreleased (its client reads slowly, or not at all: the
  servicer's idle watchdog and send budget then treat it as any unread stream), so a
  stream holds at most ``ahead`` sent segments plus the one it packs next;
- a stream that ends cancelled or failed unlinks its unreleased segments at once (a
  killed client's connection closes, which cancels its streams); one that ends well
  leaves its last replies to be read, and the timeout takes any left;
- a segment unreleased ``release_seconds`` after it was written is unlinked;
- ``close()`` (server stop) unlinks everything, and each segment is also registered
  with multiprocessing's resource tracker, which unlinks what a killed server left.

A segment reclaimed before its client mapped it is a lost reply: the client asks for
that index again (``clients.core``), so reclaiming never changes what a client sees.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

from sampler_server.wire import segments as wire_segments
from sampler_server.wire.segments import SEGMENT_DIR, SegmentRef
from sampler_server.wire.tensors import TensorField, encode_with_tensors

log = logging.getLogger("sampler_server.service")

MAX_PROBES = 1024  # probes offered and not yet taken; beyond it the oldest is withdrawn
MAX_TOKENS = 4096  # accepted tokens remembered
POLL_SECONDS = (0.0002, 0.005)  # a waiting stream looks for releases this often (first, at most)
REAP_SECONDS = 0.25


@dataclass
class _Segment:
    name: str
    nbytes: int
    created: float
    stream: "StreamSegments | None"


class SameHostTransport:
    """Server-wide: the probe tokens, the segments not yet released, the budget."""

    def __init__(self, budget_bytes: int, release_seconds: float = 60.0, ahead: int = 2,
                 directory: Path = SEGMENT_DIR, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_bytes = budget_bytes
        self.release_seconds = release_seconds
        self.ahead = ahead
        self.directory = directory
        self.clock = clock
        self.prefix = f"{wire_segments.NAME_PREFIX}{os.getpid() & 0xFFFFFFFF:08x}{secrets.token_hex(4)}"
        self.reason = "" if budget_bytes > 0 else "disabled on this server (serve --shm-mb 0)"
        if not self.reason:
            missing = wire_segments.available(directory)
            self.reason = f"no shared memory: {missing}" if missing else ""
        self.used = 0
        self.written = 0  # replies written to segments, since start (tests, logs)
        self.reclaimed = 0  # segments unlinked by this server, unreleased
        self._lock = threading.Lock()
        self._names = itertools.count()
        self._segments: dict[str, _Segment] = {}
        self._probes: collections.OrderedDict[str, tuple[str, float]] = collections.OrderedDict()
        self._tokens: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._closed = False
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return not self.reason and not self._closed

    def _name(self, tag: str) -> str:
        return f"{self.prefix}-{tag}{next(self._names):x}"

    # ---- negotiation ---------------------------------------------------------------

    def offer(self) -> tuple[str, str]:
        """(probe segment name, "") or ("", why there is no same-host transport)."""
        if not self.enabled:
            return "", self.reason or "the server is stopping"
        token = secrets.token_hex(16)
        name = self._name("p")
        try:
            wire_segments.write_segment(name, [token.encode("ascii")], self.directory)
        except OSError as error:
            return "", f"no shared memory: cannot write {self.directory / name} ({error.strerror or error})"
        _track(name)
        withdrawn = []
        with self._lock:
            self._probes[token] = (name, self.clock())
            while len(self._probes) > MAX_PROBES:
                withdrawn.append(self._probes.popitem(last=False)[1][0])
        for old in withdrawn:
            self._unlink(old)
        self._start_reaper()
        return name, ""

    def accepts(self, token: str) -> bool:
        """Whether replies to a request carrying ``token`` may use segments."""
        if not token or not self.enabled:
            return False
        with self._lock:
            if token in self._tokens:
                self._tokens.move_to_end(token)
                return True
            probe = self._probes.get(token)
            if probe is None or wire_segments.segment_exists(probe[0], self.directory):
                return False  # unknown, expired, or its client did not (could not) unlink the probe
            del self._probes[token]
            self._tokens[token] = None
            while len(self._tokens) > MAX_TOKENS:
                self._tokens.popitem(last=False)
        _untrack(probe[0])
        return True

    def stream(self, token: str) -> "StreamSegments | None":
        """The segments of one stream (or unary reply), or None: replies go in the message."""
        return StreamSegments(self) if self.accepts(token) else None

    # ---- segments ------------------------------------------------------------------

    def _write(self, owner: "StreamSegments", buffers: Sequence[bytes | memoryview], nbytes: int) -> str | None:
        """A new segment holding ``buffers`` charged to ``owner``, or None when the budget
        has no room for it (after taking note of every release so far)."""
        if not self._take(nbytes):
            self.refresh()
            if not self._take(nbytes):
                return None
        name = self._name("s")
        try:
            wire_segments.write_segment(name, buffers, self.directory)
        except BaseException as error:
            with self._lock:
                self.used -= nbytes
            if isinstance(error, OSError):  # /dev/shm full, say: this reply goes in the message
                log.warning("same-host transport: cannot write a %d-byte segment (%s); sending in the message",
                            nbytes, error.strerror or error)
                return None
            raise
        _track(name)
        with self._lock:
            if not owner.closed and not self._closed:
                self._segments[name] = _Segment(name, nbytes, self.clock(), owner)
                owner.unreleased[name] = nbytes
                self.written += 1
                return name
            self.used -= nbytes  # the stream ended while this one was written
        self._unlink(name)
        return None

    def _take(self, nbytes: int) -> bool:
        with self._lock:
            if self._closed or self.used + nbytes > self.budget_bytes:
                return False
            self.used += nbytes
            return True

    def _forget(self, segment: _Segment) -> None:
        """Under the lock: the segment is released or reclaimed; its room is free."""
        del self._segments[segment.name]
        self.used -= segment.nbytes
        if segment.stream is not None:
            segment.stream.unreleased.pop(segment.name, None)
            segment.stream.handed.discard(segment.name)

    def refresh(self, names: Sequence[str] | None = None) -> int:
        """Note the segments (all, or ``names``) whose clients released them; how many."""
        with self._lock:
            candidates = list(self._segments) if names is None else [n for n in names if n in self._segments]
        gone = [n for n in candidates if not wire_segments.segment_exists(n, self.directory)]
        released = []
        with self._lock:
            for name in gone:
                segment = self._segments.get(name)
                if segment is not None:  # not noted by another thread meanwhile
                    self._forget(segment)
                    released.append(name)
        for name in released:
            _untrack(name)
        return len(released)

    def reclaim(self, names: Sequence[str]) -> int:
        """Unlink these segments if still unreleased (their client will not map them); how many."""
        with self._lock:
            taken = [self._segments[n] for n in names if n in self._segments]
            for segment in taken:
                self._forget(segment)
        count = sum(self._unlink(segment.name) for segment in taken)
        self.reclaimed += count
        return count

    def _unlink(self, name: str) -> bool:
        gone = wire_segments.unlink_segment(name, self.directory)
        _untrack(name)
        return gone

    def reap(self) -> None:
        """Releases, timeouts and expired probes (the reaper thread calls this)."""
        self.refresh()
        deadline = self.clock() - self.release_seconds
        with self._lock:
            late = [s.name for s in self._segments.values() if s.created < deadline]
            stale = [t for t, (_, created) in self._probes.items() if created < deadline]
            probes = [self._probes.pop(t)[0] for t in stale]
        if late:
            count = self.reclaim(late)
            if count:
                log.warning("same-host transport: %d segment(s) unreleased for %.0f s reclaimed", count,
                            self.release_seconds)
        for name in probes:
            self._unlink(name)

    def _start_reaper(self) -> None:
        with self._lock:
            if self._reaper is not None or self._closed:
                return

            def run() -> None:
                while not self._stop.wait(REAP_SECONDS):
                    try:
                        self.reap()
                    except Exception:  # the reaper must outlive any one failure
                        log.exception("same-host transport reaper")

            self._reaper = threading.Thread(target=run, name="shm-reaper", daemon=True)
            self._reaper.start()

    def close(self) -> None:
        """Unlink every segment and probe this server still owns (server stop)."""
        with self._lock:
            self._closed = True
            names = list(self._segments) + [name for name, _ in self._probes.values()]
            for segment in list(self._segments.values()):
                self._forget(segment)
            self._probes.clear()
        self._stop.set()
        for name in names:
            self._unlink(name)
        if self._reaper is not None:
            self._reaper.join(timeout=5)

    def owned(self) -> list[str]:
        """Names of this server's files in the segment directory now (tests, diagnostics)."""
        try:
            return sorted(n for n in os.listdir(self.directory) if n.startswith(self.prefix))
        except OSError:
            return []


class StreamSegments:
    """The segments of one stream: the pixel sink its replies are built under."""

    def __init__(self, transport: SameHostTransport) -> None:
        self.transport = transport
        self.unreleased: dict[str, int] = {}  # name -> bytes; changed under the transport's lock
        self.handed: set[str] = set()  # of those, the ones sent (handed to gRPC)
        self.closed = False

    def reply(self, header: Any, tensors: Sequence[TensorField]) -> bytes | None:
        """``header`` with ``tensors`` in one new segment, or None (no room, or nothing to
        put there): the caller then encodes them in the message."""
        nbytes = sum(t.nbytes for t in tensors)
        if nbytes == 0 or self.closed:
            return None
        name = self.transport._write(self, [b for t in tensors for b in t.buffers], nbytes)
        if name is None:
            return None
        placed, offset = [], 0
        for tensor in tensors:
            size = tensor.nbytes
            placed.append(replace(tensor, buffers=(), segment=SegmentRef(name, offset, size)))
            offset += size
        return encode_with_tensors(header, placed)

    def sent(self, reply: bytes) -> None:
        """``reply`` (built here, or in the message) was handed to gRPC."""
        with self.transport._lock:
            self.handed.update(name for name in self.unreleased if name.encode() in reply)

    def wait(self, gone: Callable[[], bool]) -> None:
        """Until fewer than ``ahead`` of the replies this stream sent are unreleased (its
        client mapped the others), or ``gone()``."""
        delay = POLL_SECONDS[0]
        while len(self.handed) >= self.transport.ahead and not gone():
            if self.transport.refresh(list(self.handed)):
                continue
            time.sleep(delay)
            delay = min(POLL_SECONDS[1], delay * 2)

    def discard(self, reply: bytes) -> None:
        """A reply built here and never sent: unlink its segment."""
        with self.transport._lock:
            names = [name for name in self.unreleased if name.encode() in reply]
        if names:
            self.transport.reclaim(names)

    def end(self, reclaim: bool) -> None:
        """The stream is over: with ``reclaim`` (cancelled, failed) its unreleased segments
        are unlinked now; otherwise its client may still read them (the timeout applies)."""
        with self.transport._lock:
            self.closed = True
            names = list(self.unreleased)
        if reclaim and names:
            self.transport.reclaim(names)


def _track(name: str) -> None:
    """Registered with the resource tracker: unlinked by it if this server is killed."""
    try:
        resource_tracker.register("/" + name, "shared_memory")
    except Exception:  # no tracker (an exotic platform): close() still cleans up
        pass


def _untrack(name: str) -> None:
    try:
        resource_tracker.unregister("/" + name, "shared_memory")
    except Exception:
        pass
