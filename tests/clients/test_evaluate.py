"""``python -m clients.torch evaluate`` / ``clients.tf evaluate``: the pure parts (the MD
fixed-feature learners against a hand computation and scikit-learn, the feature cache,
unit keys, resume planning, the "held" table's ranges) and, against a real server holding
an MD source, a VTAB task and CoG levels, a small backbone from a test module
(``evaluate_backbones``) evaluated on all three protocols in each framework: killed after
its first unit, run again, the rerun skips what was reported and the card shows every
table. The same network in torch and Keras gives the same features and MD accuracies."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture
from transfer_runs_stores import copy_in21k_stores

from clients.evaluate import (Held, Unit, cog_units, foreign_runs, md_units, missing_episodes, parse_held,
                              stable_vtab_config, sub_runs, vtab_keys, vtab_units)
from clients.feature_cache import FeatureCache, key_text
from clients.md_fixed_features import LEARNERS, logreg_predictions, prototype_distances, prototype_predictions
from sampler_server.metrics.held.report import index_ranges

HERE = Path(__file__).resolve().parent


# ---- the MD learners ---------------------------------------------------------------------------


def test_prototypes_are_the_nearest_class_means_by_hand():
    support = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [10.0, 12.0], [0.0, 9.0]])
    labels = np.array([0, 0, 1, 1, 2])
    query = np.array([[1.0, 1.0], [9.0, 11.0], [0.0, 7.0], [5.0, 5.5]])
    # class means: (1, 0), (10, 11), (0, 9); squared distances of the last query: 16+30.25, 25+30.25, 25+12.25
    distances = prototype_distances(support, labels, query, 3)
    assert distances[3].tolist() == pytest.approx([46.25, 55.25, 37.25])
    assert distances[0].tolist() == pytest.approx([1.0, 181.0, 65.0])
    assert prototype_predictions(support, labels, query, 3).tolist() == [0, 1, 2, 2]
    # a class without support images is never predicted
    assert prototype_predictions(support[:4], labels[:4], query, 3).tolist() == [0, 1, 0, 0]


def test_logreg_is_rfs_logistic_regression_on_l2_normalised_features():
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import normalize

    rng = np.random.RandomState(3)
    centres = rng.normal(0, 1, (5, 32))
    labels = np.repeat(np.arange(5), 4)
    support = centres[labels] + rng.normal(0, 0.8, (20, 32))
    query = centres[np.repeat(np.arange(5), 6)] + rng.normal(0, 0.8, (30, 32))
    expected = LogisticRegression(C=1.0, solver="lbfgs", max_iter=1000, random_state=0).fit(
        normalize(support), labels).predict(normalize(query))
    got = logreg_predictions(support.astype(np.float32), labels, query.astype(np.float32), 5)
    assert got.dtype == np.int64 and got.tolist() == expected.tolist()
    assert np.mean(got == np.repeat(np.arange(5), 6)) > 0.5  # it learned something: the centres are apart
    assert logreg_predictions(support[:4], labels[:4], query, 5).tolist() == [0] * 30  # one class: nothing to fit


def test_a_one_shot_support_is_fitted_without_a_warning_on_the_terminal():
    import warnings

    rng = np.random.RandomState(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the demo printed scikit-learn's "regression problem" warning
        got = logreg_predictions(rng.normal(0, 1, (30, 8)), np.arange(30), rng.normal(0, 1, (7, 8)), 30)
    assert got.shape == (7,)  # scikit-learn warns from 21 samples on: a 30-way one-shot episode


# ---- the feature cache ----------------------------------------------------------------------------


def test_the_feature_cache_stores_atomically_and_recomputes_a_damaged_entry(tmp_path):
    cache = FeatureCache(tmp_path)
    key = key_text("weights-sha", "episode-fp", "16:0.0,1.0:...", {"resize": "bilinear"})
    calls = []

    def compute():
        calls.append(1)
        return {"support": np.arange(6, dtype=np.float32).reshape(2, 3), "query": np.ones((1, 3), np.float32)}

    first = cache.get_or_compute(key, compute)
    again = cache.get_or_compute(key, compute)
    assert len(calls) == 1 and (cache.hits, cache.misses) == (1, 1)
    assert np.array_equal(first["support"], again["support"]) and again["query"].shape == (1, 3)
    assert not list(tmp_path.rglob("*.tmp"))  # nothing half-written left behind
    assert key_text("other-weights", "episode-fp", "16:0.0,1.0:...", {"resize": "bilinear"}) != key
    path = cache.path(key)
    path.write_bytes(path.read_bytes()[:40])  # truncated: recomputed, not fatal
    assert np.array_equal(cache.get_or_compute(key, compute)["support"], first["support"])
    assert len(calls) == 2 and cache.recomputed == 1
    other = key_text("b", "c", "d")  # an entry renamed over another key's file is not used
    cache.path(other).parent.mkdir(parents=True, exist_ok=True)
    path.rename(cache.path(other))
    assert cache.load(other) is None and cache.recomputed == 2


# ---- units and resume planning -------------------------------------------------------------------


def test_each_protocol_part_has_its_run_and_units_come_in_the_commands_order():
    runs = sub_runs("ckpt", ["md-v1", "md-v2"], ["prototypes", "logreg"])
    assert runs == {"md/md-v1/prototypes": "ckpt/md-v1/prototypes", "md/md-v1/logreg": "ckpt/md-v1/logreg",
                    "md/md-v2/prototypes": "ckpt/md-v2/prototypes", "md/md-v2/logreg": "ckpt/md-v2/logreg",
                    "vtab": "ckpt/vtab", "cog": "ckpt/cog"}
    units = md_units(runs, {"md-v1": ["omniglot", "aircraft"]}, ["prototypes", "logreg"])
    assert [u.parts for u in units] == [("md-v1", "omniglot", "prototypes"), ("md-v1", "omniglot", "logreg"),
                                        ("md-v1", "aircraft", "prototypes"), ("md-v1", "aircraft", "logreg")]
    assert units[1].run_id == "ckpt/md-v1/logreg"
    assert [u.parts for u in vtab_units("ckpt/vtab", ["a", "b"], False)] == [("a",), ("b",)]
    assert [u.parts for u in vtab_units("ckpt/vtab", ["a", "b"], True)] == [("a", "b")]
    assert [u.parts for u in cog_units("ckpt/cog", ["IN-1K", "L1"], [0, 2], [1, 2])][:3] == [
        ("IN-1K", 0, 1), ("IN-1K", 2, 1), ("IN-1K", 0, 2)]


def test_resume_planning_reads_what_the_server_holds():
    text = json.dumps({"runs": {
        "r/md-v1/prototypes": {"config": {"backbone_fingerprint": "abc"}, "md": [
            {"source": "omniglot", "split": "test", "seed": 0, "indices": [[0, 3], [5, 6]]}], "vtab": [], "cog": []},
        "r/vtab": {"config": {"backbone_fingerprint": "abc", "mode": "linear"}, "md": [], "cog": [], "vtab": [
            {"task": "a", "split": "test", "regime": 0, "regime_seed": 0, "role": "model"},
            {"task": "a", "split": "val", "regime": 0, "regime_seed": 0, "role": "model"}]},
        "r/cog": None}})
    held = parse_held(text)
    md = held["r/md-v1/prototypes"]
    assert missing_episodes(md, ["omniglot_store", "omniglot"], 0, 7) == [3, 4, 6]
    assert missing_episodes(md, ["omniglot"], 1, 2) == [0, 1]  # another seed is other episodes
    vtab = held["r/vtab"]
    assert vtab_keys(Unit("vtab", "r/vtab", ("a",), ""), [(0, 0)]) <= vtab.vtab
    assert not vtab_keys(Unit("vtab", "r/vtab", ("a", "b"), ""), [(0, 0)]) <= vtab.vtab
    assert held["r/cog"].config is None and not held["r/cog"].cog
    assert foreign_runs(held, "abc") == []
    assert foreign_runs(held, "abd") == ["r/md-v1/prototypes", "r/vtab"]
    assert Held.from_json(None).config is None


def test_the_vtab_configuration_leaves_out_what_selects_work():
    config = {"tasks": ["a"], "chosen": {"a": "lr=0.1,steps=2"}, "chosen_regime_10": {}, "weights": "/x.pt",
              "mode": "linear", "lrs": [0.1]}
    stable = stable_vtab_config(config, "sha")
    assert stable == {"mode": "linear", "lrs": [0.1], "backbone_fingerprint": "sha", "command": "evaluate"}
    assert stable_vtab_config({**config, "tasks": ["b"], "chosen": {"b": "x"}}, "sha") == stable


def test_held_ranges_are_half_open_and_sorted():
    assert index_ranges([5, 0, 2, 1, 1]) == [[0, 3], [5, 6]]
    assert index_ranges([]) == []


def test_bad_arguments_are_one_line_naming_the_flag(capsys):
    from clients.evaluate_args import parse_evaluate_args

    base = ["--server", "h:1", "--run", "r", "--backbone", "tiny", "--feature-cache", "c"]
    for extra, words in ((["--steps-scale", "-1"], "argument --steps-scale: got '-1'"),
                         (["--scratch-run", "s"], "arguments --scratch-run/--max-run"),
                         (["--protocols", "md,imagenet"], "argument --protocols: got 'md,imagenet'"),
                         (["--shots", "0"], "argument --shots: got 0"),
                         (["--run", "x" * 190], "argument --run: got 190 characters")):
        with pytest.raises(SystemExit) as stop:
            parse_evaluate_args("torch", base + extra)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err, err
        assert err.startswith("python -m clients.torch evaluate: error:")


# ---- against a real server -------------------------------------------------------------------------

IN1K_IMAGES, IN1K_VALIDATION = 6, 20


@pytest.fixture(scope="module")
def served(tmp_path_factory, kitti_served):
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("evaluate")
    data = root / "data"
    pack_fixture(generate_fixture("image_folder", root, num_classes=24, images_per_class=12), data, name="folder")
    # the VTAB task: the KITTI store the transfer tests share (conftest's kitti_served: `pack vtab`
    # of test-built TFDS data, train800/val240/test30), copied: built once per test process
    shutil.copytree(kitti_served.config.data_dir / "tfds_kitti", data / "tfds_kitti")
    copy_in21k_stores(tmp_path_factory, data)  # the CoG levels (written and packed once per process)
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=4, images_per_class=IN1K_IMAGES,
                                  validation_images=IN1K_VALIDATION), data, name="ilsvrc_2012")
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    yield server, data
    server.stop(grace=0.5)


def _small(served, run: str, cache: Path, backbone: str) -> list[str]:
    from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES

    server, _ = served
    return ["--server", server.address, "--run", run, "--backbone", backbone, "--feature-cache", str(cache),
            "--device", "cpu",
            "--md-sources", "folder", "--episodes", "4",
            "--tasks", "kitti_distance", "--mode", "linear", "--lrs", "0.1", "0.01", "--steps", "2",
            "--vtab-batch-size", "32", "--runs", "1", "--eval-batch-size", "128",
            "--levels", "IN-1K", "L3", "--shots", "all", "2", "--seeds", "1", "--level-size", str(LEVEL_SIZE),
            "--min-images", str(MIN_IMAGES), "--epochs", "2", "--cog-batch-size", "64", "--grid", "2x1",
            "--extract-batch-size", "64"]


BACKBONES = {"torch": "evaluate_backbones:torch_backbone", "tf": "evaluate_backbones:keras_backbone"}
# torch at one thread (the commands set it from --threads, by default this process's cores): on these tiny
# networks a second thread only spins, and under make test the other worker has the other core. TensorFlow's
# counts are process-wide and fixed at its first use, so its in-process runs keep the worker's
THREADS = {"torch": ["--threads", "1"], "tf": []}
UNITS = 2 + 1 + 4  # MD: one source x two learners; VTAB: one task; CoG: two levels x two N x one seed


@pytest.fixture
def one_thread():
    """torch's thread count, restored after the test (its commands set it for the process)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield THREADS["torch"]
    torch.set_num_threads(threads)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(HERE)]), "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_ENABLE_ONEDNN_OPTS": "0"}


