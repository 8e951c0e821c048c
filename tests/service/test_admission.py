"""Admission before work: clients that open streams and never read them cannot starve
anyone else.

The case this guards (seen on the server before admission control): 200 unbounded
StreamEpisodes calls that are never read made a new client's health check and
GetEpisode time out, none of the 200 was refused despite --max-streams, and server
RSS grew by hundreds of MB. Now every stream slot has its own thread plus a reserve
for unary calls, streams past the limit are refused at once, and a stream nobody
reads is cancelled after the idle period.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time

import grpc
import pytest
from conftest import start_serve
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sampler_server.service.admission import STALL_SECONDS, LookaheadBudget, StreamAdmission, client_of
from sampler_server.errors import ResourceExhausted
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

MAX_STREAMS = 64  # the server's defaults: 64 stream slots, 16 more threads for unary calls
STALLED = 200
IDLE_SECONDS = 10


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children (the decode workers), from /proc."""
    total = 0.0
    pids = [pid] + [int(c) for c in open(f"/proc/{pid}/task/{pid}/children", encoding="ascii").read().split()]
    for each in pids:
        try:
            fields = open(f"/proc/{each}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _wait_until_idle(pid: int, timeout: float = 60.0) -> None:
    """Until the server (and its workers) stop computing: the stalled streams' episodes in
    flight are decoded and every stream thread waits on a client that does not read."""
    deadline = time.monotonic() + timeout
    before = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        after = _cpu_seconds(pid)
        if after - before < 0.05:
            return
        before = after
    raise AssertionError("the server never went idle")


def _rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _request(size: int = 48) -> pb.EpisodeRequest:
    return pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, images=pb.ImageOptions(image_size=size))


@pytest.fixture()
def server_process(served):
    # room enough for every stalled reply: here no stream is cancelled to make room (that is
    # test_stalled_streams_are_cancelled_to_make_room), so every slot stays held until the idle cancel.
    # Two decode workers: the test runs alone (`timing`), and the 64 admitted streams fill their
    # windows in half the time (a 31 s test took 21 s)
    process, address = start_serve(served.data, "--workers", "2", "--stream-idle-seconds", str(IDLE_SECONDS),
                                   "--send-mb", "4096",
                                   "--metrics", str(served.root / "admission-metrics.sqlite"), stderr=subprocess.DEVNULL)
    yield process, address
    process.kill()
    process.wait(timeout=30)


def _timed(call) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


@pytest.mark.slow
@pytest.mark.timing
def test_two_hundred_unread_streams_leave_health_and_unary_calls_fast(server_process):
    process, address = server_process
    stalled_channel = grpc.insecure_channel(address)
    stub = pb_grpc.SamplerStub(stalled_channel)
    rss_before = _rss_mb(process.pid)
    stalled = [stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(), count=0)) for _ in range(STALLED)]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sum(s.done() for s in stalled) < STALLED - MAX_STREAMS:
        time.sleep(0.1)
    refused = [s for s in stalled if s.done()]
    assert len(refused) == STALLED - MAX_STREAMS
    assert {s.code() for s in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert "retry in" in refused[0].details()
    _wait_until_idle(process.pid)  # admitted streams have filled their windows and block in send
    stalled_at = time.monotonic()

    other = grpc.insecure_channel(address)  # a well-behaved client
    health = health_pb2_grpc.HealthStub(other)
    sampler = pb_grpc.SamplerStub(other)
    sampler.ListSources(pb.ListSourcesRequest(), timeout=10)  # connect first
    health_times = [_timed(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5)) for _ in range(10)]
    unary_times = [_timed(lambda: sampler.GetEpisode(pb.GetEpisodeRequest(request=_request(16), index=i), timeout=5))
                   for i in range(10)]
    assert statistics.median(health_times) < 0.1, health_times
    assert statistics.median(unary_times) < 0.1, unary_times
    assert max(health_times + unary_times) < 1.0, (health_times, unary_times)
    extra = sampler.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(16), count=1), timeout=5)
    with pytest.raises(grpc.RpcError) as caught:  # every slot is still held by a stalled stream
        list(extra)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _rss_mb(process.pid) - rss_before < 300

    # the stalled streams are cancelled after the idle period, and their slots serve again
    time.sleep(max(0.0, stalled_at + IDLE_SECONDS + 3 - time.monotonic()))
    fresh = list(sampler.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(16), count=3), timeout=10))
    assert [m.index for m in fresh] == [0, 1, 2]
    admitted = [s for s in stalled if all(s is not r for r in refused)]
    assert len(admitted) == MAX_STREAMS
    for stream in admitted[:3]:  # what they hold is delivered, then the server's cancellation
        with pytest.raises(grpc.RpcError) as caught:
            for _ in stream:
                pass
        assert caught.value.code() == grpc.StatusCode.CANCELLED
    other.close()
    stalled_channel.close()


