"""The trainers' differentiable learner heads (``clients.torch.models``, ``clients.tf.models``)
compute what the NumPy references of ``clients.md_fixed_features`` compute: Matching Networks'
log attention mass and the k-NN baseline's one-hot nearest label, in float64 to 1e-10."""

from __future__ import annotations

import numpy as np
import pytest

import tensorflow as tf  # noqa: F401  (before torch, as every tf test file)
import torch

from clients.md_fixed_features import matching_log_probabilities, nearest_neighbour_predictions
from clients.tf import models as tf_models
from clients.torch import models as torch_models


def _episodes(count: int = 12):
    rng = np.random.RandomState(11)
    for _ in range(count):
        ways, dim = rng.randint(2, 7), rng.randint(2, 20)
        labels = np.concatenate([np.arange(ways), rng.randint(0, ways, rng.randint(0, 15))])
        scale = rng.choice([0.01, 1.0, 30.0])  # 0.01: the support's norms under the epsilon's floor
        yield (rng.normal(0, scale, (len(labels), dim)), labels, rng.normal(0, 1, (rng.randint(1, 9), dim)), ways)


@pytest.mark.parametrize("exact_cosine", [False, True])
def test_matching_logits_are_the_reference_in_both_frameworks(exact_cosine):
    for support, labels, query, ways in _episodes():
        expected = matching_log_probabilities(support, labels, query, ways, exact_cosine)
        in_torch = torch_models.matching_logits(torch.from_numpy(support), torch.from_numpy(labels),
                                                torch.from_numpy(query), ways, exact_cosine).numpy()
        in_tf = tf_models.matching_logits(tf.constant(support), tf.constant(labels), tf.constant(query),
                                          ways, exact_cosine).numpy()
        np.testing.assert_allclose(in_torch, expected, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(in_tf, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("distance", ["cosine", "l2"])
def test_nearest_neighbour_logits_are_the_one_hot_reference_label(distance):
    for support, labels, query, ways in _episodes():
        expected = np.eye(ways)[nearest_neighbour_predictions(support, labels, query, distance)]
        in_torch = torch_models.nearest_neighbour_logits(torch.from_numpy(support), torch.from_numpy(labels),
                                                         torch.from_numpy(query), ways, distance).numpy()
        in_tf = tf_models.nearest_neighbour_logits(tf.constant(support), tf.constant(labels), tf.constant(query),
                                                   ways, distance).numpy()
        assert np.array_equal(in_torch, expected) and np.array_equal(in_tf, expected)


def test_matching_logits_pass_gradients_to_support_and_query():
    support, labels, query, ways = next(_episodes())
    s, q = torch.from_numpy(support).requires_grad_(), torch.from_numpy(query).requires_grad_()
    logits = torch_models.matching_logits(s, torch.from_numpy(labels), q, ways)
    torch.nn.functional.cross_entropy(logits, torch.zeros(len(query), dtype=torch.int64)).backward()
    assert float(s.grad.abs().sum()) > 0 and float(q.grad.abs().sum()) > 0


@pytest.mark.parametrize("cosine", [False, True])
def test_weight_norms_data_dependent_init_standardises_each_output_in_both_frameworks(cosine):
    """functional_classifiers.py: g = 1 / sqrt(var + 1e-10) of the features through each class's
    unit direction over the batch, and for the plain head b = -mean g: the first batch's logits
    come out with mean 0 and variance 1 per class (the plain head; the cosine head normalises
    the features after the init)."""
    from clients.md_learners import Classifier

    rng = np.random.default_rng(3)
    features = rng.normal(2.0, 3.0, (32, 10)).astype(np.float32)
    kernel = rng.normal(0.0, 0.05, (4, 10)).astype(np.float32)
    directions = kernel / np.linalg.norm(kernel, axis=1, keepdims=True)
    outputs = features.astype(np.float64) @ directions.T
    gain = 1.0 / np.sqrt(outputs.var(0) + 1e-10)
    classifier = Classifier(cosine=cosine, multiplier=10.0, weight_norm=True)

    head = torch_models.LinearHead(10, 4, classifier)
    with torch.no_grad():
        head.linear.weight.copy_(torch.from_numpy(kernel))
    assert head.needs_initialising
    head.initialise(torch.from_numpy(features))
    assert not head.needs_initialising and int(head.initialised) == 1
    np.testing.assert_allclose(head.gain.detach().numpy(), gain, rtol=1e-5)

    keras_head = tf_models.build_head(4, 10, classifier)
    layer = keras_head.get_layer("logits")
    layer.kernel.assign(kernel.T)
    layer.initialise(tf.constant(features))
    np.testing.assert_allclose(layer.gain.numpy(), gain, rtol=1e-5)
    logits = {"torch": head(torch.from_numpy(features)).detach().numpy(),
              "tf": keras_head(tf.constant(features)).numpy()}
    np.testing.assert_allclose(logits["tf"], logits["torch"], rtol=1e-4, atol=1e-4)
    if not cosine:
        np.testing.assert_allclose(head.linear.bias.detach().numpy(), -outputs.mean(0) * gain, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(logits["torch"].mean(0), 0.0, atol=1e-4)
        np.testing.assert_allclose(logits["torch"].var(0), 1.0, rtol=1e-3)
