"""Frozen-feature episodes under Meta-Dataset's batch norm: ``evaluate``'s Meta-Dataset
learners and ``transfer --mode protonet`` embed an episode in one pass whose batch norms take
the support set's moments (``FeatureExtractor.episode_features``, ``--batch-norm md``, their
default), as the reference's learners embed a test episode, never the stored statistics.
Checked against the reference's computation in NumPy float64 (``md_batch_norm_reference``),
torch against tf from the same ``--init-seed``, and end to end: ``evaluate`` of a trainer's
checkpoint scores the trainer's own test episodes as the trainer did."""

from __future__ import annotations

import json

import numpy as np
import pytest
from md_batch_norm_reference import episode_embeddings

import tensorflow as tf  # noqa: F401  (before torch's trainers, as every tf test file)
import torch

from clients.errors import UsageError
from clients.seeds import MD_BACKBONE_SEED_NAME
from clients.tf.backbones import TFFeatures
from clients.tf.backbones import load_backbone as tf_load_backbone
from clients.torch.backbones import TorchFeatures, load_backbone, to_model_input
from clients.torch.md_train import CHECKPOINT
from clients.torch.md_train import main as torch_main
from clients.trainer_args import MD_IMAGE_SIZE, parse_args

pytestmark = pytest.mark.usefixtures("torch_one_thread")  # conftest: one torch thread per test

SIZE, SUPPORT, QUERY = 16, 7, 5
ARGV = ["--server", "127.0.0.1:1", "--run", "features", "--sources", "a", "--backbone", "conv4", "--image-size",
        str(SIZE), "--device", "cpu", "--init-seed", "3", "--threads", "1"]


def _images(seed: int, rows: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (rows, SIZE, SIZE, 3)).astype(np.uint8)


def _torch_features(batch: int = 64) -> TorchFeatures:
    loaded = load_backbone(parse_args("torch", ARGV), torch.device("cpu"), MD_IMAGE_SIZE, MD_BACKBONE_SEED_NAME)
    return TorchFeatures(loaded, torch.device("cpu"), batch)


def test_torch_episode_features_are_the_references_and_read_no_stored_statistic():
    extractor = _torch_features()
    model = extractor.backbone.model
    with torch.no_grad():  # affine parameters away from 1 and 0, stored statistics that would poison any read
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
                module.running_mean.fill_(float("nan"))
    support_images, query_images = _images(1, SUPPORT), _images(2, QUERY)
    support, query = extractor.episode_features(support_images, query_images, "md")
    assert extractor.episode_norms("md") == 4  # conv4's four batch norms, adopted
    x = to_model_input(torch.from_numpy(np.concatenate([support_images, query_images])),
                       extractor.backbone.preprocessing, torch.device("cpu")).double().numpy()
    weights = {name: value.double().numpy() for name, value in model.state_dict().items()}
    for mode in ("md", "transductive"):
        got = extractor.episode_features(support_images, query_images, mode)
        want = episode_embeddings("conv4", weights, x[:SUPPORT], x[SUPPORT:], mode)[:2]
        for ours, reference in zip(got, want, strict=True):
            assert np.allclose(ours, reference, rtol=1e-4, atol=1e-4), np.abs(ours - reference).max()
    # a query-only change moves no support feature; the stored statistics (NaN) only under running
    moved_support, _ = extractor.episode_features(support_images, _images(3, QUERY), "md")
    assert np.array_equal(moved_support, support) and np.isfinite(query).all()
    assert np.isnan(extractor.episode_features(support_images, query_images, "running")[1]).all()


def test_tf_episode_features_are_torchs_from_the_same_init_seed():
    torch_extractor = _torch_features()
    args = parse_args("tf", ARGV)
    tf_extractor = TFFeatures(tf_load_backbone(args, MD_IMAGE_SIZE, MD_BACKBONE_SEED_NAME), 64)
    support_images, query_images = _images(4, SUPPORT), _images(5, QUERY)
    for mode in ("md", "transductive"):
        ours = tf_extractor.episode_features(support_images, query_images, mode)
        theirs = torch_extractor.episode_features(support_images, query_images, mode)
        for a, b in zip(ours, theirs, strict=True):
            assert np.allclose(a, b, rtol=1e-3, atol=1e-3), np.abs(a - b).max()
    assert tf_extractor.episode_norms("md") == 4 and tf_extractor.episode_norms("running") == 0
    running = tf_extractor.episode_features(support_images, query_images, "running")[1]
    assert np.allclose(running, tf_extractor.features(query_images))  # running: each image alone
    assert not np.allclose(running, tf_extractor.episode_features(support_images, query_images, "md")[1], atol=1e-3)