def test_per_client_stream_limit_and_release():
    admission = StreamAdmission(max_streams=4, max_streams_per_client=2, idle_seconds=60)
    a1 = admission.admit("ipv4:10.0.0.1", lambda: None)
    admission.admit("ipv4:10.0.0.1", lambda: None)
    with pytest.raises(ResourceExhausted, match="client ipv4:10.0.0.1 already has 2 open streams"):
        admission.admit("ipv4:10.0.0.1", lambda: None)
    admission.admit("ipv4:10.0.0.2", lambda: None)
    a1.release()
    a1.release()  # once only
    admission.admit("ipv4:10.0.0.1", lambda: None)
    admission.admit("ipv4:10.0.0.3", lambda: None)
    with pytest.raises(ResourceExhausted, match="already serves 4 streams"):
        admission.admit("ipv4:10.0.0.4", lambda: None)
    assert admission.open_streams == 4


def test_idle_streams_are_cancelled_and_busy_ones_are_not():
    now = [0.0]
    admission = StreamAdmission(max_streams=4, max_streams_per_client=4, idle_seconds=10, clock=lambda: now[0])
    cancelled: list[str] = []
    idle = admission.admit("ipv4:1.1.1.1", lambda: cancelled.append("idle"))
    busy = admission.admit("ipv4:1.1.1.1", lambda: cancelled.append("busy"))
    now[0] = 8.0
    busy.progress()
    now[0] = 12.0
    assert admission.cancel_idle() == 1 and cancelled == ["idle"]
    assert admission.cancel_idle() == 0  # cancelled once
    now[0] = 19.0
    assert admission.cancel_idle() == 1 and cancelled == ["idle", "busy"]
    idle.release()
    busy.release()
    assert admission.open_streams == 0


def test_client_of_drops_the_port():
    assert client_of("ipv4:127.0.0.1:54321") == "ipv4:127.0.0.1"
    assert client_of("ipv6:[::1]:5000") == "ipv6:[::1]"
    assert client_of("unix:/tmp/s") == "unix:/tmp/s"


def test_where_tokens_are_used_the_per_client_limit_is_per_token(served, tmp_path):
    from test_security import write_tokens

    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.limits import ServiceLimits

    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=1, threads=4, metrics_path=tmp_path / "m.sqlite", grace_seconds=0.5,
        tokens=write_tokens(tmp_path / "tokens.jsonl"), limits=ServiceLimits(max_streams=8, max_streams_per_client=2),
    )).start()
    channel = grpc.insecure_channel(server.address)
    stub = pb_grpc.SamplerStub(channel)

    def open_stream(token: str):
        return stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(16), count=0),
                                   metadata=[("authorization", f"Bearer {token}")])

    try:
        held = [open_stream("tok-a-1"), open_stream("tok-a-1")]
        assert [next(s).index for s in held] == [0, 0]
        with pytest.raises(grpc.RpcError) as caught:
            next(open_stream("tok-a-1"))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "client token:team-a already has 2 open streams" in caught.value.details()
        assert next(open_stream("tok-b-1")).index == 0  # another team, same host: its own allowance
        for stream in held:
            stream.cancel()
    finally:
        channel.close()
        server.stop(grace=0.5)


