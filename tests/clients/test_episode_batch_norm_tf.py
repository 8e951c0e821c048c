"""Meta-Dataset's episode batch norm in the TensorFlow trainer (``--batch-norm md``, the
default; ``clients.batch_norm``), as ``test_episode_batch_norm.py`` checks it in PyTorch:
conv4 and ResNet-18 in the bucketed layout (support, query, padding) against
``md_batch_norm_reference`` (the reference's computation in NumPy float64, unpadded, one set
at a time) from the same framework-neutral weights, in training and inference; running
statistics never read; the evaluator takes the episode's moments; other batch norms refused."""

from __future__ import annotations

import numpy as np
import pytest
from md_batch_norm_reference import episode_embeddings

import tensorflow as tf

from clients.init_weights import neutral_weights  # noqa: E402
from clients.protocols.md import EpisodeArrays  # noqa: E402
from clients.tf import models  # noqa: E402
from clients.tf.backbones import assign_neutral, named_preprocessing, to_model_input  # noqa: E402
from clients.tf.md_train import Evaluator  # noqa: E402

SUPPORT, QUERY, ROWS, SIZE = 7, 5, 16, 16


def _weights(backbone: str) -> dict[str, np.ndarray]:
    """Neutral weights with batch-norm affine parameters away from 1 and 0, so they are exercised."""
    weights = neutral_weights(backbone, SIZE, 3)
    rng = np.random.RandomState(5)
    for name in weights:
        if name.endswith(".bias") and f"{name[:-5]}.running_mean" in weights:
            weights[name] = rng.uniform(-0.5, 0.5, weights[name].shape)
            weights[f"{name[:-5]}.weight"] = rng.uniform(0.5, 1.5, weights[name].shape)
    return weights


def _model(backbone: str, weights: dict[str, np.ndarray]) -> tf.keras.Model:
    model = models.build_backbone(backbone, SIZE)
    assign_neutral(model, backbone, SIZE, weights, "the test's weights")
    return model


def _images(seed: int, rows: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (rows, SIZE, SIZE, 3)).astype(np.uint8)


def _reference(backbone: str, weights: dict[str, np.ndarray], x: np.ndarray, mode: str) -> np.ndarray:
    """The reference's embeddings of the unpadded support and query, laid out as tf's (conv4's
    flatten in (H, W, C) order)."""
    nchw = np.transpose(x.astype(np.float64), (0, 3, 1, 2))
    support, query, _ = episode_embeddings(backbone, {k: v.astype(np.float64) for k, v in weights.items()},
                                           nchw[:SUPPORT], nchw[SUPPORT:SUPPORT + QUERY], mode)
    embedded = np.concatenate([support, query])
    if backbone == "conv4":
        side = SIZE // 16
        embedded = embedded.reshape(len(embedded), -1, side, side).transpose(0, 2, 3, 1).reshape(len(embedded), -1)
    return embedded


@pytest.mark.parametrize(("backbone", "mode", "training"), [
    ("conv4", "md", True), ("conv4", "md", False), ("conv4", "transductive", True), ("conv4", "transductive", False),
    ("resnet18", "md", True), ("resnet18", "transductive", False)])  # ResNet-18's every case: the torch test's
def test_padded_episode_embeddings_equal_the_references_unpadded_passes(backbone, mode, training):
    weights = _weights(backbone)
    model = _model(backbone, weights)
    padded = np.zeros((ROWS, SIZE, SIZE, 3), np.uint8)
    padded[:SUPPORT + QUERY] = _images(1, SUPPORT + QUERY)
    x = to_model_input(padded, named_preprocessing(SIZE))
    with models.episode_norm(model, mode, tf.constant(SUPPORT), tf.constant(QUERY)):
        embedded = model(x, training=training).numpy()
    reference = _reference(backbone, weights, x.numpy()[:SUPPORT + QUERY], mode)
    scale = np.abs(reference).max()
    assert np.abs(embedded[:SUPPORT + QUERY] - reference).max() <= 1e-4 * scale  # float32 against float64
    assert not embedded[SUPPORT + QUERY:].any()  # padding rows: zeros


