"""``python -m clients.tf cog``: the ImageNet-CoG linear evaluation in TensorFlow (the run
itself is ``clients.cog_eval``; this file holds the backbone and the linear classifier).

``--backbone`` is one of:
- a SavedModel directory (``tf.saved_model.save`` of a callable module, or Keras
  ``model.export``) or a Keras model file (``.keras``, ``.h5``), mapping a float32 NHWC
  batch to features [B, D];
- ``module:callable``: imported and called with the ``--backbone-checkpoint`` path, it
  returns a Keras model (or any callable on tensors) mapping NHWC to [B, D];
- ``builtin``: a small random-init convolutional network (three stride-2 3x3
  convolutions, ReLU, global average pooling, 64 features) for tests and demos, its
  weights drawn from fixed seeds and kept in a ``.weights.h5`` file
  (``--backbone-checkpoint`` or ``<feature-cache>/builtin-tf.weights.h5``).

Input as the reference's extraction: the server's uint8 RGB crop divided by 255, then
normalised per channel with ``--mean``/``--std``; Keras models run with
``training=False``. The classifier mirrors ``torch.nn.Linear`` trained by
``torch.optim.SGD``: the update is written out (gradient plus weight decay on weight and
bias, then the momentum buffer ``b = 0.9 b + g`` and ``w -= lr b``), because Keras' SGD
applies momentum and weight decay differently (the learning rate inside the buffer,
decoupled decay); a step whose loss is not finite is not applied. Op determinism is on.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from clients.cog_eval import BackboneSpec, CogBackend, backbone_spec, load_callable, run_cog_main
from clients.cog_protocol import MOMENTUM
from clients.tf.md_train import select_device
from clients.errors import UsageError

keras = tf.keras

BUILTIN_FILE = "builtin-tf.weights.h5"
BUILTIN_SEED = 20210607
PREDICT_ROWS = 8192


def builtin_model() -> keras.Model:
    """Three stride-2 3x3 convolutions with ReLU, global average pooling: 64 features (seeded initialisers)."""
    layers = [keras.Input(shape=(None, None, 3))]
    for i, width in enumerate((16, 32, 64)):
        layers.append(keras.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu",
                                          kernel_initializer=keras.initializers.GlorotUniform(seed=BUILTIN_SEED + i)))
    layers.append(keras.layers.GlobalAveragePooling2D())
    return keras.Sequential(layers)


def builtin_backbone(path: Path) -> keras.Model:
    """The builtin network with the weights kept at ``path`` (written there when missing)."""
    if not path.name.endswith(".weights.h5"):
        raise UsageError(f"argument --backbone-checkpoint: got {str(path)!r}, expected a file name ending in "
                         ".weights.h5 for the builtin tf backbone")
    model = builtin_model()
    if path.exists():
        try:
            model.load_weights(str(path))
        except (ValueError, OSError) as error:
            raise UsageError(f"argument --backbone-checkpoint: got {str(path)!r}, expected the builtin tf backbone's "
                             f"weights ({type(error).__name__}: {' '.join(str(error).split())[:160]})") from None
        return model
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{os.getpid()}.{path.name}")
    model.save_weights(str(tmp))
    os.replace(tmp, path)
    return model


def _saved_model(path: str) -> tuple[Any, Callable[[tf.Tensor], Any]]:
    """(the loaded object, which must stay referenced for its variables to live; its function)."""
    loaded = tf.saved_model.load(path)
    if hasattr(loaded, "serve"):  # Keras model.export
        return loaded, loaded.serve
    if callable(loaded):
        return loaded, loaded
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise ValueError("the SavedModel is not callable and has no serving_default signature")

    def call(images: tf.Tensor) -> Any:
        outputs = signature(images)
        return next(iter(outputs.values())) if len(outputs) == 1 else outputs

    return loaded, call


def load_backbone(spec: BackboneSpec) -> tuple[Any, Callable[[tf.Tensor], Any]]:
    """(the model object, a function of a normalised NHWC float32 batch) of the user's backbone."""
    if spec.kind == "builtin":
        model: Any = builtin_backbone(spec.checkpoint)
    elif spec.kind == "file":
        try:
            if Path(spec.target).is_dir():
                return _saved_model(spec.target)
            model = keras.models.load_model(spec.target, compile=False)
        except Exception as error:  # not a SavedModel or Keras file
            raise UsageError(f"argument --backbone: got {spec.target!r}, expected a SavedModel directory or a Keras "
                             f"model file (.keras, .h5), builtin or module:callable ({type(error).__name__}: "
                             f"{' '.join(str(error).split())[:160]})") from None
    else:
        model = load_callable(spec.target)(str(spec.checkpoint))
        if not callable(model):
            raise UsageError(f"argument --backbone: {spec.target} returned a {type(model).__name__}, "
                             "expected a Keras model or a callable")
    if isinstance(model, keras.Model):
        keras_model = model
        return model, tf.function(lambda x: keras_model(x, training=False), reduce_retracing=True)
    return model, model


class TFCogBackend(CogBackend):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, backbone_spec(args, BUILTIN_FILE))
        tf.config.experimental.enable_op_determinism()
        self.device = select_device(args.device)
        with tf.device(self.device):
            self.model, self.forward = load_backbone(self.spec)
        self.mean = tf.constant(np.asarray(args.mean, np.float32).reshape(1, 1, 1, 3))
        self.std = tf.constant(np.asarray(args.std, np.float32).reshape(1, 1, 1, 3))
        self._shape: tuple[int, int] | None = None

    def describe(self) -> dict[str, Any]:
        count = int(sum(np.prod(v.shape) for v in self.model.weights)) if isinstance(self.model, keras.Model) else 0
        return {"framework": self.name, "tensorflow_version": tf.__version__, "device": self.device,
                "backbone_parameter_count": count}

    def extract(self, images: np.ndarray) -> np.ndarray:
        with tf.device(self.device):
            x = (tf.cast(tf.constant(images), tf.float32) / 255.0 - self.mean) / self.std
            out = self.forward(x)
        if not isinstance(out, (tf.Tensor, np.ndarray)):
            raise UsageError(f"argument --backbone: it returned a {type(out).__name__}, expected a tensor of "
                             "features [B, D]")
        return np.asarray(out, np.float32)

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

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return 1, f"out of memory on {self.device} (try a smaller --extract-batch-size or --batch-size)"
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CoG evaluation; exit status 0, 2 bad input, 3 server fault."""
    return run_cog_main("tf", TFCogBackend, argv)
