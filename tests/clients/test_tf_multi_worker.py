"""The TensorFlow trainer under a real MultiWorkerMirroredStrategy: two local workers
(a TF_CONFIG cluster on free ports) against a real server train disjoint shards that
together are the window, keep identical variables (rank 0's checkpoint is that model),
evaluate sharded with each episode reported once, and a resumed run continues from the
checkpoint with the same shards. One test: a cluster takes seconds to start. Each worker is
a process of its own, forked from one that imported TensorFlow once (tf_trainer_cluster.py):
four fresh interpreters would each pay that import's ~9 s of CPU."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT

import tensorflow as tf

from clients.tf.md_train import TFFramework, tf_config_ranks  # noqa: E402
from clients.trainer_args import parse_args  # noqa: E402

WORKERS = 2
COMMON = ["--sources", "folder", "--image-size", "16", "--device", "cpu", "--ways", "5", "--shots", "2",
          "--query", "2", "--log-every", "2", "--checkpoint-every", "4"]
# Each worker at one thread (intra- and inter-op; by default, this machine's cores): two workers
# share the 2-core machine, and on these 16-pixel steps a second thread per worker only spins
# waiting for work. Op determinism is on either way; nothing checked depends on thread counts.
ONE_THREAD = ["--threads", "1"]


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def launcher() -> Iterator[subprocess.Popen]:
    """The process the clusters' workers fork from (its own process group: its workers end with it)."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("tf_trainer_cluster.py"))],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def cluster_run(launcher, served, directory: Path, run_id: str, *extra: str) -> tuple[list[int], str, dict]:
    """Both workers of a fresh two-worker cluster: (exit statuses, their stderr, rank 0's summary)."""
    workers = [f"127.0.0.1:{port}" for port in _free_ports(WORKERS)]
    summary = directory / f"{run_id}.json"
    configs = [json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
               for index in range(WORKERS)]
    errors = [directory / f"{run_id}-{index}.err" for index in range(WORKERS)]
    launcher.stdin.write(json.dumps({
        "argv": ["--server", served.address, "--run", run_id, *COMMON, *ONE_THREAD, "--json-summary", str(summary),
                 *extra],
        "configs": configs, "errors": [str(path) for path in errors], "timeout": 300}) + "\n")
    launcher.stdin.flush()
    codes = json.loads(launcher.stdout.readline())["codes"]
    return codes, "".join(path.read_text() for path in errors), (json.loads(summary.read_text())
                                                                  if summary.exists() else {})


def trained(summary: dict) -> dict[int, list[int]]:
    return {rank["rank"]: [first + step * k for first, step, count in rank["indices"] for k in range(count)]
            for rank in summary["ranks"]}


def test_tf_config_gives_the_rank(monkeypatch):
    cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3"]}
    for task, rank in (({"type": "chief", "index": 0}, 0), ({"type": "worker", "index": 1}, 2)):
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
        assert tf_config_ranks() == (rank, 3)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker"}}))
    assert tf_config_ranks() is None  # one worker: a plain run
    from clients.errors import UsageError

    for bad, said in (("{", "not JSON"), (json.dumps({"cluster": {"worker": ["h:1"], "ps": ["h:2"]},
                                                       "task": {"type": "worker"}}), "ps"),
                      (json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}),
                       "expected a 'chief' or 'worker' task")):
        monkeypatch.setenv("TF_CONFIG", bad)
        with pytest.raises(UsageError, match=said):
            tf_config_ranks()


@pytest.mark.slow
def test_two_workers_train_disjoint_shards_identically_and_resume_with_the_same_shards(launcher, served, tmp_path):
    checkpoints = tmp_path / "ckpt"
    codes, errors, first = cluster_run(launcher, served, tmp_path, "tf-workers", "--train-episodes", "8",
                                       "--eval-episodes", "5", "--checkpoint-dir", str(checkpoints))
    assert codes == [0] * WORKERS, errors[-3000:]
    assert (first["world_size"], first["start_index"], first["next_index"]) == (WORKERS, 0, 8)
    assert trained(first) == {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}
    digests = {rank["parameter_digest"] for rank in first["ranks"]}
    assert len(digests) == 1
    assert "[rank 1/2]: trained episodes 1..7 every 2 (4)" in errors and "]: error:" not in errors
    # sharded evaluation: each test episode reported once, by one of the workers
    result = first["eval"]["folder"]
    assert (result["episodes"], result["stored"], result["duplicates"]) == (5, 5, 0)
    assert sorted(report.index for report in served.server.metrics.reports("tf-workers")) == list(range(5))

    # rank 0 alone wrote the checkpoints, and they hold the workers' common variables
    assert sorted(path.name for path in checkpoints.glob("ckpt-*.index")) == ["ckpt-4.index", "ckpt-8.index"]
    framework = TFFramework(parse_args("tf", ["--server", "127.0.0.1:1", "--run", "r", *COMMON,
                                              "--checkpoint-dir", str(checkpoints)]))
    framework.build(0)
    path, stored, next_index = framework.checkpoint()
    assert stored["ranks"] == WORKERS and framework.restore(path) == next_index == 8
    assert framework.parameter_digest() == digests.pop()

    codes, errors, resumed = cluster_run(launcher, served, tmp_path, "tf-workers-resumed", "--train-episodes", "12",
                                         "--eval-episodes", "0", "--checkpoint-dir", str(checkpoints))
    assert codes == [0] * WORKERS, errors[-3000:]
    assert resumed["resumed_from"].endswith("ckpt-8") and (resumed["start_index"], resumed["next_index"]) == (8, 12)
    assert trained(resumed) == {0: [8, 10], 1: [9, 11]}
    assert len({rank["parameter_digest"] for rank in resumed["ranks"]}) == 1
    assert resumed["ranks"][0]["parameter_digest"] != first["ranks"][0]["parameter_digest"]
