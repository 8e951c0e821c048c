"""The backbone contract in TensorFlow (``clients.tf.backbones``): a user's ``module:callable``
backbone trains in the MD trainer, transfers and is evaluated on CoG; SavedModel
directories and ``.keras`` files load; ``--weights`` takes Keras weights and our MD
trainer's checkpoint, and a file that does not fit is one whole line; what a model
declares (side, range, mean, std) is what the server serves and what the model sees; a
model returning the wrong shape or dtype is refused at once with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf

import tf_user_backbones as user  # noqa: E402
from cog_eval_fake import SMALL as COG_SMALL  # noqa: E402
from cog_eval_fake import FakeCogClient  # noqa: E402
from conftest import KITTI_SIZES  # noqa: E402

from clients.backbone_contract import Preprocessing  # noqa: E402
from clients.cog_eval import CogRun  # noqa: E402
from clients.errors import UsageError  # noqa: E402
from clients.tf import models  # noqa: E402
from clients.tf.backbones import TFFeatures, load_backbone, to_model_input  # noqa: E402
from clients.trainer_args import parse_args, parse_cog_args, parse_transfer_args  # noqa: E402

keras = tf.keras
NAMED_FLAGS = ["--input-range", "-1", "1", "--mean", "0", "0", "0", "--std", "1", "1", "1"]  # what named ones declare
TASK = "kitti_distance"


def _images(rows: int, side: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (rows, side, side, 3)).astype(np.uint8)


def _cog_argv(tmp_path: Path, backbone: str, sized: bool = True) -> list[str]:
    """The stand-in client's small CoG run with ``backbone`` (``sized``: at its --image-size 16)."""
    argv = list(COG_SMALL)
    argv[argv.index("--backbone") + 1] = backbone
    if not sized:
        at = argv.index("--image-size")
        del argv[at:at + 2]
    return [*argv, "--feature-cache", str(tmp_path / "cache")]


def _cog(tmp_path: Path, backbone: str, *extra: str, sized: bool = True):
    return parse_cog_args("tf", [*_cog_argv(tmp_path, backbone, sized), *extra])


def _md(*extra: str):
    return parse_args("tf", ["--server", "h:1", "--run", "r", "--sources", "a", "--device", "cpu", *extra])


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


# ---- what the model declares, what it sees ------------------------------------------------------


def test_declared_preprocessing_is_exactly_what_the_model_sees():
    loaded = load_backbone(_cog(Path("/nonexistent"), "tf_user_backbones:flat", sized=False), 224, "backbone")
    assert loaded.preprocessing == Preprocessing(8, 0.0, 1.0, user.Flat.mean, user.Flat.std)
    images = _images(5, 8)
    seen = TFFeatures(loaded, batch_size=2).features(images)
    expected = loaded.preprocessing.to_float(images).reshape(5, -1)
    assert seen.dtype == np.float32 and np.array_equal(seen, expected)
    # a flag wins over the attribute
    flagged = load_backbone(_cog(Path("/nonexistent"), "tf_user_backbones:flat", "--mean", "0.5", "0.5", "0.5",
                                 "--image-size", "12", sized=False), 224, "backbone")
    assert flagged.preprocessing.mean == (0.5, 0.5, 0.5) and flagged.preprocessing.size == 12
    assert flagged.preprocessing.std == user.Flat.std and flagged.out_dim == 12 * 12 * 3


def test_named_backbones_keep_the_trainers_scaling_bit_for_bit():
    args = _md("--image-size", "16", "--backbone", "tiny")
    loaded = load_backbone(args, 84, "backbone")
    images = _images(4, 16)
    old = tf.cast(images, tf.float32) / 127.5 - 1.0  # the trainers' own conversion before the contract
    assert np.array_equal(to_model_input(images, loaded.preprocessing).numpy(), old.numpy())
    assert np.array_equal(loaded.preprocessing.to_float(images), old.numpy())
    again = load_backbone(_md("--image-size", "16", "--backbone", "tiny"), 84, "backbone")
    other = load_backbone(_md("--image-size", "16", "--backbone", "tiny", "--seed", "1"), 84, "backbone")
    assert again.fingerprint == loaded.fingerprint != other.fingerprint
    assert (loaded.out_dim, args.image_size) == (64, 16)


