"""The TensorFlow trainer's framework part (``python -m clients.tf``): Prototypical
Networks or MD's inference-only baseline in Keras, compiled training steps, the
evaluation forward pass and ``tf.train.Checkpoint`` files. The run itself (sources,
resume, training loop, evaluation, reports, summary, exit codes) is
``clients.orchestration``.

Determinism: op determinism is on and weights are seeded from --seed, so evaluating
the same checkpoint again gives the same metrics. Training and evaluation take
episodes from ``clients.core.SamplerClient`` (through the orchestration) rather than
``clients.tf.EpisodeSource``: episodes vary in shape (handled here by
``tf.function`` input signatures with unknown dimensions), and inside ``tf.data`` a
client error would surface as an opaque ``UnknownError`` instead of the server's message.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from clients.core import EpisodeArrays
from clients.orchestration import Batch, Framework, UsageError, run_main
from clients.tf import models

keras = tf.keras
EVAL_CHUNK = 256  # images embedded per call at evaluation (bounds memory for 500-image support sets)
_CONFIG_KEY = "config/.ATTRIBUTES/VARIABLE_VALUE"


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


def _accuracy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32))


class TFFramework(Framework):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        tf.config.experimental.enable_op_determinism()
        self.device = select_device(args.device)
        self.manager: tf.train.CheckpointManager | None = None

    # ---- model ----------------------------------------------------------------------------

    def build(self, num_classes: int) -> None:
        args = self.args
        with tf.device(self.device):
            tf.keras.utils.set_random_seed(args.seed)
            self.backbone = models.build_backbone(args.backbone, args.image_size)
            training = not args.eval_only  # evaluation restores the embedding only (no head, no optimizer)
            self.head = models.build_head(num_classes, self.backbone.output_shape[-1]) if num_classes else None
            self.optimizer = keras.optimizers.Adam(learning_rate=args.lr)
            self.next_index = tf.Variable(0, dtype=tf.int64, trainable=False, name="next_index")
            self.config = tf.Variable("", dtype=tf.string, trainable=False, name="config")
            parts: dict[str, Any] = {"backbone": self.backbone, "next_index": self.next_index, "config": self.config}
            if training:
                parts["optimizer"] = self.optimizer
            if self.head is not None:
                parts["head"] = self.head
            self.checkpointer = tf.train.Checkpoint(**parts)
            if training:
                self.optimizer.build(self.trainable)  # slots exist before a restore fills them
        if args.checkpoint_dir is not None:
            self.manager = tf.train.CheckpointManager(self.checkpointer, args.checkpoint_dir, max_to_keep=3)
        self._step = self._baseline_step() if self.head is not None else self._protonet_step()
        self._evaluator = Evaluator(self.backbone, args.image_size)

    @property
    def trainable(self) -> list[tf.Variable]:
        return list(self.backbone.trainable_variables) + (list(self.head.trainable_variables) if self.head else [])

    def parameter_count(self) -> int:
        return models.parameter_count(self.backbone, *([self.head] if self.head else []))

    def describe(self) -> dict[str, Any]:
        return {"tensorflow_version": tf.__version__, "keras_version": keras.__version__, "device": self.device,
                "parameter_count": self.parameter_count()}

    # ---- checkpoints ------------------------------------------------------------------------

    def checkpoint(self) -> tuple[str, dict[str, Any]] | None:
        latest = self.manager.latest_checkpoint if self.manager is not None else None
        if latest is None:
            return None
        try:
            stored = json.loads(tf.train.load_checkpoint(latest).get_tensor(_CONFIG_KEY).decode())
        except (tf.errors.OpError, ValueError) as error:
            raise UsageError(f"checkpoint {latest} is not one of this trainer's ({error})") from None
        return latest, stored

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

    # ---- compiled steps -------------------------------------------------------------------------

    def _protonet_step(self) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        images = tf.TensorSpec((None, self.args.image_size, self.args.image_size, 3), tf.uint8)
        labels = tf.TensorSpec((None,), tf.int64)

        @tf.function(input_signature=[images, labels, images, labels, tf.TensorSpec((), tf.int32)])
        def step(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, query_labels: tf.Tensor,
                 ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            count = tf.shape(support)[0]
            with tf.GradientTape() as tape:
                embedded = self.backbone(models.to_unit_range(tf.concat([support, query], 0)), training=True)
                logits = models.prototype_logits(embedded[:count], support_labels, embedded[count:], ways)
                loss = models.episode_loss(logits, query_labels)
            variables = self.trainable
            self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss, _accuracy(logits, query_labels)

        return step

    def _baseline_step(self) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        assert self.head is not None
        head = self.head
        classes = int(head.output_shape[-1])

        @tf.function(input_signature=[tf.TensorSpec((None, self.args.image_size, self.args.image_size, 3), tf.uint8),
                                      tf.TensorSpec((None,), tf.int64)])
        def step(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            with tf.GradientTape() as tape:
                logits = head(self.backbone(models.to_unit_range(images), training=True), training=True)
                loss = models.episode_loss(logits, labels, classes)
            variables = self.trainable
            self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss, _accuracy(logits, labels)

        return step

    def train_step(self, item: Any) -> tuple[float, float]:
        with tf.device(self.device):
            if isinstance(item, Batch):
                loss, accuracy = self._step(item.images, np.asarray(item.labels, dtype=np.int64))
            else:
                loss, accuracy = self._step(item.support_images, item.support_labels, item.query_images,
                                            item.query_labels, np.int32(item.ways))
        return float(loss), float(accuracy)  # float() waits for the step to finish

    def evaluate(self, episode: EpisodeArrays) -> tuple[Any, float]:
        with tf.device(self.device):
            loss, predicted = self._evaluator(episode)
        return predicted, loss

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return 1, (f"out of memory on {self.device}: {' '.join(error.message.split())[:300]} "
                       "(try a smaller --image-size, fixed --ways/--shots/--query, or --batch-size)")
        return None


class Evaluator:
    """Prototype classification of one episode with the frozen embedding (inference mode)."""

    def __init__(self, backbone: keras.Model, image_size: int) -> None:
        images = tf.TensorSpec((None, image_size, image_size, 3), tf.uint8)
        features = tf.TensorSpec((None, None), tf.float32)
        labels = tf.TensorSpec((None,), tf.int64)

        @tf.function(input_signature=[images])
        def embed(batch: tf.Tensor) -> tf.Tensor:
            return backbone(models.to_unit_range(batch), training=False)

        @tf.function(input_signature=[features, labels, features, labels, tf.TensorSpec((), tf.int32)])
        def score(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, query_labels: tf.Tensor,
                  ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits = models.prototype_logits(support, support_labels, query, ways)
            return models.episode_loss(logits, query_labels), tf.argmax(logits, 1)

        self._embed = embed
        self._score = score

    def embed(self, images: np.ndarray) -> tf.Tensor:
        return tf.concat([self._embed(images[i:i + EVAL_CHUNK]) for i in range(0, len(images), EVAL_CHUNK)], 0)

    def __call__(self, episode: EpisodeArrays) -> tuple[float, np.ndarray]:
        loss, predicted = self._score(
            self.embed(episode.support_images), episode.support_labels, self.embed(episode.query_images),
            episode.query_labels, np.int32(episode.ways),
        )
        return float(loss), predicted.numpy()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 out of memory, 2 bad input, 3 server fault)."""
    return run_main("tf", TFFramework, argv)
