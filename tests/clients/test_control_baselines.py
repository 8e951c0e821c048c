"""``transfer --protocol control-baselines``: the transfer-controls reference's recipe (AdamW at
1e-4 with weight decay 1e-4, batch 64, validation every 1,000 of 40,000 steps, the checkpoint of
the lowest validation loss tested, a random horizontal flip, stratified regimes), scaled down
here with flags (the summary records what overrode what) on a small KITTI task: the tested
weights are the best-validated checkpoint's, not the last step's; a model, a scratch and a max
run in each framework feed the calibrated table; torch and tf from one ``--init-seed`` agree.
The three-convolution ``tiny`` backbone at 16 px keeps the runs small (test_transfer_roles.py
says why)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import served_kitti
from transfer_refusals import refusal_lines

from clients.trainer_args import parse_transfer_args
from clients.vtab_transfer import flipped
from clients.vtab_transfer_protocols import validation_steps
from sampler_server.cli.main import main as server_cli
from sampler_server.fixtures.tfds import DemoKitti

SIZES = {"train": 60, "validation": 20, "test": 30}
TASK = "kitti_distance"
REGIMES = (20, 40)  # stratified: a val part of at least one example per class (4)
SMALL = ["--protocol", "control-baselines", "--tasks", TASK, "--backbone", "tiny", "--image-size", "16",
         "--batch-size", "8", "--eval-batch-size", "64", "--steps", "8", "--validate-every", "2", "--log-every", "1000"]
AT_REGIMES = [arg for n in REGIMES for arg in ("--regime", str(n))] + ["--regime-seed", "3"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with served_kitti(DemoKitti, tmp_path_factory.mktemp("controls"), SIZES) as server:
        yield server


def _mains() -> dict:
    import torch

    from clients.tf.vtab_transfer import main as tf_main
    from clients.torch.vtab_transfer import main as torch_main

    torch.set_num_threads(1)  # tiny convolutions: a second thread only spins (test_transfer_roles.py)
    return {"torch": lambda argv: torch_main([*argv, "--threads", "1"]), "tf": tf_main}


def _run(main, served, run_id: str, tmp_path: Path, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    assert main(["--server", served.address, "--run", run_id, "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


def test_the_protocol_is_the_references_recipe():
    args = parse_transfer_args("torch", ["--server", "h:1", "--run", "r", "--tasks", TASK, "--protocol",
                                         "control-baselines", "--regime", "20"])
    assert (args.mode, args.optimizer, args.lrs, args.weight_decay, args.batch_size, args.steps) == (
        "finetune", "adamw", [1e-4], 1e-4, 64, [40000])
    assert (args.validate_every, args.final_split, args.augment, args.regime_sampling, args.decay, args.warmup) == (
        1000, "none", "flip", "stratified", "none", 0.0)
    assert args.image_size == 224 and args.overridden == []
    assert validation_steps(1000, 40000) == list(range(1000, 40001, 1000))  # 40 checks, the last at the end
    assert validation_steps(3, 8) == [3, 6, 8]
    scratch = parse_transfer_args("torch", ["--server", "h:1", "--run", "r", "--tasks", TASK, "--protocol",
                                            "control-baselines", "--role", "scratch", "--weight-decay", "0.01"])
    assert scratch.weight_decay == 0.01 and scratch.overridden == ["weight_decay"]


def test_flips_mirror_about_half_the_images_from_the_seed():
    images = np.arange(64 * 4 * 5 * 3, dtype=np.uint8).reshape(64, 4, 5, 3)
    images.setflags(write=False)  # as the wire's
    once = flipped(images, np.random.default_rng(7))
    again = flipped(images, np.random.default_rng(7))
    mirrored = [i for i in range(64) if not np.array_equal(once[i], images[i])]
    assert np.array_equal(once, again) and 20 <= len(mirrored) <= 44
    for i in range(64):
        assert np.array_equal(once[i], images[i][:, ::-1] if i in mirrored else images[i])


def test_the_tested_weights_are_the_lowest_validation_loss_checkpoint(served, tmp_path):
    """A rate high enough that the validation loss turns up: the best check is not the last
    step's, and a run that stops at the best step ends with the weights that were tested."""
    main = _mains()["torch"]
    common = [*SMALL, "--role", "scratch", "--init-seed", "0", "--lrs", "0.02", "--steps", "12", "--validate-every", "1",
              *AT_REGIMES[:2], "--regime-seed", "3"]
    stopped = _run(main, served, "stopped", tmp_path, *common)
    result = stopped["regimes"][0]["tasks"][TASK]
    checks = result["validations"]["lr=0.02,steps=12"]
    assert [check["step"] for check in checks] == list(range(1, 13))
    losses = [check["loss"] for check in checks]
    best = int(np.argmin(losses))
    assert result["best_step"] == checks[best]["step"] < 12, checks  # the last step is not the one tested
    assert result["val_loss"] == losses[best] and result["val_accuracy"] == checks[best]["accuracy"]
    short = _run(main, served, "short", tmp_path, *common, "--steps", str(result["best_step"]),
                 "--validate-every", str(result["best_step"]))
    assert short["result_sha256"] == stopped["result_sha256"]  # the tested weights: the best step's
    assert short["regimes"][0]["tasks"][TASK]["test_accuracy"] == result["test_accuracy"]
    assert stopped["protocol_values"]["optimizer"] == "adamw"
    assert stopped["overridden"] == ["batch_size", "lrs", "steps", "validate_every"]


