"""What the server measures of itself for Prometheus (``serve --metrics-port``), as
OpenTelemetry instruments: the catalogue of the sampler's own metrics and the one object
the server's parts record through.

Not the metric *reports* (``metrics``, ``serve --metrics``: the accuracies trainers send):
these are the server's operational metrics, scraped over HTTP (``telemetry_http``).

Every instrument is declared once, in ``INSTRUMENTS``, with its unit, its meaning and the
attributes it carries; the Prometheus name each is exported under (``Instrument.family``)
follows the OpenTelemetry exporter's rule (dots to underscores, the unit's suffix, counters
``_total``), so the docs, the Grafana dashboard and the alert rules can be checked against
this table and a test checks a real server's ``/metrics`` against it.

Attributes take bounded values only: a protocol (``md``, ``vtab``, ``cog``: the RPC's), a
served store's name (a store not served is ``other``), the transport, a reason or outcome
from a fixed set. Never a run id, a seed, a peer or an index.

``Telemetry`` records nothing until ``bind`` gives it an OpenTelemetry ``Meter`` (a server
without ``--metrics-port`` keeps it unbound and imports no OpenTelemetry module); every
recording call is then one attribute lookup.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MD, VTAB, COG = "md", "vtab", "cog"
"""The ``protocol`` attribute of served replies: the RPC's protocol (VTAB's RPCs carry the
control baselines' regime and source-task streams too)."""

SAME_HOST, MESSAGE = "same_host", "message"
"""The ``transport`` attribute: pixels in a shared-memory segment, or in the gRPC message."""

REFUSAL_REASONS = ("max_streams", "max_streams_per_client", "max_message")
CANCEL_REASONS = ("idle", "stalled")
REPORT_OUTCOMES = ("stored", "duplicate", "refused")
QUARANTINE_STAGES = ("start", "serving")
OTHER = "other"


@dataclass(frozen=True)
class Instrument:
    """One of the sampler's metrics: its OpenTelemetry name, kind (``counter``,
    ``updown`` (exported as a gauge), ``gauge`` (observed at each scrape), ``histogram``),
    unit (UCUM, as OpenTelemetry writes it), meaning and attribute names."""

    name: str
    kind: str
    unit: str
    description: str
    attributes: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The Prometheus metric family it is exported as (the OpenTelemetry Prometheus
        exporter's naming: ``sampler.served.bytes`` in ``By`` -> ``sampler_served_bytes_total``)."""
        base = re.sub(r"[^a-zA-Z0-9:]+", "_", self.name)
        unit = {"s": "seconds", "By": "bytes"}.get(re.sub(r"\{.*\}", "", self.unit), "")
        if unit and not base.endswith("_" + unit):
            base += "_" + unit
        return base + "_total" if self.kind == "counter" else base

    @property
    def series(self) -> tuple[str, ...]:
        """The sample names a scrape shows for it (a histogram's three)."""
        if self.kind == "histogram":
            return (f"{self.family}_bucket", f"{self.family}_count", f"{self.family}_sum")
        return (self.family,)


_SERVED = ("protocol", "source", "transport")
INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("sampler.served.episodes", "counter", "{episode}",
               "Meta-Dataset episodes sent (streamed or GetEpisode)", _SERVED),
    Instrument("sampler.served.batches", "counter", "{batch}",
               "batches sent: MD plain batches, VTAB task batches and episode chunks, CoG batches", _SERVED),
    Instrument("sampler.served.images", "counter", "{image}",
               "images in the replies sent (decoded pixels or stored bytes)", _SERVED),
    Instrument("sampler.served.bytes", "counter", "By",
               "bytes of the replies sent: the message, plus its pixels in shared memory for same_host", _SERVED),
    Instrument("sampler.streams.open", "updown", "{stream}", "streams being served now", ("protocol",)),
    Instrument("sampler.admission.refusals", "counter", "{refusal}",
               "requests refused with RESOURCE_EXHAUSTED by the server's limits: max_streams (--max-streams), "
               "max_streams_per_client (--max-streams-per-client), max_message (--max-message-mb)", ("reason",)),
    Instrument("sampler.streams.cancelled", "counter", "{stream}",
               "streams the server cancelled: idle (their client read nothing for --stream-idle-seconds), "
               "stalled (stuck sending while others waited for --send-mb)", ("reason",)),
    Instrument("sampler.lookahead.used", "gauge", "By",
               "episodes prepared ahead of their turn, all streams together (at most --lookahead-mb)"),
    Instrument("sampler.lookahead.limit", "gauge", "By", "the lookahead budget, --lookahead-mb"),
    Instrument("sampler.send.used", "gauge", "By",
               "replies handed to gRPC and not yet taken by their clients (at most --send-mb)"),
    Instrument("sampler.send.limit", "gauge", "By", "the send budget, --send-mb"),
    Instrument("sampler.same_host.used", "gauge", "By",
               "shared memory held by same-host replies (at most --shm-mb)"),
    Instrument("sampler.decode.duration", "histogram", "s",
               "seconds the decode workers spent decoding (or copying, for raw stores) one reply's images",
               ("protocol", "source")),
    Instrument("sampler.assembly.duration", "histogram", "s",
               "seconds from a reply's turn to its bytes ready: waiting for its images, then packing them",
               _SERVED),
    Instrument("sampler.stores", "gauge", "{store}", "stores by state: served or quarantined", ("state",)),
    Instrument("sampler.store.quarantines", "counter", "{store}",
               "stores quarantined: at start-up (unreadable) or while serving (found unreadable)",
               ("source", "stage")),
    Instrument("sampler.data_loss", "counter", "{error}",
               "calls answered DATA_LOSS: a damaged record, or a decode worker that died", ("source",)),
    Instrument("sampler.reports", "counter", "{report}",
               "metric reports (ReportMetrics) by outcome: stored, duplicate (a retry, not counted twice), "
               "refused (the whole request was)", ("protocol", "outcome")),
    Instrument("sampler.replica.info", "gauge", "1",
               "1, with this server's replica number, the replica count of its serve --replicas and the version",
               ("replica", "replicas", "version")),
)
BY_NAME: Mapping[str, Instrument] = {instrument.name: instrument for instrument in INSTRUMENTS}

