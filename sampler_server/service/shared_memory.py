"""The same-host transport on the server: pixels in shared-memory segments, bounded.

Negotiation. ``offer()`` writes a probe segment holding a random token and names it in
the OfferSameHost reply. Only a client that can open this server's segments (same
host, same /dev/shm, same user) reads the token; it unlinks the probe, which proves it
can rename and unlink this server's files too, and sends the token with its requests.
``accepts(token)`` holds for a token whose probe is gone and was not unlinked by this
server: across hosts, across containers without a shared /dev/shm, or for another
user, the probe cannot be read, no token is sent and replies stay in the message.

Segments. A stream whose request carried an accepted token gets a ``StreamSegments``;
its pixel replies (``messages.pixels_reply`` under ``messages.pixels_to``) are written
into a segment each, and the reply names it. A segment is WRITTEN until its client
maps it (renames it held, ``wire.segments``), HELD while the client's arrays use it,
and FREE once the client released it: the next reply of any stream that fits is
written into those pages under a new name, so a steady stream allocates and frees no
page. Memory stays bounded:
- a server-wide budget (``budget_bytes``, in whole pages, and ``MAX_SEGMENTS``) of
  every segment this server tracks (written, held or free). A reply needs room: free segments are unlinked to make it, then the
  oldest held ones (their clients keep the mappings; the pages become theirs). A reply
  that still does not fit goes in the message as usual (never a wait on other streams);
- per stream, after each reply is handed to gRPC the stream waits while ``ahead`` of
  the replies it sent are not yet mapped (its client reads slowly, or not at all: the
  servicer's idle watchdog and send budget then treat it as any unread stream), so a
  stream has at most ``ahead`` sent segments unmapped plus the one it packs next;
- a stream that ends cancelled or failed unlinks its written and held segments at once
  (a killed client's connection closes, which cancels its streams); one that ends well
  leaves its last replies to be read;
- a segment written or held for ``release_seconds`` is unlinked, and a free one unused
  for ``FREE_SECONDS``;
- ``close()`` (server stop) unlinks everything, and every name a segment can take is
  registered with multiprocessing's resource tracker, which unlinks what a killed
  server left.

Unlinking a held segment is always safe (a mapping outlives its name), and this server
never writes into a segment it did not see released. A written segment unlinked before
its client mapped it is a lost reply: the client asks for that index again
(``clients.core``), so reclaiming never changes what a client sees.
"""

from __future__ import annotations

import collections
import enum
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

from sampler_common.wire import segments as wire_segments
from sampler_common.wire.segments import HELD, RELEASED, SEGMENT_DIR, SegmentRef
from sampler_common.wire.tensors import TensorField, encode_with_tensors

log = logging.getLogger("sampler_server.service")

MAX_PROBES = 1024  # probes offered and not yet taken; beyond it the oldest is withdrawn
MAX_TOKENS = 4096  # accepted tokens remembered
POLL_SECONDS = (0.0002, 0.001)  # a waiting stream looks for its client's progress this often (first, at most)
REAP_SECONDS = 0.25
FREE_SECONDS = 10.0  # a released segment no reply reused for this long is unlinked
MAX_SEGMENTS = 4096  # segments tracked at most, whatever their sizes (tiny replies of a client that keeps them)
PAGE = 4096  # a segment takes whole pages of the budget


class State(enum.Enum):
    WRITTEN = "written"
    HELD = "held"
    FREE = "free"


@dataclass(eq=False)
class _Segment:
    name: str  # as written; held and free it has a suffix (wire.segments)
    size: int  # the file's size: what it takes of the budget
    since: float  # when it took its state
    stream: "StreamSegments | None"
    state: State = State.WRITTEN

    @property
    def path_name(self) -> str:
        return self.name + {State.WRITTEN: "", State.HELD: HELD, State.FREE: RELEASED}[self.state]