def test_running_statistics_are_never_read_and_the_evaluator_takes_the_episodes_moments():
    weights = _weights("resnet18")
    clean, poisoned = _model("resnet18", weights), _model("resnet18", weights)
    for layer in poisoned.layers:
        if isinstance(layer, models.RowBatchNormalization):
            layer.moving_mean.assign(np.full(layer.moving_mean.shape, np.nan, np.float32))
            layer.moving_variance.assign(np.full(layer.moving_variance.shape, np.nan, np.float32))
    images = _images(4, SUPPORT + QUERY)
    labels = np.arange(SUPPORT + QUERY) % 3
    episode = EpisodeArrays(source="test", split="test", seed=0, index=0, fingerprint="", class_ids=(0, 1, 2),
                            class_names=("a", "b", "c"), support_images=images[:SUPPORT],
                            support_labels=labels[:SUPPORT], query_images=images[SUPPORT:],
                            query_labels=labels[SUPPORT:], support_record_ids=tuple(range(SUPPORT)),
                            query_record_ids=tuple(range(SUPPORT, SUPPORT + QUERY)), image_size=SIZE, resize="")
    preprocessing = named_preprocessing(SIZE)
    results = [Evaluator(model, preprocessing, buckets, "md")(episode) for model in (clean, poisoned)
               for buckets in (False, True)]
    # rel 1e-5: with and without padding rows the convolutions sum in other orders, which
    # differ between CPUs; one gave 1.1e-6 on this loss of 187, another under 1e-6
    assert np.isfinite(results[0][0]) and all(r[0] == pytest.approx(results[0][0], rel=1e-5) for r in results)
    assert all(np.array_equal(r[1], results[0][1]) for r in results)
    # what it computes: the reference's prototypes over the reference's embeddings
    reference = _reference("resnet18", weights, to_model_input(images, preprocessing).numpy(), "md")
    prototypes = np.stack([reference[:SUPPORT][labels[:SUPPORT] == k].mean(0) for k in range(3)])
    distances = ((reference[SUPPORT:, None, :] - prototypes[None]) ** 2).sum(-1)
    assert np.array_equal(results[0][1], distances.argmin(1))
    loss, _ = Evaluator(poisoned, preprocessing, False, "running")(episode)
    assert not np.isfinite(loss)  # under running, the NaN moving statistics do reach the embeddings


def test_a_plain_batch_norm_is_adopted_and_another_axis_refused_under_md():
    inputs = tf.keras.Input((SIZE, SIZE, 3))
    model = tf.keras.Model(inputs, tf.keras.layers.BatchNormalization(name="plain")(inputs))
    assert models.episode_batch_norms(model, "running") == 0
    assert type(model.get_layer("plain")) is tf.keras.layers.BatchNormalization
    assert models.episode_batch_norms(model, "md") == 1
    assert isinstance(model.get_layer("plain"), models.RowBatchNormalization)
    x = np.random.RandomState(0).uniform(-1, 1, (4, SIZE, SIZE, 3)).astype(np.float32)
    with models.episode_norm(model, "md", tf.constant(2), tf.constant(2)):
        out = model(x, training=False).numpy()
    mean, std = x[:2].mean((0, 1, 2)), x[:2].std((0, 1, 2))
    assert np.allclose(out, (x - mean) / np.sqrt(std ** 2 + 1e-3), atol=1e-4)  # Keras' default epsilon
    other = tf.keras.Model(inputs, tf.keras.layers.BatchNormalization(axis=1, name="rows")(inputs))
    with pytest.raises(ValueError, match=r"batch_norm: got md, but layer rows is a BatchNormalization that cannot "
                                         r"take an episode's moments \(over its last axis, without renormalisation\)"):
        models.episode_batch_norms(other, "md")
    assert models.episode_batch_norms(models.build_backbone("resnet18", SIZE), "md") == 20
