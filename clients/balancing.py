"""Many replicas behind one client: target syntax, round_robin, and noticing a lost replica.

Targets. ``HOST:PORT`` names one server: one connection (gRPC's ``pick_first``), as
always. A resolver target names many replicas and the channel spreads its calls over
every one that is connected, with gRPC's ``round_robin`` policy (set by service config):
``dns:///NAME:PORT`` (every address NAME resolves to: a Kubernetes headless Service
answers one per ready pod), ``ipv4:A.B.C.D:PORT,...`` or ``ipv6:[ADDR]:PORT,...`` (a
fixed list). Each stream and each unary call goes to the next connected replica in
turn (a stream stays on its replica until it ends or breaks); a replica that is gone is
skipped while it is.

Why any replica will do: an episode is a pure function of its request and index, so a
stream broken by a lost replica is reopened at its next index (``clients.stream``) on
whichever replica answers, and the caller sees exactly the sequence one server would
have sent. After a break the client opens a fresh channel, as it does with one server:
the target is resolved again (replicas that came or went are seen) and the client's
other open streams are reopened at their next index too.

Noticing a loss. A killed process's kernel resets its connections: the client's
streams fail at once (UNAVAILABLE). A lost node or link sends nothing, no reset, so
the channel checks (``Liveness``):
- keepalive: after ``keepalive_seconds`` without receiving anything on a connection,
  the client pings the server, and closes the connection when the ping is not answered
  within ``keepalive_timeout_seconds``; its streams then fail with UNAVAILABLE. gRPC
  also sets the socket's TCP_USER_TIMEOUT to the keepalive timeout, so bytes the client
  sent (flow-control updates while it reads) that go unacknowledged that long close the
  connection too. A stream's silence is noticed after at most keepalive + timeout
  (10 + 5 s by default; about 5 s while the client was reading).
  Pings go on while no call is open too, so an idle channel drops a dead replica
  before a call is sent to it. The server accepts pings 1 s apart, calls or not
  (``sampler_server.service.server``), so they do not earn a GOAWAY "too_many_pings".
- message wait: a stream that waits ``message_wait_seconds`` for its next message
  while its connection stays alive (a server that answers pings but sends nothing) is
  cancelled and reopened at that index (DEADLINE_EXCEEDED). The time the caller takes
  between two messages does not count.
Each break is logged (logger ``clients.balancing``, a warning naming the server, the
index the stream resumes at and the status) before the stream is reopened.

Ranks of one host (``rank_target``). Under torchrun (``WORLD_SIZE`` > 1) a fixed list
(``ipv4:``/``ipv6:`` with several addresses, as ``sampler-server serve --replicas N``
prints) is not spread round-robin: each rank's channel takes the list rotated by its
``LOCAL_RANK`` with gRPC's ``pick_first``, so rank r reads from address r mod M and the
others are its failover, tried in order when that one is gone. Round-robin would hand
each rank's one long stream to a replica by the order the channels happen to pick, and
two ranks on one replica leave another idle; it would also send a rank's calls to
replicas that never made it a same-host offer (their replies come in the message).
Outside torchrun, and for ``dns:///`` targets (whose list the resolver decides), the
channel balances round-robin as above. Episodes do not depend on the replica.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

log = logging.getLogger("clients.balancing")

BALANCED_SCHEMES = ("dns", "ipv4", "ipv6")
SERVER_MIN_PING_SECONDS = 1.0
"""The shortest ping interval the server accepts (its ``grpc.http2.min_ping_interval_without_data_ms``)."""
ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
PICK_FIRST = json.dumps({"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": False}}]})
"""In list order: the first address that connects serves every call until it is lost."""
FIXED_LISTS = ("ipv4", "ipv6")
TARGET_FORMS = ("HOST:PORT (one server), dns:///NAME:PORT (every replica NAME resolves to), "
                "ipv4:A.B.C.D:PORT,... or ipv6:[ADDR]:PORT,... (a list of replicas)")

_NAME = r"[A-Za-z0-9_.\-]+"
_PLAIN = re.compile(rf"^(\[[0-9A-Fa-f:.]+\]|{_NAME}):(\d{{1,5}})$")
_DNS = re.compile(rf"^dns:(?://({_NAME}(?::\d{{1,5}})?)?/)?(\[[0-9A-Fa-f:.]+\]|{_NAME}):(\d{{1,5}})$")
_IPV4 = re.compile(r"^([0-9.]+):(\d{1,5})$")
_IPV6 = re.compile(r"^\[([0-9A-Fa-f:.]+)\]:(\d{1,5})$")
_LOGGED = {grpc.StatusCode.UNAVAILABLE: logging.WARNING, grpc.StatusCode.DEADLINE_EXCEEDED: logging.WARNING,
           grpc.StatusCode.ABORTED: logging.WARNING, grpc.StatusCode.CANCELLED: logging.INFO}
"""A stream broken with one of these is reopened by the client; CANCELLED is routine (the
server cancels streams nobody read for its idle period), so it is logged at INFO only."""


@dataclass(frozen=True)
class Target:
    """A parsed server address: ``text`` is what gRPC is given, unchanged."""

    text: str
    scheme: str  # "" for HOST:PORT, else dns, ipv4, ipv6 or unix
    endpoints: tuple[str, ...]  # HOST:PORT of each listed replica; for dns, the name to resolve
    in_order: bool = False  # a list tried in order (pick_first), the first answering serves: see rank_target

    @property
    def balanced(self) -> bool:
        """Whether calls are spread over every replica the target names (round_robin)."""
        return self.scheme in BALANCED_SCHEMES and not self.in_order


def _port_ok(text: str) -> bool:
    return 0 < int(text) < 65536


def parse_target(text: str) -> Target:
    """A server address as ``SamplerClient`` and the trainers' ``--server`` take it.

    Raises:
        ValueError: ``got <text>, expected <the forms>`` (ports 1..65535 are required).
    """
    wrong = ValueError(f"got {text!r}, expected {TARGET_FORMS}")
    if not isinstance(text, str):
        raise wrong
    if text.startswith(("unix:", "unix-abstract:")) and len(text.split(":", 1)[1]) > 0:
        return Target(text, "unix", (text,))
    scheme, _, rest = text.partition(":")
    if scheme in ("ipv4", "ipv6"):
        pattern = _IPV4 if scheme == "ipv4" else _IPV6
        address_type = ipaddress.IPv4Address if scheme == "ipv4" else ipaddress.IPv6Address
        endpoints = []
        for part in rest.split(","):
            match = pattern.match(part)
            if match is None or not _port_ok(match.group(2)):
                raise wrong
            try:
                address_type(match.group(1))
            except ValueError:
                raise wrong from None
            endpoints.append(part)
        return Target(text, scheme, tuple(endpoints))
    if scheme == "dns":
        match = _DNS.match(text)
        if match is None or not _port_ok(match.group(3)):
            raise wrong
        return Target(text, "dns", (f"{match.group(2)}:{match.group(3)}",))
    match = _PLAIN.match(text)
    if match is None or not _port_ok(match.group(2)):
        raise wrong
    return Target(text, "", (text,))


@dataclass(frozen=True, kw_only=True)
class Liveness:
    """How soon a client notices a replica that went silent (see the module docstring).

    ``keepalive_seconds``: ping after this long without receiving anything (at least
    the server's 1 s). ``keepalive_timeout_seconds``: close the connection when a ping
    is not answered in this long. ``message_wait_seconds``: reopen a stream that waited
    this long for its next message (``math.inf``: never).
    """

    keepalive_seconds: float = 10.0
    keepalive_timeout_seconds: float = 5.0
    message_wait_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not SERVER_MIN_PING_SECONDS <= self.keepalive_seconds < math.inf:
            raise ValueError(f"keepalive_seconds: got {self.keepalive_seconds!r}, expected a finite number >= "
                             f"{SERVER_MIN_PING_SECONDS:g} (the server refuses pings more often)")
        if not 0 < self.keepalive_timeout_seconds < math.inf:
            raise ValueError(f"keepalive_timeout_seconds: got {self.keepalive_timeout_seconds!r}, "
                             "expected a finite number > 0")
        if not self.message_wait_seconds > 0:
            raise ValueError(f"message_wait_seconds: got {self.message_wait_seconds!r}, expected a number > 0 "
                             "(math.inf: never)")


def channel_options(target: Target, liveness: Liveness) -> list[tuple[str, Any]]:
    """gRPC channel options: keepalive for every target, round_robin for a balanced one."""
    options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", int(liveness.keepalive_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", int(liveness.keepalive_timeout_seconds * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),  # a server stream sends no data: keep pinging anyway
    ]
    if target.in_order:
        options.append(("grpc.service_config", PICK_FIRST))
    elif target.balanced:
        options.append(("grpc.service_config", ROUND_ROBIN))
    return options


# ---- nothing listening: a refusal to say at once, not to retry ----------------------------


def connect_endpoint(endpoint: str, scheme: str, timeout: float) -> socket.socket:
    """A socket connected to one ``endpoint`` of a target (``HOST:PORT``, or a ``unix:`` /
    ``unix-abstract:`` path where ``scheme`` is ``unix``), within ``timeout`` seconds.

    Raises:
        OSError: the connection failed (``ConnectionRefusedError`` where nothing listens).
    """
    if scheme == "unix":
        kind, _, path = endpoint.partition(":")
        path = "\0" + path if kind == "unix-abstract" else (path[2:] if path.startswith("//") else path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        return sock
    host, _, port = endpoint.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def _endpoint_refuses(endpoint: str, scheme: str, timeout: float) -> bool:
    """Whether connecting to ``endpoint`` is refused outright (no process listens there).
    Any other outcome (it connects, a timeout, a name that does not resolve) is not a refusal."""
    try:
        connect_endpoint(endpoint, scheme, timeout).close()
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False
    return False


def nothing_listens(target: Target, timeout: float = 1.0) -> bool:
    """Whether every address ``target`` names refuses connections: no server runs there,
    and retrying will not start one. A target with one live replica is not refused (the
    channel fails over to it); for ``dns:///`` every address the name resolves to is tried."""
    return all(_endpoint_refuses(endpoint, target.scheme, timeout) for endpoint in target.endpoints)


# ---- ranks of one host, each on its own replica ------------------------------------------


def torchrun_local_rank(environ: Mapping[str, str]) -> int | None:
    """``LOCAL_RANK`` where torchrun started this process with other ranks (``WORLD_SIZE`` > 1), else None.

    Raises:
        ValueError: ``environment NAME: got <value>, expected ...`` for a value that is no count.
    """
    def count(name: str, default: int, least: int) -> int:
        raw = environ.get(name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = least - 1
        if value < least:
            raise ValueError(f"environment {name}: got {raw!r}, expected an integer >= {least}")
        return value

    if count("WORLD_SIZE", 1, 1) <= 1:
        return None
    return count("LOCAL_RANK", 0, 0)


def rank_target(target: Target, local_rank: int | None) -> Target:
    """What the rank ``local_rank`` of a host dials: a fixed list of several addresses
    rotated so that address ``local_rank mod M`` comes first, tried in order (pick_first);
    any other target, or no rank (None), unchanged."""
    if local_rank is None or target.scheme not in FIXED_LISTS or len(target.endpoints) < 2:
        return target
    first = local_rank % len(target.endpoints)
    endpoints = target.endpoints[first:] + target.endpoints[:first]
    return Target(f"{target.scheme}:{','.join(endpoints)}", target.scheme, endpoints, in_order=True)


_announced: set[tuple[str, int]] = set()


def dialled_target(target: Target, environ: Mapping[str, str]) -> Target:
    """``rank_target`` for this process's torchrun rank (read from ``environ``); the first
    time a process dials a list this way it logs which address it prefers."""
    if target.scheme not in FIXED_LISTS or len(target.endpoints) < 2:
        return target  # nothing to prefer: the environment is not read
    local_rank = torchrun_local_rank(environ)
    dialled = rank_target(target, local_rank)
    if dialled.in_order and (target.text, local_rank) not in _announced:
        _announced.add((target.text, local_rank))
        log.info("local rank %d prefers replica %s of %s (pick_first; the others in turn are its failover)",
                 local_rank, dialled.endpoints[0], target.text)
    return dialled


# ---- the wait for each message of a stream, bounded ------------------------------------


class MessageWaitExceeded(grpc.RpcError):
    """A stream waited too long for its next message; retried like DEADLINE_EXCEEDED."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return self._details


class _Watchdog:
    """One thread per process that cancels the streams whose wait is past its deadline.
    A stream is armed only while a thread is inside its ``next`` (a few at a time), so
    nothing leaks and a scan of them all per wake is cheap."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._armed: dict[int, tuple[float, "WatchedStream"]] = {}
        self._wake = math.inf  # when the thread wakes next (it is woken sooner for an earlier deadline)
        self._thread: threading.Thread | None = None

    def arm(self, stream: "WatchedStream", deadline: float) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sampler-stream-watchdog", daemon=True)
                self._thread.start()
            self._armed[id(stream)] = (deadline, stream)
            if deadline < self._wake:
                self._lock.notify()

    def disarm(self, stream: "WatchedStream") -> None:
        with self._lock:
            self._armed.pop(id(stream), None)

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = [stream for deadline, stream in self._armed.values() if deadline <= now]
                for stream in due:
                    del self._armed[id(stream)]
                if not due:
                    self._wake = min((deadline for deadline, _ in self._armed.values()), default=math.inf)
                    self._lock.wait(None if self._wake == math.inf else self._wake - now)
                    self._wake = -math.inf  # awake: every arm notifies until the next wait
            for stream in due:
                stream._expire()


_watchdog = _Watchdog()


def _after_fork() -> None:
    global _watchdog
    _watchdog = _Watchdog()  # the parent's thread did not come along, and its lock may be held


os.register_at_fork(after_in_child=_after_fork)


class WatchedStream:
    """A server stream (a gRPC call) whose wait for each message is at most ``wait``
    seconds, and whose breaks are logged with the index it resumes at."""

    def __init__(self, call: Any, wait: float, *, what: str, address: str, start: int, step: int) -> None:
        self._call = call
        self._wait = wait
        self._what, self._address = what, address
        self._next_index, self._step = start, step
        self._expired = False
        self._closed = False

    def cancel(self) -> bool:
        return self._call.cancel()

    def close(self) -> None:
        """Cancel it for a consumer that stopped reading: not a break, so nothing is logged."""
        self._closed = True
        self._call.cancel()

    def _expire(self) -> None:
        self._expired = True
        self._call.cancel()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        watch = math.isfinite(self._wait)
        if watch:
            _watchdog.arm(self, time.monotonic() + self._wait)
        try:
            message = next(self._call)
        except grpc.RpcError as error:
            if self._expired:
                error = MessageWaitExceeded(f"no message from the server for {self._wait:g} s")
            if not self._closed:
                self._log(error)
            if self._expired:
                raise error from None
            raise
        finally:
            if watch:
                _watchdog.disarm(self)
        self._next_index += self._step
        return message

    def _log(self, error: grpc.RpcError) -> None:
        level = _LOGGED.get(error.code())
        if level is not None:
            log.log(level, "%s from %s broke (%s: %s); reopening it at index %d", self._what, self._address,
                    error.code().name, error.details(), self._next_index)


def watch_stream(call: Any, liveness: Liveness, *, what: str, address: str, start: int, step: int) -> WatchedStream:
    """``call`` (a server stream whose first message has index ``start``) with its wait
    for each message bounded by ``liveness.message_wait_seconds``."""
    return WatchedStream(call, liveness.message_wait_seconds, what=what, address=address, start=start, step=step)
