"""``sampler-server serve --replicas N`` (``sampler_server.cli.serve_replicas``): N server
processes behind one ready line whose target a client takes as it is; the same episodes
as one server; torchrun-like ranks each on their own replica with exactly the episodes
of their indices; one metrics store shared; SIGTERM drains them all; a replica that dies
takes the service down with a non-zero exit, never half of it; the parent's death takes
the replicas with it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import process_tree
import pytest
from conftest import REPO_ROOT
from rank_client import SPEC, digest

from clients.balancing import parse_target
from clients.core import SamplerClient
from clients.reporting import episode_report
from sampler_common.wire import segments
from sampler_server.cli.main import build_parser
from sampler_server.cli.main import main as server_cli
from sampler_server.cli.serve_replicas import replica_argv, replica_ports, replica_target, split_workers
from sampler_server.errors import InvalidArgument

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
COUNT = 6


def start_replicas(data: Path, log: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """``serve --replicas 2 --port 0 ...`` in a session of its own: (process, target) once ready."""
    with open(log, "w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0", "--replicas", "2",
             "--workers", "2", *flags], env=ENV, stdout=subprocess.PIPE, stderr=handle, text=True,
            start_new_session=True)
    line = process.stdout.readline()
    if not line.startswith("listening on ipv4:127.0.0.1:"):
        process.kill()
        process.wait(timeout=30)
        raise AssertionError(f"serve --replicas did not start: {line!r} {log.read_text()[-3000:]}")
    # one line for both, as one server's: the stores, then how to connect and where metrics are
    assert re.search(r" \(2 replicas; decode workers 1\+1; 2 stores: folder, folder_raw32; tls off, tokens off, "
                     r"metrics off; ready in [0-9.]+ s\)$", line.strip()), line
    return process, line.split()[2]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    process.stdout.close()


@pytest.fixture(scope="module")
def replicas(served, tmp_path_factory):
    """Two replicas over the served data, reports in a metrics file of their own."""
    work = tmp_path_factory.mktemp("replicas")
    log = work / "serve.log"
    process, target = start_replicas(served.data, log, "--metrics", str(work / "metrics.sqlite"))
    yield process, target, log
    stop(process)


def single_server(address: str, indices: list[int]) -> list[tuple[int, str, str]]:
    with SamplerClient(address, same_host=False) as client:
        return [(i, e.fingerprint, digest(e)) for i in indices for e in [client.episode(SPEC, i)]]


def test_the_plan_ports_workers_target_and_each_replicas_command_line():
    assert split_workers(24, 4) == [6, 6, 6, 6] and split_workers(5, 2) == [3, 2] and split_workers(1, 3) == [1, 1, 1]
    assert replica_ports(50051, 3) == [50051, 50052, 50053] and replica_ports(0, 2) == [0, 0]
    with pytest.raises(InvalidArgument, match="^--port: got 65535 with --replicas 2, expected at most 65534"):
        replica_ports(65535, 2)
    assert replica_target("127.0.0.1", [5, 6]) == "ipv4:127.0.0.1:5,127.0.0.1:6"
    assert replica_target("localhost", [5]) == "ipv4:127.0.0.1:5"
    assert replica_target("::1", [5, 6]) == "ipv6:[::1]:5,[::1]:6" == replica_target("[::1]", [5, 6])
    assert parse_target(replica_target("0.0.0.0", [1, 2])).balanced
    with pytest.raises(InvalidArgument, match="^--host: got 'sampler.lab', expected an IP address with --replicas"):
        replica_target("sampler.lab", [1, 2])
    # a replica's command line is the parent's options, its own port and workers, one replica
    parser = build_parser("serve")
    given = ["serve", "--data", "/d", "/e", "--data", "/f", "--replicas", "3", "--workers", "7", "--port", "6000", "--lookahead-mb", "128",
             "--stream-idle-seconds", "30.5", "--log-json", "--metrics", "postgresql://u@h:5/db", "--shm-mb", "0"]
    parent = parser.parse_args(given)
    assert parent.data == [Path("/d"), Path("/e"), Path("/f")]
    child = parser.parse_args(["serve", *replica_argv(parent, port=6001, workers=3, name="replica 2/3", parent=42)])
    expected = {**vars(parent), "port": 6001, "workers": 3, "replicas": 1, "replica_of": 42,
                "replica_name": "replica 2/3"}
    assert {k: v for k, v in vars(child).items() if k != "func"} == {k: v for k, v in expected.items() if k != "func"}


def test_bad_replica_options_are_refused_in_one_line(tmp_path, capsys):
    for flags, said in ((["--replicas", "0"], "--replicas: got 0, expected 1 or more server processes"),
                        (["--replicas", "2", "--host", "sampler.lab"], "--host: got 'sampler.lab', expected an IP"),
                        (["--replicas", "2", "--port", "65535"], "--port: got 65535 with --replicas 2"),
                        (["--replicas", "2", "--data", str(tmp_path / "none")], "--data: got ")):
        assert server_cli(["serve", "--data", str(tmp_path), *flags]) == 2  # each --data adds its directories
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, err


def test_two_replicas_serve_what_one_server_serves_through_one_target(replicas, served):
    process, target, log = replicas
    endpoints = parse_target(target).endpoints
    assert len(endpoints) == 2 and len(set(endpoints)) == 2
    expected = single_server(served.address, list(range(COUNT)))
    with SamplerClient(target, same_host=False) as client:  # round_robin over both
        streamed = [(e.index, e.fingerprint, digest(e)) for e in client.episodes(SPEC, count=COUNT)]
        unary = [(i, e.fingerprint, digest(e)) for i in range(COUNT) for e in [client.episode(SPEC, i)]]
    assert streamed == expected and unary == expected
    for endpoint in endpoints:  # and each replica alone
        assert single_server(endpoint, [4]) == expected[4:5]
    text = log.read_text()
    for name in ("replica 1/2", "replica 2/2"):
        assert f"{name}: same-host transport" in text, text[-2000:]


def test_two_torchrun_ranks_each_read_their_own_replica_and_exactly_their_indices(replicas, served):
    process, target, log = replicas
    before = log.read_text()
    ranks = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("rank_client.py")), target, str(COUNT)],
                              env={**ENV, "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    results = [rank.communicate(timeout=120) for rank in ranks]
    for rank, (out, err) in zip(ranks, results):
        assert rank.returncode == 0, err[-3000:]
    expected = single_server(served.address, list(range(2 * COUNT)))
    endpoints = parse_target(target).endpoints
    for rank, (out, err) in enumerate(results):
        got = json.loads(out)
        assert [tuple(e) for e in got["episodes"]] == expected[rank::2]  # indices r, r + 2, ...: as one server
        assert f"clients.balancing local rank {rank} prefers replica {endpoints[rank]} of {target}" in err, err
        if not segments.available():
            assert got["transport"] == "same-host"  # the offer came from the replica that serves it
    # server side: each replica served exactly one of the two streams
    deadline = time.monotonic() + 10
    while True:
        new = log.read_text()[len(before):]
        streams = [re.findall(rf"replica {n}/2: method=/sampler.v1.Sampler/StreamEpisodes ", new) for n in (1, 2)]
        if sum(map(len, streams)) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [len(s) for s in streams] == [1, 1], new[-3000:]


def test_reports_through_either_replica_land_in_the_one_metrics_store(replicas):
    process, target, log = replicas
    a, b = parse_target(target).endpoints
    with SamplerClient(a, same_host=False) as to_a, SamplerClient(b, same_host=False) as to_b:
        episodes = [to_a.episode(SPEC, i) for i in range(6)]
        reports = [episode_report("replicas-run", e, np.zeros(len(e.query_labels), dtype=np.int64)) for e in episodes]
        first = to_a.report(reports[:4])
        second = to_b.report(reports[2:])  # 2 already kept (through the other replica), 2 new
        table = json.loads(to_b.get_report(["replicas-run"], fmt="json"))
    assert (first.stored, first.duplicates, second.stored, second.duplicates) == (4, 0, 2, 2)
    assert "replicas-run" in json.dumps(table)


def test_sigterm_drains_every_replica_and_the_parent_exits_0(served, tmp_path):
    process, _ = start_replicas(served.data, tmp_path / "serve.log")
    children = process_tree.children(process.pid)
    assert len(children) == 2, process_tree.describe(children)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    process.stdout.close()
    assert not process_tree.wait_gone(children | process_tree.descendants(process.pid), 10)
    text = (tmp_path / "serve.log").read_text()
    assert "replica 1/2: stopped" in text and "replica 2/2: stopped" in text, text[-2000:]


def test_a_killed_replica_stops_the_others_and_the_parent_exits_non_zero(served, tmp_path):
    process, target = start_replicas(served.data, tmp_path / "serve.log")
    children = sorted(process_tree.children(process.pid))
    os.kill(children[1], signal.SIGKILL)
    assert process.wait(timeout=30) == 1
    process.stdout.close()
    assert not process_tree.wait_gone(set(children), 10)
    text = (tmp_path / "serve.log").read_text()
    assert re.search(r"ERROR replica [12]/2 \(127\.0\.0\.1:\d+, pid \d+\) exited with status -9; stopping the "
                     r"other replicas", text), text[-2000:]


def test_the_replicas_die_with_their_parent(served, tmp_path):
    process, _ = start_replicas(served.data, tmp_path / "serve.log")
    tree = process_tree.descendants(process.pid)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    assert not process_tree.wait_gone(tree, 10), process_tree.describe(tree)


def test_a_replica_that_cannot_start_fails_the_whole_service(served, tmp_path):
    import socket

    with socket.socket() as taken:  # the first replica's port is in use (the server does not share ports)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "sampler_server", "serve", "--data", str(served.data), "--port",
                               str(port), "--replicas", "2", "--workers", "2"], env=ENV, capture_output=True,
                              text=True, timeout=60)
    assert done.returncode != 0 and "listening on" not in done.stdout, done.stderr[-2000:]
    assert f"to bind to address 127.0.0.1:{port}" in done.stderr, done.stderr[-2000:]  # gRPC says so
    assert "ERROR replica 1/2 did not start; stopping the other replicas" in done.stderr, done.stderr[-2000:]
