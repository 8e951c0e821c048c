"""The Prometheus endpoint of ``serve --metrics-port``: one OpenTelemetry ``MeterProvider``
read by the OpenTelemetry Prometheus exporter, served as Prometheus text at
``http://HOST:PORT/metrics`` by prometheus_client's HTTP server.

Two sources feed the provider:
- gRPC's own per-method server metrics (``grpc.server.call.started``, ``.duration``, the
  message sizes; ``grpc.method`` and ``grpc.status`` attributes), from grpcio-observability's
  OpenTelemetry plugin. The plugin is process-wide: it is registered before the gRPC server
  is created and deregistered when the endpoint closes, so one server per process exports
  them (``serve`` is one). It names our service's, health's and reflection's methods; any
  other method a client calls is ``other``.
- the sampler's instruments (``telemetry.INSTRUMENTS``), recorded through ``Telemetry``.

Histograms get bucket boundaries for what they measure (seconds from 0.1 ms to 10 min;
message bytes from 1 KiB to 1 GiB) instead of OpenTelemetry's default ones (0 to 10,000,
unit-less). Besides, the endpoint serves prometheus_client's process metrics
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ...) and ``target_info``.

Replicas (``serve --replicas N``) each serve their own endpoint on their own port; no
endpoint aggregates them (a scrape of each replica is what Prometheus does best, and
``sampler_replica_info`` tells them apart).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sampler_server.errors import InvalidArgument
from sampler_server.service.telemetry import Telemetry

log = logging.getLogger("sampler_server.service")

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SIZE_BUCKETS = tuple(float(1 << shift) for shift in range(10, 31, 2))  # 1 KiB, 4 KiB, ... 1 GiB


def _service_methods() -> frozenset[str]:
    """The full names (``sampler.v1.Sampler/GetEpisode``) of the methods this server serves."""
    from grpc_health.v1 import health_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    from sampler_common.wire.gen.sampler.v1 import sampler_pb2

    names = set()
    for descriptor in (sampler_pb2.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR):
        for service in descriptor.services_by_name.values():
            names.update(f"{service.full_name}/{method.name}" for method in service.methods)
    return frozenset(names)


class MetricsEndpoint:
    """The provider, gRPC's plugin and the HTTP server of one ``serve`` process.

    Built before the gRPC server (the plugin must see it created); ``listen`` then binds
    the HTTP port, ``close`` stops all three."""

    def __init__(self, resource: Mapping[str, str]) -> None:
        import grpc_observability
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
        from opentelemetry.sdk.resources import Resource
        from prometheus_client import CollectorRegistry, ProcessCollector

        self.registry = CollectorRegistry(auto_describe=True)  # this server's own, not the process-global one
        ProcessCollector(registry=self.registry)
        self._reader = PrometheusMetricReader(scope_info_enabled=False, registry=self.registry)
        latency = ExplicitBucketHistogramAggregation(LATENCY_BUCKETS)
        views = [
            View(instrument_name="grpc.server.call.duration", aggregation=latency),
            View(instrument_name="sampler.*.duration", aggregation=latency),
            View(instrument_name="grpc.server.call.*_compressed_message_size",
                 aggregation=ExplicitBucketHistogramAggregation(SIZE_BUCKETS)),
        ]
        self.provider = MeterProvider(metric_readers=[self._reader], views=views,
                                      resource=Resource.create(dict(resource)))
        methods = _service_methods()
        self._plugin = grpc_observability.OpenTelemetryPlugin(
            meter_provider=self.provider, generic_method_attribute_filter=methods.__contains__)
        try:
            self._plugin.register_global()
        except RuntimeError as error:  # another server of this process exports gRPC's metrics already
            self.provider.shutdown()
            raise InvalidArgument(f"--metrics-port: {error} (one server per process exports metrics)") from None
        self.telemetry = Telemetry()
        self._http: Any = None
        self._closed = False

    def observe(self, observed: Mapping[str, Callable[[], Iterable[tuple[float, Mapping[str, str]]]]],
                stores: Callable[[], Iterable[str]]) -> Telemetry:
        """Bind the sampler's instruments (``Telemetry.bind``); returns the recorder."""
        from sampler_server import __version__

        self.telemetry.bind(self.provider.get_meter("sampler-server", __version__), observed, stores)
        return self.telemetry

    def listen(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (0: a free port); the port bound.

        Raises:
            InvalidArgument: the port cannot be bound (in use, not permitted, a bad host).
        """
        from prometheus_client import start_http_server

        try:
            self._http, _ = start_http_server(port, addr=host, registry=self.registry)
        except (OSError, socket.gaierror) as error:
            raise InvalidArgument(f"--metrics-port: cannot listen on {host}:{port} "
                                  f"({error.strerror or error})") from None
        bound = int(self._http.server_port)
        log.info("metrics: http://%s:%d/metrics", f"[{host}]" if ":" in host else host, bound)
        return bound

    def close(self) -> None:
        """Stop serving, then stop gRPC's plugin and the provider (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        try:
            self._plugin.deregister_global()
        except RuntimeError:
            pass  # never registered
        self.provider.shutdown()
