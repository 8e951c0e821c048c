"""RelationNet (``--model relationnet``; ``clients.md_learners``, the relation module of
``clients.torch.models`` and ``clients.tf.models``): the same scores in both frameworks from the
same weights and maps (each framework's own flatten order), the prototype first in each pair,
the pairs' own batch moments, and the loss the mean squared error to the one-hot labels."""

from __future__ import annotations

import numpy as np
import pytest

import tensorflow as tf  # noqa: F401  (before torch, as every tf test file)
import torch

from clients.init_weights import neutral_relation
from clients.md_learners import relation_map, relation_pooled_side
from clients.tf import models as tf_models
from clients.tf.backbones import assign_neutral_relation
from clients.torch import models as torch_models

CHANNELS, WAYS = 5, 3


def _maps(side: int, seed: int = 0):
    """(support maps, labels, query maps) as [N, C, S, S] arrays."""
    rng = np.random.default_rng(seed)
    labels = np.arange(9) % WAYS
    return (rng.normal(size=(9, CHANNELS, side, side)).astype(np.float32), labels,
            rng.normal(size=(4, CHANNELS, side, side)).astype(np.float32))


def _torch_module(side: int, seed: int = 1) -> torch_models.RelationModule:
    module = torch_models.RelationModule(CHANNELS, side)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in neutral_relation(CHANNELS, side, seed).items()})
    return module


def _torch_scores(module, support, labels, query):
    with torch.no_grad():
        return module.scores(torch.from_numpy(support.reshape(len(support), -1)), torch.from_numpy(labels),
                             torch.from_numpy(query.reshape(len(query), -1)), WAYS).numpy()


@pytest.mark.parametrize("side", [1, 2, 8])
def test_both_frameworks_score_the_same_pairs_alike(side):
    """Side 8 pools twice to 2 x 2, so fc1 sees a map whose flatten order differs between the
    frameworks (the neutral weights reorder it); each framework flattens its own embedding."""
    support, labels, query = _maps(side)
    expected = _torch_scores(_torch_module(side), support, labels, query)
    module = tf_models.relation_module(CHANNELS, side)
    assign_neutral_relation(module, side, neutral_relation(CHANNELS, side, 1))
    hwc = [x.transpose(0, 2, 3, 1).reshape(len(x), -1) for x in (support, query)]
    got = tf_models.relation_scores(module, CHANNELS, side, tf.constant(hwc[0]), tf.constant(labels),
                                    tf.constant(hwc[1]), tf.constant(WAYS)).numpy()
    assert expected.shape == (4, WAYS) and np.all((expected > 0) & (expected < 1))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert relation_pooled_side(side) == (2 if side == 8 else 1)


def test_the_prototype_comes_first_and_is_the_mean_support_map():
    """With the first convolution blind to the query's channels (the second half), every query
    scores the same against a class: the first half is each class's mean support map (a support
    set with the same per-class means scores the same)."""
    support, labels, query = _maps(2)
    module = _torch_module(2)
    with torch.no_grad():
        module.conv1.weight[:, CHANNELS:] = 0.0
    scores = _torch_scores(module, support, labels, query)
    np.testing.assert_allclose(scores, np.broadcast_to(scores[:1], scores.shape), rtol=1e-5)
    shifted = support.copy()
    for k in range(WAYS):  # the same class means, other members
        members = np.flatnonzero(labels == k)
        shifted[members[0]] += 1.0
        shifted[members[1]] -= 1.0
    np.testing.assert_allclose(_torch_scores(module, shifted, labels, query), scores, rtol=1e-5)
    with torch.no_grad():  # and blind to the prototypes instead: each query scores alike across classes
        module.conv1.weight.copy_(_torch_module(2).conv1.weight)
        module.conv1.weight[:, :CHANNELS] = 0.0
    blind = _torch_scores(module, support, labels, query)
    np.testing.assert_allclose(blind, np.broadcast_to(blind[:, :1], blind.shape), rtol=1e-5)


def test_its_batch_norms_take_the_pairs_own_moments_in_training_and_evaluation():
    support, labels, query = _maps(2)
    module = _torch_module(2)
    trained = _torch_scores(module.train(), support, labels, query)
    np.testing.assert_allclose(_torch_scores(module.eval(), support, labels, query), trained, rtol=1e-6)
    scaled = _torch_scores(module, support * 3.0, labels, query * 3.0)  # normalised away, up to the epsilon
    np.testing.assert_allclose(scaled, trained, rtol=1e-3)


def test_the_loss_is_the_mean_squared_error_to_the_one_hot_labels():
    scores = np.array([[0.9, 0.2, 0.1], [0.3, 0.4, 0.8]], np.float32)
    labels = np.array([0, 1])
    expected = np.mean((scores - np.eye(3)[labels]) ** 2)
    assert float(torch_models.episode_loss("relationnet", torch.from_numpy(scores), torch.from_numpy(labels))) == \
        pytest.approx(expected, rel=1e-6)
    assert float(tf_models.head_loss("relationnet", tf.constant(scores), tf.constant(labels))) == \
        pytest.approx(expected, rel=1e-6)
    cross_entropy = float(torch_models.episode_loss("protonet", torch.from_numpy(scores), torch.from_numpy(labels)))
    assert cross_entropy != pytest.approx(expected, rel=1e-2)  # another head: another loss


def test_an_embedding_is_a_map_of_a_flattened_map_backbone_else_a_one_pixel_map():
    assert relation_map("md-conv4", 64 * 5 * 5) == (64, 5)
    assert relation_map("conv4", 64) == (64, 1)
    assert relation_map("md-resnet18", 512) == (512, 1)
    assert relation_map("md-conv4", 100) == (100, 1)  # not 64 channels of a square map
