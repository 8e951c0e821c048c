"""The PyTorch trainer under a real torchrun (2 processes, gloo on CPU) against a real
server: the ranks train disjoint shards that together are the window, their models
stay identical (and rank 0's checkpoint is that model), the sharded evaluation
reports each episode once exactly as one process would, shape buckets pad and mask
per rank without changing what is learned, and a resumed run continues from the
checkpoint with the same shards (under the same rank count only), also after a rank
was killed mid-run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import process_tree
import pytest
from conftest import REPO_ROOT

import torch

from clients.errors import UsageError  # noqa: E402
from clients.torch.md_train import CHECKPOINT, TorchFramework, main, select_device, torchrun_ranks  # noqa: E402
from clients.trainer_args import parse_args  # noqa: E402

RANKS = 2
# MD variable episodes (no fixed ways/shots): ranks meet different shapes in the same step;
# one thread per process (the trainer's default is a thread per core): two ranks on this
# 2-core machine, whose second thread would only spin waiting for a core
COMMON = ["--sources", "folder", "--image-size", "16", "--device", "cpu", "--seed", "3", "--log-every", "2",
          "--threads", "1"]


pytestmark = pytest.mark.usefixtures("torch_one_thread")  # conftest: one torch thread per test


def torchrun_command(served, summary: Path, run_id: str, *extra: str, launcher: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(RANKS),
            *launcher, "-m", "clients.torch", "--server", served.address, "--run-id", run_id, *COMMON,
            "--json-summary", str(summary), *extra]


ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def torchrun(served, directory: Path, run_id: str, *extra: str,
             launcher: tuple[str, ...] = ()) -> tuple[int, str, dict]:
    """``torchrun --standalone --nproc_per_node 2 LAUNCHER -m clients.torch ...``: (exit status,
    stderr, rank 0's summary or {})."""
    summary = directory / f"{run_id}.json"
    done = subprocess.run(torchrun_command(served, summary, run_id, *extra, launcher=launcher), capture_output=True,
                          text=True, timeout=300, check=False, env=ENV)
    return done.returncode, done.stderr, (json.loads(summary.read_text()) if summary.exists() else {})


def trained(summary: dict) -> dict[int, list[int]]:
    """Each rank's trained indices, expanded from the summary's [first, step, count] runs."""
    return {rank["rank"]: [first + step * k for first, step, count in rank["indices"] for k in range(count)]
            for rank in summary["ranks"]}


def test_torchrun_environment_gives_rank_and_device(monkeypatch):
    """WORLD_SIZE > 1 means torchrun started this process: its rank and local rank; a CUDA
    device is cuda:LOCAL_RANK (each rank its own GPU), and NCCL then carries the gradients."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert torchrun_ranks() is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert torchrun_ranks() is None  # torchrun --nproc_per_node 1: a plain run
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert torchrun_ranks() == (3, 4, 1)
    for name, value, said in (("RANK", "4", "expected 0 to 3"), ("LOCAL_RANK", "-1", "expected an integer >= 0"),
                              ("WORLD_SIZE", "two", "expected an integer >= 1")):
        monkeypatch.setenv(name, value)
        with pytest.raises(UsageError, match=f"environment {name}: got '{value}', {said}"):
            torchrun_ranks()
        monkeypatch.setenv(name, {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}[name])

    assert select_device("cpu", 1) == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="--device: got cuda, but torch finds no CUDA device"):
            select_device("cuda", 1)
    # the choice itself, on a host of two GPUs (no CUDA call is made)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert select_device("cuda", 1) == torch.device("cuda", 1) and select_device("auto", 0) == torch.device("cuda", 0)
    assert select_device("cuda", None) == torch.device("cuda")  # one process: as before
    with pytest.raises(UsageError, match=r"LOCAL_RANK: got 2, but torch sees 2 CUDA device\(s\)"):
        select_device("cuda", 2)


@pytest.fixture(scope="module")
def first_run(served, tmp_path_factory) -> dict:
    """Episodes 0..7 on 2 ranks with shape buckets, checkpoints every 4, 5 test episodes."""
    directory = tmp_path_factory.mktemp("ddp")
    argv = ["--shape-buckets", "on", "--train-episodes", "8", "--checkpoint-every", "4", "--eval-episodes", "5",
            "--checkpoint-dir", str(directory / "ckpt")]
    code, stderr, summary = torchrun(served, directory, "ddp-torch", *argv)
    assert code == 0, stderr[-3000:]
    return {"summary": summary, "stderr": stderr, "directory": directory, "argv": argv}


@pytest.mark.slow
def test_ranks_train_disjoint_shards_of_the_window_and_stay_identical(first_run):
    summary, stderr = first_run["summary"], first_run["stderr"]
    assert (summary["world_size"], summary["start_index"], summary["next_index"]) == (RANKS, 0, 8)
    shards = trained(summary)
    assert shards == {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}  # global step k: indices 2k (rank 0), 2k + 1 (rank 1)
    everything = shards[0] + shards[1]
    assert sorted(everything) == list(range(8)) and len(set(everything)) == len(everything)
    digests = {rank["parameter_digest"] for rank in summary["ranks"]}
    assert len(digests) == 1 and len(next(iter(digests))) == 64
    assert summary["train"]["steps"] == 8 and summary["train"]["unit"] == "episode"
    assert summary["config"]["train_ranks"] == RANKS
    # each rank says what it trained, in its own line
    for rank, indices in shards.items():
        line = f"[rank {rank}/{RANKS}]: trained episodes {indices[0]}..{indices[-1]} every {RANKS} (4)"
        assert line in stderr, stderr[-3000:]
    assert "]: error:" not in stderr
    # progress lines come from rank 0 only, one per step (--log-every 2 = one step of 2 ranks)
    assert [line.split(": ")[1].split()[1] for line in stderr.splitlines() if "]: episode " in line] == \
        ["2/8", "4/8", "6/8", "8/8"]
    assert len(summary["train"]["curve"]) == 4


@pytest.mark.slow
def test_rank_0_checkpoint_holds_the_ranks_model(first_run):
    """Loaded by one process, the checkpoint rank 0 wrote has the digest every rank logged."""
    directory = first_run["directory"]
    state = torch.load(directory / "ckpt" / CHECKPOINT, map_location="cpu")
    assert state["next_index"] == 8 and state["resume"]["ranks"] == RANKS
    framework = TorchFramework(parse_args("torch", ["--server", "127.0.0.1:1", "--run", "r", *COMMON,
                                                    "--checkpoint-dir", str(directory / "ckpt")]))
    framework.build(0)
    fresh = framework.parameter_digest()
    path, _, next_index = framework.checkpoint()
    assert framework.restore(path) == next_index == 8
    assert framework.parameter_digest() == first_run["summary"]["ranks"][0]["parameter_digest"] != fresh


@pytest.mark.slow
def test_sharded_evaluation_reports_each_episode_once_as_one_process_would(first_run, served, tmp_path):
    summary = first_run["summary"]
    result = summary["eval"]["folder"]
    assert (result["episodes"], result["stored"], result["duplicates"]) == (5, 5, 0)
    stored = list(served.server.metrics.reports("ddp-torch"))
    assert sorted(report.index for report in stored) == list(range(5))
    mean = sum(report.metrics["accuracy"] for report in stored) / len(stored)
    assert mean == pytest.approx(result["mean_accuracy"])
    # one process evaluating the same checkpoint sends the same reports and configuration: all duplicates
    path = tmp_path / "again.json"
    argv = ["--server", served.address, "--run", "ddp-torch", *COMMON, *first_run["argv"], "--eval-only",
            "--json-summary", str(path)]
    assert main(argv) == 0
    again = json.loads(path.read_text())
    assert (again["world_size"], again["eval"]["folder"]["stored"], again["eval"]["folder"]["duplicates"]) == (1, 0, 5)
    assert again["eval"]["folder"]["mean_accuracy"] == result["mean_accuracy"]


@pytest.mark.slow
def test_shape_buckets_under_ddp_learn_what_the_unpadded_run_learns(first_run, served, tmp_path):
    code, stderr, off = torchrun(served, tmp_path, "ddp-torch-unpadded", "--shape-buckets", "off",
                                 "--train-episodes", "8", "--eval-episodes", "5")
    assert code == 0, stderr[-3000:]
    on = first_run["summary"]
    assert trained(off) == trained(on) and len({rank["parameter_digest"] for rank in off["ranks"]}) == 1
    curve_on, curve_off = np.array(on["train"]["curve"]), np.array(off["train"]["curve"])
    assert curve_on.shape == curve_off.shape == (4, 3)
    assert np.allclose(curve_on[:, 1], curve_off[:, 1], rtol=1e-3, atol=1e-4), (curve_on, curve_off)
    assert on["eval"]["folder"]["mean_accuracy"] == pytest.approx(off["eval"]["folder"]["mean_accuracy"], abs=0.02)
    assert on["config"]["shape_buckets"] == "on" and off["config"]["shape_buckets"] == "off"


def _rank_process(launcher: int, rank: int) -> int | None:
    """The pid of torchrun's worker with RANK=rank (from its environment)."""
    for pid in process_tree.children(launcher):
        try:
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
        except OSError:
            continue
    return None


RESUMED = ["--shape-buckets", "on", "--checkpoint-every", "4", "--eval-episodes", "0"]


@pytest.fixture(scope="module")
def killed_and_resumed(first_run, served, tmp_path_factory) -> dict:
    """One killed run and one resumed run serve both the resume and the kill tests (each launch is
    two ranks that each import torch: most of this file's CPU). A run resumed from a copy of the
    first run's checkpoint (episode 8) that would train to 4000 has rank 1 killed (SIGKILL) once it
    has written a checkpoint of its own (the file is replaced whole, so a new inode is a new
    checkpoint); then a run of the same arguments resumes from that checkpoint for 4 more episodes."""
    directory = tmp_path_factory.mktemp("ddp-killed")
    checkpoints = directory / "ckpt"
    shutil.copytree(first_run["directory"] / "ckpt", checkpoints)
    argv = [*RESUMED, "--checkpoint-dir", str(checkpoints)]
    path = checkpoints / CHECKPOINT
    copied = path.stat().st_ino
    launcher = subprocess.Popen(torchrun_command(served, directory / "killed.json", "ddp-torch-killed", *argv,
                                                 "--train-episodes", "4000"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while path.stat().st_ino == copied and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.05)
        victim = _rank_process(launcher.pid, 1)
        assert victim is not None and path.stat().st_ino != copied, launcher.stderr.read()[-3000:]
        os.kill(victim, signal.SIGKILL)  # mid-run, after a checkpoint of its own
        _, killed_stderr = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    saved = torch.load(path, map_location="cpu")["next_index"]
    code, stderr, summary = torchrun(served, directory, "ddp-torch-resumed", *argv, "--train-episodes",
                                     str(saved + 4))
    assert code == 0, stderr[-3000:]
    return {"checkpoints": checkpoints, "argv": argv, "killed_code": launcher.returncode,
            "killed_stderr": killed_stderr, "saved": saved, "stderr": stderr, "summary": summary}


@pytest.mark.slow
def test_resumed_run_continues_from_the_checkpoint_with_the_same_shards(first_run, killed_and_resumed, served,
                                                                         tmp_path, capfd):
    run = killed_and_resumed
    checkpoints, argv, saved, stderr, summary = (run[key] for key in ("checkpoints", "argv", "saved", "stderr",
                                                                      "summary"))
    assert summary["resumed_from"] == str(checkpoints / CHECKPOINT) and "resumed from" in stderr
    assert (summary["start_index"], summary["next_index"], summary["train"]["steps"]) == (saved, saved + 4, 4)
    # rank r again takes the indices of residue r
    assert trained(summary) == {0: [saved, saved + 2], 1: [saved + 1, saved + 3]}
    assert len({rank["parameter_digest"] for rank in summary["ranks"]}) == 1
    assert summary["ranks"][0]["parameter_digest"] != first_run["summary"]["ranks"][0]["parameter_digest"]
    assert torch.load(checkpoints / CHECKPOINT, map_location="cpu")["next_index"] == saved + 4

    # one process may not continue a checkpoint of two: one line, exit 2
    capfd.readouterr()
    assert main(["--server", served.address, "--run", "r", *COMMON, *argv, "--train-episodes", str(saved + 8)]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trained by 2 process(es)" in err and "this run has 1" in err, err

    # a window that is not whole steps is refused by every rank before anything trains. Each rank
    # refuses on its own, after a call to the server and reading the checkpoint, and torchrun stops
    # the others once it sees one fail (it looks every 0.1 s): on a loaded machine the second rank
    # was stopped before it refused, so torchrun looks every 2 s here
    odd = saved + 7
    code, stderr, _ = torchrun(served, tmp_path, "ddp-torch-odd", *argv, "--train-episodes", str(odd),
                               launcher=("--monitor-interval", "2"))
    assert code != 0
    refusals = re.findall(rf"\[rank \d/2\]: error: argument --train-episodes: got {odd}, expected a multiple of "
                          r"the 2 ranks", stderr)  # counted, not split into lines: both ranks write to one pipe
    assert len(refusals) == RANKS, stderr[-3000:]
    assert torch.load(checkpoints / CHECKPOINT, map_location="cpu")["next_index"] == saved + 4


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_and_the_rerun_continues_from_its_checkpoint(killed_and_resumed):
    run = killed_and_resumed
    assert run["killed_code"] != 0
    stderr = run["killed_stderr"]
    assert "resumed from" in stderr, stderr[-3000:]  # the killed run itself continued the first run's checkpoint
    # a rank that saw the other fail ends with one line (or is stopped by torchrun), not a traceback
    # (torchrun prefixes a rank's uncaught exception with "[rank0]:")
    assert "[rank0]:" not in stderr, stderr[-3000:]
    saved = run["saved"]
    # a whole checkpoint of the killed run's own, at a multiple of --checkpoint-every
    assert 8 < saved < 4000 and saved % 4 == 0

    summary = run["summary"]
    assert (summary["start_index"], summary["next_index"]) == (saved, saved + 4)
    assert trained(summary) == {0: [saved, saved + 2], 1: [saved + 1, saved + 3]}
    assert len({rank["parameter_digest"] for rank in summary["ranks"]}) == 1


@pytest.mark.slow
def test_the_maml_family_averages_its_gradients_over_the_ranks(served, tmp_path):
    """Proto-MAML's inner loop calls the backbone itself (no DDP wrapper): the trainer averages
    the parameters' gradients in one collective, so two ranks on different episodes still end
    with one model (without the averaging, each rank would keep its own)."""
    code, stderr, summary = torchrun(served, tmp_path, "ddp-protomaml", "--model", "protomaml", "--train-episodes", "4",
                                     "--maml-steps", "1", "--eval-episodes", "2")
    assert code == 0, stderr[-3000:]
    assert trained(summary) == {0: [0, 2], 1: [1, 3]}
    digests = {rank["parameter_digest"] for rank in summary["ranks"]}
    assert len(digests) == 1, summary["ranks"]
    assert summary["eval"]["folder"]["episodes"] == 2 and summary["config"]["model"] == "protomaml"
