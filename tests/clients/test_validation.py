"""Meta-Dataset's checkpoint selection in the trainers (``clients.validation``): validation
before training and every N updates on valid episodes, the best backbone (the first of equal
accuracies, numpy's argmax as the reference's ``select_best_model.py``) kept and the one tested,
a resumed run continuing the history with the values an unbroken run measures, and training
itself untouched by validating."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import tensorflow as tf  # noqa: F401  (before the trainers, as every tf test file)

from clients.determinism import weights_sha256
from clients.errors import UsageError
from clients.tf.md_train import TFFramework
from clients.tf.md_train import main as tf_main
from clients.torch.md_train import BEST, TorchFramework
from clients.torch.md_train import main as torch_main
from clients.trainer_args import parse_args
from clients.validation import HISTORY_FILE, Validation, ValidationHistory, due


pytestmark = pytest.mark.usefixtures("torch_one_thread")  # conftest: one torch thread per test


def _history(*accuracies: float) -> ValidationHistory:
    history = ValidationHistory(["a"], 4)
    for update, accuracy in enumerate(accuracies):
        history.add(Validation(update * 5, accuracy, 0.1))
    return history


def test_the_best_is_numpys_argmax_and_the_history_resumes_up_to_the_checkpoint(tmp_path):
    accuracies = (0.3, 0.5, 0.5, 0.4)
    history = _history(*accuracies)
    assert history.best is not None and history.best.update == 5 * int(np.argmax(accuracies))  # the first of equals
    history.save(str(tmp_path))
    stored = json.loads((tmp_path / HISTORY_FILE).read_text())
    assert (stored["best_update"], stored["best_accuracy"]) == (5, 0.5)
    resumed = ValidationHistory.load(str(tmp_path), ["a"], 4, up_to=10)
    assert [v.update for v in resumed.validations] == [0, 5, 10]  # 15 is measured again by the resumed run
    with pytest.raises(UsageError, match="measured on 4 episodes of a, this run validates on 4 of b"):
        ValidationHistory.load(str(tmp_path), ["b"], 4, up_to=10)
    assert ValidationHistory.load(None, ["a"], 4, up_to=10).validations == []
    assert [d for d in range(1, 13) if due(d, 1, 5)] == [5, 10] and [d for d in (2, 4, 6, 8) if due(d, 2, 3)] == [4, 6]
    assert not any(due(d, 1, 0) for d in range(10))


ARGV = ["--server", "127.0.0.1:1", "--run", "best", "--sources", "a", "--backbone", "conv4", "--image-size", "16",
        "--device", "cpu", "--init-seed", "3", "--threads", "1"]


def test_torch_keeps_and_restores_the_best_backbone_in_memory_and_on_disk(tmp_path):
    framework = TorchFramework(parse_args("torch", [*ARGV, "--checkpoint-dir", str(tmp_path)]))
    framework.build(0)
    kept = {name: tensor.clone() for name, tensor in framework.backbone.state_dict().items()}
    framework.keep_best(5)
    with torch.no_grad():
        for parameter in framework.backbone.parameters():
            parameter.add_(1.0)
    framework.restore_best(5)
    assert all(torch.equal(kept[name], tensor) for name, tensor in framework.backbone.state_dict().items())
    with pytest.raises(UsageError, match="update 7's, but update 5's is kept"):
        framework.restore_best(7)
    fresh = TorchFramework(parse_args("torch", [*ARGV, "--checkpoint-dir", str(tmp_path), "--init-seed", "4"]))
    fresh.build(0)
    fresh.restore_best(5)  # from best.pt: a resumed or --eval-only run
    assert all(torch.equal(kept[name], tensor) for name, tensor in fresh.backbone.state_dict().items())


def test_tf_keeps_and_restores_the_best_backbone_in_memory_and_on_disk(tmp_path):
    framework = TFFramework(parse_args("tf", [*ARGV, "--checkpoint-dir", str(tmp_path)]))
    framework.build(0)
    kept = framework.backbone.get_weights()
    framework.keep_best(5)
    for variable in framework.backbone.variables:
        variable.assign_add(tf.ones_like(variable))
    framework.restore_best(5)
    assert all(np.array_equal(a, b) for a, b in zip(kept, framework.backbone.get_weights(), strict=True))
    with pytest.raises(UsageError, match="update 7's, but update 5's is kept"):
        framework.restore_best(7)
    fresh = TFFramework(parse_args("tf", [*ARGV, "--checkpoint-dir", str(tmp_path), "--init-seed", "4"]))
    fresh.build(0)
    fresh.restore_best(5)
    assert all(np.array_equal(a, b) for a, b in zip(kept, fresh.backbone.get_weights(), strict=True))


FIXED = ["--sources", "folder", "--ways", "5", "--shots", "5", "--query", "5", "--log-every", "5"]
VALIDATE = ["--validate-every", "5", "--validate-sources", "folder", "--validate-episodes", "4"]


def _run(main, served, run_id: str, tmp_path: Path, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    argv = ["--server", served.address, "--run", run_id, "--image-size", "16", "--json-summary", str(summary),
            "--threads", "1", *FIXED, *extra]
    assert main(argv) == 0
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_torch_tests_the_best_validated_backbone_and_resumes_its_history(served, tmp_path, capfd):
    checkpoints = tmp_path / "ckpt"
    whole = _run(torch_main, served, "torch-valid", tmp_path, *VALIDATE, "--train-episodes", "10", "--eval-episodes",
                 "3", "--checkpoint-dir", str(checkpoints))
    validation = whole["validation"]
    accuracies = [v["accuracy"] for v in validation["validations"]]
    assert [v["update"] for v in validation["validations"]] == [0, 5, 10]
    assert validation["best_update"] == 5 * int(np.argmax(accuracies)) == whole["config"]["tested_update"]
    best = torch.load(checkpoints / BEST)
    assert best["update"] == validation["best_update"]
    # the backbone tested, and fingerprinted with the reports, is the best one, not the last
    assert whole["config"]["result_sha256"] == weights_sha256((n, t.numpy()) for n, t in best["backbone"].items())
    captured = capfd.readouterr()
    assert f"testing the backbone of episode {validation['best_update']}" in captured.err
    assert f"validation: best accuracy {validation['best_accuracy']:.2%} at episode {validation['best_update']}" \
        in captured.out

    # --eval-only of the directory tests that backbone again: the same accuracy and fingerprint
    again = _run(torch_main, served, "torch-valid", tmp_path, *VALIDATE, "--train-episodes", "10", "--eval-episodes",
                 "3", "--checkpoint-dir", str(checkpoints), "--eval-only")
    assert again["eval"]["folder"]["mean_accuracy"] == whole["eval"]["folder"]["mean_accuracy"]
    assert again["config"]["result_sha256"] == whole["config"]["result_sha256"]

    # validating does not change what is trained: the same weights without it
    plain = _run(torch_main, served, "torch-plain", tmp_path, "--train-episodes", "10", "--eval-episodes", "0")
    assert plain["ranks"][0]["parameter_digest"] == whole["ranks"][0]["parameter_digest"]
    assert plain["validation"] is None and "tested_update" not in plain["config"]

    # stopped at 5 and resumed to 10: the history continues with an unbroken run's values
    split = tmp_path / "split"
    _run(torch_main, served, "torch-split", tmp_path, *VALIDATE, "--train-episodes", "5", "--eval-episodes", "0",
         "--checkpoint-dir", str(split))
    resumed = _run(torch_main, served, "torch-split", tmp_path, *VALIDATE, "--train-episodes", "10",
                   "--eval-episodes", "0", "--checkpoint-dir", str(split))
    assert resumed["validation"] == validation


@pytest.mark.slow
def test_tf_tests_the_best_validated_backbone(served, tmp_path):
    checkpoints = tmp_path / "ckpt"
    whole = _run(tf_main, served, "tf-valid", tmp_path, *VALIDATE, "--train-episodes", "5", "--eval-episodes", "2",
                 "--checkpoint-dir", str(checkpoints))
    validation = whole["validation"]
    assert [v["update"] for v in validation["validations"]] == [0, 5]
    assert validation["best_update"] == whole["config"]["tested_update"]
    with np.load(checkpoints / "best.npz") as best:
        assert int(best["update"]) == validation["best_update"]
    again = _run(tf_main, served, "tf-valid", tmp_path, *VALIDATE, "--train-episodes", "5", "--eval-episodes", "2",
                 "--checkpoint-dir", str(checkpoints), "--eval-only")
    assert again["eval"]["folder"]["mean_accuracy"] == whole["eval"]["folder"]["mean_accuracy"]
    assert again["config"]["result_sha256"] == whole["config"]["result_sha256"]


def test_validation_sources_need_validation(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args("torch", [*ARGV, "--validate-sources", "a"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--validate-sources: got a, but validation needs --validate-every" in err