def test_a_batch_norm_that_cannot_take_moments_is_refused_by_name():
    extractor = _torch_features()
    extractor.backbone.model.extra = torch.nn.BatchNorm1d(3)
    with pytest.raises(UsageError, match="argument --batch-norm: got md, but layer extra is a BatchNorm1d"):
        extractor.episode_features(_images(1, 2), _images(2, 2), "md")


@pytest.mark.slow
def test_evaluate_scores_a_trainers_checkpoint_as_the_trainer_did(served, tmp_path):
    """The trainer tests its checkpoint under md; evaluate's prototypes learner, given that
    checkpoint, must predict every query of the same episodes the same way (before, evaluate
    embedded with the running statistics the trainer never reads)."""
    from clients.torch.evaluate import main as evaluate_main

    checkpoints = tmp_path / "ckpt"
    common = ["--server", served.address, "--threads", "1", "--device", "cpu"]
    assert torch_main([*common, "--run", "trained", "--preset", "md-v1", "--sources", "folder", "--image-size",
                       str(SIZE), "--train-episodes", "6", "--eval-episodes", "4", "--checkpoint-dir",
                       str(checkpoints), "--log-every", "6"]) == 0
    summary = tmp_path / "evaluate.json"
    assert evaluate_main([*common, "--run", "evaluated", "--backbone", "conv4", "--image-size", str(SIZE), "--weights",
                          str(checkpoints / CHECKPOINT), "--protocols", "md", "--presets", "md-v1", "--md-sources",
                          "folder", "--episodes", "4", "--learners", "prototypes", "--feature-cache",
                          str(tmp_path / "cache"), "--json-summary", str(summary)]) == 0
    trained = {r.index: list(r.predicted) for r in served.server.metrics.reports("trained")}
    evaluated = {r.index: list(r.predicted) for r in served.server.metrics.reports("evaluated/md-v1/prototypes")}
    assert sorted(trained) == sorted(evaluated) == [0, 1, 2, 3]
    assert trained == evaluated
    assert json.loads(summary.read_text())["units"]


@pytest.mark.slow
def test_transfer_protonet_embeds_each_query_chunk_with_the_whole_support_set(kitti_served, tmp_path, capfd):
    """VTAB as episodes (the reference's ``read_episodes.py``): the test set in chunks, each with
    the 1000 support images under md; the chunking changes no prediction."""
    from clients.client import SamplerClient
    from clients.md_fixed_features import prototype_predictions
    from clients.torch.vtab_transfer import TorchTransferLearner
    from clients.torch.vtab_transfer import main as transfer_main
    from clients.trainer_args import parse_transfer_args

    task = "kitti_distance"
    argv = ["--server", kitti_served.address, "--tasks", task, "--backbone", "conv4", "--image-size", str(SIZE),
            "--mode", "protonet", "--device", "cpu", "--threads", "1"]
    summary = tmp_path / "protonet.json"
    assert transfer_main([*argv, "--run", "md-protonet", "--eval-batch-size", "8", "--json-summary", str(summary)]) == 0
    result = json.loads(summary.read_text())
    assert (result["config"]["batch_norm"], result["config"]["episode_batch_norms"]) == ("md", 4)
    with SamplerClient(kitti_served.address) as client:
        episode = client.task_episode(task, image_size=SIZE)
    extractor = TorchTransferLearner(parse_transfer_args("torch", [*argv, "--run", "x"])).episode_extractor()
    support, query = extractor.episode_features(episode.support_images, episode.query_images, "md")  # one pass
    predicted = prototype_predictions(support, episode.support_labels, query, episode.num_classes)
    assert result["tasks"][task]["test_accuracy"] == pytest.approx(float(np.mean(predicted == episode.query_labels)))
    capfd.readouterr()
    assert transfer_main([*argv, "--run", "linear", "--mode", "linear", "--batch-norm", "running"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument --batch-norm: got running, but --mode linear trains" in err
