"""Errors quote what the client sent at a bounded length.

A megabyte-long field echoed whole made the error larger than the client accepts,
so it saw RESOURCE_EXHAUSTED instead of the error. Every message now quotes at most
200 characters of an input and stays one line of bounded length.
"""

from __future__ import annotations

import grpc
import pytest

from sampler_server.quoting import MESSAGE_LIMIT, QUOTE_LIMIT, bounded_message, quoted
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

HUGE = "x" * (1 << 20)


@pytest.fixture(scope="module")
def stub(served):
    channel = grpc.insecure_channel(served.address, options=[("grpc.max_send_message_length", 8 << 20)])
    yield pb_grpc.SamplerStub(channel)
    channel.close()


def _episode(**fields) -> pb.GetEpisodeRequest:
    request = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, images=pb.ImageOptions(image_size=16))
    for name, value in fields.items():
        if name == "sources":
            request.sources[:] = value
        else:
            setattr(request, name, value)
    return pb.GetEpisodeRequest(request=request)


@pytest.mark.parametrize(
    "call, message, code",
    [
        ("DescribeSource", pb.DescribeSourceRequest(name=HUGE), grpc.StatusCode.NOT_FOUND),
        ("GetEpisode", _episode(sources=[HUGE]), grpc.StatusCode.NOT_FOUND),
        ("GetEpisode", _episode(preset=HUGE), grpc.StatusCode.INVALID_ARGUMENT),
        ("GetReport", pb.GetReportRequest(run_ids=[HUGE]), grpc.StatusCode.NOT_FOUND),
        ("ListSources", pb.ListSourcesRequest(preset=HUGE), grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_a_megabyte_input_gets_its_own_error_in_a_short_line(stub, call, message, code):
    with pytest.raises(grpc.RpcError) as caught:
        getattr(stub, call)(message)
    assert caught.value.code() == code, caught.value.details()[:300]
    details = caught.value.details()
    assert len(details) <= MESSAGE_LIMIT + 100 and "\n" not in details


def test_batches_quote_a_long_source_and_preset(stub):
    for fields in ({"source": HUGE}, {"source": "folder", "preset": HUGE}):
        request = pb.StreamBatchesRequest(split=pb.SPLIT_TRAIN, batch_size=4, count=1, **fields)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.StreamBatches(request))
        assert caught.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
        assert f"... ({len(HUGE) + 2} characters)" in caught.value.details()


def test_quoting_helpers():
    assert quoted("abc") == "'abc'"
    assert quoted(HUGE).endswith(f"... ({len(HUGE) + 2} characters)")
    assert len(quoted(HUGE)) < QUOTE_LIMIT + 40
    assert bounded_message("a\nb  c") == "a b c"
    assert len(bounded_message("y" * 10_000)) < MESSAGE_LIMIT + 40
