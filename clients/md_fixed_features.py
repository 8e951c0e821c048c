"""Meta-Dataset episodes with frozen features: the standard fixed-feature learners (pure
NumPy, plus scikit-learn for the linear head), the same in both frameworks.

A framework only embeds an episode's images (``clients.backbone_contract.FeatureExtractor``);
what is learned on the support set and predicted for the query set is computed here, so
``python -m clients.torch evaluate`` and ``python -m clients.tf evaluate`` score the same
features identically.

- ``prototypes``: nearest centroid, as Prototypical Networks classify and as Meta-Dataset's
  inference-only baselines evaluate: each class's mean support feature, a query assigned
  to the class whose mean is nearest in squared Euclidean distance (the distance
  ``clients.torch.models.prototype_logits`` computes, here in float64; ties: the lower label).
- ``logreg``: a linear head fitted on each support set, as in Tian et al., "Rethinking
  Few-Shot Image Classification: a Good Embedding Is All You Need?" (RFS, ECCV 2020) and
  Chen et al., "A Closer Look at Few-shot Classification" (ICLR 2019): support and query
  features L2-normalised, then scikit-learn's ``LogisticRegression`` with RFS's settings:
  L2 penalty, C = 1, lbfgs, at most 1000 iterations, multinomial (scikit-learn's only
  multi-class form since 1.5), ``random_state`` 0. lbfgs is deterministic, so a repeated
  episode gives the same predictions.

- ``knn``: Meta-Dataset's k-NN baseline at test time (``BaselineLearner.compute_logits``,
  meta_dataset/learners/baseline_learners.py): each query takes the label of its single
  nearest support image, by cosine distance (the best k-NN configurations' ``knn_distance``;
  ``KNN_DISTANCES`` also has the class default, plain Euclidean); ties: the first support image,
  as ``tf.nn.top_k``.
- ``matchingnet``: Matching Networks as Meta-Dataset computes them (``MatchingNetworkLearner``,
  meta_dataset/learners/metric_learners.py): no full-context embeddings; the support features
  L2-normalised with ``tf.nn.l2_normalize``'s epsilon 1e-3 on the squared norm, the query's left
  as they are ("semi-cosine", every shipped configuration); a softmax over all support images of
  the dot products; a class's probability the attention on its support images.

Each returns the predicted label of every query image (0 .. ways - 1).
"""

from __future__ import annotations

import warnings

import numpy as np

LEARNERS = ("prototypes", "logreg", "knn", "matchingnet")
DEFAULT_LEARNERS = ("prototypes", "logreg")
KNN_DISTANCES = ("cosine", "l2")
KNN_DISTANCE = "cosine"        # best/baseline_{imagenet,all}.gin: BaselineLearner.knn_distance
MATCHING_EPSILON = 1e-3        # MatchingNetworkLearner: tf.nn.l2_normalize(..., epsilon=1e-3)
REFERENCE_EPSILON = 1e-12      # tf.nn.l2_normalize's default: the floor of the squared norm
LOGREG_C = 1.0
LOGREG_MAX_ITER = 1000


