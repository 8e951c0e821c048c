"""Training items received in a child process (``clients.receiver``, the trainers'
``--receive process``): the same items in the same order as received in the process, arrays
handed over through shared slots that regrow for larger items, the source's errors raised
in order, and nothing left behind (no child, no slot file) when the consumer stops early or
its process dies."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import receiver_sources
from clients.errors import SamplerClientError
from clients.receiver import SLOT_PREFIX, ProcessItems, slot_directory

REPO = Path(__file__).resolve().parents[2]


def _slot_files() -> set[str]:
    return {name for name in os.listdir(slot_directory()) if name.startswith(SLOT_PREFIX)}


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_items_come_whole_and_in_order_through_slots_that_regrow():
    before = _slot_files()
    items = ProcessItems(functools.partial(receiver_sources.numbered, 12, growing=True))
    seen = []
    for index, item, rows in items:
        assert item.images.shape == (rows, 8, 8, 3) and rows == 4 + index * 40
        assert (item.images == index).all() and item.labels.tolist() == list(range(index, index + rows))
        assert item.name == f"item {index}"
        seen.append(index)
    assert seen == list(range(12))
    assert items._process.returncode == 0
    assert _slot_files() <= before  # every slot's name is gone with the run


def test_items_a_full_directory_cannot_hold_come_through_the_pipe(capfd):
    """A container's /dev/shm is often 64 MiB: an item whose slot does not fit still arrives
    whole (here the ring is limited to 256 KiB: three slots fit, a fourth does not)."""
    items = ProcessItems(functools.partial(receiver_sources.numbered, 12, growing=True), limit=1 << 18)
    slotted = 0
    for index, item, rows in items:
        assert rows == 4 + index * 40 and (item.images == index).all()
        assert item.labels.tolist() == list(range(index, index + rows))
        slotted += items._reading is not None
    assert index == 11 and 0 < slotted < 12
    warned = capfd.readouterr().err
    assert warned.count("cannot hold a slot") == 1 and "--receive thread" in warned and "--shm-size" in warned


def test_the_sources_error_is_raised_after_the_items_before_it():
    items = ProcessItems(functools.partial(receiver_sources.numbered, 10, fail_at=6))
    assert [next(items)[0] for _ in range(6)] == list(range(6))
    with pytest.raises(ValueError, match="source broke at item 6"):
        next(items)
    with pytest.raises(StopIteration):
        next(items)


def test_close_ends_the_child_at_once_and_leaves_no_slot(tmp_path):
    before = _slot_files()
    pid_file = tmp_path / "pid"
    items = ProcessItems(functools.partial(receiver_sources.endless_then_pid, str(pid_file)))
    assert next(items)[0] == 0
    started = time.monotonic()
    items.close()
    assert time.monotonic() - started < 5
    assert _gone(int(pid_file.read_text()))
    assert _slot_files() <= before


_DYING_PARENT = """
import functools, sys, time
sys.path[:0] = sys.argv[2].split(":")
import receiver_sources
from clients.receiver import ProcessItems
items = ProcessItems(functools.partial(receiver_sources.endless_then_pid, sys.argv[1]))
next(items)
print("reading", flush=True)
time.sleep(600)
"""


def test_the_child_ends_when_the_trainer_is_killed(tmp_path):
    before = _slot_files()
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", _DYING_PARENT, str(pid_file),
                               f"{REPO}:{Path(receiver_sources.__file__).parent}"], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "reading\n"
        child = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _gone(child)
    finally:
        parent.kill()
        parent.wait()
    assert _slot_files() <= before


def test_a_child_that_cannot_start_is_an_error_that_says_so(monkeypatch):
    monkeypatch.setattr("clients.receiver._CHILD", "import sys; sys.exit(3)")
    items = ProcessItems(functools.partial(receiver_sources.numbered, 3))
    with pytest.raises(SamplerClientError, match=r"receiving the training items ended \(exit status 3\)"):
        next(items)


def test_an_episode_pickles_with_its_request():
    import pickle

    from clients.protocols.md import EpisodeArrays, EpisodeSpec

    request = EpisodeSpec(sources=("folder",), split="train", seed=4, ways=5).to_request()
    episode = EpisodeArrays("image_folder", "train", 4, 7, "sha", (1, 2), ("a", "b"),
                            np.ones((2, 8, 8, 3), np.uint8), np.array([0, 1]), np.zeros((2, 8, 8, 3), np.uint8),
                            np.array([1, 0]), (10, 11), (12, 13), 8, "bilinear", "", request)
    copy = pickle.loads(pickle.dumps(episode, protocol=5))
    assert copy.request == request and copy.index == 7 and copy.ways == 2
    assert (copy.support_images == 1).all() and copy.query_labels.tolist() == [1, 0]


# ---- the trainers: a child process trains on exactly what the process would receive ---------


def _digest(main, served, tmp_path: Path, name: str, receive: str, *learner: str) -> tuple[str, list]:
    summary = tmp_path / f"{name}-{receive}.json"
    argv = ["--server", served.address, "--run", f"{name}-{receive}", "--eval-episodes", "0",
            "--device", "cpu", "--threads", "1", "--log-every", "2", "--receive", receive, "--json-summary",
            str(summary), *learner]
    assert main(argv) == 0
    written = json.loads(summary.read_text())
    return written["ranks"][0]["parameter_digest"], written["train"]["curve"]


BATCHES = ("--model", "baseline", "--sources", "folder", "folder_raw32", "--image-size", "32", "--batch-size", "4",
           "--train-steps", "6")
EPISODES = ("--model", "protonet", "--sources", "folder", "--image-size", "16", "--ways", "3", "--shots", "2", "--query", "2",
            "--train-episodes", "4")


@pytest.mark.slow  # two trainer runs
@pytest.mark.parametrize("learner", [BATCHES, EPISODES], ids=["batches", "episodes"])
def test_torch_trains_the_same_weights_receiving_in_a_child_process(served, tmp_path, learner):
    from clients.torch.md_train import main

    assert (_digest(main, served, tmp_path, "rcv-torch", "process", *learner)
            == _digest(main, served, tmp_path, "rcv-torch", "thread", *learner))


@pytest.mark.slow  # two TensorFlow trainer runs: about 9 s
def test_tf_trains_the_same_weights_receiving_in_a_child_process(served, tmp_path):
    from clients.tf.md_train import main

    assert (_digest(main, served, tmp_path, "rcv-tf", "process", *BATCHES)
            == _digest(main, served, tmp_path, "rcv-tf", "thread", *BATCHES))


@pytest.mark.slow  # a server of its own, killed mid-run
def test_a_server_that_dies_mid_run_ends_the_trainer_as_in_process(served, tmp_path, capfd):
    """The child's failure reaches the trainer as its own would: exit 3, one line naming the
    server, no traceback, the progress before the fault kept."""
    import socket
    import threading

    import torch

    from clients.torch.md_train import CHECKPOINT, main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "sampler_server", "serve", "--data", str(served.data), "--port",
                               str(port), "--workers", "1"], env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "listening on" in server.stdout.readline()
        checkpoints = tmp_path / "ckpt"

        def kill_after_the_first_checkpoint() -> None:
            deadline = time.monotonic() + 60
            while not (checkpoints / CHECKPOINT).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            server.send_signal(signal.SIGKILL)

        watcher = threading.Thread(target=kill_after_the_first_checkpoint, daemon=True)
        watcher.start()
        started = time.monotonic()
        code = main(["--server", f"127.0.0.1:{port}", "--run", "rcv-dead", "--sources", "folder", "--image-size", "16",
                     "--ways", "3", "--shots", "2", "--query", "2", "--train-episodes", "2000", "--eval-episodes", "0",
                     "--device", "cpu", "--threads", "1", "--receive", "process", "--checkpoint-dir", str(checkpoints),
                     "--checkpoint-every", "5", "--retries", "2", "--connect-timeout", "1"])
        watcher.join()
        lines = capfd.readouterr().err.strip().splitlines()
        assert code == 3 and time.monotonic() - started < 60
        assert f"127.0.0.1:{port}" in lines[-1] and "unreachable" in lines[-1]
        assert "Traceback" not in "".join(lines)
        assert 5 <= torch.load(checkpoints / CHECKPOINT)["next_index"] < 2000
    finally:
        server.kill()
        server.wait()
