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

from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_server.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


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
