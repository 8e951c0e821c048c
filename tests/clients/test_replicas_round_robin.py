"""One client over many replicas (``clients.balancing``): targets parsed or refused in one
line, calls spread round-robin over three ``serve`` processes, a replica killed with
SIGKILL mid-stream and the stream finished on the others with every episode as one
server sends it; keepalive pings accepted by the server while a stream is stalled; the
wait for a message not charged with the caller's time; same-host tokens kept to the
replica that issued them."""

from __future__ import annotations

import logging
import os
import signal
import time

import grpc
import pytest
from prerequisites import missing, require_shared_memory
from replica_processes import (ACT_AT, COUNT, SPEC, paced_stream, received_bytes, require_ss, serve_command,
                               single_server_run, start_replicas, wait_connected)

from clients.balancing import Liveness, parse_target
from clients.core import EpisodeSpec, RetryPolicy, SamplerClient
from clients.trainer_args import parse_args
from sampler_common.wire import segments
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

SMALL = EpisodeSpec(sources=("folder",), split="train", seed=5, image_size=32)


def test_targets_one_server_or_many_replicas_and_bad_ones_in_one_line(capsys):
    assert not parse_target("sampler.lab:50051").balanced
    assert parse_target("[::1]:50051").endpoints == ("[::1]:50051",)
    cluster = parse_target("dns:///sampler.sampler.svc.cluster.local:50051")
    assert cluster.balanced and cluster.endpoints == ("sampler.sampler.svc.cluster.local:50051",)
    assert parse_target("ipv4:10.0.0.1:50051,10.0.0.2:50052").endpoints == ("10.0.0.1:50051", "10.0.0.2:50052")
    assert parse_target("ipv6:[::1]:1,[fe80::1]:2").balanced
    for bad in ("nowhere", "h:0", "h:70000", "dns:///sampler", "ipv4:10.0.0.1", "ipv4:10.0.0:1", "h:1,h:2",
                "ipv6:::1:5", "http://h:1"):
        with pytest.raises(ValueError, match=f"got {bad!r}, expected HOST:PORT"):
            parse_target(bad)
    with pytest.raises(ValueError, match="^address: got 'nowhere', expected HOST:PORT"):
        SamplerClient("nowhere")
    with pytest.raises(ValueError, match="keepalive_seconds: got 0.5, expected a finite number >= 1"):
        Liveness(keepalive_seconds=0.5)
    with pytest.raises(ValueError, match="message_wait_seconds: got 0, expected a number > 0"):
        Liveness(message_wait_seconds=0)
    base = ["--run", "r", "--sources", "a"]
    for target in ("dns:///sampler.sampler.svc.cluster.local:50051", "ipv4:127.0.0.1:1,127.0.0.1:2"):
        assert parse_args("torch", ["--server", target, *base]).server == target
    with pytest.raises(SystemExit) as exit_:
        parse_args("torch", ["--server", "dns:///sampler", *base])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert "--server: got 'dns:///sampler', expected HOST:PORT" in err and "dns:///NAME:PORT" in err


@pytest.fixture
def replicas(served, tmp_path):
    started = start_replicas([serve_command(served.data)] * 3, [tmp_path / f"replica-{n}.log" for n in range(3)],
                             [""] * 3, prefix="127.0.0.1:")
    for replica in started:
        replica.ss_filter = f"( dport = :{replica.address.rsplit(':', 1)[1]} )"
    yield started
    for replica in started:
        replica.stop()


def test_three_replicas_one_killed_mid_stream_the_stream_ends_on_the_others_identical(served, replicas, caplog,
                                                                                        capsys):
    if require_ss():
        missing("SAMPLER_TESTS_WITHOUT_SS", require_ss())
    caplog.set_level(logging.INFO, logger="clients.balancing")
    expected = single_server_run(served.address)
    target = "ipv4:" + ",".join(r.address for r in replicas)
    # pixels in the messages, as between hosts (and so the bytes tell which replica serves)
    client = SamplerClient(target, same_host=False, prefetch=1, retry=RetryPolicy(initial_backoff=0.05))
    with client:
        client.list_sources()  # connects
        wait_connected(replicas)
        before = [received_bytes(r.ss_filter) for r in replicas]
        spread = [client.episode(SPEC, index) for index in range(6)]  # unary calls, round-robin
        grown = [received_bytes(r.ss_filter) - b for r, b in zip(replicas, before)]
        episode_bytes = spread[0].support_images.nbytes + spread[0].query_images.nbytes
        assert all(g > episode_bytes for g in grown), (grown, episode_bytes)  # every replica answered some

        def kill(replica):
            replica.process.send_signal(signal.SIGKILL)  # the server process alone, as the OOM killer would

        run = paced_stream(client, replicas, kill, lambda: caplog.records)
    assert replicas[run.victim].process.wait(timeout=10) == -signal.SIGKILL
    assert [index for index, _, _ in run.episodes] == list(range(COUNT))  # none missing, none repeated
    assert run.episodes == expected  # fingerprints and pixels as one server sends them
    assert run.breaks, "the killed replica's stream never broke: was it serving it?"
    first = run.breaks[0]
    assert first.levelno == logging.WARNING and "UNAVAILABLE" in first.getMessage()
    resumed_at = int(first.getMessage().rsplit(" ", 1)[1])
    assert ACT_AT <= resumed_at < COUNT
    noticed = first.created - run.acted_at
    with capsys.disabled():
        print(f"\n[replicas] SIGKILL of replica {run.victim}: noticed after {noticed * 1000:.0f} ms "
              f"(stream resumed at index {resumed_at}); longest pause between two episodes {run.max_gap():.2f} s")
    assert noticed < 2.0  # a reset arrives at once


