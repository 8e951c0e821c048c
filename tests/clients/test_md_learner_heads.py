"""Meta-Dataset's test-time learners on fixed features (``clients.md_fixed_features``): the
k-NN baseline is one nearest neighbour, brute force; Matching Networks' logits are the
semi-cosine softmax computed by hand; and each learner is told apart from the others on an
episode built so that they disagree (a learner swapped for another fails here)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clients.md_fixed_features import (DEFAULT_LEARNERS, LEARNERS, learner_settings, matching_log_probabilities,
                                       matching_predictions, nearest_neighbour_predictions, predict,
                                       reference_l2_normalise)


def _brute_force_nearest(support, labels, query, distance):
    predicted = []
    for q in query.tolist():
        best, best_label = math.inf, None
        for s, label in zip(support.tolist(), labels.tolist(), strict=True):
            if distance == "l2":
                d = math.dist(q, s)
            else:
                d = -sum(a * b for a, b in zip(q, s, strict=True)) / (math.hypot(*q) * math.hypot(*s))
            if d < best:  # strictly smaller: the first of equals wins, as tf.nn.top_k
                best, best_label = d, label
        predicted.append(best_label)
    return predicted


@pytest.mark.parametrize("distance", ["l2", "cosine"])
def test_knn_is_the_nearest_support_image_by_brute_force(distance):
    rng = np.random.RandomState(4)
    for _ in range(25):
        ways, dim = rng.randint(2, 6), rng.randint(1, 9)
        labels = np.concatenate([np.arange(ways), rng.randint(0, ways, rng.randint(0, 12))])
        support = rng.normal(0, 1, (len(labels), dim))
        query = rng.normal(0, 1, (rng.randint(1, 9), dim))
        assert nearest_neighbour_predictions(support, labels, query, distance).tolist() == \
            _brute_force_nearest(support, labels, query, distance)


def test_knn_ties_go_to_the_first_support_image():
    support = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert nearest_neighbour_predictions(support, np.array([2, 0, 1]), np.array([[2.0, 0.0]]), "l2").tolist() == [2]


def test_matchingnet_logits_are_the_semi_cosine_softmax():
    support = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]])
    labels = np.array([0, 1, 1])
    query = np.array([[2.0, 0.0]])
    # support normalised: (0.6, 0.8), (1, 0), (0, 1); the query not: similarities 1.2, 2, 0
    total = math.exp(1.2) + math.exp(2.0) + math.exp(0.0)
    expected = [math.log(math.exp(1.2) / total), math.log((math.exp(2.0) + 1.0) / total)]
    assert matching_log_probabilities(support, labels, query, 2)[0].tolist() == pytest.approx(expected, rel=1e-12)


def test_matchingnet_normalises_the_support_with_the_references_epsilon():
    """``tf.nn.l2_normalize(x, epsilon=1e-3)``: a support row of norm 0.01 is divided by
    sqrt(1e-3), not by its norm."""
    tiny = np.array([[0.01, 0.0]])
    assert reference_l2_normalise(tiny, 1e-3)[0].tolist() == pytest.approx([0.01 / math.sqrt(1e-3), 0.0])
    support = np.array([[0.01, 0.0], [0.0, 1.0]])
    query = np.array([[5.0, 0.0]])
    similarities = [5.0 * 0.01 / math.sqrt(1e-3), 0.0]
    mass = [math.exp(s) / sum(math.exp(t) for t in similarities) for s in similarities]
    assert np.exp(matching_log_probabilities(support, np.array([0, 1]), query, 2))[0].tolist() == \
        pytest.approx(mass, rel=1e-12)


def test_a_class_without_support_images_has_no_attention():
    logits = matching_log_probabilities(np.array([[1.0, 0.0]]), np.array([0]), np.array([[1.0, 1.0]]), 2)
    assert logits[0, 0] == 0.0 and logits[0, 1] == -math.inf


# One support image of class 0 along (1, 0); three of class 1 a little further from the query's
# direction. The nearest image, by either distance, and the nearest class mean are class 0's;
# Matching Networks sum the attention over a class's images: class 1.
DISAGREEING_SUPPORT = np.array([[1.0, 0.0], [0.9, 0.436], [0.9, 0.436], [0.9, 0.436]])
DISAGREEING_LABELS = np.array([0, 1, 1, 1])
DISAGREEING_QUERY = np.array([[1.0, 0.2]])
# Class 0's two images lie 30 degrees either side of the query, their mean on it; class 1's one
# image 10 degrees off and five times as long: the nearest image by cosine is class 1's, the
# nearest by Euclidean distance and the nearest mean class 0's.
SPLIT_SUPPORT = np.array([[1.0, 0.577], [1.0, -0.577], [5.0, 0.88]])
SPLIT_LABELS = np.array([0, 0, 1])
SPLIT_QUERY = np.array([[1.0, 0.0]])


def test_each_learner_is_told_apart_from_the_others():
    def predicted(learner, support, labels, query):
        return predict(learner, support, labels, query, 2).tolist()

    assert predicted("matchingnet", DISAGREEING_SUPPORT, DISAGREEING_LABELS, DISAGREEING_QUERY) == [1]
    assert predicted("knn", DISAGREEING_SUPPORT, DISAGREEING_LABELS, DISAGREEING_QUERY) == [0]
    assert predicted("prototypes", DISAGREEING_SUPPORT, DISAGREEING_LABELS, DISAGREEING_QUERY) == [0]
    assert predicted("knn", SPLIT_SUPPORT, SPLIT_LABELS, SPLIT_QUERY) == [1]
    assert predicted("prototypes", SPLIT_SUPPORT, SPLIT_LABELS, SPLIT_QUERY) == [0]
    assert nearest_neighbour_predictions(SPLIT_SUPPORT, SPLIT_LABELS, SPLIT_QUERY, "l2").tolist() == [0]


def test_matchingnet_leaves_the_query_unnormalised():
    """The query's length sharpens the semi-cosine attention: 100 times the query of the
    disagreeing episode puts the mass on class 0's single closest image; the exact cosine
    (``exact_cosine_distance``, an option no shipped configuration sets) does not change."""
    long_query = 100.0 * DISAGREEING_QUERY
    assert matching_predictions(DISAGREEING_SUPPORT, DISAGREEING_LABELS, long_query, 2).tolist() == [0]
    assert matching_predictions(DISAGREEING_SUPPORT, DISAGREEING_LABELS, long_query, 2, exact_cosine=True).tolist() \
        == matching_predictions(DISAGREEING_SUPPORT, DISAGREEING_LABELS, DISAGREEING_QUERY, 2,
                                exact_cosine=True).tolist() == [1]


def test_every_learner_says_what_defines_its_numbers():
    assert set(DEFAULT_LEARNERS) <= set(LEARNERS)
    described = {learner: learner_settings(learner) for learner in LEARNERS}
    assert described["knn"] == {"neighbours": 1, "distance": "cosine", "features": "raw"}
    assert len({str(v) for v in described.values()}) == len(LEARNERS)
    with pytest.raises(ValueError, match="expected one of prototypes, logreg, knn, matchingnet"):
        learner_settings("relationnet")


# ---- the MAML family's loop (clients.md_learners.adapted_query_logits), framework-free -----------


class _Recorded:
    """An Adaptation of NumPy arrays whose gradients are fixed: what the loop does with them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def initial_weights(self):
        return [np.array([1.0, 2.0])]

    def zero_head(self):
        self.calls.append("zero")
        return np.zeros(2), np.zeros(1)

    def prototype_head(self, weights):
        self.calls.append("prototypes")
        return 2.0 * weights[0], -np.array([weights[0] @ weights[0]])

    def support_gradients(self, weights, head):
        self.calls.append("step")
        return [np.array([0.5, -1.0])], (np.ones(2), np.ones(1))

    def query_logits(self, weights, head):
        return weights, head


