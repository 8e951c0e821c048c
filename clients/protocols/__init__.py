"""One module per protocol: its arrays, its request builders and its calls.

``md`` (Meta-Dataset episodes and batches), ``vtab`` (VTAB-1k task batches and
episodes), ``baselines`` (the control baselines' data regimes) and ``cog``
(ImageNet-CoG levels and splits). Each module's calls class is mixed into
``clients.client.SamplerClient`` and uses only the client's public RPC surface,
``Rpc``: a retried unary call, a resumable stream and a report. Adding a protocol
adds a module here and one base class of ``SamplerClient``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from sampler_common.checks import check_index, check_step, check_stream_count
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

Reply = TypeVar("Reply")


class Rpc(Protocol):
    """What a protocol's calls need of the client (``SamplerClient`` implements it)."""

    @abc.abstractmethod
    def call(self, method: str, request: Any) -> Any:
        """The reply of unary RPC ``method``, retried (``clients.channel``)."""

    @abc.abstractmethod
    def call_with_pixels(self, method: str, request_for: Callable[[str], Any], parse: Callable[[Any], Reply]) -> Reply:
        """A unary call whose reply carries pixels: ``request_for(same-host token)``, parsed."""

    @abc.abstractmethod
    def stream(self, method: str, request_for: Callable[[int, int, str], Any], parse: Callable[[bytes], Any], *,
               start: int = 0, count: int = 0, step: int = 1, until_last: bool = False) -> Iterator[Any]:
        """The replies of streaming RPC ``method``, resumed across failures (``clients.stream``)."""

    @abc.abstractmethod
    def report(self, reports: Sequence[pb.MetricReport], run_config_json: str = "") -> pb.ReportMetricsResponse:
        """Send metric reports (idempotent on the server)."""


def check_window(start: int, count: int, step: int = 1) -> None:
    """A stream's index window, checked as the server checks it (``sampler_common.checks``):
    ``start_index`` an index, ``count`` 0 (unbounded) to the most a stream sends, ``index_step``
    at least 1."""
    check_index(start, "start_index")
    check_stream_count(count)
    check_step(step)
