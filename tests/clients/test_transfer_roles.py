"""Control baselines in the transfer trainers (torch and tf): a model, a scratch and a max run
on one small KITTI task at 2 regimes report through a real server, keyed by role, regime
and regime seed; each regime's sweep is scored on its val part and tested on the task's test;
the regime sampling asked for is recorded; bad role/regime arguments end in one line and exit 2.
The runs use VTAB+MD's protocol (one final run each) and the three-convolution ``tiny``
backbone to stay small: the roles, regimes and reports do not depend on the network, and
TensorFlow traces a finetuning step once per run (``tiny``'s trace is half conv4's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import served_kitti
from transfer_refusals import refusal_lines

from clients.core import SamplerClient
from clients.trainer_args import parse_transfer_args
from sampler_server.cli.main import main as server_cli
from sampler_server.core.baselines import val_count
from sampler_server.fixtures.tfds import DemoKitti

SIZES = {"train": 60, "validation": 20, "test": 30}
TASK = "kitti_distance"
REGIMES = (8, 32)
BACKBONE = "tiny"
SMALL = ["--protocol", "vtab-md", "--tasks", TASK, "--backbone", BACKBONE, "--image-size", "16", "--batch-size", "8",
         "--eval-batch-size", "64", "--lrs", "0.1", "0.01", "--steps", "2", "--log-every", "1000"]
AT_REGIMES = [arg for n in REGIMES for arg in ("--regime", str(n))] + ["--regime-seed", "4"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with served_kitti(DemoKitti, tmp_path_factory.mktemp("roles"), SIZES) as server:  # coloured by label: learnable
        yield server


def _run(main, served, run_id: str, tmp_path: Path, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    assert main(["--server", served.address, "--run", run_id, "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


def _reports_are_held(served, summary: dict, role: str, regime_seed: int) -> None:
    """Every report the summary names is already stored under its role, regime and seed (a duplicate)."""
    parts = summary["regimes"] if "regimes" in summary else [dict(summary, n=0)]
    with SamplerClient(served.address) as client:
        for part in parts:
            result = part["tasks"][TASK]
            for split, accuracy, examples in ((result["val_split"], result["val_accuracy"], result["val_examples"]),
                                              ("test", result["test_accuracy"], result["test_examples"])):
                reply = client.report_task(summary["run"], TASK, split, accuracy, examples, role=role,
                                           regime=part["n"], regime_seed=regime_seed if part["n"] else 0)
                assert (reply.stored, reply.duplicates) == (0, 1), (part["n"], split)


def _check_roles(main, served, tmp_path, framework: str, init: str) -> None:
    model = _run(main, served, f"{framework}-model", tmp_path, *SMALL, "--mode", "linear", "--weights", init,
                 "--role", "model", *AT_REGIMES)
    # one setting (the last --lrs wins): each regime's sweep still trains and scores it on its
    # val part; two settings would only add a finetuning fit per regime (the choice between
    # settings is test_transfer's)
    scratch = _run(main, served, f"{framework}-scratch", tmp_path, *SMALL, "--mode", "finetune", "--role", "scratch",
                   "--lrs", "0.1", *AT_REGIMES, "--regime-sampling", "one-per-class-first")
    # the max run trains a linear head on random-init features longer (the last --lrs/--steps
    # win): one stuck on the majority class would score exactly the blind guess, and
    # calibration is then undefined (refused)
    maximal = _run(main, served, f"{framework}-max", tmp_path, *SMALL, "--mode", "linear", "--role", "max",
                   "--lrs", "1.0", "--steps", "60")
    with SamplerClient(served.address) as client:
        regimes = {n: {s: client.get_regime(TASK, n, 4, s) for s in ("train", "val")} for n in REGIMES}
        val_size = len(list(client.eval_batches(TASK, "val", 64, image_size=16)))
    assert (model["regime_sampling"], scratch["regime_sampling"]) == ("uniform", "one-per-class-first")
    # (not "stratified": sklearn's split needs a val part of one example per class, n >= 20 here)
    assert scratch["config"]["regime_sampling"] == scratch["protocol_values"]["regime_sampling"] == (
        "one-per-class-first")
    for summary, role in ((model, "model"), (scratch, "scratch")):
        assert summary["role"] == role and summary["regime_seed"] == 4 and summary["config"]["role"] == role
        assert [part["n"] for part in summary["regimes"]] == list(REGIMES)
        for part in summary["regimes"]:
            result = part["tasks"][TASK]
            assert result["val_split"] == "val" and result["val_examples"] == val_count(part["n"])
            assert result["val_examples"] == len(regimes[part["n"]]["val"].record_ids)
            assert result["test_examples"] == SIZES["test"] and 0.0 <= result["test_accuracy"] <= 1.0
        _reports_are_held(served, summary, role, 4)
    # VTAB Appendix I's weight decay: 0.001 for the scratch run (finetune from random init), none
    # for the probes; recorded, and what each framework's optimizer was given
    decays = {role: summary["protocol_values"]["weight_decay"]
              for role, summary in (("model", model), ("scratch", scratch), ("max", maximal))}
    assert decays == {"model": 0.0, "scratch": 0.001, "max": 0.0}
    fine_tuned = parse_transfer_args(framework, ["--server", served.address, "--run", "ft", *SMALL, "--mode",
                                                 "finetune", "--weights", init])
    assert fine_tuned.weight_decay == 0.0  # fine-tuning a checkpoint: none
    assert maximal["role"] == "max" and "regimes" not in maximal and maximal["config"]["regimes"] == []
    assert maximal["tasks"][TASK]["val_split"] == "val" and maximal["tasks"][TASK]["test_examples"] == 30
    assert val_size >= 1
    _reports_are_held(served, maximal, "max", 0)
    _calibrated_table_and_plots(served, tmp_path, framework)


def _calibrated_table_and_plots(served, tmp_path: Path, framework: str) -> None:
    """The three runs give the calibrated table through the server (JSON keys of the issue)
    and, from the command line on the same data, the same JSON and both plots."""
    import grpc

    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

    runs = {role: f"{framework}-{role}" for role in ("model", "scratch", "max")}
    with grpc.insecure_channel(served.address) as channel:
        reply = pb_grpc.SamplerStub(channel).GetReport(pb.GetReportRequest(
            run_ids=[runs["model"]], table="calibrated", scratch_run=runs["scratch"], max_run=runs["max"],
            format="json"))
    served_json = json.loads(reply.text)
    task = served_json["tasks"][TASK]
    assert set(task) == {"blind_risk", "max_risk", "runs"} and list(task["runs"]) == [runs["model"]]
    model = task["runs"][runs["model"]]
    assert set(model) == {"cci", "regimes"} and [r["n"] for r in model["regimes"]] == list(REGIMES)
    assert all(set(r) == {"n", "seed", "risk", "cR", "cR_scratch"} for r in model["regimes"])
    plots = tmp_path / f"plots-{framework}"
    data = served.config.data_dir
    argv = ["report", "--calibrate", "--run", runs["model"], "--scratch", runs["scratch"], "--max", runs["max"],
            "--data", str(data), "--format", "json"]
    assert server_cli([*argv, "--plots", str(plots)]) == 0
    assert sorted(path.name for path in plots.iterdir()) == [f"calibrated_n_{TASK}.png", f"calibrated_scratch_{TASK}.png"]


def test_torch_model_scratch_and_max_runs_at_two_regimes(served, tmp_path):
    import torch
    from clients.torch.models import build_backbone
    from clients.torch.vtab_transfer import main

    torch.manual_seed(0)
    checkpoint = tmp_path / f"{BACKBONE}.pt"
    torch.save(build_backbone(BACKBONE, 16).state_dict(), checkpoint)
    # one thread (the command sets torch's from --threads, by default this process's cores): on
    # these tiny convolutions a second only spins waiting for work, and under make test the other
    # worker has the machine's other core
    threads = torch.get_num_threads()
    try:
        _check_roles(lambda argv: main([*argv, "--threads", "1"]), served, tmp_path, "torch", str(checkpoint))
    finally:
        torch.set_num_threads(threads)


def test_tf_model_scratch_and_max_runs_at_two_regimes(served, tmp_path):
    from clients.tf import models
    from clients.tf.vtab_transfer import main

    weights = tmp_path / f"{BACKBONE}.weights.h5"
    models.build_backbone(BACKBONE, 16).save_weights(str(weights))
    _check_roles(main, served, tmp_path, "tf", str(weights))


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_each_frameworks_optimizer_takes_the_runs_weight_decay(framework):
    """SGD's coupled weight decay (g + wd w): torch's ``SGD(weight_decay=)``, tf's ``TorchSGD``."""
    argv = ["--server", "127.0.0.1:1", "--run", "r", *SMALL, "--mode", "finetune", "--role", "scratch",
            "--device", "cpu"]
    args = parse_transfer_args(framework, argv)
    if framework == "torch":
        from clients.torch.vtab_transfer import TorchTransferLearner

        learner = TorchTransferLearner(args)
        learner.reset(3, 0)
        assert {group["weight_decay"] for group in learner.optimizer.param_groups} == {0.001}
    else:
        from clients.tf.vtab_transfer import TFTransferLearner

        learner = TFTransferLearner(args)
        learner.reset(3, 0)
        assert learner.optimizer.coupled_weight_decay == 0.001


def test_bad_role_and_regime_arguments_end_in_one_line_and_exit_2(served, tmp_path, capfd):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"x")
    base = ["--server", served.address, "--run", "bad", *SMALL]
    cases = [
        (["--role", "max", "--regime", "8"], ["--regime", "8", "--role max"]),
        (["--role", "scratch", "--weights", str(weights)], ["--weights", "--role scratch"]),
        (["--regime", "8", "--regime", "8"], ["--regime", "each value once"]),
        (["--regime-seed", "3"], ["--regime-seed", "3", "--regime N"]),
        (["--regime", "8", "--mode", "protonet"], ["--mode", "protonet"]),
        (["--role", "boss"], ["--role", "boss"]),
        (["--regime", "100000"], ["--regime", "100000", TASK]),
    ]
    lines = refusal_lines("torch", base, [extra for extra, _ in cases], capfd)
    for line, (_, named) in zip(lines, cases, strict=True):
        assert all(word in line for word in named), line