def test_keepalive_pings_are_accepted_while_a_stream_is_stalled(served, caplog):
    """The client pings every second while its stream sends nothing (it reads nothing);
    gRPC's default server policy would answer the third such ping with GOAWAY."""
    caplog.set_level(logging.INFO, logger="clients.balancing")
    liveness = Liveness(keepalive_seconds=1, keepalive_timeout_seconds=1, message_wait_seconds=30)
    with SamplerClient(served.address, same_host=False, prefetch=1, liveness=liveness) as client:
        stream = client.episodes(SPEC, count=0)  # unbounded: the server always has more to send
        first = next(stream)
        time.sleep(6)  # the window fills, the server waits on it: no data, only pings
        later = [next(stream) for _ in range(40)]  # past what the window held when the stall began
        stream.close()
    assert [first.index] + [e.index for e in later] == list(range(41))
    assert not [r for r in caplog.records if r.name == "clients.balancing"], caplog.text


def test_the_wait_for_a_message_does_not_count_the_callers_own_time(served, caplog):
    caplog.set_level(logging.INFO, logger="clients.balancing")
    liveness = Liveness(message_wait_seconds=1.0)
    with SamplerClient(served.address, prefetch=1, liveness=liveness) as client:
        client.episode(SMALL, 0)  # the server's decode workers are warm: its own time stays well under the wait
        stream = client.episodes(SMALL, count=0)  # open throughout: the server has more to send
        indices = []
        for _ in range(3):
            indices.append(next(stream).index)
            time.sleep(1.3)  # a slow step: longer than the wait, but not spent waiting for the server
        stream.close()
    assert indices == [0, 1, 2]
    assert not [r for r in caplog.records if r.name == "clients.balancing"], caplog.text


@pytest.fixture
def two_in_process(served):
    from sampler_server.service.server import RunningServer, ServerConfig

    servers = [RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, threads=4,
                                          grace_seconds=0.5)).start() for _ in range(2)]
    yield servers
    for server in servers:
        server.stop(grace=0.5)


def test_a_same_host_token_is_used_only_by_the_replica_that_issued_it(two_in_process):
    """Segments are per server process: a replica given another's token replies in the
    message (it does not know the token), bit-identical; over a balanced target only the
    replica that made the client's offer writes segments."""
    require_shared_memory()
    a, b = two_in_process
    request = pb.GetEpisodeRequest(request=SMALL.to_request(), index=3)
    with grpc.insecure_channel(a.address) as to_a, grpc.insecure_channel(b.address) as to_b:
        stub_a, stub_b = pb_grpc.SamplerStub(to_a), pb_grpc.SamplerStub(to_b)
        name = stub_a.OfferSameHost(pb.SameHostRequest()).probe_segment
        with open(segments.segment_path(name), encoding="ascii") as handle:
            token = handle.read()
        os.unlink(segments.segment_path(name))  # what a client does: it can, so it is on a's host
        plain = stub_b.GetEpisode(request)
        request.request.images.same_host_token = token
        at_b = stub_b.GetEpisode(request)
        at_a = stub_a.GetEpisode(request)
    assert at_a.support_images.HasField("segment")  # the issuer honours it
    assert not at_b.support_images.HasField("segment") and at_b.support_images.data == plain.support_images.data
    assert at_b.fingerprint == plain.fingerprint and b.servicer.same_host.written == 0

    written = [server.servicer.same_host.written for server in two_in_process]
    target = f"ipv4:{a.address},{b.address}"
    with SamplerClient(target) as balanced, SamplerClient(a.address, same_host=False) as reference:
        assert balanced.transport == "same-host"  # the offer came from one of them
        got = [balanced.episode(SMALL, index) for index in range(6)]
        want = [reference.episode(SMALL, index) for index in range(6)]
        for x, y in zip(got, want):
            assert x.fingerprint == y.fingerprint and x.support_images.tobytes() == y.support_images.tobytes()
    new = [server.servicer.same_host.written - w for server, w in zip(two_in_process, written)]
    assert min(new) == 0 and max(new) > 0, new  # the issuer's replies in segments, the other's in messages


def test_a_dns_target_resolves_and_balances_over_what_answers(served):
    """``localhost`` may resolve to ::1 as well, where nothing listens: round_robin uses what answers."""
    port = served.address.rsplit(":", 1)[1]
    with SamplerClient(f"dns:///localhost:{port}", same_host=False) as balanced, \
            SamplerClient(served.address, same_host=False) as single:
        got = [e.fingerprint for e in balanced.episodes(SMALL, count=4)] + [balanced.episode(SMALL, 9).fingerprint]
        want = [e.fingerprint for e in single.episodes(SMALL, count=4)] + [single.episode(SMALL, 9).fingerprint]
    assert got == want
