"""gRPC method handlers for the Sampler service, built from its descriptor.

Identical to the generated ``add_SamplerServicer_to_server`` except for two things:
- the response serialiser: handlers that already produced the serialised reply
  (episodes and batches, whose pixels are written once, see ``wire.tensors``) return
  ``bytes``, which pass through, or (streams) a ``SendOnce`` holding them, which
  gives them up; every other reply is a message, serialised as usual;
- the request deserialiser never raises: bytes that do not parse as the method's
  request become an ``UnparsableRequest``, which the status decorators answer with
  INVALID_ARGUMENT and a one-line reason (gRPC's own handling would log a traceback
  and answer INTERNAL, blaming the server for the client's bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


class SendOnce:
    """A serialised stream reply that gives its bytes away when gRPC serialises it.

    gRPC's streaming loop keeps the last response it sent in a local while it asks the
    handler for the next one; with plain bytes that is a whole episode per stream held
    outside every budget while the stream waits (for room, for pixels). A stream whose
    client reads nothing waits there for good: 40 such streams kept 146 MB of sent
    84-px replies alive in ``bench/soak.py``. Once taken the holder is empty."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def take(self) -> bytes:
        data, self._data = self._data, None
        if data is None:
            raise RuntimeError("a stream reply was serialised twice")
        return data


def _serialize(reply: Any) -> bytes:
    if isinstance(reply, SendOnce):
        return reply.take()
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


class UnparsableRequest:
    """What a request that did not parse becomes; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _deserializer(request_type: Any) -> Callable[[bytes], Any]:
    name = request_type.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return request_type.FromString(data)
        except (DecodeError, ValueError, TypeError, RuntimeError) as error:
            detail = " ".join(str(error).split()) or type(error).__name__
            return UnparsableRequest(f"request: {len(data)} bytes do not parse as {name} ({detail})")

    return parse


def sampler_handler(servicer: Any) -> grpc.GenericRpcHandler:
    service = pb.DESCRIPTOR.services_by_name["Sampler"]
    handlers = {}
    for method in service.methods:
        request_type = getattr(pb, method.input_type.name)
        behaviour = getattr(servicer, method.name)
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(behaviour, request_deserializer=_deserializer(request_type), response_serializer=_serialize)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
