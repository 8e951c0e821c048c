"""Framework parity against a real server: from the same ``--init-seed``, the same episodes
and the same hyper-parameters, the torch and tf trainers score the same. An untrained or
one-step MD ProtoNet and a VTAB linear probe agree within 0.01; a few-episode training run
lies within each other's 95% confidence intervals. Both trainers' ``main`` run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import served_kitti

from clients.tf.md_train import main as tf_md_main  # noqa: E402
from clients.tf.vtab_transfer import main as tf_transfer_main  # noqa: E402
from clients.torch.md_train import main as torch_md_main  # noqa: E402
from clients.torch.vtab_transfer import main as torch_transfer_main  # noqa: E402

# Meta-Dataset's four_layer_convnet (md-conv4) at 16 pixels: it still runs its four blocks
# (16 -> 8 -> 4 -> 2 -> 1, every pool on an even side as at 32), so every layer, the episode batch
# norm, the optimizer and the loss are compared, at a third of the CPU
MD = ["--sources", "folder", "--image-size", "16", "--backbone", "md-conv4", "--ways", "5", "--shots", "5",
      "--query", "5", "--eval-episodes", "20", "--log-every", "1000", "--device", "cpu", "--init-seed", "0"]
# A probe that learns some classes of the demo's class-coloured KITTI but not all: its accuracy
# depends on the initial weights (each framework's own init: torch 0.5, tf 1.0 on this data).
TRANSFER = ["--protocol", "vtab-md", "--tasks", "kitti_distance", "--backbone", "conv4", "--image-size", "16",
            "--batch-size", "32", "--eval-batch-size", "128", "--lrs", "1.0", "--steps", "30", "--log-every", "1000",
            "--device", "cpu", "--mode", "linear", "--init-seed", "0"]
# A torch command sets torch's threads from --threads (by default, this process's cores): one, as
# the torch_one_thread fixture means (on these small convolutions a second only spins waiting for
# work, and under make test the other worker has the machine's other core).
THREADS = {"torch": ["--threads", "1"], "tf": []}


def _summary(main, address: str, run: str, tmp_path: Path, *argv: str) -> dict:
    path = tmp_path / f"{run}.json"
    assert main(["--server", address, "--run", run, "--json-summary", str(path), *argv]) == 0
    return json.loads(path.read_text())


def _md(framework: str, served, tmp_path: Path, run: str, *extra: str) -> dict:
    main = torch_md_main if framework == "torch" else tf_md_main
    summary = _summary(main, served.address, f"{framework}-{run}", tmp_path, *MD, *THREADS[framework], *extra)
    return summary["eval"]["folder"]


@pytest.fixture(scope="module")
def learnable_kitti_served(tmp_path_factory):
    """The demo's KITTI (images coloured by their kitti_distance bin, so a linear probe on
    random conv features learns them; the shared test KITTI's images are unrelated to its
    labels) at VTAB-1k's train800/val200 and a 100-example test split, packed by ``pack
    vtab`` and served."""
    from sampler_server.fixtures.tfds import DemoKitti

    with served_kitti(DemoKitti, tmp_path_factory.mktemp("demo-kitti"),
                      {"train": 800, "validation": 200, "test": 100}) as server:
        yield server


@pytest.mark.slow
def test_md_untrained_and_one_step_agree_within_0_01(served, tmp_path, torch_one_thread):
    for run, steps in (("untrained", "0"), ("one-step", "1")):
        accuracies = {framework: _md(framework, served, tmp_path, f"parity-{run}", "--train-episodes", steps,
                                     "--checkpoint-dir", str(tmp_path / framework / run))["mean_accuracy"]
                      for framework in ("torch", "tf")}
        print(f"MD {run}: torch {accuracies['torch']:.4f} tf {accuracies['tf']:.4f}")
        assert abs(accuracies["torch"] - accuracies["tf"]) <= 0.01, (run, accuracies)


@pytest.mark.slow
def test_md_training_runs_lie_within_each_others_ci(served, tmp_path, torch_one_thread):
    results = {framework: _md(framework, served, tmp_path, "parity-trained", "--train-episodes", "5",
                              "--checkpoint-dir", str(tmp_path / framework))
               for framework in ("torch", "tf")}
    torch_result, tf_result = results["torch"], results["tf"]
    print(f"MD 5 episodes: torch {torch_result['mean_accuracy']:.4f} ± {torch_result['ci95']:.4f} "
          f"tf {tf_result['mean_accuracy']:.4f} ± {tf_result['ci95']:.4f}")
    gap = abs(torch_result["mean_accuracy"] - tf_result["mean_accuracy"])
    assert gap <= min(torch_result["ci95"], tf_result["ci95"]), results


@pytest.mark.slow
def test_vtab_linear_probe_agrees_within_0_01(learnable_kitti_served, tmp_path, torch_one_thread):
    accuracies = {}
    for framework, main in (("torch", torch_transfer_main), ("tf", tf_transfer_main)):
        summary = _summary(main, learnable_kitti_served.address, f"{framework}-parity-linear", tmp_path, *TRANSFER,
                           *THREADS[framework])
        accuracies[framework] = summary["tasks"]["kitti_distance"]["test_accuracy"]
    print(f"VTAB linear: torch {accuracies['torch']:.4f} tf {accuracies['tf']:.4f}")
    assert abs(accuracies["torch"] - accuracies["tf"]) <= 0.01, accuracies
