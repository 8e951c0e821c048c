"""Ranks of one host each on their own replica (``clients.balancing.rank_target``): under
torchrun a fixed list of replicas is rotated by the local rank and tried in order
(pick_first); elsewhere, and for dns targets, calls are balanced round-robin as before."""

from __future__ import annotations

import json
import logging

import pytest

from clients.balancing import (PICK_FIRST, ROUND_ROBIN, Liveness, channel_options, dialled_target, parse_target,
                               rank_target, torchrun_local_rank)
from clients.channel import Channel
from sampler_common.wire import segments

FOUR = "ipv4:127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"


def policy(target) -> str | None:
    return dict(channel_options(target, Liveness())).get("grpc.service_config")


def test_rank_r_tries_address_r_mod_m_first_then_the_others_in_turn():
    four = parse_target(FOUR)
    ports = {rank: [e.rsplit(":", 1)[1] for e in rank_target(four, rank).endpoints] for rank in range(6)}
    assert ports[0] == ["7000", "7001", "7002", "7003"]
    assert ports[1] == ["7001", "7002", "7003", "7000"]
    assert ports[3] == ["7003", "7000", "7001", "7002"]
    assert ports[5] == ports[1]  # more ranks than replicas: rank r on replica r mod M
    one = rank_target(four, 2)
    assert one.in_order and not one.balanced and one.text == \
        "ipv4:127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7000,127.0.0.1:7001"
    assert parse_target(one.text).endpoints == one.endpoints  # gRPC is given a target it parses
    assert policy(one) == PICK_FIRST and json.loads(PICK_FIRST)["loadBalancingConfig"][0]["pick_first"] == {
        "shuffleAddressList": False}
    six = parse_target("ipv6:[::1]:1,[::1]:2")
    assert rank_target(six, 1).text == "ipv6:[::1]:2,[::1]:1"


def test_outside_torchrun_and_for_other_targets_nothing_changes():
    four = parse_target(FOUR)
    assert rank_target(four, None) is four and policy(four) == ROUND_ROBIN  # no rank: round_robin as before
    for text in ("dns:///sampler.ns.svc:50051", "127.0.0.1:50051", "ipv4:127.0.0.1:50051", "unix:/tmp/s"):
        target = parse_target(text)
        assert rank_target(target, 3) is target, text  # a resolver's list, one server, one address


def test_torchrun_rank_read_from_the_environment_or_refused_in_one_line():
    assert torchrun_local_rank({}) is None
    assert torchrun_local_rank({"WORLD_SIZE": "1", "LOCAL_RANK": "0"}) is None  # one process: a plain run
    assert torchrun_local_rank({"WORLD_SIZE": "4", "LOCAL_RANK": "3"}) == 3
    assert torchrun_local_rank({"WORLD_SIZE": "4"}) == 0
    for environ, said in (({"WORLD_SIZE": "two"}, "environment WORLD_SIZE: got 'two', expected an integer >= 1"),
                          ({"WORLD_SIZE": "2", "LOCAL_RANK": "-1"},
                           "environment LOCAL_RANK: got '-1', expected an integer >= 0")):
        with pytest.raises(ValueError, match=f"^{said}$"):
            torchrun_local_rank(environ)


def test_a_rank_logs_once_which_replica_it_prefers(caplog):
    caplog.set_level(logging.INFO, logger="clients.balancing")
    environ = {"WORLD_SIZE": "2", "LOCAL_RANK": "1", "RANK": "1"}
    target = parse_target("ipv4:127.0.0.1:7100,127.0.0.1:7101")
    assert dialled_target(target, environ).endpoints[0] == "127.0.0.1:7101"
    assert dialled_target(target, environ).in_order
    said = [r.getMessage() for r in caplog.records if r.name == "clients.balancing"]
    assert said == ["local rank 1 prefers replica 127.0.0.1:7101 of ipv4:127.0.0.1:7100,127.0.0.1:7101 "
                    "(pick_first; the others in turn are its failover)"]


def test_the_channel_dials_the_rotated_list_under_torchrun(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    channel = Channel("ipv4:127.0.0.1:7200,127.0.0.1:7201")
    assert channel.address == "ipv4:127.0.0.1:7200,127.0.0.1:7201"  # what messages name: the user's target
    assert channel.dialled == "ipv4:127.0.0.1:7201,127.0.0.1:7200"
    monkeypatch.setenv("WORLD_SIZE", "1")
    plain = Channel("ipv4:127.0.0.1:7200,127.0.0.1:7201")
    assert plain.dialled == plain.address


def test_a_target_with_nothing_to_prefer_never_reads_the_environment():
    broken = {"WORLD_SIZE": "two"}
    for text in ("127.0.0.1:50051", "dns:///sampler.ns.svc:50051", "ipv4:127.0.0.1:50051"):
        target = parse_target(text)
        assert dialled_target(target, broken) is target
    with pytest.raises(ValueError, match="environment WORLD_SIZE"):
        dialled_target(parse_target(FOUR), broken)


@pytest.fixture
def two_servers(served):
    from sampler_server.service.server import RunningServer, ServerConfig

    servers = [RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, threads=4,
                                          grace_seconds=0.5)).start() for _ in range(2)]
    yield servers
    for server in servers:
        server.stop(grace=0.5)


def test_a_rank_whose_replica_stops_goes_on_on_the_next_one_with_the_same_episodes(two_servers, served, monkeypatch,
                                                                                   caplog):
    from clients.core import EpisodeSpec, RetryPolicy, SamplerClient

    caplog.set_level(logging.INFO, logger="clients.balancing")
    spec = EpisodeSpec(sources=("folder",), split="train", seed=5, image_size=32)
    with SamplerClient(served.address, same_host=False) as single:
        expected = [(e.index, e.fingerprint, e.support_images.tobytes()) for e in single.episodes(spec, start=1,
                                                                                                   step=2, count=12)]
    first, second = two_servers
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")  # rank 1 prefers the second address: `second`
    target = f"ipv4:{first.address},{second.address}"
    got = []
    with SamplerClient(target, prefetch=1, retry=RetryPolicy(initial_backoff=0.05)) as client:
        for episode in client.episodes(spec, start=1, step=2, count=12):
            got.append((episode.index, episode.fingerprint, episode.support_images.tobytes()))
            if len(got) == 3:
                before = [server.servicer.same_host.written for server in two_servers]
                second.stop(grace=0.5)  # drains: its stream ends UNAVAILABLE, naming the index to resume at
    assert got == expected  # none lost, none repeated, as one server sends them
    if not segments.available():  # who wrote the same-host replies tells who served
        assert before[0] == 0 and before[1] > 0  # the preferred replica alone, until it stopped
        assert first.servicer.same_host.written > 0  # then the next in the list
    said = [r.getMessage() for r in caplog.records if r.name == "clients.balancing"]
    assert said[0] == f"local rank 1 prefers replica {second.address} of {target} (pick_first; the others in turn " \
        "are its failover)"
    assert any(f"from {target} broke (UNAVAILABLE" in message for message in said[1:]), said
