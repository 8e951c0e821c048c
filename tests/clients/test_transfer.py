"""The VTAB transfer learner (torch and tf) against a real server over a test-built KITTI
store holding train800/val200/test (its val, 240, larger than val200): reports land in
the VTAB table, the vtab-md sweep picks the best val200 setting, the default protocol is
the VTAB paper's (fine-tune, per-task choice on val, the median of 3 final runs),
reference-script trains trainval1000 without a sweep, flags override and are recorded,
ProtoNet episodes report, bad input ends in one line and exit 2, and a repeated run
reports the same accuracies."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KITTI_SIZES
from transfer_refusals import refusal_lines

from clients.core import SamplerClient
from clients.vtab_transfer import Setting, choose, sweep_settings

TASK = "kitti_distance"
SMALL = ["--protocol", "vtab-md", "--tasks", TASK, "--backbone", "conv4", "--image-size", "16", "--batch-size", "32",
         "--eval-batch-size", "128", "--lrs", "0.1", "0.01", "--steps", "2", "4", "--log-every", "1000"]
TINY = ["--tasks", TASK, "--backbone", "conv4", "--image-size", "16", "--eval-batch-size", "256",
        "--log-every", "1000", "--device", "cpu"]  # every protocol value left to --protocol
SCALE = ["--steps-scale", "0.0004"]  # 2500 -> 1 step, 10000 -> 4
# TensorFlow traces a training step once per run (and class count): its runs take the three-convolution tiny
# backbone (the last --backbone wins), whose trace is half conv4's; nothing these tests check
# depends on the network
TF_NET = "tiny"


@pytest.fixture(scope="module")
def served(kitti_served):
    return kitti_served


def _run(main, served, run_id: str, tmp_path: Path, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    assert main(["--server", served.address, "--run", run_id, "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


def _vtab_json(served, run_id: str) -> str:
    with SamplerClient(served.address) as client:
        return client.get_vtab_report([run_id], fmt="json")


def _check_sweep(summary: dict) -> None:
    order = [Setting(s["lr"], s["steps"]).label for s in summary["settings"]]
    best = max(order, key=lambda label: summary["mean_val"][label])  # the first of ties, in sweep order
    chosen = summary["tasks"][TASK]["chosen"]
    assert Setting(chosen["lr"], chosen["steps"]).label == best
    assert summary["tasks"][TASK]["test_examples"] == KITTI_SIZES["test"]
    assert 0.0 <= summary["tasks"][TASK]["test_accuracy"] <= 1.0


def _check_report(served, run_id: str, summary: dict) -> None:
    """The run's test accuracy is in GetReport's VTAB table, with its configuration."""
    report = json.loads(_vtab_json(served, run_id))
    score = report["scores"][run_id]["tasks"][TASK]
    assert score["accuracy"] == pytest.approx(summary["tasks"][TASK]["test_accuracy"]) and score["examples"] == 30
    assert report["configs"][run_id]["mode"] == summary["mode"]


# ---- pure parts --------------------------------------------------------------------------------


def test_choose_takes_the_best_mean_or_each_tasks_best_and_breaks_ties_in_sweep_order():
    settings = [Setting(0.01, 10), Setting(0.001, 10)]
    val = {"a": {"lr=0.01,steps=10": 0.2, "lr=0.001,steps=10": 0.9},
           "b": {"lr=0.01,steps=10": 0.8, "lr=0.001,steps=10": 0.3}}
    assert choose(val, settings, per_task=False) == {"a": settings[1], "b": settings[1]}  # 0.6 > 0.5
    assert choose(val, settings, per_task=True) == {"a": settings[1], "b": settings[0]}
    tied = {"a": {"lr=0.01,steps=10": 0.5, "lr=0.001,steps=10": 0.5}}
    assert choose(tied, settings, per_task=False)["a"] == settings[0]


def test_sweep_order_and_scaling():
    assert [s.label for s in sweep_settings([0.01, 0.001], [2500, 10000], 0.01)] == [
        "lr=0.01,steps=25", "lr=0.01,steps=100", "lr=0.001,steps=25", "lr=0.001,steps=100"]
    assert len(sweep_settings([0.1], [2, 4], 0.01)) == 1  # both scale to 1 step


def test_transfer_modules_import_nothing_of_the_server_package():
    code = ("import sys, clients.vtab_transfer, clients.torch.vtab_transfer\n"
            "used = sorted(m for m in sys.modules if m == 'sampler_server' or m.startswith('sampler_server.'))\n"
            "assert not used, used\nassert 'tensorflow' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


# ---- torch -------------------------------------------------------------------------------------


@pytest.fixture
def torch_main():
    """The torch command at one thread: on these tiny convolutions a second one only spins waiting
    for work (and under make test the other worker has the machine's other core). The command
    sets torch's threads from --threads (by default, this process's cores; the last flag wins)."""
    import torch
    from clients.torch.vtab_transfer import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield lambda argv: main([*argv, "--threads", "1"])
    torch.set_num_threads(threads)


def test_torch_linear_probe_reports_into_the_vtab_table_and_repeats_exactly(torch_main, served, tmp_path):
    first = _run(torch_main, served, "torch-linear", tmp_path, *SMALL, "--mode", "linear", "--seed", "3")
    _check_sweep(first)
    assert first["chosen"] == first["tasks"][TASK]["chosen"] and first["config"]["framework"] == "torch"
    _check_report(served, "torch-linear", first)
    again = _run(torch_main, served, "torch-linear-again", tmp_path, *SMALL, "--mode", "linear", "--seed", "3")
    assert again["tasks"] == first["tasks"]


def test_torch_finetune_per_task_and_protonet_from_an_md_checkpoint(torch_main, served, tmp_path):
    import torch

    from clients.torch.models import build_backbone

    tuned = _run(torch_main, served, "torch-finetune", tmp_path, *SMALL, "--mode", "finetune", "--select", "per-task",
                 "--steps", "2")
    assert "chosen" not in tuned and tuned["tasks"][TASK]["chosen"]["steps"] == 2
    torch.manual_seed(0)
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"format": 2, "next_index": 5, "resume": {}, "backbone": build_backbone("conv4", 16).state_dict(),
                "head": None, "optimizer": {}}, checkpoint)
    proto = _run(torch_main, served, "torch-protonet", tmp_path, "--tasks", TASK, "--backbone", "conv4",
                 "--image-size", "16", "--mode", "protonet", "--weights", str(checkpoint))
    result = proto["tasks"][TASK]
    assert result["test_examples"] == 30 and result["support_examples"] == 1000
    _check_report(served, "torch-protonet", proto)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_bad_inputs_end_in_one_line_and_exit_2(served, tmp_path, framework, capfd):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a checkpoint")
    base = ["--server", served.address, "--run", "bad", "--backbone", "conv4", "--image-size", "16"]
    cases = [
        (["--tasks", "no_such_task"], ["--tasks", "no_such_task", TASK]),
        (["--tasks", TASK, "--weights", str(junk)], ["--weights", str(junk)]),
        (["--tasks", TASK, "--weights", str(tmp_path / "missing.pt")], ["--weights", "missing.pt"]),
        (["--tasks", TASK, "--lrs", "-1"], ["--lrs", "-1"]),
    ]
    if framework == "tf":
        cases = cases[:2]  # the parser is shared; the file and task checks are per framework
    lines = refusal_lines(framework, base, [extra for extra, _ in cases], capfd)
    for line, (_, named) in zip(lines, cases, strict=True):
        assert all(word in line for word in named[1:]) or named[0] in line, line


# ---- torch: the protocols ------------------------------------------------------------------------


def test_torch_default_run_is_vtab_per_task_on_val_and_the_median_of_3_runs(torch_main, served, tmp_path):
    summary = _run(torch_main, served, "torch-vtab", tmp_path, *TINY, *SCALE, "--batch-size", "16")
    values = summary["protocol_values"]
    assert summary["protocol"] == "vtab" and summary["mode"] == "finetune"
    # a named backbone without --weights trains from random init: VTAB's 0.001 (Appendix I)
    assert (values["lrs"], values["steps"], values["warmup"], values["weight_decay"]) == ([0.1, 0.01],
                                                                                          [2500, 10000], 0.0, 0.001)
    assert summary["overridden"] == ["batch_size"] and values["batch_size"] == 16
    assert values["resize"] == "legacy_bilinear"  # the reference's pixels, recorded with the run
    assert [(s["lr"], s["steps"]) for s in summary["settings"]] == [(0.1, 1), (0.1, 4), (0.01, 1), (0.01, 4)]
    assert summary["schedules"]["lr=0.1,steps=4"] == {"warmup_steps": 0, "decay_steps": [1, 2, 4]}
    result = summary["tasks"][TASK]
    assert "chosen" not in summary  # chosen per task
    best = max(summary["settings"], key=lambda s: result["val"][f"lr={s['lr']:g},steps={s['steps']}"])
    assert result["chosen"] == best and result["val_split"] == "val"
    assert result["val_examples"] == KITTI_SIZES["validation"]  # val (240), not val200
    assert result["final_split"] == "train800val200" and result["test_examples"] == KITTI_SIZES["test"]
    runs = result["test_runs"]
    assert [r["seed"] for r in runs] == summary["run_seeds"] and len(set(summary["run_seeds"])) == 3
    assert summary["run_seeds"][0] == 0
    assert result["test_accuracy"] == statistics.median(r["test_accuracy"] for r in runs)
    with SamplerClient(served.address) as client:
        report = json.loads(client.get_vtab_report(["torch-vtab"], fmt="json"))
    assert report["scores"]["torch-vtab"]["tasks"][TASK]["accuracy"] == pytest.approx(result["test_accuracy"])
    config = report["configs"]["torch-vtab"]  # the run config sent with the reports
    assert config["protocol"] == "vtab" and config["protocol_values"] == values and config["runs"] == 3


def test_torch_reference_script_trains_trainval1000_without_a_sweep(torch_main, served, tmp_path):
    summary = _run(torch_main, served, "torch-script", tmp_path, *TINY, "--protocol", "reference-script",
                   "--steps-scale", "0.01")
    values = summary["protocol_values"]
    assert (values["batch_size"], values["lrs"], values["steps"], values["warmup"]) == (64, [0.01], [1000], 0.08)
    assert summary["overridden"] == [] and summary["settings"] == [{"lr": 0.01, "steps": 10}]
    assert summary["schedules"]["lr=0.01,steps=10"] == {"warmup_steps": 1, "decay_steps": [3, 6, 9]}
    result = summary["tasks"][TASK]
    assert result["final_split"] == "trainval1000" and "val_accuracy" not in result and len(result["test_runs"]) == 1
    assert summary["chosen"] == {"lr": 0.01, "steps": 10}


def test_torch_overrides_win_and_are_recorded(torch_main, served, tmp_path):
    summary = _run(torch_main, served, "torch-override", tmp_path, *TINY, *SCALE, "--batch-size", "16", "--lrs",
                   "0.05", "--steps", "4000", "--runs", "1", "--decay", "paper", "--select-split", "val200",
                   "--mode", "linear")
    values = summary["protocol_values"]
    assert summary["overridden"] == ["batch_size", "decay", "lrs", "mode", "runs", "select_split", "steps"]
    assert (values["lrs"], values["steps"], values["runs"], values["decay"], values["mode"]) == (
        [0.05], [4000], 1, "paper", "linear")
    assert summary["schedules"] == {"lr=0.05,steps=2": {"warmup_steps": 0, "decay_steps": [1, 1, 2]}}
    result = summary["tasks"][TASK]
    assert result["val_split"] == "val200" and result["val_examples"] == 200 and len(result["test_runs"]) == 1


# ---- tf ----------------------------------------------------------------------------------------


@pytest.fixture
def tf_main():
    from clients.tf.vtab_transfer import main

    return main


def test_tf_linear_probe_reports_into_the_vtab_table_and_repeats_exactly(tf_main, served, tmp_path):
    first = _run(tf_main, served, "tf-linear", tmp_path, *SMALL, "--backbone", TF_NET, "--mode", "linear",
                 "--seed", "3")
    _check_sweep(first)
    assert first["config"]["framework"] == "tf"
    _check_report(served, "tf-linear", first)
    again = _run(tf_main, served, "tf-linear-again", tmp_path, *SMALL, "--backbone", TF_NET, "--mode", "linear",
                 "--seed", "3")
    assert again["tasks"] == first["tasks"]


def test_tf_finetune_and_protonet_from_keras_weights(tf_main, served, tmp_path):
    from clients.tf import models

    tuned = _run(tf_main, served, "tf-finetune", tmp_path, *SMALL, "--backbone", TF_NET, "--mode", "finetune",
                 "--steps", "2", "--lrs", "0.01")
    assert tuned["chosen"] == {"lr": 0.01, "steps": 2}
    weights = tmp_path / f"{TF_NET}.weights.h5"
    models.build_backbone(TF_NET, 16).save_weights(str(weights))
    proto = _run(tf_main, served, "tf-protonet", tmp_path, "--tasks", TASK, "--backbone", TF_NET,
                 "--image-size", "16", "--mode", "protonet", "--weights", str(weights))
    assert proto["tasks"][TASK]["test_examples"] == 30
    _check_report(served, "tf-protonet", proto)


def test_tf_default_run_is_the_vtab_protocol(tf_main, served, tmp_path):
    summary = _run(tf_main, served, "tf-vtab", tmp_path, *TINY, "--backbone", TF_NET, *SCALE, "--batch-size", "16",
                   "--steps", "2500")
    assert summary["protocol"] == "vtab" and summary["config"]["framework"] == "tf"
    assert summary["protocol_values"]["lrs"] == [0.1, 0.01] and summary["overridden"] == ["batch_size", "steps"]
    result = summary["tasks"][TASK]
    assert result["val_split"] == "val" and len(result["test_runs"]) == 3
    assert result["test_accuracy"] == statistics.median(r["test_accuracy"] for r in result["test_runs"])
