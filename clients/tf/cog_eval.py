"""``python -m clients.tf cog``: the ImageNet-CoG linear evaluation in TensorFlow (the run
itself is ``clients.cog_eval``; this file holds the backbone and the linear classifier).

``--backbone`` is any of the contract's (``clients.tf.backbones.load_backbone``): a named
backbone (``tiny`` for tests and demos; random weights drawn from a fixed seed), a
SavedModel directory or Keras model file, or ``module:callable`` (a factory called with no
arguments), with ``--weights`` for named and ``module:callable`` ones. Its features are
taken in inference mode (``TFFeatures``, ``training=False``) of the server's uint8 RGB crop
mapped as the backbone declares; one that declares nothing gets the reference's
extraction ([0, 1], then ImageNet's mean and std: the CoG parser's defaults). Features are
float32 only: a backbone's dtype is fixed when it is built or saved (a Keras mixed-precision
policy acts on layers built after it is set; a SavedModel keeps its own), so ``--precision
bf16`` is refused with one line (``check_precision``) rather than half honoured.

The classifier mirrors ``torch.nn.Linear`` trained by ``torch.optim.SGD``: the update is
written out (gradient plus weight decay on weight and bias, then the momentum buffer
``b = 0.9 b + g`` and ``w -= lr b``), because Keras' SGD applies momentum and weight
decay differently (the learning rate inside the buffer, decoupled decay); a step whose
loss is not finite is not applied. Determinism (``clients.tf.determinism``): with
``--deterministic`` on (the default on CPU) op determinism is on; thread counts are fixed
and draws seeded.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from clients import cog_protocol
from clients.determinism import weights_sha256
from clients.cog_eval import CogBackend, run_cog_main
from clients.errors import UsageError
from clients.seeds import COG_BACKBONE_SEED_NAME
from clients.cog_protocol import MOMENTUM
from clients.tf.backbones import TFFeatures, load_backbone
from clients.tf.determinism import apply_determinism, determinism_failure, tf_record
from clients.tf.md_train import select_device

keras = tf.keras

PREDICT_ROWS = 8192


def check_precision(args: argparse.Namespace) -> None:
    """``--precision``: float32 only in TensorFlow (module docstring); bf16 refused, one line."""
    if args.precision != "float32":
        raise UsageError(f"argument --precision: got {args.precision}, expected float32 in TensorFlow (a backbone's "
                         "dtype is fixed when it is built or saved); bf16 extraction is the torch client's")


class TFCogBackend(CogBackend):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        check_precision(args)
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before any model is built
        with tf.device(self.device):
            loaded = load_backbone(args, cog_protocol.IMAGE_SIZE, COG_BACKBONE_SEED_NAME)
        super().__init__(args, loaded)
        self.model = loaded.model
        self.extractor = TFFeatures(loaded, args.extract_batch_size, self.device)
        self._shape: tuple[int, int] | None = None

    def describe(self) -> dict[str, Any]:
        count = int(sum(np.prod(v.shape) for v in self.model.weights)) if isinstance(self.model, keras.Model) else 0
        return {"framework": self.name, **self.determinism.as_config(), **tf_record(self.device),
                "backbone_parameter_count": count}

    def extract(self, images: np.ndarray) -> np.ndarray:
        return self.extractor.features(images)

    def classifier_data(self, features: np.ndarray, labels: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.device(self.device):
            return tf.constant(np.asarray(features, np.float32)), tf.constant(np.asarray(labels, np.int64))

    def _build(self, dim: int, classes: int) -> None:
        """Variables of a [dim -> classes] layer and its momentum, and the compiled step (once per shape)."""
        with tf.device(self.device):
            self.kernel = tf.Variable(tf.zeros((dim, classes)), name="kernel")
            self.bias = tf.Variable(tf.zeros((classes,)), name="bias")
            self.slots = [tf.Variable(tf.zeros((dim, classes))), tf.Variable(tf.zeros((classes,)))]
            self.decay = tf.Variable(0.0, dtype=tf.float32)
        variables, slots, decay = [self.kernel, self.bias], self.slots, self.decay
        spec = [tf.TensorSpec((None, dim), tf.float32), tf.TensorSpec((None,), tf.int64),
                tf.TensorSpec((None,), tf.int64), tf.TensorSpec((), tf.float32)]

        @tf.function(input_signature=spec)
        def step(x: tf.Tensor, y: tf.Tensor, rows: tf.Tensor, lr: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                logits = tf.matmul(tf.gather(x, rows), variables[0]) + variables[1]
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.gather(y, rows), logits))
            gradients = tape.gradient(loss, variables)
            if tf.math.is_finite(loss):
                for variable, gradient, slot in zip(variables, gradients, slots):
                    slot.assign(MOMENTUM * slot + gradient + decay * variable)
                    variable.assign_sub(lr * slot)
            return loss

        self._step = step
        self._shape = (dim, classes)

    def reset(self, weight: np.ndarray, bias: np.ndarray, weight_decay: float) -> None:
        classes, dim = weight.shape
        if self._shape != (dim, classes):
            self._build(dim, classes)
        self.kernel.assign(np.ascontiguousarray(weight.T))
        self.bias.assign(bias)
        for slot in self.slots:
            slot.assign(tf.zeros_like(slot))
        self.decay.assign(weight_decay)

    def train_step(self, data: tuple[tf.Tensor, tf.Tensor], indices: np.ndarray, lr: float) -> float:
        with tf.device(self.device):
            return float(self._step(data[0], data[1], tf.constant(np.asarray(indices, np.int64)),
                                    tf.constant(lr, tf.float32)))

    def predict(self, data: tuple[tf.Tensor, tf.Tensor]) -> np.ndarray:
        x = data[0]
        with tf.device(self.device):
            parts = [tf.argmax(tf.matmul(x[i:i + PREDICT_ROWS], self.kernel) + self.bias, axis=1)
                     for i in range(0, int(x.shape[0]), PREDICT_ROWS)]
        return np.concatenate([p.numpy() for p in parts]) if parts else np.zeros(0, np.int64)

    def weights_sha256(self) -> str:
        return weights_sha256([("kernel", self.kernel.numpy()), ("bias", self.bias.numpy())])

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return 1, f"out of memory on {self.device} (try a smaller --extract-batch-size or --batch-size)"
        return determinism_failure(error)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CoG evaluation; exit status 0, 2 bad input, 3 server fault."""
    return run_cog_main("tf", TFCogBackend, argv)