@pytest.mark.slow
def test_model_scratch_and_max_in_both_frameworks_feed_the_calibrated_table(served, tmp_path, capfd):
    import torch

    from clients.tf import models
    from clients.torch.models import build_backbone

    mains = _mains()
    torch.manual_seed(0)
    weights = {"torch": tmp_path / "tiny.pt", "tf": tmp_path / "tiny.weights.h5"}
    torch.save(build_backbone("tiny", 16).state_dict(), weights["torch"])
    models.build_backbone("tiny", 16).save_weights(str(weights["tf"]))
    summaries: dict[str, dict[str, dict]] = {}
    for framework, main in mains.items():
        summaries[framework] = {
            "model": _run(main, served, f"{framework}-model", tmp_path, *SMALL, "--weights", str(weights[framework]),
                          *AT_REGIMES),
            "scratch": _run(main, served, f"{framework}-scratch", tmp_path, *SMALL, "--role", "scratch",
                            "--init-seed", "0", *AT_REGIMES),
            "max": _run(main, served, f"{framework}-max", tmp_path, *SMALL, "--role", "max", "--init-seed", "0"),
        }
        for role, summary in summaries[framework].items():
            assert summary["protocol"] == "control-baselines" and summary["role"] == role
            values = summary["protocol_values"]
            assert (values["optimizer"], values["augment"], values["final_split"]) == ("adamw", "flip", "none")
            assert values["weight_decay"] == 1e-4
            parts = summary.get("regimes") or [summary]
            for part in parts:
                result = part["tasks"][TASK]
                assert result["val_split"] == "val" and result["final_split"] == "none"
                assert result["test_examples"] == SIZES["test"]
        assert summaries[framework]["scratch"]["regime_sampling"] == "stratified"
        capfd.readouterr()
        assert server_cli(["report", "--calibrate", "--run", f"{framework}-model", "--scratch",
                           f"{framework}-scratch", "--max", f"{framework}-max", "--data",
                           str(served.config.data_dir), "--format", "json"]) == 0
        table = json.loads(capfd.readouterr().out)["tasks"][TASK]
        assert [r["n"] for r in table["runs"][f"{framework}-model"]["regimes"]] == list(REGIMES)
    # the same --init-seed, batches, flips and AdamW steps: torch and tf agree within the test's CI
    for role in ("scratch", "max"):
        parts = {f: summaries[f][role].get("regimes") or [summaries[f][role]] for f in mains}
        for torch_part, tf_part in zip(parts["torch"], parts["tf"], strict=True):
            ours, theirs = torch_part["tasks"][TASK], tf_part["tasks"][TASK]
            first = ours["validations"], theirs["validations"]
            assert first[0]["lr=0.0001,steps=8"][0]["loss"] == pytest.approx(
                first[1]["lr=0.0001,steps=8"][0]["loss"], rel=1e-3), (role, first)
            p = (ours["test_accuracy"] + theirs["test_accuracy"]) / 2
            ci95 = 1.96 * np.sqrt(max(p * (1 - p), 1e-4) / SIZES["test"])
            assert abs(ours["test_accuracy"] - theirs["test_accuracy"]) <= ci95, (role, ours, theirs)


def test_early_stopping_arguments_that_disagree_end_in_one_line_and_exit_2(served, capfd):
    base = ["--server", served.address, "--run", "bad", "--tasks", TASK, "--backbone", "tiny", "--image-size", "16"]
    cases = [
        (["--protocol", "control-baselines", "--final-split", "train800val200"],
         ["--validate-every", "--final-split train800val200", "--final-split none"]),
        (["--final-split", "none"], ["--final-split", "--validate-every"]),
        (["--validate-every", "5"], ["--validate-every", "--final-split none"]),
        (["--protocol", "control-baselines", "--mode", "linear"], ["--augment", "flip", "--mode linear"]),
        (["--protocol", "control-baselines", "--select", "all-tasks"], ["--select", "all-tasks", "per-task"]),
        (["--protocol", "control-baselines", "--select-split", "none"], ["--validate-every", "--select-split"]),
    ]
    lines = refusal_lines("torch", base, [extra for extra, _ in cases], capfd)
    for line, (_, named) in zip(lines, cases, strict=True):
        assert all(word in line for word in named), line
