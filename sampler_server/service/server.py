"""Building, starting and draining the gRPC server.

Start-up reads manifests only and starts the decode workers before gRPC's threads
exist. SIGTERM (or SIGINT) drains: health turns NOT_SERVING, open streams end with
UNAVAILABLE naming the index to resume at, then the server stops.

Health: the overall service ("" and ``sampler.v1.Sampler``) is SERVING while any
store is; each store also has its own health name ``sampler.v1.Sampler/<store>``,
SERVING for a served store and NOT_SERVING for a quarantined one (see
``registry``), so a probe can tell which store is broken while the others serve.

Metrics: with ``metrics_port`` set the server serves Prometheus text on
``http://HOST:PORT/metrics`` (``telemetry_http``): gRPC's per-method metrics and the
sampler's own (``telemetry``); ``RunningServer.metrics_port`` is the port bound.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sampler_server.assembly.assembler import Assembler
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.errors import InvalidArgument
from sampler_server.metrics.store import MetricsStore
from sampler_server.service.auth import AuthInterceptor, load_tokens
from sampler_server.service.handlers import sampler_handler
from sampler_server.service.limits import ServiceLimits
from sampler_server.service.servicer import SamplerServicer
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

if TYPE_CHECKING:
    from sampler_server.service.telemetry_http import MetricsEndpoint

log = logging.getLogger("sampler_server.service")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Sampler"].full_name


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the server's certificate chain and key, and optionally the CA whose
    client certificates are required (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        def read(path: Path, flag: str) -> bytes:
            try:
                return Path(path).read_bytes()
            except OSError as error:
                raise InvalidArgument(f"{flag}: cannot read {path} ({error.strerror or error})") from None

        pair = (read(self.key, "--tls-key"), read(self.cert, "--tls-cert"))
        client_ca = read(self.client_ca, "--tls-client-ca") if self.client_ca is not None else None
        return grpc.ssl_server_credentials([pair], root_certificates=client_ca,
                                           require_client_auth=client_ca is not None)


def store_health_name(store: str) -> str:
    """The health-check service name of one store."""
    return f"{SERVICE_NAME}/{store}"


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path | tuple[Path, ...]  # one data directory, or several served together (the first holds metrics)
    host: str = "127.0.0.1"
    port: int = 50051
    workers: int | None = None
    threads: int = 16  # handler threads for unary calls and health checks, beyond one per stream slot
    max_queued_calls: int = 256  # calls waiting for a thread; more are refused (RESOURCE_EXHAUSTED)
    metrics_path: Path | str | None = None  # a SQLite file or a postgresql:// URL; None: DATA/metrics.sqlite
    limits: ServiceLimits = ServiceLimits()
    grace_seconds: float = 5.0
    tls: TlsFiles | None = None  # None: plaintext (the loopback default)
    tokens: Path | None = None  # JSON-lines tokens file (service.auth); None: no authentication
    metrics_port: int | None = None  # Prometheus /metrics on host:metrics_port (0: a free port); None: off
    replica: tuple[int, int] = (1, 1)  # this server's number among the replicas of its serve --replicas, and their count

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        """The data directories served, in the order given."""
        return tuple(self.data_dir) if isinstance(self.data_dir, (tuple, list)) else (self.data_dir,)


class RunningServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.metrics_port: int | None = None  # the Prometheus port bound (config.metrics_port 0: a free one)
        # credentials and tokens first: a bad file fails before any store is opened
        credentials = config.tls.credentials() if config.tls is not None else None
        interceptor = AuthInterceptor(load_tokens(config.tokens) if config.tokens is not None else None)
        self.registry = StoreRegistry.from_data_dir(config.data_dirs)
        self._endpoint = self._metrics_endpoint()  # before the gRPC server: gRPC's plugin must see it created
        try:
            self._build(config, credentials, interceptor)
        except BaseException:  # e.g. a port in use: what was started stops (decode workers, gRPC's plugin)
            if hasattr(self, "assembler"):
                self.assembler.close()
            if self._endpoint is not None:
                self._endpoint.close()
            raise

    def _metrics_endpoint(self) -> "MetricsEndpoint | None":
        if self.config.metrics_port is None:
            return None
        from sampler_server import __version__
        from sampler_server.service.telemetry_http import MetricsEndpoint

        replica, replicas = self.config.replica
        return MetricsEndpoint({"service.name": "sampler-server", "service.version": __version__,
                                "service.instance.id": f"{socket.gethostname()}/{replica}"})

    def _observed(self) -> dict[str, Callable[[], list[tuple[float, dict[str, str]]]]]:
        """What the metrics' gauges read at each scrape (the servicer's state once it exists)."""
        limits, registry = self.config.limits, self.registry
        replica, replicas = self.config.replica
        from sampler_server import __version__

        info = {"replica": str(replica), "replicas": str(replicas), "version": __version__}
        return {
            "sampler.lookahead.used": lambda: [(self.servicer.lookahead_budget.used, {})],
            "sampler.lookahead.limit": lambda: [(limits.lookahead_bytes, {})],
            "sampler.send.used": lambda: [(self.servicer.admission.send_used, {})],
            "sampler.send.limit": lambda: [(limits.send_bytes, {})],
            "sampler.same_host.used": lambda: [(self.servicer.same_host.used, {})],
            "sampler.stores": lambda: [(len(registry.stores), {"state": "served"}),
                                       (len(registry.quarantined), {"state": "quarantined"})],
            "sampler.replica.info": lambda: [(1, info)],
        }

    def _build(self, config: ServerConfig, credentials: grpc.ServerCredentials | None,
               interceptor: AuthInterceptor) -> None:
        self.assembler = Assembler({name: s.reader for name, s in self.registry.stores.items()}, config.workers)
        self.assembler.warm_up(wait=False)
        metrics_path = config.metrics_path or (Path(config.data_dirs[0]) / "metrics.sqlite")
        self.metrics = MetricsStore(metrics_path)
        telemetry = None
        if self._endpoint is not None:
            telemetry = self._endpoint.observe(self._observed(),
                                               lambda: [*self.registry.stores, *self.registry.quarantined])
            for store in self.registry.quarantined:
                telemetry.quarantined(store, "start")
        self.servicer = SamplerServicer(self.registry, self.assembler, self.metrics, config.limits, telemetry)
        self.servicer.on_quarantine = lambda store: self.health.set(
            store_health_name(store), health_pb2.HealthCheckResponse.NOT_SERVING)
        message_limit = config.limits.max_message_bytes + (1 << 20)
        # Every stream slot has a thread of its own (a send blocked on a client that does not
        # read holds it), and ``threads`` more serve unary calls and health checks, so a full
        # house of stalled streams never starves them (service.admission).
        handler_threads = config.limits.max_streams + config.threads
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=handler_threads, thread_name_prefix="rpc"),
            interceptors=(interceptor,),
            maximum_concurrent_rpcs=handler_threads + config.max_queued_calls,
            options=[
                ("grpc.max_send_message_length", message_limit),
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.so_reuseport", 0),
                # Clients ping to notice a lost replica (clients.balancing: every 10 s of silence by
                # default, 1 s at the least), also while no call is open: accept those pings rather
                # than answer GOAWAY "too_many_pings" (gRPC's default allows one per 5 minutes).
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 1000),
            ],
        )
        self.server.add_generic_rpc_handlers((sampler_handler(self.servicer),))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        address = f"{config.host}:{config.port}"
        if credentials is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, credentials)
        if self.port == 0:
            raise OSError(f"cannot listen on {config.host}:{config.port}")
        if self._endpoint is not None:
            self.metrics_port = self._endpoint.listen(config.host, config.metrics_port or 0)
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    def start(self) -> "RunningServer":
        self.server.start()
        for name in ("", SERVICE_NAME, *(store_health_name(store) for store in self.registry.stores)):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        for store in self.registry.quarantined:
            self.health.set(store_health_name(store), health_pb2.HealthCheckResponse.NOT_SERVING)
        same_host = self.servicer.same_host
        if same_host.enabled:
            log.info("same-host transport: on (up to %d MiB of replies in shared memory)", same_host.budget_bytes >> 20)
        else:
            log.info("same-host transport: off (%s)", same_host.reason)
        return self

    def stop(self, grace: float | None = None) -> None:
        if self._stopped.is_set():
            return
        for name in ("", SERVICE_NAME, *(store_health_name(store) for store in self.registry.stores)):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.servicer.draining.set()
        self.server.stop(self.config.grace_seconds if grace is None else grace).wait()
        self.servicer.same_host.close()  # no segment outlives the server
        self.assembler.close()
        self.metrics.close()
        if self._endpoint is not None:
            self._endpoint.close()
        self._stopped.set()

    def wait(self) -> None:
        # In short waits: a signal the kernel hands to another thread (gRPC's, a stream's)
        # only sets a flag, and its handler runs when the main thread next runs Python; a
        # main thread blocked for good in one wait never would (SIGTERM ignored for good,
        # about once in 30 starts while a same-host stream was being served).
        while not self._stopped.wait(0.2):
            pass

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: object) -> None:
            log.info("signal %d: draining", signum)
            threading.Thread(target=self.stop, daemon=True).start()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
