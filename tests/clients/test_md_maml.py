"""The MAML family's episode in both frameworks (``clients.torch.adaptation``,
``clients.tf.adaptation`` under ``clients.md_learners.adapted_query_logits``), on Meta-Dataset's
four-layer convnet from the same neutral weights (``--init-seed``):

- fo-MAML's first inner step is one manual SGD step: with the zeroed head the backbone's
  gradient is zero, the head's is (softmax(0) - one-hot)^T e / n; its second step moves the
  backbone by alpha times the plain module's autograd gradient;
- Proto-MAML's logits before any step are ProtoNet's plus ||q||^2 (the same softmax), and the
  outer gradient reaches the backbone through the head's initialisation;
- torch and tf give the same adapted query logits."""

from __future__ import annotations

import numpy as np
import pytest
from adaptation_episode import QUERY, SUPPORT, WAYS, episode, tf_adaptation, torch_adaptation

import tensorflow as tf  # noqa: F401  (before torch, as every tf test file)
import torch
from torch.nn import functional as F

from clients.md_learners import InnerLoop, adapted_query_logits
from clients.torch import models as torch_models


def _numpy(x) -> np.ndarray:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def test_the_first_maml_step_moves_only_the_head_by_the_hand_computed_gradient():
    images, labels = episode(5)
    adaptation = torch_adaptation(images, labels)
    model = adaptation.backbone
    steps: dict[int, tuple] = {}
    adapted_query_logits(adaptation, InnerLoop(2, 0, 0.5, prototype_head=False), training=True,
                         on_step=lambda step, weights, head: steps.__setitem__(step, (weights, head)))
    initial = [p.detach() for p in model.parameters()]
    embedded = adaptation._embed(initial, SUPPORT, 0).detach().double().numpy()
    residual = np.full((SUPPORT, WAYS), 1.0 / WAYS) - np.eye(WAYS)[labels[:SUPPORT]]  # softmax(0) - one-hot
    weights, (weight, bias) = steps[0]
    assert all(torch.equal(w, p) for w, p in zip(weights, initial, strict=True))  # zero head: no backbone gradient
    np.testing.assert_allclose(weight.detach().numpy(), -0.5 * residual.T @ embedded / SUPPORT, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(bias.detach().numpy(), -0.5 * residual.mean(0), rtol=1e-6, atol=1e-8)
    # the second step: the plain module's autograd gradient at the first step's head
    model.zero_grad()
    with torch_models.episode_norm(model, "md", SUPPORT, 0):
        logits = model(adaptation.images[:SUPPORT]) @ weight.detach().t() + bias.detach()
    F.cross_entropy(logits, torch.from_numpy(labels[:SUPPORT])).backward()
    second, _ = steps[1]
    moved = [float((w - p + 0.5 * p.grad).abs().max()) for w, p in zip(second, model.parameters(), strict=True)]
    assert max(moved) < 1e-5 and any(float(p.grad.abs().max()) > 1e-3 for p in model.parameters())


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_protomaml_before_any_step_is_protonet(framework):
    images, labels = episode(5)
    adaptation = (torch_adaptation if framework == "torch" else tf_adaptation)(images, labels)
    logits = _numpy(adapted_query_logits(adaptation, InnerLoop(0, 0, 0.01, prototype_head=True), training=False))
    embedded = _numpy(adaptation._embed(adaptation.initial_weights(), SUPPORT + QUERY, QUERY)).astype(np.float64)
    protonet = -((embedded[SUPPORT:, None] - np.stack([embedded[:SUPPORT][labels[:SUPPORT] == k].mean(0)
                                                        for k in range(WAYS)])[None]) ** 2).sum(-1)
    squared_norms = (embedded[SUPPORT:] ** 2).sum(1, keepdims=True)
    np.testing.assert_allclose(logits - protonet, np.broadcast_to(squared_norms, logits.shape), rtol=1e-4)
    zero = _numpy(adapted_query_logits(adaptation, InnerLoop(0, 0, 0.01, prototype_head=False), training=False))
    assert np.array_equal(zero, np.zeros_like(zero))  # MAML's zeroed head: every class alike, unlike Proto-MAML's


def test_the_outer_gradient_flows_through_the_prototype_head():
    images, labels = episode(5)
    gradients = {}
    for detached in (False, True):
        adaptation = torch_adaptation(images, labels)
        model = adaptation.backbone
        if detached:
            initial = adaptation.prototype_head
            adaptation.prototype_head = lambda weights: tuple(t.detach().requires_grad_() for t in initial(weights))
        logits = adapted_query_logits(adaptation, InnerLoop(1, 0, 0.01, prototype_head=True), training=True)
        F.cross_entropy(logits, torch.from_numpy(labels[SUPPORT:])).backward()
        gradients[detached] = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert float((gradients[False] - gradients[True]).norm()) > 1e-3 * float(gradients[True].norm())


@pytest.mark.parametrize("prototype_head", [False, True])
def test_torch_and_tf_adapt_to_the_same_query_logits(prototype_head):
    images, labels = episode(5)
    loop = InnerLoop(3, 2, 0.05, prototype_head)
    in_torch = adapted_query_logits(torch_adaptation(images, labels), loop, training=False).detach().numpy()
    in_tf = adapted_query_logits(tf_adaptation(images, labels), loop, training=False).numpy()
    np.testing.assert_allclose(in_tf, in_torch, rtol=1e-4, atol=1e-4 * float(np.abs(in_torch).max()))


@pytest.mark.parametrize("prototype_head", [False, True])
def test_a_bucketed_support_pass_adapts_as_the_unpadded_one(prototype_head):
    """With shape buckets the inner loop embeds the support's bucket of rows (here: the query
    rows as well): the rows past the support enter no moment and no loss, so the adapted query
    logits are the unpadded loop's."""
    images, labels = episode(3)
    loop = InnerLoop(3, 0, 0.1, prototype_head)
    plain = torch_adaptation(images, labels)
    bucketed = torch_adaptation(images, labels)
    bucketed.support_rows = SUPPORT + QUERY
    with torch.enable_grad():
        expected = adapted_query_logits(plain, loop, training=True).detach().numpy()
        got = adapted_query_logits(bucketed, loop, training=True).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
