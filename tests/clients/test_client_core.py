"""The framework-free client: same episodes as the wire, resume after a server crash,
a clear error for a dead address."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest
from conftest import REPO_ROOT

from clients.core import EpisodeSpec, RetryPolicy, SamplerClient, SamplerClientError, shard_window
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

SPEC = EpisodeSpec(sources=("folder",), split="train", seed=5, image_size=32)


def test_client_episodes_equal_the_wire_stream(served):
    with SamplerClient(served.address) as client:
        episodes = list(client.episodes(SPEC, start=2, count=5))
    channel = grpc.insecure_channel(served.address)
    stub = pb_grpc.SamplerStub(channel)
    wire = list(stub.StreamEpisodes(pb.StreamEpisodesRequest(request=SPEC.to_request(), start_index=2, count=5)))
    channel.close()
    assert [e.index for e in episodes] == [2, 3, 4, 5, 6]
    for episode, message in zip(episodes, wire):
        assert episode.fingerprint == message.fingerprint
        assert episode.support_images.tobytes() == message.support_images.data
        assert episode.support_images.shape[1:] == (32, 32, 3)
        assert episode.query_labels.dtype == np.int64
        assert episode.ways == len(message.classes)
        assert episode.split == "train" and episode.resize == "bilinear"


def test_shard_windows_partition_the_index_space():
    for count in (0, 1, 7, 23):
        seen = []
        for shard in range(4):
            start, mine, step = shard_window(10, count, shard, 4)
            if mine < 0:
                continue
            limit = mine if mine else 6  # unbounded: the first 6 indices of each shard
            seen.extend(start + k * step for k in range(limit))
        # bounded: every index of the window once; unbounded: the first 4 x 6 indices once
        assert sorted(seen) == list(range(10, 10 + (count or 24))), count


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(data, port):
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", str(port), "--workers", "1"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = process.stdout.readline()
    assert "listening on" in line, line
    return process


@pytest.mark.slow
def test_server_killed_and_restarted_mid_stream_gives_an_identical_gap_free_sequence(served):
    with SamplerClient(served.address) as client:
        expected = [e.fingerprint for e in client.episodes(SPEC, start=0, count=30)]
    port = _free_port()
    server = _start_server(served.data, port)
    received = []
    try:
        client = SamplerClient(f"127.0.0.1:{port}", prefetch=1, retry=RetryPolicy(max_attempts=20, initial_backoff=0.1))
        for episode in client.episodes(SPEC, start=0, count=30):
            received.append((episode.index, episode.fingerprint))
            if len(received) == 6:
                server.send_signal(signal.SIGKILL)
                server.wait()
                time.sleep(0.5)
                server = _start_server(served.data, port)
        client.close()
    finally:
        server.kill()
        server.wait()
    assert [index for index, _ in received] == list(range(30))
    assert [fingerprint for _, fingerprint in received] == expected


def test_dead_address_is_a_clear_error_not_a_hang():
    port = _free_port()
    client = SamplerClient(f"127.0.0.1:{port}", connect_timeout=0.3,
                           retry=RetryPolicy(max_attempts=2, initial_backoff=0.05))
    started = time.monotonic()
    told = re.escape(f"nothing listens at 127.0.0.1:{port}: is `sampler-server serve` running there?")
    with pytest.raises(SamplerClientError, match=told):  # at once, not after the attempts (issue 27)
        client.list_sources()
    with pytest.raises(SamplerClientError, match=told):
        next(iter(client.episodes(SPEC, count=1)))
    assert time.monotonic() - started < 10


def test_server_refusals_are_raised_with_the_servers_message(served):
    with SamplerClient(served.address) as client:
        with pytest.raises(SamplerClientError, match="NOT_FOUND: source 'nope' is not served") as caught:
            next(iter(client.episodes(EpisodeSpec(sources=("nope",)), count=1)))
        assert caught.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(SamplerClientError, match="INVALID_ARGUMENT: num_ways"):
            client.episode(EpisodeSpec(sources=("folder",), ways=99), 0)
