"""gRPC method handlers for the Sampler service, built from its descriptor.

Identical to the generated ``add_SamplerServicer_to_server`` except for the response
serialiser: handlers that already produced the serialised reply (episodes and
batches, whose pixels are written once, see ``wire.tensors``) return ``bytes``,
which pass through; every other reply is a message and is serialised as usual.
"""

from __future__ import annotations

from typing import Any

import grpc

from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb


def _serialize(reply: Any) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


def sampler_handler(servicer: Any) -> grpc.GenericRpcHandler:
    service = pb.DESCRIPTOR.services_by_name["Sampler"]
    handlers = {}
    for method in service.methods:
        request_type = getattr(pb, method.input_type.name)
        behaviour = getattr(servicer, method.name)
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(behaviour, request_deserializer=request_type.FromString, response_serializer=_serialize)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
