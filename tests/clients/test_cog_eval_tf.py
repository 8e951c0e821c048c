"""The ImageNet-CoG evaluation's TensorFlow backend: its linear classifier learns a separable
problem and takes the same steps as torch's SGD (same draws, same weights within float
error), runs over the stand-in client deterministically with its cache, and loads
SavedModel, Keras-file and module:callable (with --weights) backbones."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from cog_eval_fake import SMALL, FakeCogClient, fit_toy, results_of, separable

from clients import cog_eval
from clients.cog_eval import CogRun, HParams
from clients.tf import models
from clients.tf.cog_eval import TFCogBackend
from clients.tf.cog_eval import main as tf_main
from clients.trainer_args import parse_cog_args

keras = tf.keras
NAMED_FLAGS = ["--input-range", "-1", "1", "--mean", "0", "0", "0", "--std", "1", "1", "1"]  # what tiny declares


def _args(tmp_path: Path, *extra: str) -> object:
    return parse_cog_args("tf", [*SMALL, "--feature-cache", str(tmp_path / "cache"), *extra])


def _run(tmp_path: Path, client: FakeCogClient, *extra: str) -> dict:
    return CogRun(TFCogBackend(_args(tmp_path, *extra)), client, lambda _: None).execute()


def test_tf_linear_classifier_learns_a_separable_problem_deterministically(tmp_path):
    backend = TFCogBackend(_args(tmp_path))
    outcome, acc = fit_toy(backend)
    assert not outcome.diverged and acc >= 0.98
    kernel = backend.kernel.numpy().copy()
    again, acc2 = fit_toy(backend)
    assert again.loss == outcome.loss and acc2 == acc and np.array_equal(backend.kernel.numpy(), kernel)


def test_tf_steps_equal_torch_sgd_on_the_same_draws(tmp_path):
    from clients.torch import cog_eval as torch_cog
    x, y = separable(classes=3, per_class=10, dim=6)
    hp = HParams(3.0, 1e-3)
    results = []
    for backend in (TFCogBackend(_args(tmp_path)), torch_cog.TorchCogBackend(
            parse_cog_args("torch", [*SMALL, "--feature-cache", str(tmp_path / "cache")]))):
        data = backend.classifier_data(x, y)
        outcome = cog_eval.fit(backend, data, len(y), x.shape[1], 3, hp, 5, 8, seed=11)
        tf_backend = isinstance(backend, TFCogBackend)
        weight = backend.kernel.numpy().T if tf_backend else backend.linear.weight.detach().numpy()
        results.append((outcome.loss, weight))
    (tf_loss, tf_weight), (torch_loss, torch_weight) = results
    assert tf_loss == pytest.approx(torch_loss, rel=1e-4, abs=1e-6)
    assert np.allclose(tf_weight, torch_weight, atol=1e-4)


def test_tf_run_is_deterministic_and_reuses_its_cache(tmp_path):
    client = FakeCogClient()
    first = _run(tmp_path, client, "--levels", "L2", "--shots", "all", "1", "--seeds", "1")
    assert first["extracted"] == 4 * 26 and first["levels"]["L2"]["feature_dim"] == 64
    assert [(r.cog_level, r.shots, r.seed) for r in client.reports] == [("L2", 0, 1), ("L2", 1, 1)]
    again = FakeCogClient()
    second = _run(tmp_path, again, "--levels", "L2", "--shots", "all", "1", "--seeds", "1")
    assert second["extracted"] == 0 and again.streamed == 0 and results_of(first) == results_of(second)
    assert first["levels"]["L2"]["results"][0]["accuracy"] >= 0.9


def test_saved_model_keras_file_and_module_callable_backbones(tmp_path):
    named = TFCogBackend(_args(tmp_path))
    images = FakeCogClient().image("L1", 100_001, 16)[None]
    expected = named.extract(images)
    model = named.model
    model.save(tmp_path / "net.keras")
    model.export(str(tmp_path / "saved"), verbose=False)
    weights = tmp_path / "tiny.weights.h5"
    model.save_weights(str(weights))
    for path in (tmp_path / "net.keras", tmp_path / "saved"):
        args = parse_cog_args("tf", [*SMALL, "--feature-cache", str(tmp_path), "--backbone", str(path), *NAMED_FLAGS])
        assert np.allclose(TFCogBackend(args).extract(images), expected, atol=1e-5), path
    sys.path.insert(0, str(tmp_path))
    try:
        (tmp_path / "cog_user_tf_net.py").write_text(
            "from clients.tf.models import tiny\n\n"
            "def build():\n    return tiny(16)\n")
        args = parse_cog_args("tf", [*SMALL, "--feature-cache", str(tmp_path), "--backbone", "cog_user_tf_net:build",
                                     "--weights", str(weights), *NAMED_FLAGS])
        assert np.allclose(TFCogBackend(args).extract(images), expected, atol=1e-5)
    finally:
        sys.path.remove(str(tmp_path))
    assert models.tiny(16).output_shape == (None, 64)


def test_tf_bad_backbone_is_one_line(tmp_path, capsys):
    (tmp_path / "junk.keras").write_bytes(b"not a model")
    assert tf_main([*SMALL, "--feature-cache", str(tmp_path), "--backbone", str(tmp_path / "junk.keras")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected a Keras model file (.keras, .h5)" in err, err
    conv4 = tmp_path / "conv4.weights.h5"
    models.build_backbone("conv4", 16).save_weights(str(conv4))
    assert tf_main([*SMALL, "--feature-cache", str(tmp_path), "--weights", str(conv4)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{conv4} is Keras weights of 20 arrays" in err, err
    assert "--backbone tiny expects 6 arrays" in err, err


def test_tf_refuses_bf16_extraction_in_one_line(tmp_path, capsys):
    assert tf_main([*SMALL, "--feature-cache", str(tmp_path), "--precision", "bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument --precision: got bf16, expected float32 in TensorFlow" in err, err
