"""The TensorFlow trainer's framework part (``python -m clients.tf``): Prototypical
Networks or MD's inference-only baseline in Keras, compiled training steps, the
evaluation forward pass and ``tf.train.Checkpoint`` files. The run itself (sources,
resume, training loop, evaluation, reports, summary, exit codes) is
``clients.md_train``.

Determinism (``clients.tf.determinism``, before any model is built): with
``--deterministic`` on (the default on CPU) op determinism is on; thread counts are
fixed and the weights seeded from --seed by name (the baseline's head from
``clients.seeds.HEAD_SEED_NAME``, as torch's), so the same command gives the same weights
and evaluating the same checkpoint again gives the same metrics. The optimizer takes torch's
update rule of ``--optimizer`` (``TorchAdam``, ``TorchSGD``: ``clients.tf.optimizers``), as the
torch trainer takes it. Training and evaluation take
episodes from ``clients.core.SamplerClient`` (through ``clients.md_train``) rather than
``clients.tf.EpisodeSource``: episodes vary in shape (handled here by
``tf.function`` input signatures with unknown dimensions), and inside ``tf.data`` a
client error would surface as an opaque ``UnknownError`` instead of the server's message.

Shape buckets (``--shape-buckets``; on by default with a GPU, off on CPU): one trace
serves every shape, but cuDNN autotuning (and oneDNN's primitives on CPU) are per
shape, so episodes are padded to a few sizes (``clients.buckets``: exact, batch
norms count the valid rows only); evaluation pads each embedding chunk the same way.
The run's background feed packs each episode into that layout ahead of the step.

Distributed (a ``TF_CONFIG`` naming two or more workers; ``clients.md_train`` says what
a step, a checkpoint, the reports and the evaluation are): the trainer runs under
``tf.distribute.MultiWorkerMirroredStrategy``, one replica per worker (each worker
sees one GPU, or trains on CPU; ``--device cpu`` hides the GPUs), its rank the task's
place in the cluster (the chief, if any, is rank 0, then the workers by index). Each
worker's step runs on its own episode inside ``strategy.run``; the optimizer sums the
replicas' gradients, and each replica's loss is divided by the worker count, so the
update takes their mean. Batch norms' moving statistics are averaged over the workers
(``clients.tf.models.RowBatchNormalization``). Only rank 0 writes checkpoints (every
worker holds the same variables; writing reads no other worker's); every worker
restores the same one. Evaluation runs outside the strategy, on each worker's shard.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from clients.backbone_contract import NAMED_BACKBONES, LoadedBackbone, Preprocessing
from clients.batch_norm import EPISODE_MOMENTS
from clients.buckets import DEFAULT_RATIO, EpisodeBounds, Ladder, PackedEpisode, pack_episode, resolve_buckets_for
from clients.determinism import weights_sha256
from clients.init_weights import neutral_head, neutral_relation
from clients.md_learners import (Finetuning, InnerLoop, adapted_query_logits, classifier_of, eval_head,
                                 finetune_inputs, finetuned_query_logits, finetuning, inner_loop, md_learner,
                                 relation_map)
from clients.md_train import Batch, Framework, run_main
from clients.recipe import MOMENTUM, decayed
from clients.protocols.md import EpisodeArrays
from clients.seeds import (FINETUNE_HEAD_SEED_NAME, HEAD_SEED_NAME, MD_BACKBONE_SEED_NAME, RELATION_SEED_NAME,
                           derive_seed)
from clients.tf import models
from clients.tf.adaptation import TFAdaptation
from clients.tf.backbones import assign_neutral_head, assign_neutral_relation, load_backbone, to_model_input
from clients.tf.determinism import apply_determinism, determinism_failure, tf_record
from clients.tf.optimizers import TorchAdam, TorchSGD
from clients.errors import UsageError
from clients.trainer_args import MD_IMAGE_SIZE

keras = tf.keras
EVAL_CHUNK = 256  # images embedded per call at evaluation (bounds memory for 500-image support sets)
_CONFIG_KEY = "config/.ATTRIBUTES/VARIABLE_VALUE"
BEST = "best.npz"  # the backbone of the best validation (``clients.validation``), as Keras' get_weights
_NEXT_INDEX_KEY = "next_index/.ATTRIBUTES/VARIABLE_VALUE"


def select_device(requested: str) -> str:
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised (an earlier run in this process)
            pass
    if requested == "cpu":
        return "/CPU:0"
    if requested in ("cuda", "gpu"):
        if not gpus:
            raise UsageError(f"argument --device: got {requested}, but TensorFlow sees no GPU")
        return "/GPU:0"
    return "/GPU:0" if gpus else "/CPU:0"


def tf_config_ranks() -> tuple[int, int] | None:
    """(rank, workers) of this task in ``TF_CONFIG``'s cluster: the chief (if named) is
    rank 0, then the workers by index. None without TF_CONFIG or with one task."""
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError as error:
        raise UsageError(f"environment TF_CONFIG: got text that is not JSON ({error})") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise UsageError("environment TF_CONFIG: expected a JSON object with 'cluster' and 'task'")
    others = sorted(set(cluster) - {"chief", "worker"})
    if others:
        raise UsageError(f"environment TF_CONFIG: cluster has {', '.join(others)} tasks, expected only 'chief' and "
                         "'worker' (MultiWorkerMirroredStrategy)")
    sizes = {kind: len(cluster.get(kind) or []) for kind in ("chief", "worker")}
    if sizes["chief"] > 1:
        raise UsageError(f"environment TF_CONFIG: got {sizes['chief']} chief tasks, expected at most one")
    kind, index = task.get("type"), task.get("index", 0)
    if kind not in ("chief", "worker") or not isinstance(index, int) or not 0 <= index < sizes.get(kind, 0):
        raise UsageError(f"environment TF_CONFIG: task {task!r}, expected a 'chief' or 'worker' task of the cluster")
    workers = sizes["chief"] + sizes["worker"]
    if workers < 2:
        return None
    return (0 if kind == "chief" else sizes["chief"] + index), workers


def _accuracy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32))


class TFFramework(Framework):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        ranks = tf_config_ranks()
        if ranks is not None and args.device == "cpu":
            tf.config.set_visible_devices([], "GPU")  # the strategy would take the GPUs otherwise
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before TensorFlow's runtime starts
        self.manager: tf.train.CheckpointManager | None = None
        self._best: tuple[int, list[np.ndarray]] | None = None  # ``keep_best``
        self._ladders: dict[bytes, Ladder] = {}
        self.strategy: tf.distribute.Strategy | None = None
        self._gather: Any = None
        if ranks is not None:
            self.rank, self.world_size = ranks
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
            self.collectives = "MultiWorkerMirroredStrategy"
            replicas = self.strategy.num_replicas_in_sync
            if replicas != self.world_size:
                raise UsageError(f"environment TF_CONFIG: {self.world_size} workers train {replicas} replicas; "
                                 "expected one per worker (give each worker one GPU with CUDA_VISIBLE_DEVICES, or "
                                 "use --device cpu)")
        self.loaded: LoadedBackbone | None = None
        self.batch_norms = 0  # the backbone's batch norms that take the episode's moments (``build``)
        if args.backbone not in NAMED_BACKBONES:  # its side is known, and a wrong output refused, before any request
            self.loaded = self._load_backbone()
        self.buckets = resolve_buckets_for(args.backbone, args.shape_buckets, self.device.startswith("/GPU"))

    def _load_backbone(self) -> LoadedBackbone:
        """The backbone, its variables where the steps run (the strategy's, or the device's)."""
        with self.strategy.scope() if self.strategy is not None else tf.device(self.device):
            loaded = load_backbone(self.args, MD_IMAGE_SIZE, MD_BACKBONE_SEED_NAME)
        if not isinstance(loaded.model, keras.Model):
            raise UsageError(f"argument --backbone: {loaded.spec.target} made a {type(loaded.model).__name__}, "
                             "expected a Keras model (the trainer trains its variables and checkpoints them)")
        return loaded

    def _placement(self) -> Any:
        """Where a step runs: the strategy places its replica; one process: ``self.device``."""
        return contextlib.nullcontext() if self.strategy is not None else tf.device(self.device)

    # ---- model ----------------------------------------------------------------------------

    def build(self, num_classes: int) -> None:
        args = self.args
        training = not args.eval_only  # evaluation restores the embedding only (no head, no optimizer)
        with tf.device(self.device):  # bookkeeping, not replicated state
            self.next_index = tf.Variable(0, dtype=tf.int64, trainable=False, name="next_index")
            self.config = tf.Variable("", dtype=tf.string, trainable=False, name="config")
        if self.loaded is None:
            self.loaded = self._load_backbone()
        self.backbone, self.preprocessing = self.loaded.model, self.loaded.preprocessing
        try:
            self.batch_norms = models.episode_batch_norms(self.backbone, args.batch_norm)
        except ValueError as error:
            raise UsageError(f"argument --batch-norm: {str(error).removeprefix('batch_norm: ')}") from None
        with self.strategy.scope() if self.strategy is not None else tf.device(self.device):
            tf.keras.utils.set_random_seed(derive_seed(args.seed, HEAD_SEED_NAME))
            self.head = (models.build_head(num_classes, self.loaded.out_dim, classifier_of(args)) if num_classes
                         else None)
            if self.head is not None and args.init_seed is not None:  # the same head as torch's
                assign_neutral_head(self.head, args.backbone, args.image_size,
                                    neutral_head(self.loaded.out_dim, num_classes, args.init_seed))
            self.relation = None
            if md_learner(args.model).head == "relationnet":  # MD's init, as torch's
                self.relation_map = relation_map(args.backbone, self.loaded.out_dim)
                self.relation = models.relation_module(*self.relation_map)
                seed = args.init_seed if args.init_seed is not None else derive_seed(args.seed, RELATION_SEED_NAME)
                assign_neutral_relation(self.relation, self.relation_map[1], neutral_relation(*self.relation_map, seed))
            # MD's staircase decay of this run's updates (optimizer.iterations, restored with a resumed run)
            rate = (keras.optimizers.schedules.ExponentialDecay(args.lr, args.decay_every, args.decay_rate,
                                                                 staircase=True) if args.decay_every else args.lr)
            self.optimizer = (TorchAdam(learning_rate=rate) if args.optimizer == "adam" else
                              TorchSGD(learning_rate=rate, momentum=MOMENTUM if args.optimizer == "momentum" else 0.0))
            parts: dict[str, Any] = {"backbone": self.backbone, "next_index": self.next_index, "config": self.config}
            if training:
                parts["optimizer"] = self.optimizer
            if self.head is not None:
                parts["head"] = self.head
            if self.relation is not None:  # RelationNet's evaluation needs it: restored with the backbone
                parts["relation"] = self.relation
            self.checkpointer = tf.train.Checkpoint(**parts)
            if training:
                self.optimizer.build(self.trainable)  # slots exist before a restore fills them
        if args.init_from is not None:  # the backbone only; a checkpoint in --checkpoint-dir still wins (restore)
            self._init_backbone(args.init_from)
        if args.checkpoint_dir is not None and self.rank == 0:  # every worker holds the same variables
            self.manager = tf.train.CheckpointManager(self.checkpointer, args.checkpoint_dir, max_to_keep=3)
        head = md_learner(args.model).head
        self.train_loop = inner_loop(args, head)  # the MAML family's inner loop, else None
        self.eval_head = eval_head(args.model, args.eval_learner)
        self.eval_loop = inner_loop(args, self.eval_head)
        self._step = (self._baseline_step() if self.head is not None else
                      self._adapted_step(self.train_loop, self.buckets) if self.train_loop is not None else
                      self._protonet_step(self.buckets))
        eval_finetuning = finetuning(args, self.eval_head)
        self._evaluator = (self._finetuned_evaluator(eval_finetuning) if eval_finetuning is not None else
                           self._adapted_evaluator(self.eval_loop) if self.eval_loop is not None else
                           Evaluator(self.backbone, self.preprocessing, self.buckets, args.batch_norm,
                                     self.eval_head, self._episode_head(self.eval_head), args.bucket_ratio))

    def _init_backbone(self, given: str) -> None:
        """The backbone's variables from the tf trainer checkpoint ``given`` (a directory holding
        checkpoints, or a checkpoint prefix), nothing else of it; or one line saying what it is."""
        prefix = tf.train.latest_checkpoint(given) if os.path.isdir(given) else given
        if prefix is None or not tf.io.gfile.exists(f"{prefix}.index"):
            raise UsageError(f"argument --init-from: {given} is neither a tf trainer checkpoint nor a directory "
                             "holding one")
        try:
            tf.train.Checkpoint(backbone=self.backbone).restore(prefix).assert_existing_objects_matched().expect_partial()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise UsageError(f"argument --init-from: {prefix} holds another backbone than --backbone "
                             f"{self.args.backbone} at --image-size {self.args.image_size} "
                             f"({' '.join(str(error).split())[:200]})") from None

    @property
    def trainable(self) -> list[tf.Variable]:
        return (list(self.backbone.trainable_variables) + (list(self.head.trainable_variables) if self.head else [])
                + (list(self.relation.trainable_variables) if self.relation is not None else []))

    def _kept(self) -> list[keras.Model]:
        """What the best validated model is: the backbone, and RelationNet's relation module."""
        return [self.backbone] + ([self.relation] if self.relation is not None else [])

    def parameter_count(self) -> int:
        return models.parameter_count(self.backbone, *([self.head] if self.head else []))

    def describe(self) -> dict[str, Any]:
        assert self.loaded is not None
        return {**self.determinism.as_config(), **tf_record(self.device),
                "parameter_count": self.parameter_count(), "shape_buckets": "on" if self.buckets else "off",
                "embedding_dim": self.loaded.out_dim, "backbone_sha256": self.loaded.fingerprint,
                "preprocessing": self.loaded.preprocessing.as_config(), "batch_norm_layers": self.batch_norms}

    # ---- checkpoints ------------------------------------------------------------------------

    def checkpoint(self) -> tuple[str, dict[str, Any], int] | None:
        latest = tf.train.latest_checkpoint(self.args.checkpoint_dir) if self.args.checkpoint_dir else None
        if latest is None:
            return None
        try:
            reader = tf.train.load_checkpoint(latest)
            stored = json.loads(reader.get_tensor(_CONFIG_KEY).decode())
            next_index = int(reader.get_tensor(_NEXT_INDEX_KEY))
        except (tf.errors.OpError, ValueError) as error:
            raise UsageError(f"checkpoint {latest} is not one of this trainer's ({error})") from None
        return latest, stored, next_index

    def restore(self, path: str) -> int:
        try:
            status = self.checkpointer.restore(path).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise UsageError(f"checkpoint {path} does not fit this model: {error}") from None
        if self.args.eval_only:
            status.expect_partial()
        return int(self.next_index.numpy())

    def save(self, next_index: int, resume: dict[str, Any]) -> None:
        self.next_index.assign(next_index)
        self.config.assign(json.dumps(resume, sort_keys=True))
        if self.manager is not None:
            self.manager.save(checkpoint_number=next_index)

    def keep_best(self, update: int) -> None:
        self._best = (update, [np.array(weight) for model in self._kept() for weight in model.get_weights()])
        if self.manager is None:  # the chief writes; every worker keeps it in memory
            return
        path = os.path.join(self.args.checkpoint_dir, BEST)
        os.makedirs(self.args.checkpoint_dir, exist_ok=True)
        with open(path + ".partial", "wb") as file:
            np.savez(file, update=np.int64(update), *self._best[1])
        os.replace(path + ".partial", path)

    def restore_best(self, update: int) -> None:
        best = self._best
        path = os.path.join(self.args.checkpoint_dir, BEST) if self.args.checkpoint_dir else None
        if best is None and path is not None and os.path.exists(path):
            with np.load(path) as stored:
                best = (int(stored["update"]), [stored[f"arr_{i}"] for i in range(len(stored.files) - 1)])
        if best is None or best[0] != update:
            found = "none" if best is None else f"update {best[0]}'s"
            raise UsageError(f"the best validated backbone is update {update}'s, but {found} is kept "
                             f"({path or 'no --checkpoint-dir'})")
        weights = list(best[1])
        for model in self._kept():
            count = len(model.get_weights())
            model.set_weights(weights[:count])
            weights = weights[count:]

    # ---- compiled steps -------------------------------------------------------------------------

    def _episode_signature(self) -> list[tf.TensorSpec]:
        """An episode in the bucketed layout (``PackedEpisode``): images, labels, support, query, ways."""
        count = tf.TensorSpec((), tf.int32)
        return [tf.TensorSpec((None, self.args.image_size, self.args.image_size, 3), tf.uint8),
                tf.TensorSpec((None,), tf.int64), count, count, count]

    def _episode_step(self, logits_of: Callable[..., tf.Tensor]) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        """The step on an episode in the bucketed layout: ``logits_of(images, labels, support,
        query, ways, tape)`` gives the query logits under the step's tape (the loss the model's
        head's, ``models.head_loss``)."""
        head_name = md_learner(self.args.model).head

        def step(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor,
                 ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            rows = support + query
            with tf.GradientTape() as tape:
                logits = logits_of(images, labels, support, query, ways, tape)
                loss = models.head_loss(head_name, logits, labels[support:rows])
                replica_loss = self._replica_loss(self._regularised(loss))
            variables = self.trainable
            self.optimizer.apply_gradients(zip(tape.gradient(replica_loss, variables), variables, strict=True))
            return loss, _accuracy(logits, labels[support:rows])

        return self._compile(step, self._episode_signature())

    def _protonet_step(self, padded: bool) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        """The metric learners' step (the model's head on one pass's embeddings); ``padded``:
        trace it with batch norms counting the valid rows (without, it is the plain step)."""
        head = self._episode_head(md_learner(self.args.model).head)

        def logits_of(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor, ways: tf.Tensor,
                      tape: tf.GradientTape) -> tf.Tensor:
            with models.episode_norm(self.backbone, self.args.batch_norm, support, query, padded):
                embedded = self.backbone(to_model_input(images, self.preprocessing), training=True)
            return head(embedded[:support], labels[:support], embedded[support:support + query], ways)

        return self._episode_step(logits_of)

    def _episode_head(self, name: str) -> Callable[..., tf.Tensor]:
        """The metric head ``name`` as (support, labels, query, ways) -> logits."""
        if name != "relationnet":
            return models.EPISODE_HEADS[name]
        relation, (channels, side) = self.relation, self.relation_map
        return lambda support, labels, query, ways: models.relation_scores(relation, channels, side, support, labels,
                                                                           query, ways)

    def _adaptation(self, images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor,
                    ways: tf.Tensor, padded: bool, paused: Callable[[], Any] | None = None) -> TFAdaptation:
        """``paused``: the training step's tape's ``stop_recording`` (None: an evaluation)."""
        assert self.loaded is not None
        return TFAdaptation(self.backbone, to_model_input(images, self.preprocessing), labels, support, query, ways,
                            self.args.batch_norm, self.loaded.out_dim, padded, paused is not None, paused)

    def _adapted_step(self, loop: InnerLoop, padded: bool) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        """The MAML family's step (``md_learners.adapted_query_logits``); the outer gradient first order."""

        def logits_of(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor, ways: tf.Tensor,
                      tape: tf.GradientTape) -> tf.Tensor:
            adaptation = self._adaptation(images, labels, support, query, ways, padded, tape.stop_recording)
            return adapted_query_logits(adaptation, loop, training=True)

        return self._episode_step(logits_of)

    def _adapted_evaluator(self, loop: InnerLoop) -> Callable[[EpisodeArrays], tuple[float, np.ndarray]]:
        """(loss, predictions) of an episode after the inner loop's evaluation steps; no update kept."""

        @tf.function(input_signature=self._episode_signature())
        def evaluate(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor,
                     ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits = adapted_query_logits(self._adaptation(images, labels, support, query, ways, self.buckets),
                                          loop, training=False)
            return models.episode_loss(logits, labels[support:support + query]), tf.argmax(logits, 1)

        def run(episode: EpisodeArrays) -> tuple[float, np.ndarray]:
            packed = pack_episode(episode, self.ladder(episode) if self.buckets else None)
            loss, predicted = evaluate(packed.images, packed.labels, np.int32(packed.support),
                                       np.int32(packed.query), np.int32(packed.ways))
            return float(loss), predicted.numpy()

        return run

    def _finetuned_evaluator(self, settings: Finetuning) -> Callable[[EpisodeArrays], tuple[float, np.ndarray]]:
        """(loss, predictions) of an episode after its test-time training from a new head (drawn
        here, from the episode's index, as torch's, with its batches); nothing kept."""
        head = [tf.TensorSpec((None, None), tf.float32), tf.TensorSpec((None,), tf.float32),
                tf.TensorSpec((None,), tf.float32)]
        rows_spec = [] if settings.batch is None else [tf.TensorSpec((None, None), tf.int64)]

        @tf.function(input_signature=[*self._episode_signature(), *head, *rows_spec])
        def evaluate(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor, ways: tf.Tensor,
                     weight: tf.Tensor, bias: tf.Tensor, gain: tf.Tensor, *rows: tf.Tensor
                     ) -> tuple[tf.Tensor, tf.Tensor]:
            logits = finetuned_query_logits(self._adaptation(images, labels, support, query, ways, self.buckets),
                                            settings, (weight, bias, gain), rows[0] if rows else None)
            return models.episode_loss(logits, labels[support:support + query]), tf.argmax(logits, 1)

        def run(episode: EpisodeArrays) -> tuple[float, np.ndarray]:
            assert self.loaded is not None
            packed = pack_episode(episode, self.ladder(episode) if self.buckets else None)
            drawn, rows = finetune_inputs(settings, self.loaded.out_dim, packed.ways, packed.support,
                                          derive_seed(self.args.seed, FINETUNE_HEAD_SEED_NAME, episode.index))
            loss, predicted = evaluate(packed.images, packed.labels, np.int32(packed.support),
                                       np.int32(packed.query), np.int32(packed.ways), *drawn,
                                       *([] if rows is None else [rows]))
            return float(loss), predicted.numpy()

        return run

    def _regularised(self, loss: tf.Tensor) -> tf.Tensor:
        """``loss`` plus MD's L2 regulariser of the kernels (``--weight-decay``; ``clients.recipe``)."""
        if not self.args.weight_decay:
            return loss
        kernels = [v for v in self.backbone.trainable_variables if decayed(tuple(v.shape))]
        if self.relation is not None:
            kernels += [v for v in self.relation.trainable_variables if decayed(tuple(v.shape))]
        if self.head is not None:
            logits = self.head.get_layer("logits")
            kernels += logits.decayed_kernels() if isinstance(logits, models.ClassifierLayer) else [logits.kernel]
        return loss + self.args.weight_decay * tf.add_n([tf.reduce_sum(tf.square(v)) for v in kernels])

    def _replica_loss(self, loss: tf.Tensor) -> tf.Tensor:
        """What one replica differentiates: the optimizer sums the replicas' gradients."""
        return loss / self.world_size if self.world_size > 1 else loss

    def _compile(self, step: Callable[..., Any], signature: list[tf.TensorSpec]) -> Callable[..., Any]:
        """``step`` as a tf.function; under the strategy, run by it on each worker's input."""
        if self.strategy is None:
            return tf.function(step, input_signature=signature)
        strategy = self.strategy

        def distributed(*inputs: tf.Tensor) -> Any:
            return strategy.run(step, args=inputs)

        return tf.function(distributed, input_signature=signature)

    def _baseline_step(self) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        assert self.head is not None
        head = self.head
        classes = int(head.output_shape[-1])

        def step(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            with tf.GradientTape() as tape:
                logits = head(self.backbone(to_model_input(images, self.preprocessing), training=True),
                              training=True)
                loss = models.episode_loss(logits, labels, classes)
                replica_loss = self._replica_loss(self._regularised(loss))
            variables = self.trainable
            self.optimizer.apply_gradients(zip(tape.gradient(replica_loss, variables), variables, strict=True))
            return loss, _accuracy(logits, labels)

        return self._compile(step, [tf.TensorSpec((None, self.args.image_size, self.args.image_size, 3), tf.uint8),
                                    tf.TensorSpec((None,), tf.int64)])

    def ladder(self, episode: EpisodeArrays) -> Ladder | None:
        """The shape buckets of the episode's request (None with buckets off)."""
        if not self.buckets:
            return None
        key = episode.request.SerializeToString() if episode.request is not None else b""
        if key not in self._ladders:
            self._ladders[key] = (Ladder.for_bounds(EpisodeBounds.of_request(episode.request), self.args.bucket_ratio)
                                  if episode.request is not None else Ladder(ratio=self.args.bucket_ratio))
        return self._ladders[key]

    def stage(self, item: Any) -> Any:
        """On the feed's thread: an episode packed to its bucket, a batch copied (NumPy; an
        item's arrays may be views of a receiving buffer that is reused: ``clients.receiver``)."""
        if isinstance(item, EpisodeArrays):
            return pack_episode(item, self.ladder(item))
        if isinstance(item, Batch):
            return Batch(np.array(item.images), np.array(item.labels))
        return item

    def train_step(self, item: Any) -> tuple[Any, Any]:
        with self._placement():
            if isinstance(item, Batch):
                self.shapes.add(tuple(item.images.shape))
                self._initialise_head(item.images)
                loss, accuracy = self._step(item.images, np.asarray(item.labels, dtype=np.int64))
            else:
                packed: PackedEpisode = item if isinstance(item, PackedEpisode) else self.stage(item)
                self.shapes.add(tuple(packed.images.shape))
                loss, accuracy = self._step(packed.images, packed.labels, np.int32(packed.support),
                                            np.int32(packed.query), np.int32(packed.ways))
        return loss, accuracy  # read when a progress line needs them

    def _initialise_head(self, images: np.ndarray) -> None:
        """A weight-normalised head's data-dependent init from the first training batch, as
        torch's (``clients.torch.md_train``): training-mode features, the batch norms' moving
        statistics put back, the values averaged over the workers."""
        assert self.head is not None
        logits = self.head.get_layer("logits")
        if not (isinstance(logits, models.ClassifierLayer) and logits.needs_initialising):
            return
        moving = [v.numpy() for v in self.backbone.non_trainable_variables]
        features = self.backbone(to_model_input(images, self.preprocessing), training=True)
        for variable, value in zip(self.backbone.non_trainable_variables, moving, strict=True):
            variable.assign(value)
        workers = self.world_size

        def average(value: tf.Tensor) -> tf.Tensor:
            if workers == 1:
                return value
            return tf.add_n([tf.constant(v) for v in self.all_gather(value.numpy())]) / workers

        logits.initialise(features, average)

    def evaluate(self, episode: EpisodeArrays) -> tuple[Any, float]:
        with tf.device(self.device):
            loss, predicted = self._evaluator(episode)
        return predicted, loss

    def all_gather(self, value: Any) -> list[Any]:
        """Pickled, padded to the longest, gathered over the workers by the strategy (two
        collectives: the lengths, then the bytes as int32 words)."""
        if self.strategy is None:
            return [value]
        if self._gather is None:
            strategy = self.strategy

            def gather(words: tf.Tensor) -> tf.Tensor:
                return tf.distribute.get_replica_context().all_gather(words[tf.newaxis], axis=0)

            self._gather = tf.function(lambda words: strategy.run(gather, args=(words,)),
                                       input_signature=[tf.TensorSpec((None,), tf.int32)])
        data = pickle.dumps(value)
        lengths = [int(row[0]) for row in self._gather(np.array([len(data)], dtype=np.int32)).numpy()]
        words = np.zeros(-(-max(lengths) // 4), dtype=np.int32)
        words.view(np.uint8)[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        rows = self._gather(words).numpy()
        return [pickle.loads(row.view(np.uint8)[:length].tobytes()) for row, length in zip(rows, lengths, strict=True)]

    def parameter_digest(self) -> str:
        digest = hashlib.sha256()
        for variable in self.backbone.variables + (self.head.variables if self.head is not None else []):
            digest.update(variable.path.encode())
            digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
        return digest.hexdigest()

    def weights_sha256(self) -> str:
        return weights_sha256((variable.path, variable.numpy()) for variable in self.backbone.variables)

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        refused = determinism_failure(error)
        if refused is not None:
            return refused
        if self.strategy is not None and isinstance(error, (tf.errors.UnavailableError, tf.errors.CancelledError,
                                                            tf.errors.DeadlineExceededError, tf.errors.AbortedError)):
            return 1, (f"worker {self.rank}: lost the other workers ({' '.join(error.message.split())[:300]}); the "
                       "last checkpoint holds the run's progress")
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return 1, (f"out of memory on {self.device}: {' '.join(error.message.split())[:300]} "
                       "(try a smaller --image-size, fixed --ways/--shots/--query, or --batch-size)")
        return None


class Evaluator:
    """Classification of one episode with the frozen embedding (inference mode) by ``head``
    (``models.EPISODE_HEADS``: prototypes by default).

    Under ``batch_norm`` ``md`` or ``transductive`` (``clients.batch_norm``) the episode is
    embedded in one pass, support then query (then padding to a bucket, with ``buckets``), its
    batch norms taking the episode's moments as in training. Under ``running`` each set is
    embedded in chunks of ``EVAL_CHUNK`` images (bounding memory for 500-image support sets),
    each padded to a bucket with ``buckets``: inference-mode batch norm is per row, so padding
    changes no valid row."""

    def __init__(self, backbone: keras.Model, preprocessing: Preprocessing, buckets: bool = False,
                 batch_norm: str = "md", head: str = "protonet", head_fn: Callable[..., tf.Tensor] | None = None,
                 ratio: float = DEFAULT_RATIO) -> None:
        classify = head_fn if head_fn is not None else models.EPISODE_HEADS[head]
        images = tf.TensorSpec((None, preprocessing.size, preprocessing.size, 3), tf.uint8)
        features = tf.TensorSpec((None, None), tf.float32)
        labels = tf.TensorSpec((None,), tf.int64)
        count = tf.TensorSpec((), tf.int32)
        self.episodic = batch_norm in EPISODE_MOMENTS
        self.ladder = Ladder(ratio=ratio, cap=None if self.episodic else EVAL_CHUNK) if buckets else None

        @tf.function(input_signature=[images])
        def embed(batch: tf.Tensor) -> tf.Tensor:
            return backbone(to_model_input(batch, preprocessing), training=False)

        @tf.function(input_signature=[images, count, count])
        def embed_episode(batch: tf.Tensor, support: tf.Tensor, query: tf.Tensor) -> tf.Tensor:
            with models.episode_norm(backbone, batch_norm, support, query):
                return backbone(to_model_input(batch, preprocessing), training=False)

        @tf.function(input_signature=[features, labels, features, labels, tf.TensorSpec((), tf.int32)])
        def score(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, query_labels: tf.Tensor,
                  ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits = classify(support, support_labels, query, ways)
            return models.head_loss(head, logits, query_labels), tf.argmax(logits, 1)

        self._embed = embed
        self._embed_episode = embed_episode
        self._score = score

    def _chunk(self, images: np.ndarray) -> tf.Tensor:
        rows = len(images)
        if self.ladder is None or self.ladder.size(rows) == rows:
            return self._embed(images)
        padded = np.zeros((self.ladder.size(rows), *images.shape[1:]), dtype=np.uint8)
        padded[:rows] = images
        return self._embed(padded)[:rows]

    def embed(self, images: np.ndarray) -> tf.Tensor:
        return tf.concat([self._chunk(images[i:i + EVAL_CHUNK]) for i in range(0, len(images), EVAL_CHUNK)], 0)

    def __call__(self, episode: EpisodeArrays) -> tuple[float, np.ndarray]:
        if self.episodic:
            support, query = len(episode.support_images), len(episode.query_images)
            rows = support + query
            images = np.zeros((self.ladder.size(rows) if self.ladder is not None else rows,
                               *episode.support_images.shape[1:]), dtype=np.uint8)
            images[:support] = episode.support_images
            images[support:rows] = episode.query_images
            embedded = self._embed_episode(images, np.int32(support), np.int32(query))
            support_embedded, query_embedded = embedded[:support], embedded[support:rows]
        else:
            support_embedded, query_embedded = self.embed(episode.support_images), self.embed(episode.query_images)
        loss, predicted = self._score(support_embedded, episode.support_labels, query_embedded, episode.query_labels,
                                      np.int32(episode.ways))
        return float(loss), predicted.numpy()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 out of memory, 2 bad input, 3 server fault)."""
    return run_main("tf", TFFramework, argv)