@pytest.mark.parametrize(("factory", "returned"), [("wrong_rank", "float32 [2, 3, 1]"), ("integers", "int32 [2, 3]")])
def test_a_wrong_output_is_refused_at_once_with_one_line(tmp_path, capsys, factory, returned):
    from clients.tf.cog_eval import main

    from clients.tf.md_train import main as md_main

    for command in (lambda: main(_cog_argv(tmp_path, f"tf_user_backbones:{factory}")),
                    lambda: md_main(["--server", "127.0.0.1:1", "--run", "r", "--sources", "folder", "--backbone",
                                     f"tf_user_backbones:{factory}", "--image-size", "16", "--device", "cpu"])):
        assert command() == 2  # before any server is asked (there is none)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"tf_user_backbones:{factory} returned {returned} for 2 images" in err[0], err
        assert "expected floating-point features [2, D]" in err[0]


# ---- model files and --weights -------------------------------------------------------------------


def test_saved_model_and_keras_file_give_the_named_backbones_features(tmp_path):
    named = load_backbone(_cog(tmp_path, "tiny"), 224, "backbone")
    images = _images(3, 16)
    expected = TFFeatures(named, 8).features(images)
    named.model.save(tmp_path / "net.keras")
    named.model.export(str(tmp_path / "saved"), verbose=False)
    for path in (tmp_path / "net.keras", tmp_path / "saved"):
        loaded = load_backbone(_cog(tmp_path, str(path), *NAMED_FLAGS), 224, "backbone")
        assert loaded.preprocessing == named.preprocessing, path  # the .keras model's fixed input declares 16
        assert loaded.out_dim == 64 and np.allclose(TFFeatures(loaded, 8).features(images), expected, atol=1e-6)
    # a file declaring nothing gets the one default of every command: ImageNet's mean and std on [0, 1]
    plain = load_backbone(_cog(tmp_path, str(tmp_path / "saved")), 224, "backbone")
    assert (plain.preprocessing.low, plain.preprocessing.high) == (0.0, 1.0) and plain.preprocessing.normalises


