"""Helpers for the replica tests: ``serve`` processes of their own (killed by process
group), the bytes a client received from each replica (``ss``), and one paced stream
with an action (kill, cut) in the middle, its breaks read from the client's log."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT

from clients.core import EpisodeArrays, EpisodeSpec, SamplerClient

SPEC = EpisodeSpec(sources=("folder",), split="train", seed=5, image_size=64)
COUNT = 100  # episodes per stream: ~0.5 MB each, so the server is still sending when the action comes
ACT_AT = 20  # the action comes after this many episodes were delivered
PACE = 0.02  # seconds the consumer spends per episode (a trainer's step)


@dataclass
class Replica:
    """One ``serve`` process (the leader of its own process group) and its address."""

    process: subprocess.Popen
    address: str
    log: Path
    ss_filter: str  # selects the client's connections to this replica
    extra: dict[str, Any] = field(default_factory=dict)

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server and its decode workers
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_replicas(commands: Sequence[Sequence[str]], logs: Sequence[Path], ss_filters: Sequence[str],
                   prefix: str = "") -> list[Replica]:
    """Start every ``serve`` command at once (each in a session of its own, logging to a
    file: a full pipe would stall it), then wait for each one's listening line."""
    started: list[Replica] = []
    try:
        for command, log, ss_filter in zip(commands, logs, ss_filters):
            with open(log, "w") as handle:
                process = subprocess.Popen(
                    [*command], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                    stderr=handle, text=True, start_new_session=True)
            started.append(Replica(process, "", log, ss_filter))
        for replica in started:
            line = replica.process.stdout.readline()
            if not line.startswith(f"listening on {prefix}"):
                raise AssertionError(f"serve did not start: {line!r} {replica.log.read_text()[-2000:]}")
            replica.address = line.split()[2]
    except BaseException:
        for replica in started:
            replica.stop()
        raise
    return started


def serve_command(data: Path, host: str = "127.0.0.1", port: int = 0) -> list[str]:
    return [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--host", host, "--port",
            str(port), "--workers", "1"]


def received_bytes(ss_filter: str) -> int:
    """Bytes received so far on this host's established connections that ``ss_filter`` selects."""
    out = subprocess.run(["ss", "-Htin", "state", "established", ss_filter], capture_output=True, text=True,
                         check=True).stdout
    return sum(int(n) for n in re.findall(r"bytes_received:(\d+)", out))


def wait_connected(replicas: Sequence[Replica], timeout: float = 10.0) -> None:
    """Until this host has a connection to every replica (round_robin connects to all,
    but a channel is ready as soon as one is)."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [r.address for r in replicas
                   if not subprocess.run(["ss", "-Htn", "state", "established", r.ss_filter], capture_output=True,
                                         text=True, check=True).stdout.strip()]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no connection to {missing} after {timeout:g} s")
        time.sleep(0.05)


def require_ss() -> str | None:
    return None if shutil.which("ss") else "ss (iproute2) is missing: it tells which replica serves the stream"


def digest(episode: EpisodeArrays) -> str:
    """The episode as delivered: composition, pixels and labels."""
    h = hashlib.sha256(episode.fingerprint.encode())
    for array in (episode.support_images, episode.support_labels, episode.query_images, episode.query_labels):
        h.update(array.tobytes())
    return h.hexdigest()


def single_server_run(address: str, count: int = COUNT) -> list[tuple[int, str, str]]:
    """(index, fingerprint, digest) of episodes 0..count-1 from one server."""
    with SamplerClient(address, same_host=False) as client:
        return [(e.index, e.fingerprint, digest(e)) for e in client.episodes(SPEC, count=count)]


@dataclass
class StreamRun:
    episodes: list[tuple[int, str, str]]
    delivered_at: list[float]  # time.time() of each delivery
    acted_at: float  # time.time() of the action
    victim: int  # which replica the action hit (the one serving the stream)
    breaks: list[logging.LogRecord]  # the client's break records after the action

    def max_gap(self) -> float:
        return max(b - a for a, b in zip(self.delivered_at, self.delivered_at[1:]))


def paced_stream(client: SamplerClient, replicas: Sequence[Replica], act: Callable[[Replica], None],
                 records: Callable[[], list[logging.LogRecord]]) -> StreamRun:
    """Stream COUNT episodes at a trainer's pace; after ACT_AT, find the replica that
    serves the stream (the most bytes received since the stream began) and ``act`` on it."""
    before = [received_bytes(r.ss_filter) for r in replicas]
    episodes, delivered_at = [], []
    acted_at, victim = 0.0, -1
    for episode in client.episodes(SPEC, count=COUNT):
        episodes.append((episode.index, episode.fingerprint, digest(episode)))
        delivered_at.append(time.time())
        if len(episodes) == ACT_AT:
            grown = [received_bytes(r.ss_filter) - b for r, b in zip(replicas, before)]
            victim = grown.index(max(grown))
            acted_at = time.time()
            act(replicas[victim])
        time.sleep(PACE)
    breaks = [r for r in records() if r.name == "clients.balancing" and r.created >= acted_at]
    return StreamRun(episodes, delivered_at, acted_at, victim, breaks)
