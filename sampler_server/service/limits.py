"""The bounds one server keeps (``sampler-server serve`` sets them): stream counts, message
size, memory held ahead of sending, reports per request, same-host segments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceLimits:
    max_message_bytes: int = 512 << 20
    max_streams: int = 64
    max_streams_per_client: int = 64  # a client is a peer host (or a token name where tokens are used)
    stream_idle_seconds: float = 120.0  # a stream whose client reads nothing this long is cancelled
    stream_shed_seconds: float = 5.0  # ... and after this long, it drops the episodes it prepared ahead
    lookahead_bytes: int = 16 << 20  # episodes prepared ahead of their turn, all streams together (126 px MD: ~14 MB each)
    send_bytes: int = 16 << 20  # replies with gRPC, not yet taken by their clients, all streams together
    max_reports_per_request: int = 10_000
    lookahead: int = 3  # episodes of a stream being decoded while one is sent
    shm_bytes: int = 128 << 20  # same-host segments tracked (not taken, held, or released for reuse); 0 = off
    shm_release_seconds: float = 60.0  # a segment not taken, or held, this long is unlinked