class Pooled(tf.Module):
    """Channel means times a variable: a SavedModel of a plain module, no Keras."""

    def __init__(self, scale: list[float]) -> None:
        super().__init__()
        self.scale = tf.Variable(scale)

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32)])
    def pool(self, images: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(images, axis=[1, 2]) * self.scale


def test_saved_model_of_a_callable_module_or_a_serving_signature(tmp_path):
    callable_module, signed = Pooled([1.0, 2.0, 3.0]), Pooled([1.0, 2.0, 4.0])
    callable_module.__call__ = callable_module.pool
    tf.saved_model.save(callable_module, str(tmp_path / "callable"))
    tf.saved_model.save(signed, str(tmp_path / "signed"), signatures={"serving_default": signed.pool})
    images = _images(3, 16)
    fingerprints = set()
    for name, scale in (("callable", [1.0, 2.0, 3.0]), ("signed", [1.0, 2.0, 4.0])):
        loaded = load_backbone(_cog(tmp_path, str(tmp_path / name)), 224, "backbone")
        expected = loaded.preprocessing.to_float(images).mean(axis=(1, 2)) * np.asarray(scale, np.float32)
        assert loaded.out_dim == 3 and np.allclose(TFFeatures(loaded, 2).features(images), expected, atol=1e-5)
        fingerprints.add(loaded.fingerprint)
        assert load_backbone(_cog(tmp_path, str(tmp_path / name)), 224, "backbone").fingerprint == loaded.fingerprint
    assert len(fingerprints) == 2  # other weights, another fingerprint


def test_keras_weights_load_and_a_mismatched_file_is_one_whole_line(tmp_path):
    source = load_backbone(_md("--image-size", "16", "--backbone", "tiny", "--seed", "4"), 84, "backbone")
    weights = tmp_path / "tiny.weights.h5"
    source.model.save_weights(str(weights))
    loaded = load_backbone(_md("--image-size", "16", "--backbone", "tiny", "--weights", str(weights)), 84, "x")
    assert loaded.fingerprint == source.fingerprint

    conv4 = tmp_path / "conv4.weights.h5"
    models.build_backbone("conv4", 16).save_weights(str(conv4))
    with pytest.raises(UsageError) as error:
        load_backbone(_md("--image-size", "16", "--backbone", "tiny", "--weights", str(conv4)), 84, "x")
    line = _one_line(error)
    assert line == (f"argument --weights: {conv4} is Keras weights of 20 arrays (113,344 values), --backbone tiny "
                    "expects 6 arrays (23,584 values): its arrays match conv4: use --backbone conv4 (19 of the "
                    "file's arrays have no place in it (first [3, 3, 3, 64]); 5 of its arrays are not in the file "
                    "(first [3, 3, 3, 16]))")

    checkpoint = tf.train.Checkpoint(backbone=models.build_backbone("conv4", 16)).save(str(tmp_path / "ck" / "c"))
    with pytest.raises(UsageError) as error:
        load_backbone(_md("--image-size", "16", "--backbone", "tiny", "--weights", checkpoint), 84, "x")
    line = _one_line(error)
    assert line.startswith(f"argument --weights: {checkpoint} is a tf checkpoint whose backbone holds 20 arrays")
    assert "--backbone tiny expects 6 arrays" in line


# ---- a user's backbone through every command -------------------------------------------------------


@pytest.fixture(scope="module")
def kitti(kitti_served):
    """The VTAB KITTI store of the transfer tests, served (one for the session)."""
    return kitti_served


@pytest.mark.slow
def test_a_module_callable_backbone_trains_transfers_and_is_evaluated(served, kitti, tmp_path, capsys):
    from clients.tf.cog_eval import TFCogBackend
    from clients.tf.md_train import main as md_main
    from clients.tf.vtab_transfer import main as transfer_main

    backbone = "tf_user_backbones:small"
    common = ["--server", served.address, "--sources", "folder", "--backbone", backbone, "--device", "cpu",
              "--ways", "5", "--shots", "2", "--query", "2", "--train-episodes", "4", "--eval-episodes", "2",
              "--log-every", "2"]
    assert md_main([*common, "--run", "tf-user-on", "--shape-buckets", "on"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --shape-buckets: got on, but --backbone tf_user_backbones:small" in err[0]

    checkpoints, summary = tmp_path / "ckpt", tmp_path / "md.json"
    assert md_main([*common, "--run", "tf-user-md", "--checkpoint-dir", str(checkpoints),
                    "--json-summary", str(summary)]) == 0, capsys.readouterr().err
    md = json.loads(summary.read_text())
    config = md["config"]
    assert config["image_size"] == user.SMALL_SIDE and config["shape_buckets"] == "off"  # served at the declared side
    assert config["preprocessing"] == {"input_size": 16, "input_range": list(user.SMALL_RANGE),
                                       "mean": list(user.SMALL_MEAN), "std": list(user.SMALL_STD),
                                       "source": "model attributes"}
    assert md["train"]["steps"] == 4 and md["eval"]["folder"]["episodes"] == 2

    # the MD trainer's checkpoint as --weights: exactly the trained weights, in transfer and in CoG
    trained = load_backbone(_cog(tmp_path, backbone, "--weights", str(checkpoints)), 224, "backbone")
    restored = user.small()  # TensorFlow's own restore of the checkpoint's backbone, for comparison
    tf.train.Checkpoint(backbone=restored).restore(tf.train.latest_checkpoint(str(checkpoints))).expect_partial()
    fresh = load_backbone(_cog(tmp_path, backbone), 224, "backbone")
    for mine, theirs, initial in zip(trained.model.weights, restored.weights, fresh.model.weights, strict=True):
        assert np.array_equal(mine.numpy(), theirs.numpy()) and mine.shape == initial.shape
    assert trained.fingerprint != fresh.fingerprint
    assert config["backbone_sha256"] == fresh.fingerprint  # the run records the weights it started from

    transfer_summary = tmp_path / "transfer.json"
    assert transfer_main(["--server", kitti.address, "--run", "tf-user-transfer", "--protocol", "vtab-md",
                          "--tasks", TASK, "--backbone", backbone, "--weights", str(checkpoints), "--mode", "linear",
                          "--lrs", "0.1", "--steps", "2", "--batch-size", "32", "--eval-batch-size", "128",
                          "--device", "cpu", "--log-every", "1000", "--json-summary", str(transfer_summary)]) == 0
    transfer = json.loads(transfer_summary.read_text())
    assert transfer["tasks"][TASK]["test_examples"] == KITTI_SIZES["test"]
    assert transfer["config"]["image_size"] == 16 and transfer["config"]["backbone_sha256"] == trained.fingerprint

    client = FakeCogClient()
    cog = CogRun(TFCogBackend(_cog(tmp_path, backbone, "--weights", str(checkpoints), "--levels", "L1", "--shots",
                                   "all", "--seeds", "1")), client, lambda _: None).execute()
    assert cog["levels"]["L1"]["feature_dim"] == 8 and cog["config"]["backbone_sha256"] == trained.fingerprint
    assert [(r.cog_level, r.shots) for r in client.reports] == [("L1", 0)]


def test_transfer_finetune_needs_a_keras_model(tmp_path):
    from clients.tf.vtab_transfer import TFTransferLearner

    args = parse_transfer_args("tf", ["--server", "h:1", "--run", "r", "--tasks", TASK, "--backbone",
                                      "tf_user_backbones:flat", "--mode", "finetune", "--device", "cpu"])
    with pytest.raises(UsageError) as error:
        TFTransferLearner(args)
    assert _one_line(error).startswith("argument --mode: got finetune, but --backbone tf_user_backbones:flat made a "
                                       "Flat, expected a Keras model")