def l2_normalise(features: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (at least 1e-12, as ``torch.nn.functional.normalize``)."""
    x = np.asarray(features, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def reference_l2_normalise(features: np.ndarray, epsilon: float = REFERENCE_EPSILON) -> np.ndarray:
    """Rows divided by the square root of max(squared norm, ``epsilon``): ``tf.nn.l2_normalize``,
    which the reference's learners call (its floor is on the squared norm, unlike ``l2_normalise``)."""
    x = np.asarray(features, np.float64)
    return x / np.sqrt(np.maximum((x * x).sum(1, keepdims=True), epsilon))


def prototype_distances(support: np.ndarray, support_labels: np.ndarray, query: np.ndarray,
                        ways: int) -> np.ndarray:
    """Squared Euclidean distance [Nq, ways] of each query feature to each class's mean
    support feature (a class without support images is infinitely far)."""
    support = np.asarray(support, np.float64)
    query = np.asarray(query, np.float64)
    labels = np.asarray(support_labels, np.int64)
    one_hot = np.eye(ways, dtype=np.float64)[labels]                       # [Ns, W]
    counts = one_hot.sum(0)
    prototypes = one_hot.T @ support / np.maximum(counts, 1.0)[:, None]    # [W, D]
    distances = ((query ** 2).sum(1, keepdims=True) - 2.0 * query @ prototypes.T
                 + (prototypes ** 2).sum(1)[None, :])
    distances[:, counts == 0] = np.inf
    return distances


def prototype_predictions(support: np.ndarray, support_labels: np.ndarray, query: np.ndarray,
                          ways: int) -> np.ndarray:
    """The nearest class mean of each query feature (int64 [Nq])."""
    return np.argmin(prototype_distances(support, support_labels, query, ways), axis=1).astype(np.int64)


def logreg_predictions(support: np.ndarray, support_labels: np.ndarray, query: np.ndarray,
                       ways: int) -> np.ndarray:
    """A multinomial logistic regression fitted on the L2-normalised support features,
    applied to the L2-normalised query features (int64 [Nq]); RFS's settings."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    labels = np.asarray(support_labels, np.int64)
    present = np.unique(labels)
    if len(present) == 1:  # nothing to separate (never in MD, whose episodes have at least 5 ways)
        return np.full(len(query), present[0], np.int64)
    model = LogisticRegression(C=LOGREG_C, solver="lbfgs", max_iter=LOGREG_MAX_ITER, random_state=0)
    with warnings.catch_warnings():  # RFS keeps what 1000 iterations reach, as this does
        warnings.simplefilter("ignore", ConvergenceWarning)
        # one-shot supports have as many classes as samples, which scikit-learn takes for a
        # sign of regression targets; they are class labels
        warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
        model.fit(l2_normalise(support), labels)
    return np.asarray(model.predict(l2_normalise(query)), np.int64)


def nearest_neighbour_distances(support: np.ndarray, query: np.ndarray, distance: str = KNN_DISTANCE) -> np.ndarray:
    """[Nq, Ns]: the reference's k-NN distances, Euclidean (not squared) or minus the cosine
    similarity of the ``tf.nn.l2_normalize``d features."""
    support = np.asarray(support, np.float64)
    query = np.asarray(query, np.float64)
    if distance == "l2":
        return np.sqrt(np.maximum((query ** 2).sum(1, keepdims=True) - 2.0 * query @ support.T
                                  + (support ** 2).sum(1)[None, :], 0.0))
    if distance == "cosine":
        return -(reference_l2_normalise(query) @ reference_l2_normalise(support).T)
    raise ValueError(f"distance: got {distance!r}, expected one of {', '.join(KNN_DISTANCES)}")


def nearest_neighbour_predictions(support: np.ndarray, support_labels: np.ndarray, query: np.ndarray,
                                  distance: str = KNN_DISTANCE) -> np.ndarray:
    """The label of each query feature's nearest support feature (int64 [Nq]); the first on ties."""
    nearest = np.argmin(nearest_neighbour_distances(support, query, distance), axis=1)
    return np.asarray(support_labels, np.int64)[nearest]


def matching_log_probabilities(support: np.ndarray, support_labels: np.ndarray, query: np.ndarray, ways: int,
                               exact_cosine: bool = False) -> np.ndarray:
    """[Nq, ways]: the log of each class's attention mass (the reference's logits; minus
    infinity for a class without support images)."""
    support = reference_l2_normalise(support, MATCHING_EPSILON)
    query = np.asarray(query, np.float64)
    if exact_cosine:
        query = reference_l2_normalise(query, MATCHING_EPSILON)
    similarities = query @ support.T                                        # [Nq, Ns]
    similarities -= similarities.max(1, keepdims=True)
    attention = np.exp(similarities)
    attention /= attention.sum(1, keepdims=True)
    probabilities = attention @ np.eye(ways, dtype=np.float64)[np.asarray(support_labels, np.int64)]
    with np.errstate(divide="ignore"):
        return np.log(probabilities)


def matching_predictions(support: np.ndarray, support_labels: np.ndarray, query: np.ndarray, ways: int,
                         exact_cosine: bool = False) -> np.ndarray:
    """The class of each query feature's largest attention mass (int64 [Nq]); the lower on ties."""
    return np.argmax(matching_log_probabilities(support, support_labels, query, ways, exact_cosine),
                     axis=1).astype(np.int64)


def learner_settings(learner: str) -> dict[str, object]:
    """What defines ``learner``'s numbers besides the features: a run's configuration records it."""
    if learner == "prototypes":
        return {"distance": "squared euclidean", "features": "raw"}
    if learner == "logreg":
        return {"solver": "lbfgs", "C": LOGREG_C, "max_iter": LOGREG_MAX_ITER, "penalty": "l2",
                "features": "l2-normalised"}
    if learner == "knn":
        return {"neighbours": 1, "distance": KNN_DISTANCE, "features": "raw"}
    if learner == "matchingnet":
        return {"similarity": "semi-cosine (support L2-normalised, epsilon 1e-3)", "attention": "softmax",
                "full_context_embeddings": False}
    raise ValueError(f"learner: got {learner!r}, expected one of {', '.join(LEARNERS)}")


def predict(learner: str, support: np.ndarray, support_labels: np.ndarray, query: np.ndarray,
            ways: int) -> np.ndarray:
    """The predicted labels of ``learner`` (one of ``LEARNERS``) for one episode's features."""
    if learner == "prototypes":
        return prototype_predictions(support, support_labels, query, ways)
    if learner == "logreg":
        return logreg_predictions(support, support_labels, query, ways)
    if learner == "knn":
        return nearest_neighbour_predictions(support, support_labels, query)
    if learner == "matchingnet":
        return matching_predictions(support, support_labels, query, ways)
    raise ValueError(f"learner: got {learner!r}, expected one of {', '.join(LEARNERS)}")
