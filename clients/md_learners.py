"""Meta-Dataset's learners as the MD trainer's ``--model`` values: how each trains and which
episode head classifies its validation and test episodes (seed 002, section 2 and Table 1;
../shared/reference/md_learners.md, section 1). Framework-free: the torch and tf trainers map
each metric head's name to their own differentiable function (``EPISODE_HEADS`` in their models
modules, held to the NumPy references of ``clients.md_fixed_features``), and run the episode
loops below (MAML's inner loop, Finetune's test-time training) over their own explicit-weight
operations (``clients.torch.adaptation``, ``clients.tf.adaptation``).

- ``protonet``: episodes; logits minus the squared Euclidean distance to each class mean.
- ``matchingnet``: episodes; logits the log attention mass of each class (semi-cosine).
- ``baseline``: plain batches of the all-way problem through a linear head; its episodes
  classified with prototypes, MD's "ProtoNet inference" (section 5, "Effect of meta-training").
- ``knn``: the k-NN baseline: trained as ``baseline``, its episodes classified by the nearest
  support image (cosine distance, the best configurations').
- ``maml``: first-order MAML (``MAMLLearner``, meta_dataset/learners/optimization_learners.py):
  a linear head zeroed in every episode; ``--maml-steps`` SGD steps of size ``--maml-alpha`` on
  the support set's mean cross-entropy, each re-embedding the support set, updating the whole
  backbone (batch-norm scale and offset included: the reference's ``adapt_batch_norm`` check
  never matches inside its loop, md_learners.md 1.6) and the head; ``--maml-eval-steps`` more at
  validation and test; the query classified by the adapted weights, its batch norms taking the
  moments of the support set re-embedded with them. First order: the outer gradient reaches the
  initial weights through the identity of theta - alpha g alone.
- ``finetune``: the Finetune baseline (``BaselineFinetuneLearner``): trained as ``baseline``; on
  each validation and test episode a new linear head (truncated normal, sigma 0.1, bias 0.1, drawn
  from the episode's own seed so both frameworks draw the same) trained for ``--finetune-steps``
  steps of SGD or TF1's Adam (its slots new in every episode) at ``--finetune-lr`` on the whole
  support set's summed cross-entropy, the head alone on the support features or, with
  ``--finetune-all-layers``, the backbone too (under SGD without the batch norms' scale and
  offset: the reference's step skips variables so named); the query, embedded alone (its own
  batch moments, as the reference's last pass), through the result.
- ``relationnet``: Relation Networks (``RelationNetworkLearner``): episodes; the embedding kept
  as a feature map (``relation_map``), each class's prototype the mean support map, each
  (prototype, query) pair concatenated on channels (prototype first) through the relation
  module (2 x [3 x 3 conv 64 SAME, batch norm on the pairs' own moments, ReLU, 2 x 2 max-pool
  while the side is above 1], FC 8 + ReLU, FC 1 + sigmoid); the scores are the logits, the
  loss their mean squared error to the one-hot labels; its preset normalises support and
  query each with its own moments (``--batch-norm transductive``, relationnet_config.gin).
- ``protomaml``: first-order Proto-MAML: ``maml`` with the head initialised in every episode
  from the support prototypes c (computed with the initial weights) as W = 2c, b = -||c||^2, the
  outer gradient flowing through that initialisation into the backbone.

``--eval-learner`` names another head for the validation and test episodes: the inference-only
variants are ``--model baseline --eval-learner protonet|matchingnet|protomaml``; VTAB+MD's
transfer learners are test-time procedures only (``TRANSFER_LEARNERS``):

- ``md-transfer``: MD-Transfer (VTAB+MD section 4.1): Finetune's loop with a cosine head x10
  under weight norm, TF1's Adam at 0.01 for 100 steps on all layers, the whole support set each step.
- ``bit-md``: BiT's transfer heuristic on MD-v2 (VTAB+MD section 4.2, BiT-HyperRule for small
  sets): a zeroed linear head and all layers, SGD with momentum 0.9 at 0.003 under the rule's
  warm-up and decays, 500 steps of batches of 512 drawn from the support set, the mean loss,
  at 224 px.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


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
    MDLearner("finetune", "batches", "finetune", "optimization_learners.py: BaselineFinetuneLearner"),
    MDLearner("maml", "episodes", "maml", "optimization_learners.py: MAMLLearner (first_order, zero_fc_layer)"),
    MDLearner("protomaml", "episodes", "protomaml",
              "optimization_learners.py: MAMLLearner (first_order, proto_maml_fc_layer_init)"),
    MDLearner("relationnet", "episodes", "relationnet", "metric_learners.py: RelationNetworkLearner"),
)}
ADAPTING = ("maml", "protomaml")
"""The learners that adapt the backbone on each episode's support set (``InnerLoop``)."""
MAML_STEPS, MAML_EVAL_STEPS, MAML_ALPHA = 5, 0, 0.01
"""learners/maml_config.gin: num_update_steps, additional_evaluation_update_steps, alpha."""
FINETUNE_STEPS, FINETUNE_LR = 5, 1e-4
"""learners/baselinefinetune_config.gin: num_finetune_steps, finetune_lr."""
ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON = 0.9, 0.999, 1e-8
"""tf.train.AdamOptimizer's defaults (the reference's finetuning optimizer)."""
HEAD_STDDEV, HEAD_BIAS = 0.1, 0.1
"""models/functional_backbones.py weight_variable (truncated normal) and bias_variable (constant)."""
MODELS = tuple(LEARNERS)
EPISODE_HEADS = ("protonet", "matchingnet", "knn", "finetune", "maml", "protomaml", "relationnet", "md-transfer",
                 "bit-md")
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
    if eval_learner == "relationnet" and model != "relationnet":
        raise ValueError(f"eval learner: got relationnet for --model {model}, but its relation module is trained "
                         "with it on episodes (MD section 5: no inference-only RelationNet); expected another head")
    return eval_learner