def test_a_stream_that_sheds_its_lookahead_resumes_with_identical_episodes(served, tmp_path):
    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.limits import ServiceLimits

    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=2, threads=4, metrics_path=tmp_path / "m.sqlite", grace_seconds=0.5,
        limits=ServiceLimits(max_streams=4, stream_shed_seconds=0.3, stream_idle_seconds=30),
    )).start()
    channel = grpc.insecure_channel(server.address, options=[("grpc.max_receive_message_length", 64 << 20)])
    stub = pb_grpc.SamplerStub(channel)
    window = pb.StreamEpisodesRequest(request=_request(64), count=12)
    try:
        unbroken = [(m.fingerprint, m.support_images.data, m.query_images.data) for m in stub.StreamEpisodes(window)]
        paused = stub.StreamEpisodes(window)
        got = [next(paused)]
        dropped = 0
        deadline = time.monotonic() + 10
        while not dropped and time.monotonic() < deadline:  # the client stops reading; the stream sheds
            time.sleep(0.2)
            dropped = sum(1 for slot in server.servicer.admission._slots if slot.shed_done)
        assert dropped, "the idle stream never shed its lookahead"
        got += list(paused)
        assert [(m.fingerprint, m.support_images.data, m.query_images.data) for m in got] == unbroken
        assert [m.index for m in got] == list(range(12))
    finally:
        channel.close()
        server.stop(grace=0.5)


def test_shedding_happens_once_per_idle_spell():
    now = [0.0]
    admission = StreamAdmission(max_streams=2, max_streams_per_client=2, idle_seconds=10, clock=lambda: now[0],
                                shed_seconds=2)
    slot = admission.admit("ipv4:1.1.1.1", lambda: None)
    calls: list[float] = []
    slot.shed = lambda: calls.append(now[0]) or 3
    now[0] = 1.0
    assert admission.shed_idle() == 0
    now[0] = 3.0
    assert admission.shed_idle() == 3 and admission.shed_idle() == 0
    slot.progress()  # the client read again
    now[0] = 5.5
    assert admission.shed_idle() == 3
    assert calls == [3.0, 5.5] and admission.cancel_idle() == 0


def test_the_client_resumes_a_stream_the_server_cancelled_as_idle(served, tmp_path, caplog):
    from clients.core import EpisodeSpec, SamplerClient
    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.limits import ServiceLimits

    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=1, threads=4, metrics_path=tmp_path / "m.sqlite", grace_seconds=0.5,
        limits=ServiceLimits(max_streams=4, stream_shed_seconds=0.2, stream_idle_seconds=0.6),
    )).start()
    spec = EpisodeSpec(sources=("folder",), split="train", seed=4, image_size=64)
    try:
        with SamplerClient(server.address, prefetch=1) as client:
            expected = [e.fingerprint for e in client.episodes(spec, 0, 10)]
            stream = client.episodes(spec, 0, 10)
            got = [next(stream).fingerprint]
            with caplog.at_level("WARNING", logger="sampler_server.service"):
                time.sleep(2.5)  # a long pause: the server cancels the unread stream as idle
            assert any("made no progress" in r.getMessage() for r in caplog.records)
            got += [e.fingerprint for e in stream]
        assert got == expected
    finally:
        server.stop(grace=0.5)


# ---- memory bounded server-wide: replies being sent, episodes prepared ahead ---------


def test_a_reply_that_fits_takes_room_at_once_and_gives_it_back_when_sent():
    admission = StreamAdmission(max_streams=4, max_streams_per_client=4, idle_seconds=60, send_bytes=10)
    slot = admission.admit("ipv4:1.1.1.1", lambda: None)
    admission.wait_for_room(slot, 6, lambda: False)
    assert slot.send_charge == 6
    slot.sending()
    slot.progress()  # the client took it
    assert slot.send_charge == 0
    admission.wait_for_room(slot, 25, lambda: False)  # larger than the budget: fits an empty one
    assert slot.send_charge == 25
    slot.release()  # a stream that ends gives its room back too
    other = admission.admit("ipv4:1.1.1.1", lambda: None)
    admission.wait_for_room(other, 10, lambda: False)
    assert other.send_charge == 10


def test_a_stream_stuck_sending_is_cancelled_to_make_room_and_a_slow_one_is_not():
    now = [0.0]
    admission = StreamAdmission(max_streams=4, max_streams_per_client=4, idle_seconds=60, clock=lambda: now[0],
                                send_bytes=10)
    cancelled: list[str] = []
    stuck = admission.admit("ipv4:1.1.1.1", lambda: cancelled.append("stuck"))
    admission.wait_for_room(stuck, 8, lambda: False)
    stuck.sending()
    now[0] = 0.5  # stuck for less than STALL_SECONDS: a slow client, not one that stopped reading
    reader = admission.admit("ipv4:2.2.2.2", lambda: cancelled.append("reader"))
    gave_up = []
    admission.wait_for_room(reader, 5, lambda: gave_up.append(1) or len(gave_up) > 2)
    assert cancelled == [] and reader.send_charge == 0  # it waited, then gave up (its call ended)
    now[0] = STALL_SECONDS + 0.5
    admission.wait_for_room(reader, 5, lambda: False)
    assert cancelled == ["stuck"] and reader.send_charge == 5 and stuck.send_charge == 0


