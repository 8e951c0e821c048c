"""A truncated store beside an intact one: ``serve`` (a real process) starts, quarantines
the broken store with one log line, serves the intact one, and stays up."""

from __future__ import annotations

import os
import shutil
import signal

import grpc
import pytest
from conftest import generate_fixture, pack_fixture, start_serve
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


def _episode(store: str, index: int = 0) -> pb.GetEpisodeRequest:
    return pb.GetEpisodeRequest(
        request=pb.EpisodeRequest(sources=[store], split=pb.SPLIT_TRAIN, images=pb.ImageOptions(image_size=16)),
        index=index,
    )


@pytest.mark.slow
def test_truncated_store_is_quarantined_and_the_server_stays_up(tmp_path):
    fixture = generate_fixture("image_folder", tmp_path, num_classes=24, images_per_class=12)
    data = tmp_path / "data"
    pack_fixture(fixture, data, name="folder")
    shutil.copytree(data / "folder", data / "broken")
    with open(data / "broken" / "data.mdb", "r+b") as handle:
        handle.truncate(os.path.getsize(data / "broken" / "data.mdb") // 2)
    process, address = start_serve(data, "--workers", "2")
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.SamplerStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetEpisode(_episode("broken"))
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "'broken'" in caught.value.details() and "truncated" in caught.value.details()
            for index in range(5):  # the intact store serves, through the pool and in-process
                episode = stub.GetEpisode(_episode("folder", index))
                assert episode.index == index
            health = health_pb2_grpc.HealthStub(channel)
            status = {name: health.Check(health_pb2.HealthCheckRequest(service=name)).status
                      for name in ("", "sampler.v1.Sampler", "sampler.v1.Sampler/folder", "sampler.v1.Sampler/broken")}
            assert status == {
                "": health_pb2.HealthCheckResponse.SERVING,
                "sampler.v1.Sampler": health_pb2.HealthCheckResponse.SERVING,
                "sampler.v1.Sampler/folder": health_pb2.HealthCheckResponse.SERVING,
                "sampler.v1.Sampler/broken": health_pb2.HealthCheckResponse.NOT_SERVING,
            }
            assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        log = process.stderr.read()
        quarantine_lines = [entry for entry in log.splitlines() if "quarantined" in entry]
        assert len(quarantine_lines) == 1 and "'broken'" in quarantine_lines[0], log
        assert "truncated" in quarantine_lines[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
def test_a_store_truncated_while_served_is_quarantined_and_health_says_so(tmp_path):
    """The defect: a data file cut while the server ran gave DATA_LOSS per request, but
    health kept saying SERVING for that store. Now the first read that finds it short
    quarantines it: DATA_LOSS for that request, FAILED_PRECONDITION after, NOT_SERVING
    in health, while the intact store (and the server) keep serving."""
    fixture = generate_fixture("image_folder", tmp_path, num_classes=24, images_per_class=12)
    data = tmp_path / "data"
    pack_fixture(fixture, data, name="folder")
    shutil.copytree(data / "folder", data / "broken")
    process, address = start_serve(data, "--workers", "2")
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.SamplerStub(channel)
            health = health_pb2_grpc.HealthStub(channel)

            def store_health(name: str) -> int:
                return health.Check(health_pb2.HealthCheckRequest(service=f"sampler.v1.Sampler/{name}")).status

            assert stub.GetEpisode(_episode("broken")).index == 0  # opened and read while intact
            assert store_health("broken") == health_pb2.HealthCheckResponse.SERVING
            with open(data / "broken" / "data.mdb", "r+b") as handle:
                handle.truncate(os.path.getsize(data / "broken" / "data.mdb") // 2)
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetEpisode(_episode("broken", 1))
            assert caught.value.code() == grpc.StatusCode.DATA_LOSS
            assert "'broken'" in caught.value.details() and "truncated after it was opened" in caught.value.details()
            assert store_health("broken") == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetEpisode(_episode("broken", 2))
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "quarantined" in caught.value.details()
            for index in range(3):
                assert stub.GetEpisode(_episode("folder", index)).index == index
            assert store_health("folder") == health_pb2.HealthCheckResponse.SERVING
            assert health.Check(health_pb2.HealthCheckRequest(service="")).status == \
                health_pb2.HealthCheckResponse.SERVING
            names = [s.name for s in stub.ListSources(pb.ListSourcesRequest()).sources]
            assert names == ["folder"]
            assert process.poll() is None
    finally:
        process.kill()
        process.wait()
