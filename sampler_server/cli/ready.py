"""The ready line ``serve`` prints on stdout once it serves, and reads back from its replicas.

``listening on ADDRESS (N stores: a, b; tls on|off, tokens on|off, metrics :PORT|off;
ready in S s)``: where to connect, what is served, and how to connect (TLS, tokens) and
where the server's metrics are scraped, so a user sharing the server knows which client
flags to give. ``serve --replicas N`` prints one line of the same form for all of them
(``N replicas; decode workers ...;`` first, one metrics port per replica). Scripts and
tests find the address as the third word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

READY = re.compile(r"^listening on (\S+) \((.*); ready in [0-9.]+ s\)$")
"""A ready line: the address, and what it says of the server (``ready_line``)."""
SETTINGS = re.compile(r"tls (on|off), tokens (on|off), metrics (off|:[0-9+:]+)$")
"""The end of a ready line's summary: ``ready_settings``."""


def ready_settings(tls: bool, tokens: bool, metrics_ports: Sequence[int | None]) -> str:
    """``tls on|off, tokens on|off, metrics :PORT|off``: how to connect, and where the
    server's metrics are scraped (one port per server process: ``:9100+:9101`` for
    replicas; ``off`` when none has one)."""
    ports = [port for port in metrics_ports if port is not None]
    metrics = "+".join(f":{port}" for port in ports) if ports else "off"
    return f"tls {'on' if tls else 'off'}, tokens {'on' if tokens else 'off'}, metrics {metrics}"


def ready_line(address: str, stores: Sequence[str], settings: str, seconds: float) -> str:
    """The line ``serve`` prints once it serves (``READY`` reads it back)."""
    return (f"listening on {address} ({len(stores)} stores: {', '.join(stores)}; {settings}; "
            f"ready in {seconds:.2f} s)")