def test_streams_waiting_for_room_are_served_in_order():
    admission = StreamAdmission(max_streams=4, max_streams_per_client=4, idle_seconds=60, send_bytes=10)
    holder = admission.admit("ipv4:1.1.1.1", lambda: None)
    admission.wait_for_room(holder, 5, lambda: False)
    holder.sending()
    order: list[str] = []

    def wait(name: str, nbytes: int) -> None:
        slot = admission.admit("ipv4:1.1.1.1", lambda: None)
        admission.wait_for_room(slot, nbytes, lambda: False)
        order.append(name)
        slot.progress()

    first = threading.Thread(target=wait, args=("first, large", 9))
    first.start()
    time.sleep(0.3)
    second = threading.Thread(target=wait, args=("second, small", 1))  # fits now, but the first came first
    second.start()
    time.sleep(0.3)
    assert order == []
    holder.progress()
    first.join(5)
    second.join(5)
    assert order == ["first, large", "second, small"]


def test_lookahead_budget_never_refuses_an_empty_budget():
    budget = LookaheadBudget(10)
    assert budget.try_take(30)  # one episode larger than the budget still gets prepared ahead
    assert not budget.try_take(1)
    budget.give(30)
    assert budget.try_take(6) and budget.try_take(4) and not budget.try_take(1)
    budget.give(4)
    assert budget.try_take(4)


def _tree_pss_mb(pid: int) -> float:
    """Summed Pss of a process and its children (the decode workers): pages they share,
    like the workers' shared-memory blocks, counted once."""
    pids = [pid] + [int(c) for c in open(f"/proc/{pid}/task/{pid}/children", encoding="ascii").read().split()]
    total = 0
    for each in pids:
        try:
            for line in open(f"/proc/{each}/smaps_rollup", encoding="ascii"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:  # a worker that ended between the listing and the read holds nothing
            pass
    return total / 1024


@pytest.mark.slow
def test_stalled_streams_are_cancelled_to_make_room(served, tmp_path):
    """The defect: each stream whose client stopped reading kept its lookahead, a packed
    reply and the reply gRPC was sending: here the server tree's Pss grew by 520 MB
    before this change. Now replies in flight and episodes prepared ahead are bounded
    server-wide (about 210 MB at the peak here, most of it gRPC's transient write queue
    while 40 new streams push their first replies into a client that buffers them), and
    a reading client gets room by cancelling stalled streams."""
    log = tmp_path / "serve.log"
    process, address = start_serve(served.data, "--workers", "1", "--stream-idle-seconds", "600",
                                   "--metrics", str(tmp_path / "metrics.sqlite"), stderr=open(log, "w"))
    try:
        time.sleep(1.0)
        before = _tree_pss_mb(process.pid)
        peak = [before]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.2):
                peak[0] = max(peak[0], _tree_pss_mb(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stalled_channel = grpc.insecure_channel(address)
        stub = pb_grpc.SamplerStub(stalled_channel)
        stalled = [stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(84), start_index=1000 * i, count=0))
                   for i in range(40)]
        _wait_until_idle(process.pid, timeout=120)

        reader = grpc.insecure_channel(address)
        fresh = list(pb_grpc.SamplerStub(reader).StreamEpisodes(
            pb.StreamEpisodesRequest(request=_request(84), count=5), timeout=60))
        assert [m.index for m in fresh] == [0, 1, 2, 3, 4]
        sampling.set()
        sampler.join()
        grown = peak[0] - before
        assert grown < 300, f"server memory grew by {grown:.0f} MB with 40 stalled streams"
        assert "sending to a client that does not read" in log.read_text()
        for call in stalled:
            call.cancel()
        reader.close()
        stalled_channel.close()
    finally:
        process.kill()
        process.wait(timeout=30)
