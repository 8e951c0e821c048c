"""``sampler-server serve`` as a process: start-up line, SIGTERM drain, one log line per stream."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import grpc
import pytest
from conftest import REPO_ROOT

from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_server.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


@pytest.mark.slow
def test_sigterm_drains_open_streams_and_exits_cleanly(served):
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(served.data), "--port", "0", "--workers", "1"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = process.stdout.readline()
    assert line.startswith("listening on 127.0.0.1:"), line
    address = line.split()[2]
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.SamplerStub(channel)
    request = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, images=pb.ImageOptions(image_size=16))
    stream = stub.StreamEpisodes(pb.StreamEpisodesRequest(request=request, count=0))
    first = [next(stream).index for _ in range(3)]
    assert first == [0, 1, 2]
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    with pytest.raises(grpc.RpcError) as caught:
        for _ in stream:
            pass
    assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert process.wait(timeout=30) == 0
    assert time.monotonic() - started < 30
    channel.close()
    log = process.stderr.read()
    stream_lines = [entry for entry in log.splitlines() if "stream episodes" in entry]
    assert len(stream_lines) == 1, log
    assert "folder train seed=0 start=0 step=1 count=unbounded" in stream_lines[0]