GRPC_INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("grpc.server.call.started", "counter", "{call}", "calls started", ("grpc.method",)),
    Instrument("grpc.server.call.duration", "histogram", "s", "a call's duration, start to end",
               ("grpc.method", "grpc.status")),
    Instrument("grpc.server.call.sent_total_compressed_message_size", "histogram", "By",
               "bytes a call sent", ("grpc.method", "grpc.status")),
    Instrument("grpc.server.call.rcvd_total_compressed_message_size", "histogram", "By",
               "bytes a call received", ("grpc.method", "grpc.status")),
)
"""gRPC's standard per-method server metrics, recorded by grpcio-observability's plugin
(``telemetry_http``), not by us: declared here to name what the server exports."""

PROCESS_FAMILIES = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                    "process_open_fds", "process_max_fds", "process_start_time_seconds")
"""The serve process's own (prometheus_client's process collector)."""


def exported_series() -> set[str]:
    """Every sample name a scrape of a busy server shows: the sampler's, gRPC's and the process's."""
    return {name for i in (*INSTRUMENTS, *GRPC_INSTRUMENTS) for name in i.series} | set(PROCESS_FAMILIES)


class Telemetry:
    """The server's recorder: unbound (recording nothing) until ``bind``."""

    def __init__(self) -> None:
        self._on = False
        self._instruments: dict[str, Any] = {}
        self._stores: Callable[[], Iterable[str]] = lambda: ()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._on

    def bind(self, meter: Any, observed: Mapping[str, Callable[[], Iterable[tuple[float, Mapping[str, str]]]]],
             stores: Callable[[], Iterable[str]]) -> None:
        """Create the instruments on ``meter``; ``observed`` gives each gauge's callback
        ((value, attributes) pairs read at each scrape); ``stores`` lists the names a
        ``source`` attribute may take (the others are ``other``)."""
        from opentelemetry.metrics import Observation

        def observer(read: Callable[[], Iterable[tuple[float, Mapping[str, str]]]]) -> Callable[[Any], list]:
            return lambda _options: [Observation(value, dict(attributes)) for value, attributes in read()]

        for instrument in INSTRUMENTS:
            common = {"name": instrument.name, "unit": instrument.unit, "description": instrument.description}
            if instrument.kind == "counter":
                made = meter.create_counter(**common)
            elif instrument.kind == "updown":
                made = meter.create_up_down_counter(**common)
            elif instrument.kind == "histogram":
                made = meter.create_histogram(**common)
            else:
                made = meter.create_observable_gauge(callbacks=[observer(observed[instrument.name])], **common)
            self._instruments[instrument.name] = made
        self._stores = stores
        self._on = True
        # zero series for the fixed label sets, so that rate() and increase() see the first event
        for reason in REFUSAL_REASONS:
            self._add("sampler.admission.refusals", 0, reason=reason)
        for reason in CANCEL_REASONS:
            self._add("sampler.streams.cancelled", 0, reason=reason)
        from sampler_common import protocols

        for protocol in protocols.REPORT_PROTOCOLS:
            for outcome in REPORT_OUTCOMES:
                self._add("sampler.reports", 0, protocol=protocol, outcome=outcome)
        for store in stores():
            self._add("sampler.data_loss", 0, source=store)
            self._add("sampler.store.quarantines", 0, source=store, stage="serving")

    def _add(self, name: str, value: float, **attributes: str) -> None:
        self._instruments[name].add(value, attributes)

    def source(self, store: str | None) -> str:
        """``store`` as a ``source`` attribute: a store the server knows, else ``other``."""
        return store if store is not None and store in set(self._stores()) else OTHER

    # ---- what the server's parts record -------------------------------------------------

    def reply_sent(self, protocol: str, store: str, episode: bool, images: int, nbytes: int, transport: str) -> None:
        """One episode (``episode``) or batch handed to gRPC and taken by it."""
        if not self._on:
            return
        attributes = {"protocol": protocol, "source": store, "transport": transport}
        self._instruments["sampler.served.episodes" if episode else "sampler.served.batches"].add(1, attributes)
        self._instruments["sampler.served.images"].add(images, attributes)
        self._instruments["sampler.served.bytes"].add(nbytes, attributes)

    def assembled(self, protocol: str, store: str, transport: str, seconds: float,
                  decode_seconds: float | None) -> None:
        """One reply built (``seconds``), its images decoded in ``decode_seconds`` (None: none were)."""
        if not self._on:
            return
        self._instruments["sampler.assembly.duration"].record(
            seconds, {"protocol": protocol, "source": store, "transport": transport})
        if decode_seconds is not None:
            self._instruments["sampler.decode.duration"].record(decode_seconds, {"protocol": protocol, "source": store})

    def stream_opened(self, protocol: str) -> None:
        if self._on:
            self._add("sampler.streams.open", 1, protocol=protocol)

    def stream_closed(self, protocol: str) -> None:
        if self._on:
            self._add("sampler.streams.open", -1, protocol=protocol)

    def refused(self, reason: str) -> None:
        """A request refused by a limit (one of ``REFUSAL_REASONS``)."""
        if self._on:
            self._add("sampler.admission.refusals", 1, reason=reason)

    def cancelled(self, reason: str, count: int = 1) -> None:
        """Streams cancelled by the watchdog or for room (one of ``CANCEL_REASONS``)."""
        if self._on and count:
            self._add("sampler.streams.cancelled", count, reason=reason)

    def quarantined(self, store: str, stage: str) -> None:
        if self._on:
            self._add("sampler.store.quarantines", 1, source=store, stage=stage)

    def data_loss(self, store: str | None) -> None:
        if self._on:
            self._add("sampler.data_loss", 1, source=self.source(store))

    def reports(self, protocol: str, outcome: str, count: int = 1) -> None:
        if self._on and count:
            self._add("sampler.reports", count, protocol=protocol, outcome=outcome)


_STORE_NAMED = re.compile(r"store '(?P<store>[^']*)'")


def store_named(message: str) -> str | None:
    """The store an error message names (``store 'folder', record 12: ...``), if any."""
    match = _STORE_NAMED.search(message)
    return match["store"] if match else None