def test_the_maml_loop_takes_its_steps_from_the_initial_weights():
    from clients.md_learners import InnerLoop, adapted_query_logits

    loop = InnerLoop(steps=3, extra_eval_steps=2, alpha=0.1, prototype_head=False)
    recorded = _Recorded()
    (weights,), (weight, bias) = adapted_query_logits(recorded, loop, training=True)
    assert recorded.calls == ["zero", "step", "step", "step"]
    assert weights.tolist() == pytest.approx([1.0 - 3 * 0.05, 2.0 + 3 * 0.1])
    assert weight.tolist() == pytest.approx([-0.3, -0.3]) and bias.tolist() == pytest.approx([-0.3])
    recorded = _Recorded()
    adapted_query_logits(recorded, InnerLoop(3, 2, 0.1, prototype_head=True), training=False)
    assert recorded.calls == ["prototypes"] + ["step"] * 5  # evaluation: the extra steps


def test_the_inner_loop_belongs_to_the_adapting_heads():
    from argparse import Namespace

    from clients.md_learners import inner_loop

    args = Namespace(maml_steps=10, maml_eval_steps=5, maml_alpha=0.0992)
    assert inner_loop(args, "protonet") is None and inner_loop(args, "matchingnet") is None
    assert inner_loop(args, "maml").prototype_head is False and inner_loop(args, "protomaml").prototype_head is True
    assert inner_loop(args, "maml").steps_for(False) == 15 and inner_loop(args, "maml").steps_for(True) == 10
