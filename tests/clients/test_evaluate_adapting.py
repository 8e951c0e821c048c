"""``evaluate --md-learners`` with the learners that adapt the backbone on each episode
(finetune, md-transfer, bit-md, maml, protomaml) beside the fixed-feature ones: the flags
(either list form, the old name, Meta-Dataset's defaults, the one-line refusals) and, against a
real server holding a small MD source, a ``module:callable`` backbone with batch norms
(``adapting_backbones``) through every learner in torch and in TensorFlow: each reported under
``RUN/<preset>/<learner>``, bit-md's episodes at 224 px, the loaded weights (batch-norm buffers
included) unchanged after the job, the two frameworks at the same accuracies; and an adapting
unit killed part way resumes at its first missing episode."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture

from clients.evaluate import Held, missing_episodes, parse_held
from clients.evaluate_args import MD_LEARNERS, maml_alpha, parse_evaluate_args

HERE = Path(__file__).resolve().parent
BACKBONES = {"torch": "adapting_backbones:torch_backbone", "tf": "adapting_backbones:keras_backbone"}
BASE = ["--server", "h:1", "--run", "r", "--backbone", "tiny", "--feature-cache", "c"]
EPISODES = 3
NAMES = ("folder", "image_folder")  # the store's name and its kind, as the held table names it
QUICK = ["--finetune-steps", "4", "--maml-steps", "2"]  # the tests' few steps (the defaults: MD's 200 and 1)


# ---- the flags -----------------------------------------------------------------------------------


def test_md_learners_are_named_either_way_with_meta_datasets_defaults():
    args = parse_evaluate_args("torch", [*BASE, "--md-learners", "prototypes,knn,finetune", "protomaml"])
    assert args.md_learners == ["prototypes", "knn", "finetune", "protomaml"]
    assert parse_evaluate_args("torch", [*BASE, "--learners", "logreg", "bit-md"]).md_learners == ["logreg", "bit-md"]
    assert parse_evaluate_args("torch", BASE).md_learners == ["prototypes", "logreg"]
    # MD's best Finetune (best/baselinefinetune_*.gin) and Proto-MAML inference (one step, alpha by preset)
    assert (args.finetune_steps, args.finetune_lr, args.finetune_optimizer, args.finetune_all_layers,
            args.classifier, args.weight_norm) == (200, 0.01, "adam", True, "linear", True)
    assert (args.maml_steps, args.maml_eval_steps, args.maml_alpha) == (1, 0, None)
    assert (maml_alpha(None, "md-v1"), maml_alpha(None, "md-v2"), maml_alpha(0.1, "md-v2")) == (0.0614, 0.00577, 0.1)
    off = parse_evaluate_args("torch", [*BASE, "--no-finetune-all-layers", "--no-weight-norm", "--maml-alpha", "0.2"])
    assert (off.finetune_all_layers, off.weight_norm, off.maml_alpha) == (False, False, 0.2)


def test_bad_learners_are_one_line_naming_the_flag(capsys):
    for extra, words in ((["--md-learners", "prototypes,foo"], "got 'prototypes,foo', expected learners of"),
                         (["--md-learners", "knn,finetune", "knn"], "argument --md-learners: got knn finetune knn, "
                                                                    "expected each value once"),
                         (["--md-learners", "bit-md", "--image-size", "32"],
                          "bit-md runs at 224 px (VTAB+MD's BiT), but --image-size fixes the backbone's input at 32 px")):
        with pytest.raises(SystemExit) as stop:
            parse_evaluate_args("torch", BASE + extra)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err, err
    assert set(MD_LEARNERS) >= {"prototypes", "knn", "finetune", "matchingnet", "protomaml", "md-transfer", "bit-md",
                                "logreg", "maml"}


# ---- against a real server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("adapting")
    data = root / "data"
    pack_fixture(generate_fixture("image_folder", root, num_classes=24, images_per_class=12), data, name="folder")
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    yield server
    server.stop(grace=0.5)


@pytest.fixture
def short_recipes(monkeypatch):
    """md-transfer's and bit-md's fixed recipes (100 and 500 steps, batches of 512) cut to a few
    steps of small batches: the same loops, at a test's cost."""
    from clients import md_learners

    recipes = md_learners.TRANSFER_LEARNERS
    monkeypatch.setitem(recipes, "md-transfer", dataclasses.replace(recipes["md-transfer"], steps=3))
    monkeypatch.setitem(recipes, "bit-md", dataclasses.replace(recipes["bit-md"], steps=5, batch=8))


def _argv(served, run: str, framework: str, learners: list[str], cache: Path) -> list[str]:
    return ["--server", served.address, "--run", run, "--backbone", BACKBONES[framework], "--feature-cache",
            str(cache), "--device", "cpu", "--protocols", "md", "--md-sources", "folder", "--episodes",
            str(EPISODES), "--md-learners", ",".join(learners), *QUICK,
            *(["--threads", "1"] if framework == "torch" else [])]


def _held(served, runs: list[str]) -> dict[str, Held]:
    from clients.core import SamplerClient
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

    with SamplerClient(served.address) as client:
        return parse_held(client.call("GetReport", pb.GetReportRequest(run_ids=runs, format="json",
                                                                       table="held")).text)


