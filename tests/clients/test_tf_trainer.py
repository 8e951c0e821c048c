"""The TensorFlow trainer against a real server: a short ProtoNet run learns and its
reports land; a resumed run continues at the next index and ends where an unbroken
run ends; the baseline trains on plain batches and reports; faults exit 3 (refused requests 2) with one
line. The trainer's ``main`` runs in-process (TensorFlow is imported once)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT

import tensorflow as tf

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from clients.md_train import steps_before  # noqa: E402
from clients.tf.md_train import main  # noqa: E402
from sampler_server.metrics.store import MetricsStore  # noqa: E402

SMALL = ["--sources", "folder", "--image-size", "32", "--backbone", "conv4", "--log-every", "10"]
FIXED = ["--ways", "5", "--shots", "5", "--query", "5"]
# Where what is checked does not depend on what is learned (resuming, riding out a restart,
# the baseline's plain batches), 16-pixel images (the last --image-size wins): a training
# step then costs a third of a 32-pixel one.
SMALLER = ["--image-size", "16"]
# Resuming and riding out a restart check indices, checkpoints and exit codes, not what is
# learned: 20-image episodes, a step a third of a 50-image one.
FEW = ["--ways", "5", "--shots", "2", "--query", "2"]
# The learning run: 24-pixel images (a step costs about half a 32-pixel one) in episodes of
# 25 (5 ways of 3 shots and 2 queries: half the images of 5 shots and 5 queries, which reach
# 0.56): its 80 episodes still lift conv4 from 0.34 (untrained) to 0.57 on the test episodes on
# one CPU and 0.49 (± 0.04) on another (the two CPUs' float32 kernels round
# differently, and 80 steps carry that on): 0.45 is over two of those intervals above the untrained 0.34.
LEARN_SIZE = 24
LEARN = ["--ways", "5", "--shots", "3", "--query", "2", "--image-size", str(LEARN_SIZE)]


def run_trainer(served, tmp_path: Path, run: str, *extra: str) -> tuple[int, dict]:
    summary = tmp_path / f"{run}.json"
    code = main(["--server", served.address, "--run", run, *SMALL, "--json-summary", str(summary), *extra])
    return code, (json.loads(summary.read_text()) if summary.exists() else {})


@pytest.mark.slow
def test_short_protonet_run_learns_and_its_reports_land(served, tmp_path, capsys):
    run = "tf-trainer-learns"
    code, summary = run_trainer(served, tmp_path, run, *LEARN, "--train-episodes", "80", "--eval-episodes", "20",
                                "--report-batch", "8", "--checkpoint-dir", str(tmp_path / "ckpt"))
    assert code == 0, capsys.readouterr().err
    train, result = summary["train"], summary["eval"]["folder"]
    assert (train["start_index"], train["next_index"], train["steps"]) == (0, 80, 80)
    assert train["steps_per_s"] > 0 and 0 <= train["data_wait_fraction"] < 1
    # Test episodes have 5 or 6 ways (6 test classes), so chance is at most 1/5.
    assert result["mean_accuracy"] > 0.45, result
    assert (result["episodes"], result["stored"], result["duplicates"]) == (20, 20, 0)

    with SamplerClient(served.address) as client:
        assert run in client.get_report([run], "json")  # the server knows the run (its tables are the lead's)
        spec = EpisodeSpec(sources=("folder",), split="test", seed=0, image_size=LEARN_SIZE)
        fingerprints = [episode.fingerprint for episode in client.episodes(spec, 0, 20)]
    metrics = MetricsStore(served.data / "metrics.sqlite")
    try:
        reports = list(metrics.reports(run))
        config = metrics.run_config(run)
    finally:
        metrics.close()
    assert [report.index for report in reports] == list(range(20))
    assert [report.fingerprint for report in reports] == fingerprints
    assert all(set(report.metrics) == {"accuracy", "loss"} and report.predicted for report in reports)
    assert np.mean([report.metrics["accuracy"] for report in reports]) == pytest.approx(result["mean_accuracy"])
    assert config["framework"] == "tf" and config["backbone"] == "conv4" and config["parameter_count"] > 0
    assert config["run"] == run and config["train_episodes"] == 80 and config["tensorflow_version"] == tf.__version__

    # Evaluating the same checkpoint again (same arguments, --eval-only) reports identical
    # results under the same run configuration: all duplicates.
    code, again = run_trainer(served, tmp_path, run, *LEARN, "--train-episodes", "80", "--eval-only",
                              "--eval-episodes", "20", "--checkpoint-dir", str(tmp_path / "ckpt"))
    assert code == 0, capsys.readouterr().err
    assert (again["eval"]["folder"]["stored"], again["eval"]["folder"]["duplicates"]) == (0, 20)


def _checkpoint_values(directory: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(directory))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.endswith("VARIABLE_VALUE") and not key.startswith("save_counter")}


@pytest.mark.slow
def test_resumed_run_continues_at_the_next_index_and_matches_an_unbroken_run(served, tmp_path, capsys):
    resumed, unbroken = tmp_path / "resumed", tmp_path / "unbroken"
    common = [*FEW, *SMALLER, "--checkpoint-every", "5", "--eval-episodes", "0"]
    code, first = run_trainer(served, tmp_path, "tf-resume-1", *common, "--train-episodes", "10",
                              "--checkpoint-dir", str(resumed))
    assert code == 0 and (first["train"]["start_index"], first["train"]["next_index"]) == (0, 10)
    assert {path.name for path in resumed.glob("ckpt-*.index")} == {"ckpt-5.index", "ckpt-10.index"}

    code, second = run_trainer(served, tmp_path, "tf-resume-2", *common, "--train-episodes", "20",
                               "--checkpoint-dir", str(resumed))
    assert code == 0, capsys.readouterr().err
    assert second["resumed_from"].endswith("ckpt-10")
    assert (second["train"]["start_index"], second["train"]["next_index"], second["next_index"]) == (10, 20, 20)
    assert second["start_index"] == 10 and second["train"]["steps"] == 10

    code, _ = run_trainer(served, tmp_path, "tf-resume-3", *common, "--train-episodes", "20",
                          "--checkpoint-dir", str(unbroken))
    assert code == 0
    after_resume, straight = _checkpoint_values(resumed), _checkpoint_values(unbroken)
    assert after_resume.keys() == straight.keys()
    for key in straight:
        np.testing.assert_array_equal(after_resume[key], straight[key], err_msg=key)

    capsys.readouterr()
    code, _ = run_trainer(served, tmp_path, "tf-resume-4", *common, "--seed", "7", "--train-episodes", "30",
                          "--checkpoint-dir", str(resumed))
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--seed 0 there, 7 here" in lines[0]


@pytest.mark.slow
def test_baseline_trains_on_plain_batches_and_reports(served, tmp_path, capsys):
    run = "tf-trainer-baseline"
    code, summary = run_trainer(served, tmp_path, run, *SMALLER, "--model", "baseline", "--train-steps", "30",
                                "--batch-size", "32", "--eval-episodes", "10", "--report-batch", "4")
    assert code == 0, capsys.readouterr().err
    assert summary["model"] == "baseline"
    assert (summary["train"]["unit"], summary["train"]["next_index"]) == ("batch", 30)
    result = summary["eval"]["folder"]
    assert (result["episodes"], result["stored"]) == (10, 10)
    assert result["mean_accuracy"] > result["mean_chance"], result  # above chance, as the torch test asserts
    metrics = MetricsStore(served.data / "metrics.sqlite")
    try:
        assert [report.index for report in metrics.reports(run)] == list(range(10))
        assert metrics.run_config(run)["model"] == "baseline"
    finally:
        metrics.close()


def test_round_robin_steps_split_the_index_space_between_sources():
    for period in (1, 2, 3, 8):
        for start, target in ((0, 0), (0, 17), (5, 23), (9, 10)):
            counts = [steps_before(target, r, period) - steps_before(start, r, period) for r in range(period)]
            assert sum(counts) == target - start
            for residue in range(period):
                expected = [t // period for t in range(start, target) if t % period == residue]
                first = steps_before(start, residue, period)
                assert expected == list(range(first, first + counts[residue]))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Not marked timing: 15 s is a bound on hanging, not a speed (it takes 0.2 s), and the
# timing part would import TensorFlow for it alone.
def test_dead_address_exits_3_with_one_line_within_seconds(tmp_path, capsys):
    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    code = main(["--server", address, "--run", "tf-dead", *SMALL, "--connect-timeout", "0.5", "--retries", "2"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 3
    assert time.monotonic() - started < 15
    assert len(lines) == 1 and f"nothing listens at {address}: is `sampler-server serve` running" in lines[0], lines


def test_unknown_source_exits_2_naming_it(served, capsys):
    base = ["--server", served.address, "--run", "tf-unknown", "--image-size", "32"]
    for sources in (["--sources", "nope"], ["--sources", "folder", "--eval-sources", "nope"]):
        code = main([*base, *sources])
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1, lines
        assert "'nope'" in lines[0] and served.address in lines[0] and "folder" in lines[0]


def _start_server(data: Path, port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", str(port), "--workers", "1"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = process.stdout.readline()
    assert "listening on" in line, line
    return process


def _kill_when(path: Path, server: list[subprocess.Popen], restart: tuple[Path, int] | None) -> threading.Thread:
    """Once ``path`` exists, SIGKILL the server (mid-run) and, if asked, start it again."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        server[0].send_signal(signal.SIGKILL)
        server[0].wait()
        if restart is not None:
            time.sleep(0.5)
            server[0] = _start_server(*restart)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_server_restart_is_ridden_out_and_a_dead_server_ends_cleanly(served, tmp_path, capsys):
    port = _free_port()
    address = f"127.0.0.1:{port}"
    server = [_start_server(served.data, port)]
    checkpoints = tmp_path / "ckpt"
    argv = ["--server", address, *SMALL, *FEW, *SMALLER, "--checkpoint-dir", str(checkpoints),
            "--checkpoint-every", "10", "--eval-episodes", "0", "--connect-timeout", "1"]
    try:
        watcher = _kill_when(checkpoints / "ckpt-10.index", server, (served.data, port))
        code = main([*argv, "--run", "tf-restart", "--train-episodes", "40", "--retries", "10"])
        watcher.join()
        assert code == 0, capsys.readouterr().err
        assert tf.train.load_checkpoint(str(checkpoints)).get_tensor("next_index/.ATTRIBUTES/VARIABLE_VALUE") == 40

        capsys.readouterr()
        watcher = _kill_when(checkpoints / "ckpt-50.index", server, None)
        started = time.monotonic()
        code = main([*argv, "--run", "tf-dead-mid-run", "--train-episodes", "400", "--retries", "2"])
        watcher.join()
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 3 and time.monotonic() - started < 60
        assert address in lines[-1] and "unreachable" in lines[-1] and "Traceback" not in "".join(lines)
        saved = tf.train.load_checkpoint(str(checkpoints)).get_tensor("next_index/.ATTRIBUTES/VARIABLE_VALUE")
        assert 50 <= saved < 400  # the progress made before the fault is kept
    finally:
        server[0].kill()
        server[0].wait()


def test_weights_are_seeded_from_the_seed_argument():
    from clients.tf.md_train import TFFramework
    from clients.trainer_args import parse_args

    def weights(seed: int) -> list[np.ndarray]:
        framework = TFFramework(parse_args("tf", ["--server", "h:1", "--run", "r", "--sources", "a",
                                                  "--image-size", "16", "--seed", str(seed), "--device", "cpu"]))
        framework.build(0)
        return [v.numpy() for v in framework.backbone.trainable_variables]

    first, again, other = weights(3), weights(3), weights(4)
    assert len(first) > 0 and all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_summary_schema_is_the_torch_trainers(served, tmp_path, capsys):
    import dataclasses

    from clients.md_train import EvalSummary, RunSummary

    code, summary = run_trainer(served, tmp_path, "tf-one-episode", *FIXED, "--train-episodes", "0",
                                "--eval-episodes", "1")
    assert code == 0, capsys.readouterr().err
    assert set(summary) == {f.name for f in dataclasses.fields(RunSummary)}
    assert set(summary["eval"]["folder"]) == {f.name for f in dataclasses.fields(EvalSummary)}
    assert summary["eval"]["folder"]["ci95"] is None and summary["framework"] == "tf"
