"""Failures that say what to do (issue 27, item 3): an address where nothing listens is
refused within 2 s in one line that says what to check, from the Python client and from
the trainer's command line, while a server that answered once (a restart, a lost replica)
keeps its retries, and a dead replica among live ones is failed over, not refused."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients.channel import RetryPolicy
from clients.client import SamplerClient
from clients.core import EpisodeSpec
from clients.errors import NothingListens, SamplerClientError

REPO_ROOT = Path(__file__).resolve().parents[2]
REFUSAL_SECONDS = 2.0
SLACK_SECONDS = 1.0
"""Added to the promised 2 s: a refusal measured 0.21 s on an idle 2-core machine (gRPC's
first failed connect plus one TCP probe per address); the slack is for a loaded CI host."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _told(address: str) -> str:
    return (f"nothing listens at {address}: is `sampler-server serve` running there? "
            "It prints its address when ready")


@pytest.mark.parametrize("form", ["host", "localhost", "list"])
def test_the_client_refuses_an_address_where_nothing_listens_within_2_s(form):
    port, other = _free_port(), _free_port()
    address = {"host": f"127.0.0.1:{port}", "localhost": f"localhost:{port}",
               "list": f"ipv4:127.0.0.1:{port},127.0.0.1:{other}"}[form]
    client = SamplerClient(address)  # the defaults a user has: 10 s to connect, 8 attempts
    for ask in (client.list_sources, lambda: next(iter(client.episodes(EpisodeSpec(sources=("folder",)), count=1)))):
        started = time.monotonic()
        with pytest.raises(NothingListens) as caught:
            ask()
        elapsed = time.monotonic() - started
        assert str(caught.value) == _told(address)
        assert elapsed < REFUSAL_SECONDS + SLACK_SECONDS, f"refused after {elapsed:.2f} s"
    client.close()


def test_the_trainer_exits_3_within_2_s_with_one_line_and_no_traceback(capfd):
    pytest.importorskip("torch")
    from clients.torch.md_train import main

    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    code = main(["--server", address, "--run", "nothing-listens", "--sources", "folder"])
    elapsed = time.monotonic() - started
    err = capfd.readouterr().err.strip()
    assert code == 3 and elapsed < REFUSAL_SECONDS + SLACK_SECONDS, (code, elapsed, err)
    assert err == f"python -m clients.torch: error: {_told(address)}"


def test_the_trainer_command_line_says_it_in_one_line_without_a_traceback():
    pytest.importorskip("torch")
    address = f"127.0.0.1:{_free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "clients.torch", "train", "--server", address, "--run", "nothing-listens",
         "--sources", "folder"],
        capture_output=True, text=True, timeout=40, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3, done.stderr
    assert lines == [f"python -m clients.torch: error: {_told(address)}"], lines


def test_a_dead_replica_among_live_ones_is_failed_over_not_refused(served):
    dead = f"127.0.0.1:{_free_port()}"
    live = served.address.rpartition(":")[2]
    with SamplerClient(f"ipv4:{dead},127.0.0.1:{live}") as client:
        assert "folder" in {source.name for source in client.list_sources()}
        episode = next(iter(client.episodes(EpisodeSpec(sources=("folder",), ways=5, shots=1, query=2), count=1)))
        assert episode.index == 0


def test_a_server_that_answered_once_is_retried_after_it_stops(served):
    """A server gone after the client reached it is a restart or a crash: the retries run
    (a refusal now is no reason to give up), and the error after them says so."""
    from sampler_server.service.server import RunningServer, ServerConfig

    server = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, grace_seconds=0.1)).start()
    client = SamplerClient(server.address, connect_timeout=0.5,
                           retry=RetryPolicy(max_attempts=3, initial_backoff=0.3, max_backoff=0.3))
    assert client.list_sources()
    server.stop(grace=0.1)
    started = time.monotonic()
    with pytest.raises(SamplerClientError) as caught:
        client.list_sources()
    assert not isinstance(caught.value, NothingListens)
    assert f"server {server.address} unreachable after 3 attempts" in str(caught.value)
    assert time.monotonic() - started >= 0.6  # two backoffs of 0.3 s: it was retried
    client.close()
