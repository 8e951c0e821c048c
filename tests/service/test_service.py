"""The gRPC service against a real server on 127.0.0.1 and real stores."""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sampler_server.assembly.assembler import decode_records
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.multisource import MultiSourceSampler
from sampler_server.core.spec import DatasetSpec
from sampler_server.imaging import ResizeMethod
from sampler_server.store.reader import StoreReader
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def stub(served):
    channel = grpc.insecure_channel(served.address, options=[("grpc.max_receive_message_length", 256 << 20)])
    yield pb_grpc.SamplerStub(channel)
    channel.close()


def _request(source="folder", split=pb.SPLIT_TRAIN, seed=7, size=40, **config):
    return pb.EpisodeRequest(
        sources=[source], split=split, seed=seed, config=pb.EpisodeConfig(**config),
        images=pb.ImageOptions(image_size=size),
    )


def _array(tensor):
    dtype = {pb.DTYPE_UINT8: np.uint8, pb.DTYPE_INT64: np.int64}[tensor.dtype]
    return np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))


def test_episodes_match_in_process_compositions_and_pixels(served, stub):
    reader = StoreReader(served.encoded.store_dir)
    spec = DatasetSpec.from_manifest(reader.manifest)
    sampler = MultiSourceSampler({spec.source: spec}, [spec.source], "train", EpisodeConfig())
    stream = stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(), start_index=3, count=6))
    received = list(stream)
    assert [m.index for m in received] == [3, 4, 5, 6, 7, 8]
    assert [m.last for m in received] == [False] * 5 + [True]
    for message in received:
        expected = sampler.sample(7, message.index)
        assert message.fingerprint == expected.fingerprint
        assert [c.class_id for c in message.classes] == list(expected.class_ids)
        support_ids = [r for ids in expected.support for r in ids]
        query_ids = [r for ids in expected.query for r in ids]
        assert list(message.support_record_ids) == support_ids
        assert list(message.query_record_ids) == query_ids
        support = _array(message.support_images)
        assert support.shape == (len(support_ids), 40, 40, 3)
        assert np.array_equal(support, decode_records(reader, support_ids, 40, ResizeMethod.BILINEAR))
        assert np.array_equal(_array(message.query_images), decode_records(reader, query_ids, 40, ResizeMethod.BILINEAR))
        labels = _array(message.support_labels)
        assert labels.tolist() == [label for label, ids in enumerate(expected.support) for _ in ids]
        assert message.resize == pb.RESIZE_METHOD_BILINEAR and message.image_size == 40
    single = stub.GetEpisode(pb.GetEpisodeRequest(request=_request(), index=5))
    assert single.fingerprint == received[2].fingerprint
    assert single.support_images.data == received[2].support_images.data


def test_raw_store_serves_the_same_episodes_without_decoding(served, stub):
    encoded = stub.GetEpisode(pb.GetEpisodeRequest(request=_request(size=32), index=11))
    raw = stub.GetEpisode(pb.GetEpisodeRequest(request=_request(source="folder_raw32", size=32), index=11))
    assert raw.fingerprint == encoded.fingerprint
    raw_reader = StoreReader(served.raw.store_dir)
    payloads = [raw_reader.read(r).payload for r in raw.support_record_ids]
    assert _array(raw.support_images).tobytes() == b"".join(payloads)


def test_encoded_mode_returns_the_stored_bytes(served, stub):
    request = _request()
    request.images.mode = pb.IMAGE_MODE_ENCODED
    message = stub.GetEpisode(pb.GetEpisodeRequest(request=request, index=2))
    reader = StoreReader(served.encoded.store_dir)
    assert list(message.support_encoded.data) == [reader.read(r).payload for r in message.support_record_ids]
    assert not message.support_images.data


