"""The connection to a server: channel, TLS and token, retries with backoff, same host.

Security: against a server with TLS the client is given the CA that signed the
server's certificate (``tls_ca``; plus its own certificate and key where the server
requires client certificates), and against one that checks tokens a bearer token,
sent as ``authorization: Bearer <token>`` metadata on every call and stream. Unset,
they come from ``SAMPLER_TLS_CA`` / ``SAMPLER_TLS_CERT`` / ``SAMPLER_TLS_KEY`` (file
paths) and ``SAMPLER_TOKEN`` (the token itself); with none, the channel is plaintext
and carries no token (the loopback default). UNAUTHENTICATED and PERMISSION_DENIED are
not retried: a token does not become valid by asking again. UNAUTHENTICATED is a
``ConnectionMismatch`` saying whether a token was missing or unknown and how to give one.

Mismatches: a client and a server that disagree on how to connect (one uses TLS and the
other not, a CA that did not sign the server's certificate, a certificate for another
host, a client certificate required or refused) never connect, however long the client
waits. Where the channel first fails before any server answered and the address accepts
connections, the client asks the server with a few bytes of its own (``clients.mismatch``:
a TLS ClientHello, the HTTP/2 preface, the handshake gRPC makes) and raises
``ConnectionMismatch`` at once, one line naming the cause and the setting that fixes it,
instead of retrying for minutes.

Retries: a call that fails with a retryable status (``RETRYABLE``) is sent again after
an exponential backoff (``RetryPolicy``), on a fresh connection; any other status, or
too many failures in a row, is a ``SamplerClientError`` naming the server and its
message. One exception: where no server has answered yet and every address refuses the
connection (nothing listens there: a wrong port, a server not started), the first
attempt raises ``NothingListens`` within a second or two instead of retrying for
minutes. Once a server has answered, a refusal is a restart or a lost replica and is
retried as above.

Same host: when the client runs on the server's host (and shares its /dev/shm), pixels
need not cross a socket. By default the client asks the server for a probe segment
(OfferSameHost), reads its token and unlinks it; then its requests carry the token and
the server writes each reply's pixels into a shared-memory segment the reply names
(``sampler_common.wire.segments``). The client maps it: its arrays are views of that
mapping (read-only, as always), and when the last of them is gone the segment goes back
to the server, which writes a later reply into the same pages.
Across hosts, for another user, or against an older server, the probe cannot be read
and replies come in the message as before; the arrays are bit-identical either way.
A reply whose segment is gone (reclaimed by the server) is asked for again at its
index; twice in a row, and the client goes back to the plain transport. Opt out with
``SamplerClient(..., same_host=False)`` or ``SAMPLER_SAME_HOST=0``.

Many replicas: an address such as ``dns:///sampler.ns.svc:50051`` or
``ipv4:10.0.0.1:50051,10.0.0.2:50051`` spreads calls and streams over every replica with
gRPC's round_robin (``clients.balancing``); under torchrun, each rank of a host reads from
its own replica of a fixed list (rank r from address r mod M, the others its failover).
Keepalive pings and a bounded wait for each message (``Liveness``) notice a replica that
went silent without a reset. Same-host tokens stay safe: a replica ignores a token it did
not issue (its replies come in the message).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc
from sampler_common.wire.segments import SegmentLost, read_probe

from clients.balancing import Liveness, channel_options, dialled_target, nothing_listens, parse_target
from clients.errors import ConnectionMismatch, NothingListens, SamplerClientError
from clients.mismatch import TlsSettings, diagnose

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED})
STREAM_RETRYABLE = RETRYABLE | {grpc.StatusCode.CANCELLED}
"""A stream the server cancelled (its client read nothing for the server's idle period,
e.g. a long evaluation pause) is reopened at the next index like a broken one."""

Reply = TypeVar("Reply")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8          # consecutive failed attempts before giving up
    initial_backoff: float = 0.2   # seconds
    max_backoff: float = 5.0
    multiplier: float = 2.0


def check_tls_pair(cert: object, key: object, names: str = "tls_cert and tls_key") -> None:
    """A client certificate comes with its key: both or neither (``names`` says where
    they were given, e.g. the trainers' "arguments --tls-cert/--tls-key")."""
    if (cert is None) != (key is None):
        raise ValueError(f"{names}: expected both or neither")


def tls_material(ca: str | Path | None, cert: str | Path | None,
                 key: str | Path | None) -> tuple[bytes, bytes | None, bytes | None] | None:
    """(CA, key, certificate chain) as PEM bytes, or None for plaintext. Bytes, not
    credentials, so that a client pickles into DataLoader workers."""
    if ca is None:
        if cert is not None or key is not None:
            raise ValueError("tls_cert/tls_key: a client certificate needs tls_ca (the CA of the server's certificate)")
        return None
    check_tls_pair(cert, key)

    def read(path: str | Path, what: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as error:
            raise ValueError(f"{what}: cannot read {path} ({error.strerror or error})") from None

    return (read(ca, "tls_ca"), read(key, "tls_key") if key is not None else None,
            read(cert, "tls_cert") if cert is not None else None)


def same_host_setting(value: bool | None) -> bool:
    """``same_host`` as given, else ``SAMPLER_SAME_HOST`` (unset: auto, i.e. on where it works)."""
    if value is not None:
        return bool(value)
    raw = os.environ.get("SAMPLER_SAME_HOST", "").strip().lower()
    if raw in ("", "auto", "1", "on", "true", "yes"):
        return True
    if raw in ("0", "off", "false", "no"):
        return False
    raise ValueError(f"SAMPLER_SAME_HOST: got {raw!r}, expected auto, on or off (or 1 / 0)")


class _Unreachable(grpc.RpcError):
    """Connecting timed out; treated like UNAVAILABLE (retried, then reported)."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details


class Channel:
    """One channel to a server (or its replicas) and what every call on it shares: the
    credentials, the retry policy, the same-host transport. Pickles without its
    connection, so a copy in another process connects (and probes) on its own."""

    def __init__(
        self,
        address: str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        prefetch: int = 2,
        max_message_mb: int = 1024,
        connect_timeout: float = 10.0,
        call_timeout: float = 120.0,
        tls_ca: str | Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        token: str | None = None,
        same_host: bool | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        """Arguments as ``SamplerClient``'s; the environment fills in TLS, token and same host."""
        try:
            target = parse_target(address)
        except ValueError as error:
            raise ValueError(f"address: {error}") from None
        self.address = address
        self.target = target
        self._reached = False  # a server answered here once: a refusal since is a restart, retried
        dialled = dialled_target(target, os.environ)  # under torchrun, a rank's own replica first
        self.dialled = dialled.text
        self.liveness = liveness if liveness is not None else Liveness()
        ca = tls_ca or os.environ.get("SAMPLER_TLS_CA") or None
        cert = tls_cert or os.environ.get("SAMPLER_TLS_CERT") or None
        key = tls_key or os.environ.get("SAMPLER_TLS_KEY") or None
        self._tls = tls_material(ca, cert, key)
        self._tls_settings = None if self._tls is None else TlsSettings(
            self._tls[0], str(ca), None if cert is None else str(cert), None if key is None else str(key))
        token = token or os.environ.get("SAMPLER_TOKEN", "").strip() or None
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.call_timeout = call_timeout
        self.retry = retry
        self.prefetch = max(1, prefetch)
        self.connect_timeout = connect_timeout
        self._options = [
            ("grpc.max_receive_message_length", max_message_mb << 20),
            ("grpc.max_send_message_length", 64 << 20),
            *channel_options(dialled, self.liveness),
        ]
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.SamplerStub | None = None
        self.same_host = same_host_setting(same_host)
        self._same_host: str | None = None  # the server's probe token ("" = plain); None = not asked yet
        self._lost_in_a_row = 0

    # ---- the connection --------------------------------------------------------------

    def connect(self) -> grpc.Channel:
        """The channel, connected now (never waits past connect_timeout)."""
        self.stub()
        assert self._channel is not None
        return self._channel

    def stub(self) -> pb_grpc.SamplerStub:
        """A stub on a channel that is connected now (never waits past connect_timeout)."""
        if self._stub is None:
            if self._tls is None:
                channel = grpc.insecure_channel(self.dialled, options=self._options)
            else:
                ca, key, chain = self._tls
                credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=chain)
                channel = grpc.secure_channel(self.dialled, credentials, options=self._options)
            try:
                self._wait_ready(channel)
            except BaseException:
                channel.close()
                raise
            self._reached = True
            self._channel = channel
            self._stub = pb_grpc.SamplerStub(channel)
        return self._stub

    def _wait_ready(self, channel: grpc.Channel) -> None:
        """Return once ``channel`` is connected; ``_Unreachable`` after connect_timeout, or
        ``NothingListens`` at once where no server was reached yet and every address refuses
        connections (a server that restarts, once reached, is waited for and retried)."""
        changed = threading.Event()
        states: list[grpc.ChannelConnectivity] = []
        seen, probed = 0, False

        def note(state: grpc.ChannelConnectivity) -> None:  # on gRPC's thread
            states.append(state)
            changed.set()

        channel.subscribe(note, try_to_connect=True)
        deadline = time.monotonic() + self.connect_timeout
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                changed.wait(remaining)
                changed.clear()
                state = states[-1] if states else None
                if state is grpc.ChannelConnectivity.READY:
                    return
                failed = grpc.ChannelConnectivity.TRANSIENT_FAILURE in states[seen:]  # since the last look
                seen = len(states)
                if failed and not self._reached:
                    timeout = min(1.0, max(remaining, 0.05))
                    if nothing_listens(self.target, timeout=timeout):
                        raise NothingListens(self.address)
                    if not probed:  # once: the server's answer does not change while we wait
                        probed = True
                        found = diagnose(self.target, self._tls_settings, timeout=timeout)
                        if found is not None:
                            raise ConnectionMismatch(self.address, found.cause, found.fix)
        finally:
            channel.unsubscribe(note)
        tls = " over TLS (is the CA the one that signed the server's certificate? does the server use TLS?)"
        raise _Unreachable(f"no server answered at {self.address} within {self.connect_timeout:g} s"
                           f"{tls if self._tls is not None else ''}")

    def reset(self) -> None:
        """Drop the connection; the next call connects again (perhaps to another server)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None
        self._same_host = None  # another server may answer now: ask again

    def close(self) -> None:
        self.reset()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_channel"] = None
        state["_stub"] = None
        state["_same_host"] = None  # a process elsewhere must open the probe itself
        return state

    # ---- unary calls, retried --------------------------------------------------------

    def call(self, method: str, request: Any) -> Any:
        """The reply of RPC ``method`` (e.g. "ListSources"), retried as the policy says."""
        attempt = 0
        while True:
            try:
                return getattr(self.stub(), method)(request, timeout=self.call_timeout, metadata=self.metadata)
            except grpc.RpcError as error:
                attempt = self.backoff(error, attempt, method)

    def call_with_pixels(self, method: str, request_for: Callable[[str], Any], parse: Callable[[Any], Reply]) -> Reply:
        """``parse`` of the reply to ``request_for(same-host token)``; asked again where the
        reply's shared-memory segment was gone before it was mapped."""
        while True:
            sent = request_for(self.same_host_token())
            try:
                return parse(self.call(method, sent))
            except SegmentLost as error:
                self.lost_reply(str(error), method)

    def backoff(self, error: grpc.RpcError, attempt: int, what: str,
                retryable: frozenset[grpc.StatusCode] = RETRYABLE) -> int:
        """After the failed ``attempt``-th try of ``what``: wait and return the attempt count,
        or raise ``SamplerClientError`` (not retryable, or too many attempts)."""
        code = error.code()
        if code is grpc.StatusCode.UNAUTHENTICATED:
            raise self._token_refused() from None
        if code not in retryable:
            raise SamplerClientError(f"{what} on {self.address}: {code.name}: {error.details()}", code) from None
        attempt += 1
        if attempt >= self.retry.max_attempts:
            raise SamplerClientError(
                f"{what}: server {self.address} unreachable after {attempt} attempts ({code.name}: {error.details()})",
                code,
            ) from None
        self.reset()
        delay = min(self.retry.max_backoff, self.retry.initial_backoff * self.retry.multiplier ** (attempt - 1))
        time.sleep(delay)
        return attempt

    def _token_refused(self) -> ConnectionMismatch:
        """UNAUTHENTICATED in one line: no token sent, or one the server does not know."""
        if not self.metadata:
            return ConnectionMismatch(self.address, "requires a token (serve --tokens) and this client sent none",
                                      "give one of its tokens with {token}", grpc.StatusCode.UNAUTHENTICATED)
        return ConnectionMismatch(self.address, "does not know the token this client sent",
                                  "give a token of the server's --tokens file with {token}",
                                  grpc.StatusCode.UNAUTHENTICATED)

    # ---- same-host transport -----------------------------------------------------------

    def same_host_token(self) -> str:
        """The token that asks for pixels in shared memory, or "" (plain messages)."""
        if not self.same_host:
            return ""
        token = self._same_host
        if token is None:
            token = self._negotiate()
        return token or ""

    def _negotiate(self) -> str | None:
        """Open the server's probe segment: its token where that works from here, "" where
        it cannot (another host, another user, an older server), None when the server did
        not answer (ask again next time)."""
        try:
            offer = self.stub().OfferSameHost(pb.SameHostRequest(), timeout=self.call_timeout, metadata=self.metadata)
        except grpc.RpcError as error:
            if error.code() in STREAM_RETRYABLE:
                return None
            offer = pb.SameHostOffer()  # UNIMPLEMENTED (an older server), refused: plain
        token = read_probe(offer.probe_segment) if offer.probe_segment else None
        self._same_host = token or ""
        return self._same_host

    @property
    def transport(self) -> str:
        """"same-host" or "grpc": how pixels come from this server to this process."""
        return "same-host" if self.same_host_token() else "grpc"

    def lost_reply(self, detail: str, what: str) -> None:
        """A reply's segment was gone; twice in a row, segments are not reliable from here."""
        self._lost_in_a_row += 1
        if self._lost_in_a_row >= 2 and self.same_host:
            self.same_host = False
            warnings.warn(f"{what} on {self.address}: {detail}, twice in a row; receiving pixels in the messages "
                          "from now on (same_host=False)", RuntimeWarning, stacklevel=2)

    def delivered(self) -> None:
        """A reply arrived whole: the count of lost replies in a row starts again."""
        self._lost_in_a_row = 0
