"""Every request message, fuzzed: the server answers only with defined statuses.

Hypothesis builds request messages from the proto descriptors (any field set or not,
edge-case integers, unknown enum values, odd strings and floats, nested messages and
repeated fields), plus raw random bytes; each goes to a real server over gRPC. The
answer must be OK or a status the project defines for a bad request, never INTERNAL
or UNKNOWN, and the server must still answer a health check afterwards.
"""

from __future__ import annotations

import math

import grpc
import pytest
from conftest import examples
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_server.service.limits import ServiceLimits
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

DEFINED = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.OUT_OF_RANGE,
}
SERVICE = pb.DESCRIPTOR.services_by_name["Sampler"]
NAMES = ["folder", "folder_raw32", "image_folder", "omniglot", "md-v1", "md-v2", "", "train", "x" * 300, "\x00", "é"]
INT_EDGES = [0, 1, 2, 3, 5, 7, 16, 84, 1000, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1]
_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1), FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
}


def _scalar(field: FieldDescriptor) -> st.SearchStrategy:
    kind = field.type
    if kind in _RANGES:
        low, high = _RANGES[kind]
        return st.one_of(st.sampled_from([v for v in INT_EDGES if low <= v <= high]), st.integers(low, high))
    if kind == FieldDescriptor.TYPE_ENUM:  # proto3 enums are open: unknown numbers travel too
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 50))
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, math.log(0.5), math.inf, -math.inf, math.nan]),
                         st.floats(allow_nan=True, allow_infinity=True))
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.sampled_from(NAMES), st.text(max_size=20))
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    raise AssertionError(f"no strategy for field type {kind}")


def message_strategy(descriptor, depth: int = 0) -> st.SearchStrategy:
    """Messages of ``descriptor``'s type with a random subset of fields set."""
    cls = getattr(pb, descriptor.name)
    fields = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value = st.dictionaries(st.sampled_from(["accuracy", "loss", "", "x"]), _scalar(field.message_type.fields[1]),
                                    max_size=2)
        elif field.message_type is not None:
            if depth >= 3:
                continue
            inner = st.deferred(lambda f=field: message_strategy(f.message_type, depth + 1))
            value = st.lists(inner, max_size=2) if field.is_repeated else inner
        elif field.is_repeated:
            value = st.lists(_scalar(field), max_size=3)
        else:
            value = _scalar(field)
        fields.append((field, value))

    @st.composite
    def build(draw) -> object:
        message = cls()
        for field, strategy in fields:
            if not draw(st.booleans()):
                continue
            value = draw(strategy)
            target = getattr(message, field.name)
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                target.update(value)
            elif field.message_type is not None and field.is_repeated:
                target.extend(value)
            elif field.message_type is not None:
                target.CopyFrom(value)
            elif field.is_repeated:
                target.extend(value)
            else:
                setattr(message, field.name, value)
        return message

    return build()


@pytest.fixture(scope="module")
def fuzz_server(served, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=1, threads=8, metrics_path=root / "metrics.sqlite", grace_seconds=0.5,
        limits=ServiceLimits(max_message_bytes=8 << 20, max_streams=8, stream_idle_seconds=10),
    )).start()
    channel = grpc.insecure_channel(server.address, options=[("grpc.max_receive_message_length", 64 << 20)])
    yield channel
    channel.close()
    server.stop(grace=0.5)


def _call(channel: grpc.Channel, method, payload: bytes) -> grpc.StatusCode:
    path = f"/{SERVICE.full_name}/{method.name}"
    identity = lambda data: data  # noqa: E731 - raw bytes both ways
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=identity, response_deserializer=identity)(
                payload, timeout=30)
            for taken, _ in enumerate(stream):
                if taken >= 1:
                    stream.cancel()
                    break
            return grpc.StatusCode.OK
        channel.unary_unary(path, request_serializer=identity, response_deserializer=identity)(payload, timeout=30)
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.CANCELLED:  # our own cancel after two messages
            return grpc.StatusCode.OK
        return error.code()


def _alive(channel: grpc.Channel) -> None:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.slow
@pytest.mark.parametrize("method", list(SERVICE.methods), ids=lambda m: m.name)
def test_fuzzed_requests_get_defined_statuses(fuzz_server, method):
    strategy = message_strategy(method.input_type)

    @settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(message=strategy)
    def check(message) -> None:
        code = _call(fuzz_server, method, message.SerializeToString())
        assert code in DEFINED, f"{method.name} answered {code} to {message!r:.300}"

    check()
    _alive(fuzz_server)


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(method=st.sampled_from(list(SERVICE.methods)), payload=st.binary(max_size=200))
def test_random_bytes_get_defined_statuses(fuzz_server, method, payload):
    code = _call(fuzz_server, method, payload)
    assert code in DEFINED, f"{method.name} answered {code} to {payload!r}"
    _alive(fuzz_server)
