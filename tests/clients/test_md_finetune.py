"""The Finetune baseline's episode (``clients.md_learners.finetuned_query_logits`` over
``clients.torch.adaptation`` and ``clients.tf.adaptation``): its Adam is TF1's
``AdamOptimizer`` step for step; with the head alone it is plain logistic-regression descent on
the summed support loss, computed here in NumPy; every episode draws a new head from its own
seed; under SGD the batch norms' scale and offset stay (the reference's step skips them), under
Adam they move; torch and tf give the same query logits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from adaptation_episode import DIM, SUPPORT, WAYS, episode, tf_adaptation, torch_adaptation

import tensorflow as tf  # noqa: F401  (before torch, as every tf test file)
import torch

from clients.md_learners import (TRANSFER_LEARNERS, Classifier, Finetuning, finetune_head, finetune_inputs,
                                 finetuned_query_logits, momentum_step, support_batches, tf1_adam)


def _run(framework: str, settings: Finetuning, seed: int = 1):
    images, labels = episode(8)
    head, rows = finetune_inputs(settings, DIM, WAYS, SUPPORT, seed)
    if framework == "torch":
        with torch.no_grad():
            return finetuned_query_logits(torch_adaptation(images, labels), settings,
                                          tuple(torch.from_numpy(t) for t in head),
                                          None if rows is None else torch.from_numpy(rows)).numpy()
    return finetuned_query_logits(tf_adaptation(images, labels), settings, tuple(tf.constant(t) for t in head),
                                  None if rows is None else tf.constant(rows)).numpy()


def _optimizer(adam: bool) -> str:
    return "adam" if adam else "sgd"


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
    got = _run("torch", Finetuning(3, 0.01, _optimizer(adam), all_layers=False))
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

    def record(weights, head, settings):
        seen["weights"] = weights
        return original(weights, head, settings)

    adaptation.query_alone_logits = record
    with torch.no_grad():
        finetuned_query_logits(adaptation, Finetuning(2, 0.01, _optimizer(adam), all_layers=True),
                               tuple(torch.from_numpy(t) for t in finetune_inputs(
                                   Finetuning(2, 0.01, _optimizer(adam), True), DIM, WAYS, SUPPORT, 1)[0]))
    norms = adaptation.batch_norm_parameters()
    assert any(norms) and not all(norms)
    moved = [not torch.equal(w, p) for w, p in zip(seen["weights"], adaptation.initial_weights(), strict=True)]
    assert all(moved[i] for i, norm in enumerate(norms) if not norm)  # the convolutions move either way
    assert all(moved[i] == adam for i, norm in enumerate(norms) if norm)


@pytest.mark.parametrize(("adam", "all_layers"), [(False, False), (True, False), (False, True), (True, True)])
def test_torch_and_tf_finetune_to_the_same_query_logits(adam, all_layers):
    settings = Finetuning(4, 0.01, _optimizer(adam), all_layers)
    in_torch, in_tf = _run("torch", settings), _run("tf", settings)
    np.testing.assert_allclose(in_tf, in_torch, rtol=1e-4, atol=1e-4 * float(np.abs(in_torch).max()))
    assert not np.allclose(in_torch, _run("torch", settings, seed=2))  # another episode: another head


# ---- the heads' forms and VTAB+MD's transfer learners ---------------------------------------------


def _numpy_classifier_logits(features, head, classifier):
    weight, bias, gain = (t.astype(np.float64) for t in head)
    features = features.astype(np.float64)
    if classifier.weight_norm:
        weight = weight * (gain / np.sqrt((weight ** 2).sum(1)))[:, None]
    if not classifier.cosine:
        return features @ weight.T + bias
    features = features / np.sqrt(np.maximum((features ** 2).sum(1, keepdims=True), 1e-3))
    if not classifier.weight_norm:
        weight = weight / np.sqrt(np.maximum((weight ** 2).sum(1, keepdims=True), 1e-3))
    return classifier.multiplier * features @ weight.T


@pytest.mark.parametrize("classifier", [Classifier(), Classifier(weight_norm=True), Classifier(True, 10.0),
                                        Classifier(True, 10.0, True)], ids=lambda c: c.describe())
def test_each_head_form_is_the_references_forward_pass_in_both_frameworks(classifier):
    """functional_classifiers.py: cosine normalises the features (epsilon 1e-3 on the squared
    norm) and, without weight norm, the class weights; weight norm rescales each class's
    direction to its g; only the plain head has a bias."""
    from clients.tf.models import classifier_logits as tf_logits
    from clients.torch.models import classifier_logits as torch_logits

    rng = np.random.default_rng(0)
    features = rng.normal(size=(6, DIM)).astype(np.float32) * 3.0
    head = (rng.normal(size=(WAYS, DIM)).astype(np.float32), rng.normal(size=WAYS).astype(np.float32),
            rng.uniform(0.5, 2.0, WAYS).astype(np.float32))
    expected = _numpy_classifier_logits(features, head, classifier)
    got_torch = torch_logits(torch.from_numpy(features), [torch.from_numpy(t) for t in head], classifier).numpy()
    got_tf = tf_logits(tf.constant(features), [tf.constant(t) for t in head], classifier).numpy()
    np.testing.assert_allclose(got_torch, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_tf, expected, rtol=1e-4, atol=1e-4)
    if classifier.cosine:  # bounded by the multiplier (times g under weight norm)
        bound = classifier.multiplier * (head[2].max() if classifier.weight_norm else 1.0)
        assert np.abs(expected).max() <= bound + 1e-6


def test_bit_schedule_is_the_hyperrule_for_small_sets():
    """bit_hyperrule.py for under 20k examples: 500 steps, warm-up over 100 (BiT's loop counts
    from 0, so its first update has rate 0), the base rate, then / 10 after steps 200, 300, 400."""
    bit = TRANSFER_LEARNERS["bit-md"]
    rates = [bit.lr_at(step) for step in range(1, bit.steps + 1)]
    assert rates[0] == 0.0 and rates[50] == pytest.approx(0.003 * 50 / 100)
    assert rates[100] == rates[200] == pytest.approx(0.003)  # counts 100 and 200
    assert rates[201] == pytest.approx(3e-4) and rates[300] == pytest.approx(3e-4)
    assert rates[301] == pytest.approx(3e-5) and rates[401] == pytest.approx(3e-6) and rates[-1] == pytest.approx(3e-6)
    assert TRANSFER_LEARNERS["md-transfer"].lr_at(1) == TRANSFER_LEARNERS["md-transfer"].lr_at(100) == 0.01


def test_momentum_step_is_torchs_sgd_with_momentum_step_for_step():
    start = np.array([0.5, -1.5, 2.0], np.float32)
    target = np.array([1.0, 2.0, -3.0], np.float32)
    parameter = torch.nn.Parameter(torch.from_numpy(start.copy()))
    optimizer = torch.optim.SGD([parameter], lr=0.003, momentum=0.9)
    values, velocities = [start.copy()], [0.0 * start]
    for _ in range(5):
        gradient = 2.0 * (parameter.detach().numpy() - target)
        parameter.grad = torch.from_numpy(gradient.copy())
        optimizer.step()
        values, velocities = momentum_step(values, [gradient], velocities, 0.003, 0.9)
        np.testing.assert_allclose(values[0], parameter.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_bits_batches_cycle_through_the_support_set_from_the_episode_seed():
    rows = support_batches(SUPPORT, 512, 3, seed=5)
    assert rows.shape == (3, 512) and rows.min() == 0 and rows.max() == SUPPORT - 1
    flat = rows.reshape(-1)
    for start in range(0, len(flat) - SUPPORT, SUPPORT):  # each pass is a permutation of the support set
        assert sorted(flat[start:start + SUPPORT].tolist()) == list(range(SUPPORT))
    assert np.array_equal(rows, support_batches(SUPPORT, 512, 3, seed=5))
    assert not np.array_equal(rows, support_batches(SUPPORT, 512, 3, seed=6))


def test_md_transfer_and_bit_heads_start_as_their_recipes_say():
    transfer, _ = finetune_inputs(TRANSFER_LEARNERS["md-transfer"], DIM, WAYS, SUPPORT, 1)
    assert transfer[0].std() == pytest.approx(0.05, rel=0.2) and np.all(transfer[2] == 1.0)  # weight norm's v, g
    bit, rows = finetune_inputs(TRANSFER_LEARNERS["bit-md"], DIM, WAYS, SUPPORT, 1)
    assert not bit[0].any() and not bit[1].any()  # BiT's zeroed head
    assert rows.shape == (500, 512)


@pytest.mark.parametrize("name", ["md-transfer", "bit-md"])
def test_torch_and_tf_run_the_transfer_learners_to_the_same_query_logits(name):
    """The recipes shortened to 4 steps (bit-md's batches to 12 rows, its schedule kept): both
    frameworks, from the same drawn head and batches, end at the same logits, and training moved them."""
    settings = replace(TRANSFER_LEARNERS[name], steps=4, **({"batch": 12} if name == "bit-md" else {}))
    in_torch, in_tf = _run("torch", settings), _run("tf", settings)
    np.testing.assert_allclose(in_tf, in_torch, rtol=1e-4, atol=1e-4 * float(np.abs(in_torch).max()))
    untrained = _run("torch", replace(settings, steps=0))
    assert not np.allclose(in_torch, untrained, atol=1e-3)