def test_sources_health_and_reflection(served, stub):
    sources = {s.name: s for s in stub.ListSources(pb.ListSourcesRequest()).sources}
    assert set(sources) == {"folder", "folder_raw32"}
    assert sources["folder"].fingerprint == sources["folder_raw32"].fingerprint
    assert (sources["folder"].train_classes, sources["folder"].valid_classes, sources["folder"].test_classes) == (12, 6, 6)
    assert sources["folder_raw32"].raw_size == 32
    description = stub.DescribeSource(pb.DescribeSourceRequest(name="folder"))
    assert len(description.classes) == 24 and description.classes[0].num_records == 12
    channel = grpc.insecure_channel(served.address)
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="sampler.v1.Sampler")).status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = list(reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in responses[0].list_services_response.service}
    assert {"sampler.v1.Sampler", "grpc.health.v1.Health"} <= names
    channel.close()


@pytest.mark.parametrize(
    "request_message, code, text",
    [
        (pb.GetEpisodeRequest(request=_request(source="nope")), grpc.StatusCode.NOT_FOUND, "source 'nope' is not served"),
        (pb.GetEpisodeRequest(request=_request(num_ways=40)), grpc.StatusCode.INVALID_ARGUMENT, "num_ways: got 40"),
        (pb.GetEpisodeRequest(request=_request(split=pb.SPLIT_UNSPECIFIED)), grpc.StatusCode.INVALID_ARGUMENT, "request.split"),
        (pb.GetEpisodeRequest(request=_request(size=5000)), grpc.StatusCode.INVALID_ARGUMENT, "image_size: got 5000, expected an integer in [1, 1024]"),
        (pb.GetEpisodeRequest(request=_request(num_support=30, num_ways=5)), grpc.StatusCode.INVALID_ARGUMENT, "num_support"),
        (pb.GetEpisodeRequest(request=_request(size=1024)), grpc.StatusCode.RESOURCE_EXHAUSTED, "message limit"),
    ],
)
def test_bad_requests_get_their_status_while_a_healthy_stream_continues(served, stub, request_message, code, text):
    healthy: list[str] = []
    errors: list[Exception] = []

    def consume():
        try:
            for message in stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(seed=99), count=8)):
                healthy.append(message.fingerprint)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=consume)
    thread.start()
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetEpisode(request_message)
    thread.join(timeout=60)
    assert caught.value.code() == code, caught.value.details()
    assert text in caught.value.details()
    assert not errors and len(healthy) == 8


def test_too_many_streams_is_resource_exhausted(served, stub):
    streams = [stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(size=16), count=0)) for _ in range(8)]
    for stream in streams:
        next(stream)
    with pytest.raises(grpc.RpcError) as caught:
        next(stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(size=16), count=1)))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for stream in streams:
        stream.cancel()


def _report(message, run="run-1", accuracy=0.5, fingerprint=None):
    return pb.MetricReport(
        run_id=run, protocol="md-episode", source=message.source, split=message.split, seed=message.seed,
        index=message.index, fingerprint=fingerprint or message.fingerprint, metrics={"accuracy": accuracy},
        request=_request(),
    )


def test_reports_are_idempotent_and_checked_against_the_episode(served, stub):
    episodes = list(stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(), count=3)))
    first = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_report(m) for m in episodes], run_config_json='{"x": 1}'))
    assert (first.stored, first.duplicates) == (3, 0)
    again = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_report(m) for m in episodes]))
    assert (again.stored, again.duplicates) == (0, 3)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_report(episodes[0], run="run-2", fingerprint="f" * 64)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not match episode 0" in caught.value.details()
    text = stub.GetReport(pb.GetReportRequest(run_ids=["run-1"], format="table")).text
    assert "folder/train  50.00 ± 0.00 (3)" in text
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetReport(pb.GetReportRequest(run_ids=["never-ran"]))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_errors_name_the_fields_the_client_sent(served, stub):
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetEpisode(pb.GetEpisodeRequest(request=_request(), index=2**63))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("index: got 9223372036854775808")
    batches = pb.StreamBatchesRequest(source="folder", split=pb.SPLIT_TRAIN, batch_size=256, count=2,
                                      start_index=2**63 // 256, images=pb.ImageOptions(image_size=8))
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamBatches(batches))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"start_index: got {2**63 // 256}, expected 0 to {2**63 // 256 - 1}")
    assert "batch_size 256" in caught.value.details()
    batches.start_index = 2**63 // 256 - 2
    batches.count = 3
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamBatches(batches))
    assert caught.value.details().startswith("start_index + (count - 1) * index_step: got")


