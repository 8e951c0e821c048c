"""Meta-Dataset's learners as the MD trainer's ``--model`` values: how each trains and which
episode head classifies its validation and test episodes (seed 002, section 2 and Table 1;
../shared/reference/md_learners.md, section 1). Framework-free: the torch and tf trainers map
each head's name to their own differentiable function (``EPISODE_HEADS`` in their models
modules), which tests/clients/test_md_learner_heads_frameworks.py holds to the NumPy
references of ``clients.md_fixed_features``.

- ``protonet``: episodes; logits minus the squared Euclidean distance to each class mean.
- ``matchingnet``: episodes; logits the log attention mass of each class (semi-cosine).
- ``baseline``: plain batches of the all-way problem through a linear head; its episodes
  classified with prototypes, MD's "ProtoNet inference" (section 5, "Effect of meta-training").
- ``knn``: the k-NN baseline: trained as ``baseline``, its episodes classified by the nearest
  support image (cosine distance, the best configurations').

``--eval-learner`` names another head for the validation and test episodes: the inference-only
variants are ``--model baseline --eval-learner protonet|matchingnet``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MDLearner:
    name: str
    trains_on: str   # "episodes" or "batches" (the all-way problem, through a linear head)
    head: str        # the episode head of its training episodes (episodic) and, by default, of its evaluation
    reference: str   # the reference's class (meta_dataset/learners/)


LEARNERS: dict[str, MDLearner] = {learner.name: learner for learner in (
    MDLearner("protonet", "episodes", "protonet", "metric_learners.py: PrototypicalNetworkLearner"),
    MDLearner("matchingnet", "episodes", "matchingnet", "metric_learners.py: MatchingNetworkLearner"),
    MDLearner("baseline", "batches", "protonet", "baseline_learners.py: BaselineLearner, evaluated as "
              "PrototypicalNetworkLearner (learn/gin/default/prototypical_inference_*.gin)"),
    MDLearner("knn", "batches", "knn", "baseline_learners.py: BaselineLearner (1-NN, knn_distance 'cosine')"),
)}
MODELS = tuple(LEARNERS)
EPISODE_HEADS = ("protonet", "matchingnet", "knn")
"""The heads an episode can be classified with (``--eval-learner``)."""


def md_learner(name: str) -> MDLearner:
    if name not in LEARNERS:
        raise ValueError(f"model: got {name!r}, expected one of {', '.join(MODELS)}")
    return LEARNERS[name]


def episodic(name: str) -> bool:
    """Whether ``--model name`` trains on episodes (else on plain batches through a head)."""
    return md_learner(name).trains_on == "episodes"


def eval_head(model: str, eval_learner: str | None) -> str:
    """The head of the validation and test episodes: ``--eval-learner``, else the model's own."""
    if eval_learner is None:
        return md_learner(model).head
    if eval_learner not in EPISODE_HEADS:
        raise ValueError(f"eval learner: got {eval_learner!r}, expected one of {', '.join(EPISODE_HEADS)}")
    return eval_learner
