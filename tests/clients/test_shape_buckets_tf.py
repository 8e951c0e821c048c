"""Shape buckets in the TensorFlow trainer are exact: a padded step's loss, gradients and
batch-norm moving statistics equal the unpadded step's for conv4 and ResNet-18;
evaluation predicts the same; a bucketed run and an unbucketed run of the same seed
follow the same training curve on the same episodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from clients.tf import models  # noqa: E402
from clients.tf.backbones import named_preprocessing, to_model_input  # noqa: E402
from clients.tf.md_train import Evaluator, main  # noqa: E402


def _episode(seed: int, support: int, query: int, ways: int, size: int = 32) -> tuple[np.ndarray, ...]:
    rng = np.random.RandomState(seed)
    images = rng.randint(0, 256, (support + query, size, size, 3)).astype(np.uint8)
    labels = np.concatenate([np.arange(support) % ways, rng.randint(0, ways, query)]).astype(np.int64)
    return images[:support], labels[:support], images[support:], labels[support:]


def _step(model, episode: tuple[np.ndarray, ...], ways: int, padded_rows: int | None,
          count_valid_rows: bool = True) -> tuple[float, list[np.ndarray]]:
    """Loss and gradients of one training forward pass, unpadded or padded to ``padded_rows``."""
    support, support_labels, query, query_labels = episode
    ns, nq = len(support), len(query)
    rows = ns + nq if padded_rows is None else padded_rows
    images = np.zeros((rows, *support.shape[1:]), np.uint8)
    images[:ns], images[ns:ns + nq] = support, query
    labels = np.zeros(rows, np.int64)
    labels[:ns], labels[ns:ns + nq] = support_labels, query_labels
    with tf.GradientTape() as tape:
        with models.valid_rows(model, ns + nq if padded_rows is not None and count_valid_rows else None):
            embedded = model(to_model_input(images, named_preprocessing(images.shape[1])), training=True)
        logits = models.prototype_logits(embedded[:ns], labels[:ns], embedded[ns:ns + nq], tf.constant(ways))
        loss = models.episode_loss(logits, labels[ns:ns + nq])
    gradients = tape.gradient(loss, model.trainable_variables)
    return float(loss), [g.numpy() for g in gradients]


def _twin(name: str):
    tf.keras.utils.set_random_seed(0)
    first = models.build_backbone(name, 32)
    second = models.build_backbone(name, 32)
    second.set_weights(first.get_weights())
    return first, second


def _moving(model) -> list[np.ndarray]:
    return [v.numpy() for v in model.non_trainable_variables]


def _gradient_error(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-12)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("backbone", ["conv4", "resnet18"])
def test_padded_step_equals_unpadded_step(backbone: str):
    reference, padded = _twin(backbone)
    control = models.build_backbone(backbone, 32)
    control.set_weights(reference.get_weights())
    ways, episode = 5, _episode(1, 13, 15, 5)

    loss, gradients = _step(reference, episode, ways, None)
    padded_loss, padded_gradients = _step(padded, episode, ways, 40)
    control_loss, control_gradients = _step(control, episode, ways, 40, count_valid_rows=False)

    assert padded_loss == pytest.approx(loss, rel=2e-5)
    assert _gradient_error(gradients, padded_gradients) < 2e-5
    for a, b in zip(_moving(reference), _moving(padded), strict=True):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-6)
    # plain batch norm over the padded batch would change what is learned: the test can tell
    assert abs(control_loss - loss) > 1e-3 * abs(loss) or _gradient_error(gradients, control_gradients) > 1e-3
    assert any(not np.allclose(a, c, rtol=1e-3) for a, c in zip(_moving(reference), _moving(control), strict=True))


@pytest.mark.parametrize("ratio", [1.125, 1.0625])
def test_evaluation_predicts_the_same_with_buckets(served, ratio: float):
    tf.keras.utils.set_random_seed(0)
    backbone = models.build_backbone("conv4", 32)
    on, off = (Evaluator(backbone, named_preprocessing(32), buckets=True, ratio=ratio),
               Evaluator(backbone, named_preprocessing(32), buckets=False))
    assert on.ladder.ratio == ratio
    with SamplerClient(served.address) as client:
        episodes = list(client.episodes(EpisodeSpec(sources=("folder",), split="test", image_size=32), 0, 4))
    assert any(on.ladder.size(len(e.support_images)) != len(e.support_images) for e in episodes)  # padding happens
    for episode in episodes:
        loss_on, predicted_on = on(episode)
        loss_off, predicted_off = off(episode)
        assert np.array_equal(predicted_on, predicted_off)
        assert loss_on == pytest.approx(loss_off, rel=1e-4)


def _run(served, tmp_path: Path, run_id: str, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    # 16 px: whether the two runs' curves agree does not depend on the image size (a step is
    # a third of a 32-px one); the episodes' shapes, and so the buckets, are the same
    assert main(["--server", served.address, "--run", run_id, "--sources", "folder", "--image-size", "16",
                 "--train-episodes", "6", "--eval-episodes", "2", "--log-every", "1", "--seed", "5", "--device", "cpu",
                 "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_bucketed_run_follows_the_unbucketed_curve(served, tmp_path):
    on = _run(served, tmp_path, "tf-buckets-on", "--shape-buckets", "on")
    off = _run(served, tmp_path, "tf-buckets-off", "--shape-buckets", "off")
    curve_on, curve_off = np.array(on["train"]["curve"]), np.array(off["train"]["curve"])
    assert curve_on.shape == curve_off.shape == (6, 3)
    assert np.allclose(curve_on[:, 1], curve_off[:, 1], rtol=1e-3, atol=1e-4), (curve_on, curve_off)
    assert np.abs(curve_on[:, 2] - curve_off[:, 2]).max() <= 1 / 30 + 1e-6
    assert on["eval"]["folder"]["mean_accuracy"] == pytest.approx(off["eval"]["folder"]["mean_accuracy"])
    assert on["train"]["distinct_shapes"] < off["train"]["distinct_shapes"]
    assert (on["config"]["shape_buckets"], off["config"]["shape_buckets"]) == ("on", "off")


def test_adapter_yields_the_bucketed_layout(served):
    from clients.buckets import Ladder
    from clients.reporting import episode_report
    from clients.tf import EpisodeSource

    spec = EpisodeSpec(sources=("folder",), split="train", image_size=32)
    plain = list(EpisodeSource(served.address, spec, count=3).dataset().as_numpy_iterator())
    packed = list(EpisodeSource(served.address, spec, count=3, shape_buckets=True).dataset().as_numpy_iterator())
    ladder = Ladder(cap=1000)
    for item, bucketed in zip(plain, packed, strict=True):
        ns, nq = int(bucketed["support"]), int(bucketed["query"])
        assert (ns, nq) == (len(item["support_images"]), len(item["query_images"]))
        assert bucketed["images"].shape == (ladder.size(ns + nq), 32, 32, 3)
        assert np.array_equal(bucketed["images"][:ns], item["support_images"])
        assert np.array_equal(bucketed["images"][ns:ns + nq], item["query_images"])
        assert np.array_equal(bucketed["labels"][ns:ns + nq], item["query_labels"])
        assert not bucketed["images"][ns + nq:].any()
        report = episode_report("r", bucketed, bucketed["query_labels"])
        assert report.metrics["accuracy"] == 1.0 and report.index == item["index"]
    assert EpisodeSource(served.address, spec, shape_buckets=True, bucket_ratio=1.0625).ladder == Ladder(1.0625, 8, 1000)
