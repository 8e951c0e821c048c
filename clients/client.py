"""``SamplerClient``: one channel to a server and every protocol's calls on it.

The client composes the connection (``clients.channel``: TLS, token, retries, same
host), the resumable stream engine (``clients.stream``) and one calls class per
protocol (``clients.protocols``: ``md``, ``baselines``, ``vtab``, ``cog``), which use
only its public RPC surface (``clients.protocols.Rpc``). Metric reports and report
tables, common to every protocol, are its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

from clients.balancing import Liveness
from clients.channel import Channel, RetryPolicy
from clients.protocols import Reply
from clients.protocols.baselines import BaselineCalls
from clients.protocols.cog import CogCalls
from clients.protocols.md import MdCalls
from clients.protocols.vtab import VtabCalls
from clients.stream import resumable


class SamplerClient(MdCalls, BaselineCalls, VtabCalls, CogCalls):
    """One channel to a server; safe to use from one thread per stream."""

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
        """Args (beyond the connection's tuning):
            tls_ca: PEM file of the CA that signed the server's certificate; given, the
                channel uses TLS (default: ``SAMPLER_TLS_CA``; neither: plaintext).
            tls_cert, tls_key: this client's certificate and key (PEM files), for a server
                that requires client certificates (default: ``SAMPLER_TLS_CERT`` / ``_KEY``).
            token: the bearer token sent with every call (default: ``SAMPLER_TOKEN``).
            same_host: receive pixels through shared memory when the server is on this
                host (True, the default: where the server's probe shows it works, else
                plainly; False: always in the messages). Default: ``SAMPLER_SAME_HOST``
                (``0`` / ``off`` turns it off).
            liveness: keepalive and the wait for each stream message, which notice a
                silent server (``clients.balancing.Liveness``; default 10 + 5 s, 60 s).

        Raises:
            ValueError: an address that is not HOST:PORT or a replicas target
                (``clients.balancing.parse_target``), a TLS file that cannot be read, a
                certificate without its key, either without a CA, or a
                ``SAMPLER_SAME_HOST`` that is not on or off.
        """
        self.channel = Channel(address, retry=retry, prefetch=prefetch, max_message_mb=max_message_mb,
                               connect_timeout=connect_timeout, call_timeout=call_timeout, tls_ca=tls_ca,
                               tls_cert=tls_cert, tls_key=tls_key, token=token, same_host=same_host,
                               liveness=liveness)

    @property
    def address(self) -> str:
        return self.channel.address

    @property
    def same_host(self) -> bool:
        """Whether pixels are asked for through shared memory where the server's probe allows
        (turned off by the client itself after two lost replies in a row)."""
        return self.channel.same_host

    @property
    def transport(self) -> str:
        """"same-host" or "grpc": how pixels come from this server to this process."""
        return self.channel.transport

    def server_settings(self) -> pb.ServerSettings:
        """The answering server's lookahead room and decode workers (zeros from a server
        older than the field): what a trainer's data wait depends on there."""
        return self.call("ListSources", pb.ListSourcesRequest()).server

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "SamplerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the RPC surface the protocols' calls use (``clients.protocols.Rpc``) ----------

    def call(self, method: str, request: Any) -> Any:
        """The reply of unary RPC ``method`` (e.g. "ListSources"), retried."""
        return self.channel.call(method, request)

    def call_with_pixels(self, method: str, request_for: Callable[[str], Any], parse: Callable[[Any], Reply]) -> Reply:
        return self.channel.call_with_pixels(method, request_for, parse)

    def stream(self, method: str, request_for: Callable[[int, int, str], Any], parse: Callable[[bytes], Any], *,
               start: int = 0, count: int = 0, step: int = 1, until_last: bool = False) -> Iterator[Any]:
        return resumable(self.channel, method, request_for, parse, start=start, count=count, step=step,
                         until_last=until_last)

    # ---- metric reports and report tables (every protocol) -----------------------------

    def report(self, reports: Sequence[pb.MetricReport], run_config_json: str = "") -> pb.ReportMetricsResponse:
        """Idempotent on the server, so retrying after a lost reply is safe."""
        return self.call("ReportMetrics", pb.ReportMetricsRequest(reports=list(reports), run_config_json=run_config_json))

    def get_report(self, run_ids: Sequence[str], fmt: str = "table") -> str:
        return self.call("GetReport", pb.GetReportRequest(run_ids=list(run_ids), format=fmt)).text