def test_request_bytes_that_do_not_parse_are_invalid_argument(served, stub, caplog):
    channel = grpc.insecure_channel(served.address)
    for method in ("GetEpisode", "ReportMetrics"):
        call = channel.unary_unary(f"/sampler.v1.Sampler/{method}", request_serializer=lambda raw: raw,
                                   response_deserializer=lambda raw: raw)
        with caplog.at_level("ERROR"), pytest.raises(grpc.RpcError) as caught:
            call(b"\x0a\xff\xff\xff\xff\x0f")  # field 1, length-delimited, length past the end
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = caught.value.details()
        assert details.startswith("request: 6 bytes do not parse as sampler.v1.") and "\n" not in details
    streaming = channel.unary_stream("/sampler.v1.Sampler/StreamEpisodes", request_serializer=lambda raw: raw,
                                     response_deserializer=lambda raw: raw)
    with pytest.raises(grpc.RpcError) as caught:
        list(streaming(b"\xff"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not [r for r in caplog.records if "Traceback" in r.getMessage() or r.exc_info]
    channel.close()
    assert stub.GetEpisode(pb.GetEpisodeRequest(request=_request(), index=0)).fingerprint  # still serving


def test_source_kinds_resolve_like_store_names(served, stub):
    by_kind = stub.GetEpisode(pb.GetEpisodeRequest(request=_request(source="image_folder"), index=4))
    by_name = stub.GetEpisode(pb.GetEpisodeRequest(request=_request(source="folder"), index=4))
    assert by_kind.fingerprint == by_name.fingerprint
    assert _array(by_kind.support_images).tobytes() == _array(by_name.support_images).tobytes()
    described = stub.DescribeSource(pb.DescribeSourceRequest(name="image_folder"))
    assert described.summary.name == "folder"  # the encoded store: 40 px is no raw store's size
    # at the raw store's size a kind picks it only for the method it was packed with
    raw = _request(source="image_folder", size=32)
    by_kind = stub.GetEpisode(pb.GetEpisodeRequest(request=raw, index=4))
    assert _array(by_kind.support_images).tobytes() == _array(stub.GetEpisode(
        pb.GetEpisodeRequest(request=_request(source="folder_raw32", size=32), index=4)).support_images).tobytes()
    raw.images.resize = pb.RESIZE_METHOD_ANTIALIAS
    antialiased = stub.GetEpisode(pb.GetEpisodeRequest(request=raw, index=4))  # the encoded store, not a refusal
    raw.sources[:] = ["folder"]
    assert antialiased.support_images.data == stub.GetEpisode(pb.GetEpisodeRequest(request=raw, index=4)).support_images.data
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetEpisode(pb.GetEpisodeRequest(request=_request(source="nope"), index=0))
    assert "source kinds: image_folder" in caught.value.details()


def test_reports_are_keyed_by_seed_and_a_run_keeps_its_first_configuration(served, stub):
    for seed in (11, 12):
        (message,) = stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(seed=seed), count=1))
        report = _report(message, run="run-seeds")
        report.request.seed = seed
        reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report], run_config_json='{"lr": 0.1}'))
        assert (reply.stored, reply.duplicates) == (1, 0), seed
    with pytest.raises(grpc.RpcError) as caught:
        stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report], run_config_json='{"lr": 0.2}'))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already has a different configuration" in caught.value.details()
