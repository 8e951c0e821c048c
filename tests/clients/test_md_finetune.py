"""The Finetune baseline's episode (``clients.md_learners.finetuned_query_logits`` over
``clients.torch.adaptation`` and ``clients.tf.adaptation``): its Adam is TF1's
``AdamOptimizer`` step for step; with the head alone it is plain logistic-regression descent on
the summed support loss, computed here in NumPy; every episode draws a new head from its own
seed; under SGD the batch norms' scale and offset stay (the reference's step skips them), under
Adam they move; torch and tf give the same query logits."""

from __future__ import annotations

import numpy as np
import pytest
from adaptation_episode import DIM, SUPPORT, WAYS, episode, tf_adaptation, torch_adaptation

import tensorflow as tf  # noqa: F401  (before torch, as every tf test file)
import torch

from clients.md_learners import Finetuning, finetune_head, finetuned_query_logits, tf1_adam


def _run(framework: str, settings: Finetuning, seed: int = 1):
    images, labels = episode(8)
    head = finetune_head(DIM, WAYS, seed)
    if framework == "torch":
        with torch.no_grad():
            return finetuned_query_logits(torch_adaptation(images, labels), settings,
                                          tuple(torch.from_numpy(t) for t in head)).numpy()
    return finetuned_query_logits(tf_adaptation(images, labels), settings, tuple(tf.constant(t) for t in head)).numpy()


def test_tf1_adam_is_tensorflows_adam_optimizer_step_for_step():
    """In float32, as the trainers step (TF1 keeps its beta powers in float32 even for float64
    variables: 2e-10 apart there)."""
    start = np.array([0.5, -1.5, 2.0], np.float32)
    target = np.array([1.0, 2.0, -3.0])
    variable = tf.Variable(start)
    optimizer = tf.compat.v1.train.AdamOptimizer(0.01)
    values, moments = [start.copy()], [(0.0 * start, 0.0 * start)]
    for step in range(1, 6):
        gradient = (2.0 * (variable.numpy() - target) * np.arange(1, 4)).astype(np.float32)
        optimizer.apply_gradients([(tf.constant(gradient), variable)])
        values, moments = tf1_adam(values, [gradient], moments, step, 0.01)
        np.testing.assert_allclose(values[0], variable.numpy(), rtol=1e-6, atol=1e-7)


def test_every_episode_draws_a_new_truncated_normal_head_from_its_seed():
    weight, bias = finetune_head(DIM, WAYS, 1)
    again, _ = finetune_head(DIM, WAYS, 1)
    other, _ = finetune_head(DIM, WAYS, 2)
    assert weight.shape == (WAYS, DIM) and np.array_equal(weight, again) and not np.array_equal(weight, other)
    assert np.abs(weight).max() <= 0.2 and 0.07 < weight.std() < 0.1  # sigma 0.1, cut at two sigmas
    assert bias.tolist() == pytest.approx([0.1] * WAYS)


@pytest.mark.parametrize("adam", [False, True])
def test_the_head_alone_is_descent_on_the_summed_support_loss(adam):
    """The support features are fixed: the steps are multinomial logistic regression's, by hand."""
    images, labels = episode(8)
    adaptation = torch_adaptation(images, labels)
    with torch.no_grad():
        features = adaptation.support_features().double().numpy()
    weight, bias = (t.astype(np.float64) for t in finetune_head(DIM, WAYS, 1))
    one_hot = np.eye(WAYS)[labels[:SUPPORT]]
    moments = [(0.0 * weight, 0.0 * weight), (0.0 * bias, 0.0 * bias)]
    for step in range(1, 4):
        logits = features @ weight.T + bias
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        gradients = [(p - one_hot).T @ features, (p - one_hot).sum(0)]  # summed, not averaged
        if adam:
            (weight, bias), moments = tf1_adam([weight, bias], gradients, moments, step, 0.01)
        else:
            weight, bias = weight - 0.01 * gradients[0], bias - 0.01 * gradients[1]
    got = _run("torch", Finetuning(3, 0.01, adam, all_layers=False))
    with torch.no_grad():  # the query alone, through the initial weights
        embedded_query = torch.func.functional_call(
            adaptation.backbone, dict(zip(adaptation.names, adaptation.initial_weights(), strict=True)),
            (adaptation.images[SUPPORT:],))
    np.testing.assert_allclose(got, embedded_query.double().numpy() @ weight.T + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("adam", [False, True])
def test_batch_norm_scale_and_offset_move_under_adam_only(adam):
    images, labels = episode(8)
    adaptation = torch_adaptation(images, labels)
    seen = {}
    original = adaptation.query_alone_logits

    def record(weights, head):
        seen["weights"] = weights
        return original(weights, head)

    adaptation.query_alone_logits = record
    with torch.no_grad():
        finetuned_query_logits(adaptation, Finetuning(2, 0.01, adam, all_layers=True),
                               tuple(torch.from_numpy(t) for t in finetune_head(DIM, WAYS, 1)))
    norms = adaptation.batch_norm_parameters()
    assert any(norms) and not all(norms)
    moved = [not torch.equal(w, p) for w, p in zip(seen["weights"], adaptation.initial_weights(), strict=True)]
    assert all(moved[i] for i, norm in enumerate(norms) if not norm)  # the convolutions move either way
    assert all(moved[i] == adam for i, norm in enumerate(norms) if norm)


@pytest.mark.parametrize(("adam", "all_layers"), [(False, False), (True, False), (False, True), (True, True)])
def test_torch_and_tf_finetune_to_the_same_query_logits(adam, all_layers):
    settings = Finetuning(4, 0.01, adam, all_layers)
    in_torch, in_tf = _run("torch", settings), _run("tf", settings)
    np.testing.assert_allclose(in_tf, in_torch, rtol=1e-4, atol=1e-4 * float(np.abs(in_torch).max()))
    assert not np.allclose(in_torch, _run("torch", settings, seed=2))  # another episode: another head