def _evaluate(framework: str, argv: list[str]) -> tuple[dict, str, str]:
    """The job run in this process: (summary, the fingerprint of the weights as loaded, their
    fingerprint after the job)."""
    from clients.core import SamplerClient
    from clients.evaluate import EvaluateJob

    if framework == "torch":
        from clients.torch.backbones import fingerprint
        from clients.torch.evaluate import TorchEvaluate as Framework
    else:
        from clients.tf.backbones import fingerprint
        from clients.tf.evaluate import TFEvaluate as Framework
    args = parse_evaluate_args(framework, argv)
    with SamplerClient(args.server) as client:
        job = EvaluateJob(Framework(args), client, lambda line: None)
        summary = job.execute()
    return summary, job.fingerprint, fingerprint(job.backbone.model, job.backbone.spec)


@pytest.fixture
def one_thread():
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_every_learner_runs_in_both_frameworks_leaves_the_weights_and_agrees(served, tmp_path, short_recipes,
                                                                             one_thread):
    sys.path.insert(0, str(HERE))
    means = {}
    for framework in ("torch", "tf"):
        run = f"all-{framework}"
        began = time.perf_counter()
        summary, loaded, after = _evaluate(framework, _argv(served, run, framework, list(MD_LEARNERS),
                                                            tmp_path / framework))
        seconds = time.perf_counter() - began
        assert after == loaded  # every episode adapted a copy: the module's weights and buffers as loaded
        results = {u["unit"].rsplit(" ", 1)[1]: u["result"] for u in summary["units"]}
        assert sorted(results) == sorted(MD_LEARNERS) and all(r["episodes"] == EPISODES for r in results.values())
        runs = [f"{run}/md-v1/{learner}" for learner in MD_LEARNERS]
        assert summary["runs"] == sorted(runs)
        held = _held(served, runs)
        for learner in MD_LEARNERS:
            config = held[f"{run}/md-v1/{learner}"].config
            assert config["learner"] == learner and config["backbone_fingerprint"] == loaded
            assert config["input_size"] == (224 if learner == "bit-md" else 84), (learner, config["input_size"])
            assert missing_episodes(held[f"{run}/md-v1/{learner}"], NAMES, 0, EPISODES) == []
        assert held[f"{run}/md-v1/finetune"].config["learner_settings"]["steps"] == 4
        assert held[f"{run}/md-v1/protomaml"].config["learner_settings"]["alpha"] == 0.0614
        means[framework] = {learner: results[learner]["mean_accuracy"] for learner in MD_LEARNERS}
        print(f"\n{framework}: {seconds:.1f} s, " + ", ".join(f"{k} {v:.4f}" for k, v in means[framework].items()))
    for learner in MD_LEARNERS:  # the same network, the same loops: the same predictions
        assert abs(means["torch"][learner] - means["tf"][learner]) < 0.02, (learner, means)


@pytest.mark.slow
def test_an_adapting_unit_killed_part_way_resumes_at_its_first_missing_episode(served, tmp_path, capsys,
                                                                             one_thread):
    from clients.torch.evaluate import main

    run, episodes = "killed-finetune", 8
    argv = _argv(served, run, "torch", ["finetune"], tmp_path / "cache")
    argv[argv.index("--episodes") + 1] = str(episodes)
    argv[argv.index("--finetune-steps") + 1] = "40"  # slow enough episodes to stop one part way
    argv += ["--report-batch", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(HERE)]), "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen([sys.executable, "-m", "clients.torch", "evaluate", *argv], cwd=REPO_ROOT, env=env,
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    unit = f"{run}/md-v1/finetune"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            held = _held(served, [unit])[unit]
            if held.episodes(NAMES, "test", 0):  # its first episode is reported: stop it there
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
    finally:
        process.kill()
        _, err = process.communicate(timeout=60)
    before = len(_held(served, [unit])[unit].episodes(NAMES, "test", 0))
    assert 0 < before < episodes, (before, err[-2000:])

    sys.path.insert(0, str(HERE))
    summary_path = tmp_path / "summary.json"
    assert main([*argv, "--json-summary", str(summary_path)]) == 0
    (result,) = [u["result"] for u in json.loads(summary_path.read_text())["units"]]
    assert result["held_before"] == before and result["episodes"] == episodes - before
    assert missing_episodes(_held(served, [unit])[unit], NAMES, 0, episodes) == []
    capsys.readouterr()
    # a rerun under other settings is refused before any work, in one line naming what differs
    assert main([*argv, "--finetune-steps", "41"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"run '{unit}' holds results of its learner under other settings (steps 40, now 41)" \
        in err[0], err


def test_bit_md_on_a_backbone_that_declares_another_side_is_refused_in_one_line(served, tmp_path, capsys,
                                                                                 one_thread):
    from clients.torch.evaluate import main

    sys.path.insert(0, str(HERE))
    argv = _argv(served, "declared-16", "torch", ["prototypes", "bit-md"], tmp_path / "cache")
    argv[argv.index("--backbone") + 1] = "evaluate_backbones:torch_backbone"  # input_size 16
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("argument --md-learners: bit-md runs at 224 px, but the backbone's contract fixes its "
                              "input at 16 px (its input_size attribute)") in err[0], err
    assert _held(served, ["declared-16/md-v1/prototypes"])["declared-16/md-v1/prototypes"].config is None
