"""The resumable stream: one engine that opens, reads, prefetches and resumes every stream.

A stream is a cursor over one canonical index space: (request, next index, step,
remaining count). When the connection breaks (server killed, restarted, draining, a
replica lost), the client reconnects with exponential backoff and asks for the stream
again from the next index it has not yet delivered, so the caller sees exactly the
sequence an unbroken stream would have produced: no gap, no repeat. Errors that
retrying cannot fix (a bad request, an unknown source, corrupt data) are raised at once
with the server's message. A reply whose shared-memory segment was reclaimed before it
was mapped is asked for again at its index.

Every streaming RPC (episodes, batches, VTAB task batches and episodes, CoG batches)
goes through ``resumable``: a protocol supplies only its request for a window
(``request_for(next_index, remaining, same_host_token)``) and its reply parser.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from sampler_common.wire.segments import SegmentLost

from clients.balancing import watch_stream
from clients.channel import STREAM_RETRYABLE, Channel
from clients.errors import SamplerClientError

RequestFor = Callable[[int, int, str], Any]
"""(next index, remaining count (0 = unbounded), same-host token) -> the request to send."""


class LostReply:
    """What a reply whose shared-memory segment was gone parses to: its stream is reopened
    at that index (a deserializer must not raise: gRPC would end the call as INTERNAL)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail


def guarded(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``parse`` as a deserializer: a lost segment becomes a ``LostReply``, not an error."""
    def run(data: bytes) -> Any:
        try:
            return parse(data)
        except SegmentLost as error:
            return LostReply(str(error))

    return run


def open_stream(channel: Channel, method: str, request: Any, parse: Callable[[bytes], Any]) -> Iterator[Any]:
    """Open the server-streaming RPC ``method`` with ``request`` on a connected channel."""
    call = channel.connect().unary_stream(
        f"/sampler.v1.Sampler/{method}", request_serializer=type(request).SerializeToString,
        response_deserializer=guarded(parse))
    return call(request, metadata=channel.metadata)


def resumable(channel: Channel, method: str, request_for: RequestFor, parse: Callable[[bytes], Any], *,
              start: int = 0, count: int = 0, step: int = 1, until_last: bool = False) -> Iterator[Any]:
    """Replies of ``method`` for indices start, start + step, ... (``count`` of them; 0 =
    unbounded), in index order with prefetch, reopened after retryable failures.
    ``until_last``: the stream is finite and ends with the reply that has ``last`` set."""
    buffer: queue.Queue = queue.Queue(maxsize=channel.prefetch)
    stop = threading.Event()
    done = object()
    open_calls: list[Any] = []  # the pump's current stream, cancelled when the consumer stops early

    def deliver(item: Any) -> bool:
        """``item`` into the buffer unless the consumer stopped reading (its buffer may be full
        for good): whether it went in."""
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        next_index, delivered, attempt = start, 0, 0
        try:
            while not stop.is_set() and (not count or delivered < count):
                try:
                    channel.connect()
                    request = request_for(next_index, count - delivered if count else 0, channel.same_host_token())
                    call = open_stream(channel, method, request, parse)
                    stream = watch_stream(call, channel.liveness, what=method, address=channel.address,
                                          start=next_index, step=step)
                    open_calls[:] = [stream]
                    if stop.is_set():  # the consumer stopped while this one opened
                        stream.cancel()
                        return
                    lost = False
                    for message in stream:
                        if isinstance(message, LostReply):  # reclaimed before we mapped it: ask again
                            stream.cancel()
                            channel.lost_reply(message.detail, method)
                            lost = True
                            break
                        if message.index != next_index:
                            raise SamplerClientError(
                                f"{method}: server sent index {message.index}, expected {next_index}")
                        attempt = 0
                        if not deliver(message):
                            stream.cancel()
                            return
                        delivered += 1
                        next_index += step
                        channel.delivered()
                        if until_last and message.last:
                            deliver(done)
                            return
                    if lost:
                        continue
                    if count and delivered < count:
                        raise SamplerClientError(f"{method}: stream ended after {delivered} of {count} items")
                    if not count:
                        continue  # an unbounded stream never ends normally; reopen
                except grpc.RpcError as error:
                    if stop.is_set():
                        return
                    attempt = channel.backoff(error, attempt, method, STREAM_RETRYABLE)
            deliver(done)
        except BaseException as error:  # delivered to the consumer, raised there (if it still reads)
            deliver(error)

    worker = threading.Thread(target=pump, name="sampler-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = buffer.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        # A consumer that stops early (a break, close()) must not wait for the server's next
        # message: the pump may be blocked reading it, so its stream is cancelled, not drained.
        stop.set()
        for call in list(open_calls):
            call.close()
        worker.join(timeout=5)
