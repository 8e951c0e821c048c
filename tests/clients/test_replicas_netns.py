"""Replicas on hosts of their own: three network namespaces, each joined to this one by a
veth pair and running ``serve`` on its own address. A lost node sends no reset, so the
client must notice the silence itself: one replica's link is set down mid-stream and the
client notices by keepalive (UNAVAILABLE) within keepalive + timeout; another's, with
keepalive slower than the message wait, by the wait (DEADLINE_EXCEEDED). Both streams
end on the replicas left with every episode as one server sends it, none missing or
repeated. Namespaces and links are removed however the test ends. Needs root and
iproute2 (``ip``, ``ss``); fails, saying which is missing, otherwise (unless
$SAMPLER_TESTS_WITHOUT_NETNS=1 opts out)."""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import subprocess

import pytest
from prerequisites import missing
from replica_processes import (ACT_AT, COUNT, paced_stream, require_ss, serve_command, single_server_run,
                               start_replicas, wait_connected)

from clients.balancing import Liveness
from clients.core import RetryPolicy, SamplerClient

REPLICAS = 3
PORT = 50051
SLACK = 3.0  # seconds beyond the configured bound: scheduling on a loaded 2-core runner


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the test makes network namespaces and veth pairs"
    if shutil.which("ip") is None:
        return "needs iproute2's ip to make network namespaces"
    return require_ss()


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _free_prefix() -> int:
    """A second octet x such that 10.x.0.0/16 is on no interface here."""
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    used = [ipaddress.ip_interface(word) for line in shown.splitlines() for word in line.split()[3:4]]
    for octet in range(200, 255):
        net = ipaddress.ip_network(f"10.{octet}.0.0/16")
        if not any(interface.network.overlaps(net) for interface in used):
            return octet
    raise RuntimeError("no free 10.x.0.0/16 for the test's links")


@pytest.fixture
def hosts(tmp_path):
    """(namespace, link on this side, replica address) for each replica host; removed at the end."""
    absent = _missing()
    if absent:
        missing("SAMPLER_TESTS_WITHOUT_NETNS", absent)
    tag = f"smp{os.getpid() % 100000}"
    made: list[tuple[str, str]] = []
    try:
        try:
            _ip("netns", "add", f"{tag}n0")
        except RuntimeError as error:
            missing("SAMPLER_TESTS_WITHOUT_NETNS", f"cannot make a network namespace here: {error}")
        made.append((f"{tag}n0", f"{tag}h0"))
        octet = _free_prefix()
        for n in range(REPLICAS):
            namespace, here, there = f"{tag}n{n}", f"{tag}h{n}", f"{tag}p{n}"
            if n:
                _ip("netns", "add", namespace)
                made.append((namespace, here))
            _ip("link", "add", here, "type", "veth", "peer", "name", there)
            _ip("link", "set", there, "netns", namespace)
            _ip("addr", "add", f"10.{octet}.{n}.1/24", "dev", here)
            _ip("link", "set", here, "up")
            _ip("-n", namespace, "addr", "add", f"10.{octet}.{n}.2/24", "dev", there)
            _ip("-n", namespace, "link", "set", there, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        yield [(namespace, here, f"10.{octet}.{n}.2") for n, (namespace, here) in enumerate(made)]
    finally:
        for namespace, here in made:  # the namespace takes its end of the pair with it
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
            subprocess.run(["ip", "link", "del", here], capture_output=True)
        left = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert tag not in left and tag not in spaces, f"left behind: {left} {spaces}"


@pytest.fixture
def replicas(served, hosts, tmp_path):
    commands = [["ip", "netns", "exec", namespace, *serve_command(served.data, host=address, port=PORT)]
                for namespace, _, address in hosts]
    started = start_replicas(commands, [tmp_path / f"replica-{n}.log" for n in range(len(hosts))],
                             [f"( dst {address} )" for _, _, address in hosts], prefix="10.")
    for replica, (_, here, _) in zip(started, hosts):
        replica.extra["link"] = here
    yield started
    for replica in started:
        replica.stop()  # before the namespaces go: a process in one keeps it alive


def _cut(replica) -> None:
    """The node is gone: its link goes down, nothing answers, nothing is reset."""
    _ip("link", "set", replica.extra["link"], "down")


def test_a_replica_cut_off_mid_stream_is_noticed_in_bounded_time_and_the_stream_ends_on_the_others(
        served, replicas, caplog, capsys):
    caplog.set_level(logging.INFO, logger="clients.balancing")
    expected = single_server_run(served.address)
    target = "ipv4:" + ",".join(r.address for r in replicas)
    retry = RetryPolicy(initial_backoff=0.05)
    cases = [  # (what notices, liveness, status, bound in seconds)
        ("keepalive", Liveness(keepalive_seconds=1, keepalive_timeout_seconds=1, message_wait_seconds=30),
         "UNAVAILABLE", 1 + 1),
        ("message wait", Liveness(keepalive_seconds=10, keepalive_timeout_seconds=5, message_wait_seconds=1.5),
         "DEADLINE_EXCEEDED", 1.5),
    ]
    live = list(replicas)
    for what, liveness, status, bound in cases:
        caplog.clear()
        with SamplerClient(target, same_host=False, prefetch=1, retry=retry, liveness=liveness) as client:
            client.list_sources()
            wait_connected(live)
            run = paced_stream(client, live, _cut, lambda: caplog.records)
        assert [index for index, _, _ in run.episodes] == list(range(COUNT))  # none missing, none repeated
        assert run.episodes == expected  # fingerprints and pixels as one server sends them
        assert run.breaks, f"{what}: the cut replica's stream never broke: was it serving it?"
        first = run.breaks[0]
        noticed = first.created - run.acted_at
        resumed_at = int(first.getMessage().rsplit(" ", 1)[1])
        with capsys.disabled():
            print(f"\n[replicas] link of replica {run.victim} down: noticed by {what} after {noticed:.2f} s "
                  f"({status}; bound {bound:g} s; stream resumed at index {resumed_at}); longest pause between "
                  f"two episodes {run.max_gap():.2f} s")
        assert status in first.getMessage(), first.getMessage()
        assert ACT_AT <= resumed_at < COUNT
        assert noticed < bound + SLACK, (what, noticed)
        live.pop(run.victim)  # the next case cuts one of the replicas left