# ---- RelationNet: the relation module's input, once for both frameworks ---------------------------

MAP_CHANNELS = 64
FLATTENED_MAPS = ("conv4", "md-conv4", "md-relationnet-convnet")
"""The backbones whose embedding is a flattened map of ``MAP_CHANNELS`` channels (torch (C, H, W),
tf (H, W, C)): RelationNet unflattens it (the reference's ``keep_spatial_dims``). Any other
embedding enters the relation module as a 1 x 1 map of its features."""
RELATION_DEPTH, RELATION_HIDDEN = 64, 8
"""functional_backbones.py ``relation_module``: two 3 x 3 convolutions of 64, then FC 8, FC 1."""
RELATION_BN_EPSILON = 1e-5
"""functional_backbones.py ``bn``'s variance epsilon."""


def relation_map(backbone: str, dim: int) -> tuple[int, int]:
    """(channels, side) of the feature map behind an embedding of ``dim`` features."""
    if backbone in FLATTENED_MAPS:
        side = int(round((dim // MAP_CHANNELS) ** 0.5))
        if MAP_CHANNELS * side * side == dim:
            return MAP_CHANNELS, side
    return dim, 1


def relation_pooled_side(side: int) -> int:
    """The side after the relation module's two blocks, each pooling 2 x 2 / 2 (VALID) only
    while the side is above 1 (the reference's ``if layer.shape[1] > 1``)."""
    for _ in range(2):
        if side > 1:
            side //= 2
    return side


# ---- the MAML family's episode: once, for both frameworks ---------------------------------------


@dataclass(frozen=True)
class InnerLoop:
    """fo-MAML's inner loop as a run's flags set it."""

    steps: int          # SGD steps on the support set in training (--maml-steps)
    extra_eval_steps: int  # more at validation and test (--maml-eval-steps)
    alpha: float        # their step size (--maml-alpha)
    prototype_head: bool  # Proto-MAML's head initialisation (else zeros)

    def steps_for(self, training: bool) -> int:
        return self.steps + (0 if training else self.extra_eval_steps)


def inner_loop(args: Any, head: str) -> InnerLoop | None:
    """The inner loop of an episode classified by ``head`` (the model's in training, the
    evaluation's at validation and test) under the run's flags; None for a head that does not adapt."""
    if head not in ADAPTING:
        return None
    return InnerLoop(args.maml_steps, args.maml_eval_steps, args.maml_alpha, head == "protomaml")


class Adaptation(Protocol):
    """What a framework supplies for one episode of the MAML family: functions of explicit
    weights (a list of tensors in the backbone's parameter order), so the loop below is the
    same code in torch and tf."""

    def initial_weights(self) -> list[Any]: ...
    def zero_head(self) -> tuple[Any, Any]: ...
    def prototype_head(self, weights: list[Any]) -> tuple[Any, Any]: ...
    def support_gradients(self, weights: list[Any], head: tuple[Any, Any]) -> tuple[list[Any], tuple[Any, Any]]: ...
    def query_logits(self, weights: list[Any], head: tuple[Any, Any]) -> Any: ...


def descend(values: Sequence[Any], gradients: Sequence[Any], alpha: float) -> list[Any]:
    """One plain SGD step, theta - alpha g (the gradients carry no graph: first order)."""
    return [value - alpha * gradient for value, gradient in zip(values, gradients, strict=True)]


def adapted_query_logits(adaptation: Adaptation, loop: InnerLoop, training: bool,
                         on_step: Callable[[int, list[Any], tuple[Any, Any]], None] | None = None) -> Any:
    """The query logits of one episode after the inner loop (``MAMLLearner.forward_pass``):
    the head zeroed or set from the prototypes of the initial weights, ``steps_for(training)``
    first-order SGD steps on the backbone and the head, the query through the adapted weights.
    ``on_step`` sees each step's weights and head (tests)."""
    weights = adaptation.initial_weights()
    head = adaptation.prototype_head(weights) if loop.prototype_head else adaptation.zero_head()
    for step in range(loop.steps_for(training)):
        weight_gradients, head_gradients = adaptation.support_gradients(weights, head)
        weights = descend(weights, weight_gradients, loop.alpha)
        head = tuple(descend(head, head_gradients, loop.alpha))  # type: ignore[assignment]
        if on_step is not None:
            on_step(step, weights, head)
    return adaptation.query_logits(weights, head)


# ---- the Finetune baseline's episode and the transfer learners': once, for both frameworks -------


@dataclass(frozen=True)
class Classifier:
    """A linear head's form (the reference's ``linear_classifier``): plain (``f W^T + b``);
    cosine (the features and, without weight norm, W's rows L2-normalised, the logits times
    ``multiplier``; no bias); and/or weight-normalised (W = g v / ||v||, g learned)."""

    cosine: bool = False
    multiplier: float = 1.0
    weight_norm: bool = False

    def describe(self) -> str:
        form = f"cosine x{self.multiplier:g}" if self.cosine else "linear"
        return form + (" + weight norm" if self.weight_norm else "")


LINEAR = Classifier()
WEIGHT_NORM_INIT_EPSILON = 1e-10
"""The data-dependent init's g = 1 / sqrt(var + epsilon) (functional_classifiers.py)."""
CLASSIFIER_EPSILON = 1e-3
"""``linear_classifier_forward_pass``'s ``tf.nn.l2_normalize`` epsilon (on the squared norm)."""
SCHEDULES = ("constant", "bit")
OPTIMIZERS = ("sgd", "adam", "momentum")


@dataclass(frozen=True)
class Finetuning:
    """Test-time training of a new head per episode (and, with ``all_layers``, a copy of the
    backbone): the Finetune baseline's, MD-Transfer's and BiT's recipes."""

    steps: int         # --finetune-steps
    lr: float          # --finetune-lr (the base rate under a schedule)
    optimizer: str     # sgd (the reference's plain step), adam (TF1's, new moments per episode), momentum
    all_layers: bool   # --finetune-all-layers
    classifier: Classifier = LINEAR
    zero_head: bool = False  # BiT's new head starts at zero (else drawn as the reference draws one)
    summed: bool = True      # the reference minimises the per-example loss vector: its gradient is the sum
    batch: int | None = None  # BiT: each step a batch of this many support examples (else the whole support set)
    schedule: str = "constant"
    momentum: float = 0.9

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"finetune optimizer: got {self.optimizer!r}, expected one of {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"finetune schedule: got {self.schedule!r}, expected one of {', '.join(SCHEDULES)}")

    def lr_at(self, step: int) -> float:
        """The rate of step ``step`` (from 1). ``bit``: BiT-HyperRule's schedule for under 20k
        examples (bit_hyperrule.py, 500 steps: linear warm-up over the first 100, counted from
        0 as BiT's loop counts, then the rate divided by 10 after steps 200, 300 and 400),
        scaled to ``steps``."""
        if self.schedule == "constant":
            return self.lr
        count = step - 1
        warmup = self.steps / 5
        if count < warmup:
            return self.lr * count / warmup
        return self.lr * 0.1 ** sum(count > self.steps * k / 5 for k in (2, 3, 4))


TRANSFER_LEARNERS: dict[str, Finetuning] = {
    # VTAB+MD section 4.1 and learn/gin/metadataset_v2/best/baselinefinetune_*.gin: the whole episode,
    # a cosine head x10 with weight norm, Adam at a constant 0.01, 100 updates, all layers
    "md-transfer": Finetuning(100, 0.01, "adam", True, Classifier(cosine=True, multiplier=10.0, weight_norm=True)),
    # VTAB+MD section 4.2 and BiT's HyperRule for MD-v2: SGD with momentum 0.9 at 0.003, 500 steps,
    # the head zeroed, the mean loss over batches of 512, the warm-up and decays of its schedule
    "bit-md": Finetuning(500, 0.003, "momentum", True, LINEAR, zero_head=True, summed=False, batch=512,
                         schedule="bit"),
}
"""VTAB+MD's transfer learners, as test-time procedures on any backbone (``--eval-learner``, ``evaluate``)."""
BIT_IMAGE_SIZE = 224
"""VTAB+MD runs BiT on MD-v2 at a fixed 224 x 224."""
IMAGE_SIZES = {"bit-md": BIT_IMAGE_SIZE}
"""The image side a test-time learner fixes (others take the run's)."""
FINETUNING = ("finetune", *TRANSFER_LEARNERS)
"""The heads that train a new classifier on each episode (``Finetuning``)."""


def classifier_of(args: Any) -> Classifier:
    """The run's ``--classifier``, ``--cosine-multiplier`` and ``--weight-norm``."""
    return Classifier(args.classifier == "cosine", args.cosine_multiplier, args.weight_norm)


def finetuning(args: Any, head: str) -> Finetuning | None:
    """The test-time training of an episode classified by ``head``: the Finetune baseline's
    from the run's flags (its new head of the run's classifier form), a transfer learner's
    fixed recipe; None for a head that trains nothing."""
    if head in TRANSFER_LEARNERS:
        return TRANSFER_LEARNERS[head]
    if head != "finetune":
        return None
    return Finetuning(args.finetune_steps, args.finetune_lr, args.finetune_optimizer, args.finetune_all_layers,
                      classifier_of(args))


def finetune_head(dim: int, ways: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A new head (W [ways, dim], b [ways]) as the reference's ``linear_classifier`` draws one:
    truncated normal of sigma 0.1 (a draw beyond two sigmas drawn again, as
    ``tf.initializers.truncated_normal``) and a bias of 0.1; from ``seed`` alone."""
    rng = np.random.default_rng(seed)
    weight = rng.normal(0.0, HEAD_STDDEV, (ways, dim))
    outside = np.abs(weight) > 2 * HEAD_STDDEV
    while outside.any():
        weight[outside] = rng.normal(0.0, HEAD_STDDEV, int(outside.sum()))
        outside = np.abs(weight) > 2 * HEAD_STDDEV
    return weight.astype(np.float32), np.full(ways, HEAD_BIAS, np.float32)


WEIGHT_NORM_STDDEV = 0.05
"""functional_classifiers.py: a weight-normalised head's directions start normal, sigma 0.05."""


def initial_head(settings: Finetuning, dim: int, ways: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An episode's new head (W [ways, dim], b [ways], g [ways]), from ``seed`` alone. A
    weight-normalised head starts as the reference's per-episode reset leaves it: directions
    normal of sigma 0.05, g = 1, b = 0 (its data-dependent init of g and b runs once per
    session there, on the first episode only, so every later episode starts here; starting
    every episode here keeps episodes independent of their order)."""
    gain = np.ones(ways, np.float32)
    if settings.zero_head:
        return np.zeros((ways, dim), np.float32), np.zeros(ways, np.float32), gain
    if settings.classifier.weight_norm:
        weight = np.random.default_rng(seed).normal(0.0, WEIGHT_NORM_STDDEV, (ways, dim)).astype(np.float32)
        return weight, np.zeros(ways, np.float32), gain
    weight, bias = finetune_head(dim, ways, seed)
    return weight, bias, gain


BATCH_STREAM = 1
"""The draw of ``support_batches`` from an episode's seed: apart from its head's."""


def support_batches(support: int, batch: int, steps: int, seed: int) -> np.ndarray:
    """[steps, batch] support indices: the support set in a new random order per pass, passes
    end to end, cut into batches (BiT's fixed batch over a small set: an image can appear
    twice in one batch)."""
    rng = np.random.default_rng([seed, BATCH_STREAM])
    passes = max(1, -(-steps * batch // support))
    order = np.concatenate([rng.permutation(support) for _ in range(passes)])
    return order[:steps * batch].reshape(steps, batch)


def finetune_inputs(settings: Finetuning, dim: int, ways: int, support: int, seed: int
                    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray | None]:
    """What an episode's test-time training draws, from its seed alone (NumPy, so both
    frameworks and every caller draw the same): the new head and, for a batched recipe, the
    support rows of each step."""
    rows = None if settings.batch is None else support_batches(support, settings.batch, settings.steps, seed)
    return initial_head(settings, dim, ways, seed), rows


class Finetunable(Protocol):
    """What a framework supplies for one episode's test-time training; a head is (W, b, g)
    (``initial_head``) classified by ``settings.classifier``."""

    def initial_weights(self) -> list[Any]: ...
    def support_features(self) -> Any: ...
    def head_gradients(self, weights: list[Any] | None, features: Any, head: tuple[Any, ...], settings: Finetuning,
                       rows: Any | None) -> tuple[list[Any], tuple[Any, ...]]: ...
    def batch_norm_parameters(self) -> list[bool]: ...
    def query_alone_logits(self, weights: list[Any], head: tuple[Any, ...], settings: Finetuning) -> Any: ...


def tf1_adam(values: Sequence[Any], gradients: Sequence[Any], moments: list[tuple[Any, Any]], step: int,
             lr: float) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """One step of ``tf.train.AdamOptimizer`` (its epsilon outside the bias correction): the new
    values and first and second moments; ``step`` counts from 1."""
    rate = lr * (1.0 - ADAM_BETA2 ** step) ** 0.5 / (1.0 - ADAM_BETA1 ** step)
    new_values, new_moments = [], []
    for value, gradient, (first, second) in zip(values, gradients, moments, strict=True):
        first = ADAM_BETA1 * first + (1.0 - ADAM_BETA1) * gradient
        second = ADAM_BETA2 * second + (1.0 - ADAM_BETA2) * gradient * gradient
        new_values.append(value - rate * first / (second ** 0.5 + ADAM_EPSILON))
        new_moments.append((first, second))
    return new_values, new_moments


def momentum_step(values: Sequence[Any], gradients: Sequence[Any], velocities: list[Any], lr: float,
                  momentum: float) -> tuple[list[Any], list[Any]]:
    """One step of SGD with momentum as torch's ``SGD`` and TF's ``MomentumOptimizer`` take it
    (v = m v + g, theta - lr v; v starts at zero)."""
    velocities = [momentum * velocity + gradient for velocity, gradient in zip(velocities, gradients, strict=True)]
    return [value - lr * velocity for value, velocity in zip(values, velocities, strict=True)], velocities


def finetuned_query_logits(finetunable: Finetunable, settings: Finetuning, head: tuple[Any, ...],
                           rows: Any | None = None) -> Any:
    """The query logits of one episode after test-time training from the new ``head``
    (``initial_head``, as the framework's tensors; ``BaselineFinetuneLearner.compute_logits``
    for the Finetune baseline and MD-Transfer), nothing of which outlives the episode.
    ``rows``: ``support_batches``'s indices (as the framework's tensor) where ``settings.batch``."""
    weights = finetunable.initial_weights()
    features = None if settings.all_layers else finetunable.support_features()
    trained = list(head) + (weights if settings.all_layers else [])
    slots = [(0.0 * t, 0.0 * t) for t in trained]
    frozen = [False] * len(head) + (finetunable.batch_norm_parameters() if settings.all_layers else [])
    for step in range(1, settings.steps + 1):
        weight_gradients, head_gradients = finetunable.head_gradients(
            weights if settings.all_layers else None, features, head, settings,
            None if rows is None else rows[step - 1])
        gradients = [*head_gradients, *(weight_gradients if settings.all_layers else [])]
        lr = settings.lr_at(step)
        if settings.optimizer == "adam":
            trained, slots = tf1_adam(trained, gradients, slots, step, lr)
        elif settings.optimizer == "momentum":
            trained, velocities = momentum_step(trained, gradients, [first for first, _ in slots], lr,
                                                settings.momentum)
            slots = [(velocity, velocity) for velocity in velocities]
        else:  # gradient_descent_step: no step for the batch norms' scale and offset
            trained = [value if skip else value - lr * gradient
                       for value, gradient, skip in zip(trained, gradients, frozen, strict=True)]
        head = tuple(trained[:len(head)])
        if settings.all_layers:
            weights = trained[len(head):]
    return finetunable.query_alone_logits(weights, head, settings)
