"""``python -m clients.tf transfer``: the VTAB-1k transfer learner in TensorFlow/Keras (the
run itself is ``clients.vtab_transfer``; this file holds weights, steps and predictions).

Same behaviour as ``clients.torch.vtab_transfer``: the backbone is any of the contract's
(``clients.tf.backbones.load_backbone``: named, ``module:callable``, SavedModel or Keras
file; ``--weights`` takes our MD trainer's checkpoint, a ``tf.train.Checkpoint`` prefix
such as ``ckpt-10``, its ``.index`` file or its directory, or Keras weights
``*.weights.h5``), its input scaled and normalised as it declares (our named backbones:
[-1, 1]); a zero-initialised linear head; linear mode embeds each (task, split, record)
once with the frozen backbone in inference mode. ``--mode finetune`` trains the backbone,
so it needs a Keras model. The head is trained by ``TorchSGD`` (``clients.tf.optimizers``:
torch's momentum step, the same as the torch learner's under the learning-rate schedule).
Determinism (``clients.tf.determinism``): with ``--deterministic`` on (the default on
CPU) op determinism is on; thread counts are fixed and draws seeded, so a repeated run
reports the same accuracies and the same ``result_sha256``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from clients.determinism import weights_sha256
from clients.protocols.vtab import TaskBatchArrays, TaskEpisodeArrays
from clients.tf import models
from clients.tf.backbones import TFFeatures, inference, load_backbone, to_model_input
from clients.tf.determinism import apply_determinism, determinism_failure, tf_record
from clients.tf.md_train import select_device
from clients.tf.optimizers import TorchAdam, TorchSGD
from clients.errors import UsageError
from clients.seeds import TRANSFER_BACKBONE_SEED_NAME
from clients.trainer_args import TRANSFER_IMAGE_SIZE
from clients.vtab_transfer import TransferLearner, run_transfer_main
from clients.vtab_transfer_protocols import MOMENTUM

keras = tf.keras




class TFTransferLearner(TransferLearner):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before any model is built
        with tf.device(self.device):
            self.loaded = load_backbone(args, TRANSFER_IMAGE_SIZE, TRANSFER_BACKBONE_SEED_NAME)
        self.backbone, self.preprocessing = self.loaded.model, self.loaded.preprocessing
        self.trainable_backbone = isinstance(self.backbone, keras.Model)
        if args.mode == "finetune" and not self.trainable_backbone:
            raise UsageError(f"argument --mode: got finetune, but --backbone {self.loaded.spec.target} made a "
                             f"{type(self.backbone).__name__}, expected a Keras model (finetuning trains its "
                             "variables); use --mode linear or protonet")
        self.initial = self.backbone.get_weights() if self.trainable_backbone else []
        self.dim = self.loaded.out_dim
        self.features: dict[tuple[str, str, int], np.ndarray] = {}
        images = tf.TensorSpec((None, args.image_size, args.image_size, 3), tf.uint8)
        forward = inference(self.backbone)
        self._embed = tf.function(lambda x: forward(self._input(x)), input_signature=[images])
        self._built: dict[int, tuple[keras.Model, TorchSGD | TorchAdam, Any]] = {}  # per class count: head, optimizer, step
        self._episodes: TFFeatures | None = None  # ``episode_extractor``

    def _input(self, images: tf.Tensor) -> tf.Tensor:
        """uint8 -> what the backbone declares (``clients.tf.backbones.to_model_input``)."""
        return to_model_input(images, self.preprocessing)

    def describe(self) -> dict[str, Any]:
        count = models.parameter_count(self.backbone) if self.trainable_backbone else 0
        return {"framework": self.name, **self.determinism.as_config(), **tf_record(self.device),
                "backbone_parameter_count": count, "embedding_dim": self.dim,
                "backbone_sha256": self.loaded.fingerprint, "preprocessing": self.preprocessing.as_config()}

    def reset(self, num_classes: int, seed: int) -> None:
        """A fresh zero head and optimizer (and, finetuning, the backbone's initial weights).
        The head, optimizer and traced step of a class count are built once and reset in place
        for each later fit: the same zeros, an empty momentum and the same graph, so a fit
        computes exactly what a newly built one would, without tracing its step again (a
        finetuning trace costs far more than its few steps)."""
        args = self.args
        if self.trainable_backbone:
            self.backbone.set_weights(self.initial)
        built = self._built.get(num_classes)
        if built is not None:
            self.head, self.optimizer, self._step = built
            for variable in self.head.variables:
                variable.assign(tf.zeros_like(variable))
            self.optimizer.iterations.assign(0)
            self.optimizer.learning_rate.assign(args.lrs[0])
            for slot in self.optimizer.variables[2:]:  # after iterations and the learning rate: its moments
                slot.assign(tf.zeros_like(slot))
            return
        with tf.device(self.device):
            inputs = keras.Input(shape=(self.dim,), dtype="float32")
            # named: the weights' sha256 names each variable by its path, which an unnamed layer's
            # counter (dense, dense_1, ...) would make differ between two runs in one process
            logits = keras.layers.Dense(num_classes, kernel_initializer="zeros", name="logits")(inputs)
            self.head = keras.Model(inputs, logits, name="head")
            if args.optimizer == "adamw":  # torch.optim.AdamW's defaults, the reference's
                self.optimizer = TorchAdam(learning_rate=args.lrs[0], weight_decay=args.weight_decay, decoupled=True)
            else:
                self.optimizer = TorchSGD(learning_rate=args.lrs[0], momentum=MOMENTUM,
                                          weight_decay=args.weight_decay)
        head, backbone, optimizer, classes = self.head, self.backbone, self.optimizer, num_classes
        labels = tf.TensorSpec((None,), tf.int64)
        if args.mode == "linear":
            variables = list(head.trainable_variables)

            @tf.function(input_signature=[tf.TensorSpec((None, self.dim), tf.float32), labels])
            def step(features: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
                with tf.GradientTape() as tape:
                    loss = models.episode_loss(head(features), targets, classes)
                optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
                return loss
        else:
            variables = list(backbone.trainable_variables) + list(head.trainable_variables)
            images = tf.TensorSpec((None, args.image_size, args.image_size, 3), tf.uint8)

            @tf.function(input_signature=[images, labels])
            def step(batch: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
                with tf.GradientTape() as tape:
                    logits = head(backbone(self._input(batch), training=True))
                    loss = models.episode_loss(logits, targets, classes)
                optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
                return loss
        self._step = step
        self._built[num_classes] = (head, optimizer, step)

    def weights_sha256(self) -> str:
        trained = [self.head] + ([self.backbone] if self.args.mode == "finetune" else [])
        return weights_sha256((variable.path, variable.numpy()) for model in trained for variable in model.variables)

    def _frozen_features(self, batch: TaskBatchArrays) -> np.ndarray:
        keys = [(batch.task, batch.split, int(r)) for r in batch.record_ids]
        missing = [i for i, key in enumerate(keys) if key not in self.features]
        if missing:
            with tf.device(self.device):
                embedded = self._embed(batch.images[missing]).numpy()
            for i, row in zip(missing, embedded):
                self.features[keys[i]] = row
        return np.stack([self.features[key] for key in keys])

    def train_step(self, batch: TaskBatchArrays, lr: float) -> float:
        self.optimizer.learning_rate.assign(lr)
        inputs = self._frozen_features(batch) if self.args.mode == "linear" else batch.images
        with tf.device(self.device):
            return float(self._step(inputs, np.asarray(batch.labels, np.int64)))

    def _logits(self, batch: TaskBatchArrays) -> tf.Tensor:
        with tf.device(self.device):
            features = self._frozen_features(batch) if self.args.mode == "linear" else self._embed(batch.images)
            return self.head(features, training=False)

    def predict(self, batch: TaskBatchArrays) -> np.ndarray:
        return tf.argmax(self._logits(batch), axis=1).numpy()

    def predict_with_loss(self, batch: TaskBatchArrays) -> tuple[np.ndarray, float]:
        logits = tf.cast(self._logits(batch), tf.float32)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(np.asarray(batch.labels, np.int64), logits)
        return tf.argmax(logits, axis=1).numpy(), float(tf.reduce_sum(losses))

    def _trained(self) -> list[keras.Model]:
        return [self.head] + ([self.backbone] if self.args.mode == "finetune" else [])

    def snapshot(self) -> list[list[np.ndarray]]:
        return [model.get_weights() for model in self._trained()]

    def restore(self, snapshot: list[list[np.ndarray]]) -> None:
        for model, weights in zip(self._trained(), snapshot, strict=True):
            model.set_weights(weights)

    def _embed_all(self, images: np.ndarray) -> tf.Tensor:
        step = self.args.eval_batch_size
        with tf.device(self.device):
            return tf.concat([self._embed(images[i:i + step]) for i in range(0, len(images), step)], 0)

    def episode_extractor(self) -> TFFeatures:
        if self._episodes is None:
            self._episodes = TFFeatures(self.loaded, self.args.eval_batch_size, self.device)
        return self._episodes

    def protonet_predict(self, episode: TaskEpisodeArrays) -> np.ndarray:
        support, query = self._embed_all(episode.support_images), self._embed_all(episode.query_images)
        labels = tf.constant(np.asarray(episode.support_labels, np.int64))
        logits = models.prototype_logits(support, labels, query, tf.constant(episode.num_classes, tf.int32))
        return tf.argmax(logits, axis=1).numpy()

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return 1, f"out of memory on {self.device} (try a smaller --batch-size or --image-size)"
        return determinism_failure(error)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the transfer learner; exit status 0, 2 bad input, 3 server fault."""
    return run_transfer_main("tf", TFTransferLearner, argv)