def _held(served, runs: list[str]) -> dict[str, Held]:
    from clients.core import SamplerClient
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

    with SamplerClient(served[0].address) as client:
        return parse_held(client.call("GetReport", pb.GetReportRequest(run_ids=runs, format="json",
                                                                       table="held")).text)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_evaluate_runs_every_protocol_resumes_after_a_kill_and_the_card_shows_every_table(served, tmp_path,
                                                                                         framework, capsys,
                                                                                         one_thread):
    from sampler_server.cli.main import main as server_cli

    run = f"e2e-{framework}"
    argv = [*_small(served, run, tmp_path / "cache", BACKBONES[framework]), *THREADS[framework]]
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", f"clients.{framework}", "evaluate", *argv], cwd=REPO_ROOT,
                               env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    try:
        for line in process.stderr:  # killed as soon as its first unit is reported
            lines.append(line)
            if line.startswith("evaluate: md md-v1 folder prototypes: 4 episodes"):
                process.send_signal(signal.SIGKILL)
                break
    finally:
        process.kill()
        process.wait(timeout=60)
    assert any(line.startswith("evaluate: md md-v1 folder prototypes") for line in lines), "".join(lines)[-3000:]
    killed_at = time.perf_counter() - began

    if framework == "torch":
        from clients.torch.evaluate import main
    else:
        from clients.tf.evaluate import main
    sys.path.insert(0, str(HERE))
    summary_path = tmp_path / "summary.json"
    again = time.perf_counter()
    assert main([*argv, "--json-summary", str(summary_path)]) == 0
    rerun = time.perf_counter() - again
    summary = json.loads(summary_path.read_text())
    by_unit = {u["unit"]: u for u in summary["units"]}
    assert len(by_unit) == UNITS
    assert by_unit["md md-v1 folder prototypes"]["status"] == "held"  # not redone
    assert by_unit["md md-v1 folder logreg"]["status"] == "ran"
    assert by_unit["md md-v1 folder logreg"]["result"]["episodes"] == 4
    assert summary["feature_cache"]["misses"] == 0  # the killed run cached the episodes' features
    ran_after_kill = [u["unit"] for u in summary["units"] if u["status"] == "ran"]
    assert len(ran_after_kill) == UNITS - 1

    runs = summary["runs"]
    assert runs == sorted([f"{run}/cog", f"{run}/md-v1/logreg", f"{run}/md-v1/prototypes", f"{run}/vtab"])
    held = _held(served, runs)
    for learner in ("prototypes", "logreg"):
        assert missing_episodes(held[f"{run}/md-v1/{learner}"], ["folder", "image_folder"], 0, 4) == []
    assert ("kitti_distance", "test", 0, 0) in held[f"{run}/vtab"].vtab
    assert held[f"{run}/cog"].cog == {(level, n, 1) for level in ("IN-1K", "L3") for n in (0, 2)}
    assert all(summary["backbone_fingerprint"] in json.dumps(h.config) for h in held.values())

    # a third time: nothing left to do
    assert main([*argv, "--json-summary", str(summary_path)]) == 0
    assert {u["status"] for u in json.loads(summary_path.read_text())["units"]} == {"held"}

    capsys.readouterr()
    card_args = ["report", "--card", "--data", str(served[1]), "--run", run]  # the run ids under it, expanded
    assert server_cli(card_args) == 0
    card = capsys.readouterr().out
    for title in ("Meta-Dataset", "VTAB-1k", "ImageNet-CoG"):
        assert f"## {title}" in card and f"{title}: left out" not in card, card[:3000]
    assert "kitti_distance" in card and "L3" in card and f"{run}/md-v1/logreg" in card
    print(f"\n{framework}: killed after {killed_at:.1f} s, rerun {rerun:.1f} s")


