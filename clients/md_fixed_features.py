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

Both return the predicted label of every query image (0 .. ways - 1).
"""

from __future__ import annotations

import warnings

import numpy as np

LEARNERS = ("prototypes", "logreg")
LOGREG_C = 1.0
LOGREG_MAX_ITER = 1000


def l2_normalise(features: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (at least 1e-12, as ``torch.nn.functional.normalize``)."""
    x = np.asarray(features, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


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


def predict(learner: str, support: np.ndarray, support_labels: np.ndarray, query: np.ndarray,
            ways: int) -> np.ndarray:
    """The predicted labels of ``learner`` (one of ``LEARNERS``) for one episode's features."""
    if learner == "prototypes":
        return prototype_predictions(support, support_labels, query, ways)
    if learner == "logreg":
        return logreg_predictions(support, support_labels, query, ways)
    raise ValueError(f"learner: got {learner!r}, expected one of {', '.join(LEARNERS)}")