class SameHostTransport:
    """Server-wide: the probe tokens, the segments this server tracks, the budget."""

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
        self.used = 0  # bytes of the segments tracked
        self.written = 0  # replies written to segments, since start
        self.reused = 0  # ... of them into released segments
        self.reclaimed = 0  # written segments unlinked before their client mapped them
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
        """A segment holding ``buffers`` for ``owner``'s next reply (released pages when
        some fit, else new ones), or None when the budget has no room for it."""
        name = self._name("s")
        # registered before the file exists: a server killed between creating (or renaming)
        # it and registering it would leave it behind
        _track_all(name)
        try:
            written = self._write_named(owner, name, buffers, nbytes)
        except BaseException:
            _untrack_all(name)
            raise
        if written is None:
            _untrack_all(name)
        return written

    def _write_named(self, owner: "StreamSegments", name: str, buffers: Sequence[bytes | memoryview],
                     nbytes: int) -> str | None:
        charge = -(-nbytes // PAGE) * PAGE
        free = self._take_free(charge)
        if free is not None:
            size, done = max(free.size, charge), False
            try:
                done = wire_segments.rewrite_segment(free.path_name, name, buffers, self.directory)
            except OSError:
                pass  # unlinked, by rewrite_segment: try new pages
            finally:
                _untrack_all(free.name)
                if not done:
                    with self._lock:
                        self.used -= size  # gone: it no longer takes room
            if done:
                return self._written(owner, name, size, reused=True)
        if not self._room(charge, new=True):
            return None
        try:
            wire_segments.write_segment(name, buffers, self.directory)
        except BaseException as error:
            with self._lock:
                self.used -= charge
            if isinstance(error, OSError):  # /dev/shm full, say: this reply goes in the message
                log.warning("same-host transport: cannot write a %d-byte segment (%s); sending in the message",
                            nbytes, error.strerror or error)
                return None
            raise
        return self._written(owner, name, charge, reused=False)

    def _written(self, owner: "StreamSegments", name: str, size: int, reused: bool) -> str | None:
        """Track a segment just written (its size already counted in ``used``; its names
        registered with the resource tracker by ``_write``)."""
        with self._lock:
            if not owner.closed and not self._closed:
                segment = _Segment(name, size, self.clock(), owner)
                self._segments[name] = segment
                owner.unmapped[name] = segment
                self.written += 1
                self.reused += reused
                return name
            self.used -= size  # the stream ended while this one was written
        self._unlink_files(name)  # ``_write`` unregisters its names
        return None

    def _take_free(self, nbytes: int) -> _Segment | None:
        """A released segment for ``nbytes``, out of the pool: the smallest that holds
        them, else the largest (the write extends it: only the extra pages are new). Its
        size and the growth are counted in ``used``; None when there is none, or no room
        to grow one."""
        with self._lock:
            free = [s for s in self._segments.values() if s.state is State.FREE]
            held = [s.name for s in self._segments.values() if s.state is State.HELD] if not free else []
        if held and self.refresh(held):  # released since the reaper last looked?
            with self._lock:
                free = [s for s in self._segments.values() if s.state is State.FREE]
        with self._lock:
            free = [s for s in free if self._segments.get(s.name) is s and s.state is State.FREE]
            if not free:
                return None
            holding = [s for s in free if s.size >= nbytes]
            best = min(holding, key=lambda s: s.size) if holding else max(free, key=lambda s: s.size)
            del self._segments[best.name]
        if best.size < nbytes and not self._room(nbytes - best.size):
            with self._lock:
                self.used -= best.size
            self._unlink_all(best.name)
            return None
        return best

    def _room(self, nbytes: int, new: bool = False) -> bool:
        """Count ``nbytes`` in ``used`` if the budget has room (and, for a ``new``
        segment, the count), making room by unlinking free segments, then the oldest
        held ones."""
        if nbytes > self.budget_bytes:
            return False
        while True:
            with self._lock:
                if self._closed:
                    return False
                over = len(self._segments) + 1 - MAX_SEGMENTS if new else 0
                if self.used + nbytes <= self.budget_bytes and over <= 0:
                    self.used += nbytes
                    return True
                spare = [s for s in self._segments.values() if s.state is not State.WRITTEN]
                if not spare:
                    victims: list[_Segment] = []
                else:
                    spare.sort(key=lambda s: (s.state is State.HELD, s.since))  # free first, then held, oldest first
                    victims, needed = [], self.used + nbytes - self.budget_bytes
                    for segment in spare:
                        victims.append(segment)
                        needed -= segment.size
                        over -= 1
                        if needed <= 0 and over <= 0:
                            break
                    for segment in victims:
                        self._forget(segment)
            if not victims:
                self.refresh()  # perhaps some were released since the reaper last looked
                with self._lock:
                    if not any(s.state is not State.WRITTEN for s in self._segments.values()):
                        return False
                continue
            for segment in victims:
                self._unlink_all(segment.name)

    def _forget(self, segment: _Segment) -> None:
        """Under the lock: this server no longer tracks the segment; its room is free."""
        if self._segments.get(segment.name) is segment:
            del self._segments[segment.name]
        self.used -= segment.size
        if segment.stream is not None:
            segment.stream.unmapped.pop(segment.name, None)
            segment.stream.handed.discard(segment.name)
            segment.stream.held.pop(segment.name, None)

    def refresh(self, names: Sequence[str] | None = None) -> int:
        """Note what clients did to these segments (all, or ``names``): mapped (held),
        released (free), or unlinked; how many changed."""
        with self._lock:
            candidates = [s for s in (self._segments.values() if names is None else
                                      (self._segments.get(n) for n in names)) if s is not None]
        changes: list[tuple[_Segment, State, State | None]] = []
        for segment in candidates:
            state = segment.state
            if state is State.FREE or wire_segments.segment_exists(segment.path_name, self.directory):
                continue
            if state is State.WRITTEN and wire_segments.segment_exists(segment.name + HELD, self.directory):
                changes.append((segment, state, State.HELD))
            elif wire_segments.segment_exists(segment.name + RELEASED, self.directory):
                changes.append((segment, state, State.FREE))
            else:
                changes.append((segment, state, None))  # unlinked by its client (or renamed in between)
        gone = []
        now = self.clock()
        with self._lock:
            for segment, was, state in changes:
                if segment.state is not was or self._segments.get(segment.name) is not segment:
                    continue  # another thread noted it meanwhile
                if state is None:
                    self._forget(segment)
                    gone.append(segment.name)
                    continue
                segment.state, segment.since = state, now
                if segment.stream is not None:
                    segment.stream.unmapped.pop(segment.name, None)
                    segment.stream.handed.discard(segment.name)
                    if state is State.HELD:
                        segment.stream.held[segment.name] = segment
                    else:
                        segment.stream.held.pop(segment.name, None)
                if state is State.FREE:
                    segment.stream = None
        for name in gone:
            _untrack_all(name)
        return len(changes)

    def reclaim(self, names: Sequence[str]) -> int:
        """Unlink these segments (written or held) now; how many were written, unmapped."""
        with self._lock:
            taken = [self._segments[n] for n in names if n in self._segments]
            unmapped = sum(1 for s in taken if s.state is State.WRITTEN)
            for segment in taken:
                self._forget(segment)
        for segment in taken:
            self._unlink_all(segment.name)
        self.reclaimed += unmapped
        return unmapped

    def _unlink(self, name: str) -> bool:
        gone = wire_segments.unlink_segment(name, self.directory)
        _untrack(name)
        return gone

    def _unlink_all(self, name: str) -> None:
        """Unlink a segment under whichever of its names it has, and unregister them."""
        self._unlink_files(name)
        _untrack_all(name)

    def _unlink_files(self, name: str) -> None:
        """The file has one name at a time (its client may rename it meanwhile): tried
        in the order it moves."""
        for suffix in ("", HELD, RELEASED):
            if wire_segments.unlink_segment(name + suffix, self.directory):
                break

    def reap(self) -> None:
        """Releases, timeouts and expired probes (the reaper thread calls this)."""
        self.refresh()
        now = self.clock()
        with self._lock:
            late = [s.name for s in self._segments.values()
                    if s.state is not State.FREE and s.since < now - self.release_seconds]
            idle = [s for s in self._segments.values() if s.state is State.FREE and s.since < now - FREE_SECONDS]
            for segment in idle:
                self._forget(segment)
            stale = [t for t, (_, created) in self._probes.items() if created < now - self.release_seconds]
            probes = [self._probes.pop(t)[0] for t in stale]
        if late:
            count = self.reclaim(late)
            if count:
                log.warning("same-host transport: %d segment(s) not taken for %.0f s reclaimed", count,
                            self.release_seconds)
        for segment in idle:
            self._unlink_all(segment.name)
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
        """Unlink every segment and probe this server still tracks (server stop)."""
        with self._lock:
            self._closed = True
            names = list(self._segments)
            for segment in list(self._segments.values()):
                self._forget(segment)
            probes = [name for name, _ in self._probes.values()]
            self._probes.clear()
        self._stop.set()
        for name in names:
            self._unlink_all(name)
        for name in probes:
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
        # changed under the transport's lock:
        self.unmapped: dict[str, _Segment] = {}  # written, not yet mapped by the client
        self.handed: set[str] = set()  # of those, the ones sent (handed to gRPC)
        self.held: dict[str, _Segment] = {}  # mapped, not yet released
        self.closed = False

    def reply(self, header: Any, tensors: Sequence[TensorField]) -> bytes | None:
        """``header`` with ``tensors`` in one segment, or None (no room, or nothing to put
        there): the caller then encodes them in the message."""
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

    def sent(self, reply: bytes) -> bool:
        """``reply`` (built here, or in the message) was handed to gRPC; whether its pixels
        are in a segment of this stream."""
        with self.transport._lock:
            names = [name for name in self.unmapped if name.encode() in reply]
            self.handed.update(names)
        return bool(names)

    def holds(self, reply: bytes) -> bool:
        """Whether ``reply``'s pixels are in a segment of this stream (not in the message)."""
        with self.transport._lock:
            return any(name.encode() in reply for name in self.unmapped)

    def wait(self, gone: Callable[[], bool]) -> None:
        """Until fewer than ``ahead`` of the replies this stream sent are unmapped (its
        client took the others), or ``gone()``."""
        delay = POLL_SECONDS[0]
        while len(self.handed) >= self.transport.ahead and not gone():
            if self.transport.refresh(list(self.handed)):
                continue
            time.sleep(delay)
            delay = min(POLL_SECONDS[1], delay * 2)

    def discard(self, reply: bytes) -> None:
        """A reply built here and never sent: unlink its segment."""
        with self.transport._lock:
            names = [name for name in self.unmapped if name.encode() in reply]
        if names:
            self.transport.reclaim(names)

    def end(self, reclaim: bool) -> None:
        """The stream is over: with ``reclaim`` (cancelled, failed) its written and held
        segments are unlinked now; otherwise its client may still read them (and
        release them, or the timeout takes them)."""
        with self.transport._lock:
            self.closed = True
            names = list(self.unmapped) + list(self.held)
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


def _track_all(name: str) -> None:
    """Every name the segment may take (its client renames it)."""
    for suffix in ("", HELD, RELEASED):
        _track(name + suffix)


def _untrack_all(name: str) -> None:
    for suffix in ("", HELD, RELEASED):
        _untrack(name + suffix)