def test_a_rerun_with_another_checkpoint_under_the_same_run_is_refused(served, tmp_path, capsys, one_thread):
    from clients.torch.evaluate import main

    sys.path.insert(0, str(HERE))
    common = [*one_thread, "--protocols", "md", "--md-sources", "folder", "--episodes", "1", "--learners", "prototypes",
              "--device", "cpu", "--server", served[0].address, "--feature-cache", str(tmp_path / "cache")]
    assert main(["--run", "ckpt-a", "--backbone", "evaluate_backbones:torch_backbone", *common]) == 0
    capsys.readouterr()
    assert main(["--run", "ckpt-a", "--backbone", "tiny", "--image-size", "16", *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run 'ckpt-a/md-v1/prototypes' holds results of another checkpoint" in err[0], err


def test_precision_is_in_the_md_configuration_and_keys_the_episode_cache(served, tmp_path, one_thread):
    from clients.torch.evaluate import main

    summary_path = tmp_path / "summary.json"
    common = [*one_thread, "--protocols", "md", "--md-sources", "folder", "--episodes", "1", "--learners", "prototypes",
              "--device", "cpu", "--server", served[0].address, "--feature-cache", str(tmp_path / "cache"),
              "--backbone", "tiny", "--image-size", "16", "--json-summary", str(summary_path)]
    summaries = {}
    for precision in ("float32", "bf16"):
        flags = [] if precision == "float32" else ["--precision", precision]  # float32: the default
        assert main(["--run", f"p-{precision}", *common, *flags]) == 0
        summaries[precision] = json.loads(summary_path.read_text())
    assert [s["precision"] for s in summaries.values()] == ["float32", "bf16"]
    cached = [s["feature_cache"] for s in summaries.values()]
    assert cached[1] == {**cached[0], "hits": 0} and cached[0]["misses"] > 0, cached  # bf16 embedded its own
    held = _held(served, ["p-float32/md-v1/prototypes", "p-bf16/md-v1/prototypes"])
    assert {run: h.config["precision"] for run, h in held.items()} == {
        "p-float32/md-v1/prototypes": "float32", "p-bf16/md-v1/prototypes": "bf16"}


@pytest.mark.slow
def test_the_same_network_in_torch_and_keras_gives_the_same_features_and_md_accuracies(served, tmp_path,
                                                                                      one_thread):
    import argparse

    import torch

    from clients.core import EpisodeSpec, SamplerClient
    from clients.tf.backbones import TFFeatures
    from clients.tf.backbones import load_backbone as load_tf
    from clients.tf.evaluate import main as tf_main
    from clients.torch.backbones import TorchFeatures
    from clients.torch.backbones import load_backbone as load_torch
    from clients.torch.evaluate import main as torch_main
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

    sys.path.insert(0, str(HERE))

    def args(backbone: str) -> argparse.Namespace:
        return argparse.Namespace(backbone=backbone, weights=None, image_size=None, input_range=None, mean=None,
                                  std=None, seed=0, init_seed=None)

    in_torch = load_torch(args(BACKBONES["torch"]), torch.device("cpu"), 84, "evaluate")
    in_tf = load_tf(args(BACKBONES["tf"]), 84, "evaluate")
    assert in_torch.preprocessing == in_tf.preprocessing and in_torch.out_dim == in_tf.out_dim == 16
    torch_convs = [v.numpy() for k, v in in_torch.model.state_dict().items()]
    tf_convs = [w for w in in_tf.model.get_weights()]
    for ours, theirs in zip(torch_convs, tf_convs):  # the weights copied across: kernels transposed
        assert np.array_equal(ours.transpose(2, 3, 1, 0) if ours.ndim == 4 else ours, theirs)
    spec = EpisodeSpec(sources=("folder",), preset="md-v1", split="test", seed=0, image_size=16)
    with SamplerClient(served[0].address) as client:
        for episode in client.episodes(spec, start=0, count=3):
            images = np.concatenate([episode.support_images, episode.query_images])
            a = TorchFeatures(in_torch, torch.device("cpu"), 64).features(images)
            b = TFFeatures(in_tf, 64).features(images)
            assert a.shape == b.shape and np.abs(a - b).max() < 1e-4

    common = ["--protocols", "md", "--md-sources", "folder", "--episodes", "12", "--device", "cpu", "--server",
              served[0].address, "--feature-cache", str(tmp_path / "cache"), "--learners", *LEARNERS]
    assert torch_main(["--run", "same-torch", "--backbone", BACKBONES["torch"], *common, *one_thread]) == 0
    assert tf_main(["--run", "same-tf", "--backbone", BACKBONES["tf"], *common]) == 0
    with SamplerClient(served[0].address) as client:
        for learner in LEARNERS:
            runs = [f"same-torch/md-v1/{learner}", f"same-tf/md-v1/{learner}"]
            table = json.loads(client.call("GetReport", pb.GetReportRequest(run_ids=runs, format="json")).text)
            (cells,) = table["sources"].values()
            torch_cell, tf_cell = cells[runs[0]], cells[runs[1]]
            assert torch_cell["episodes"] == tf_cell["episodes"] == 12
            gap = abs(torch_cell["mean_accuracy"] - tf_cell["mean_accuracy"])
            assert gap <= min(torch_cell["ci95"], tf_cell["ci95"]), (learner, torch_cell, tf_cell)


@pytest.mark.slow
def test_a_named_backbone_without_weights_is_one_network_in_every_protocol(served, tmp_path, one_thread):
    from clients.torch.evaluate import main

    run = "random-tiny"
    summary_path = tmp_path / "summary.json"
    argv = [*_small(served, run, tmp_path / "cache", "tiny"), *one_thread]
    argv[argv.index("--levels") + 1:argv.index("--shots")] = ["L3"]
    argv[argv.index("--shots") + 1:argv.index("--seeds")] = ["2"]
    assert main([*argv, "--learners", "prototypes", "--image-size", "16", "--json-summary", str(summary_path)]) == 0
    fingerprint = json.loads(summary_path.read_text())["backbone_fingerprint"]
    held = _held(served, [f"{run}/vtab", f"{run}/cog"])
    # the transfer and cog commands loaded the weights evaluate drew, not weights of their own seeds
    assert {h.config["backbone_sha256"] for h in held.values()} == {fingerprint}, {
        r: h.config.get("backbone_sha256") for r, h in held.items()}
    assert (tmp_path / "cache" / "initial-weights" / f"{fingerprint}.pt").is_file()


# ---- one input convention per checkpoint (issue 39) -------------------------------------------------

IMAGENET = {"input_range": (0.0, 1.0), "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
MINUS_ONE_TO_ONE = {"input_range": (-1.0, 1.0), "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}
CONVENTIONS = {"imagenet": IMAGENET, "[-1, 1]": MINUS_ONE_TO_ONE}
PROBES = {"torch": "torch_backbone", "tf": "keras_backbone"}


def _one_of_each(served, run: str, cache: Path, backbone: str) -> list[str]:
    """``_small`` cut to one unit per protocol: MD prototypes, one VTAB setting, CoG L3 at N=2."""
    argv = _small(served, run, cache, backbone)
    argv[argv.index("--lrs") + 1:argv.index("--steps")] = ["0.1"]
    argv[argv.index("--levels") + 1:argv.index("--shots")] = ["L3"]
    argv[argv.index("--shots") + 1:argv.index("--seeds")] = ["2"]
    argv[argv.index("--episodes") + 1] = "2"
    return [*argv, "--learners", "prototypes", "--grid", "1x1", "--epochs", "1"]


def _by_protocol(monkeypatch, phase: list[str]) -> None:
    """``phase[0]`` names the protocol whose unit runs (else 'other': loading, probing)."""
    from clients.evaluate import EvaluateJob

    for protocol in ("md", "vtab", "cog"):
        unit = getattr(EvaluateJob, f"run_{protocol}")

        def tagged(self, *args, _unit=unit, _protocol=protocol):
            phase[0] = _protocol
            try:
                return _unit(self, *args)
            finally:
                phase[0] = "other"

        monkeypatch.setattr(EvaluateJob, f"run_{protocol}", tagged)


def _fed_as(fed: list[tuple[str, np.ndarray]]) -> dict[str, set[str]]:
    """The conventions (``CONVENTIONS``' names) each protocol's fed tensors are uint8 pixels under."""
    import input_probe_backbones as probe

    seen: dict[str, set[str]] = {}
    for phase, rows in fed:
        seen.setdefault(phase, set()).update(
            [name for name, convention in CONVENTIONS.items() if probe.fits(rows, **convention)] or ["neither"])
    assert {"md", "vtab", "cog"} <= set(seen), seen
    return seen


def _recorded_sources(served, summary_path: Path, runs: list[str]) -> set[tuple[str, str]]:
    """(the summary's, each run configuration's) preprocessing source, with its numbers checked equal."""
    summary = json.loads(summary_path.read_text())
    wanted = {key: summary["preprocessing"][key] for key in ("input_range", "mean", "std", "source")}
    configs = {run: held.config["preprocessing"] for run, held in _held(served, runs).items()}
    for run, recorded in configs.items():
        assert {key: recorded[key] for key in wanted} == wanted, (run, recorded, wanted)
    return {("summary", wanted["source"])} | {(run, c["source"]) for run, c in configs.items()}


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a_backbone_declaring_nothing_is_fed_imagenet_statistics_in_every_protocol(served, tmp_path, framework,
                                                                                    monkeypatch, capsys, one_thread):
    """The one default (ImageNet's mean and std on [0, 1]) in MD, VTAB and CoG alike, read off the
    tensors the model was fed, named in the job's first line and recorded in every run."""
    import input_probe_backbones as probe

    main = __import__(f"clients.{framework}.evaluate", fromlist=["main"]).main
    run, summary_path = f"undeclared-{framework}", tmp_path / "summary.json"
    _by_protocol(monkeypatch, probe.PHASE)
    probe.RECORDED.clear()
    argv = _one_of_each(served, run, tmp_path / "cache", f"input_probe_backbones:{PROBES[framework]}")
    assert main([*argv, *THREADS[framework], "--json-summary", str(summary_path)]) == 0
    fed = _fed_as(probe.RECORDED)
    assert set(map(frozenset, fed.values())) == {frozenset({"imagenet"})}, fed
    first = capsys.readouterr().err.splitlines()[0]
    assert "[0, 1], mean 0.485 0.456 0.406, std 0.229 0.224 0.225" in first and "default" in first, first
    runs = [f"{run}/md-v1/prototypes", f"{run}/vtab", f"{run}/cog"]
    assert _recorded_sources(served, summary_path, runs) == {("summary", "default")} | {(r, "default") for r in runs}
    if framework == "torch":  # the card says it, once for the checkpoint's runs
        from sampler_server.cli.main import main as server_cli

        assert server_cli(["report", "--card", "--data", str(served[1]), "--run", run]) == 0
        card = capsys.readouterr().out
        assert (f"input of {run}/cog, {run}/md-v1/prototypes, {run}/vtab: [0, 1], mean 0.485 0.456 0.406, std "
                "0.229 0.224 0.225 (the default for a backbone that declares none)") in card, card[:2000]


@pytest.mark.parametrize("backbone", ["tiny", "resnet18+torchvision"])
def test_a_named_backbone_is_fed_minus_one_to_one_and_torchvision_weights_imagenet_statistics(
        served, tmp_path, backbone, monkeypatch, one_thread):
    """Our named backbones (trained by our MD trainer on [-1, 1]) keep [-1, 1] in every protocol;
    torchvision's ResNet-18 weights loaded into ``resnet18`` bring ImageNet's statistics on [0, 1]."""
    import input_probe_backbones as probe
    import torch

    from clients.torch.evaluate import main

    name, _, weights = backbone.partition("+")
    run, summary_path = f"convention-{name}", tmp_path / "summary.json"
    phase = ["other"]
    _by_protocol(monkeypatch, phase)
    fed: list[tuple[str, np.ndarray]] = []

    def hook(module, inputs):
        if type(module).__name__ in ("Tiny", "ResNet18"):  # the backbone itself, not its layers
            fed.append((phase[0], inputs[0][:2].detach().float().permute(0, 2, 3, 1).numpy()))

    argv = _one_of_each(served, run, tmp_path / "cache", name)
    if weights:
        probe.write_torchvision_resnet18(tmp_path / "resnet18.pt")
        argv += ["--weights", str(tmp_path / "resnet18.pt")]
    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        assert main([*argv, *one_thread, "--image-size", "16", "--json-summary", str(summary_path)]) == 0
    finally:
        handle.remove()
    conventions = _fed_as(fed)
    assert set(map(frozenset, conventions.values())) == {frozenset({"imagenet" if weights else "[-1, 1]"})}, conventions
    source = "torchvision weights" if weights else "named backbone"
    runs = [f"{run}/md-v1/prototypes", f"{run}/vtab", f"{run}/cog"]
    assert _recorded_sources(served, summary_path, runs) == {("summary", source)} | {(r, source) for r in runs}


def test_episodes_a_test_split_cannot_give_are_refused_before_any_unit_runs(served, tmp_path, capsys, one_thread):
    """A source whose test split is too small for the episodes asked (the demo's Omniglot for MD's
    5-way draws) ends the job in one line before the first unit, not after the others ran."""
    from clients.torch.evaluate import main

    sys.path.insert(0, str(HERE))
    assert main([*one_thread, "--protocols", "md", "--md-sources", "folder", "--episodes", "1", "--md-learners",
                 "prototypes", "--md-ways", "50", "--device", "cpu", "--server", served[0].address, "--feature-cache",
                 str(tmp_path / "cache"), "--run", "too-wide", "--backbone", "tiny", "--image-size", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --md-sources: folder under md-v1: " in err[0], err
    # the store as served, beside its kind (the image_folder converter's)
    assert "num_ways: got 50, expected at most 6 (the classes of store 'folder' (image_folder) split 'test')" in err[0]
    assert "leave it out of --md-sources" in err[0] and "--md-ways" in err[0]
    assert not _held(served, ["too-wide/md-v1/prototypes"])["too-wide/md-v1/prototypes"].md
