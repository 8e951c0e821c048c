"""Keras models of the TensorFlow trainer: the Meta-Dataset backbones, Prototypical
Networks' episode loss and the inference-only baseline's linear head.

Backbones map float32 NHWC images in [-1, 1] (uint8 pixels converted by
``clients.tf.backbones.to_model_input``, the backbone contract's scaling) to one
embedding vector per image:

- ``conv4``: four blocks of [Conv2D 3x3, 64 filters; BatchNorm; ReLU; MaxPool 2],
  flattened (1600 features at 84 x 84, 256 at 32 x 32).
- ``resnet18``: a 7x7/2 stem with a 3x3/2 max-pool, basic residual blocks [2, 2, 2, 2]
  with widths 64/128/256/512, global average pooling (512 features).
- ``resnet50``: the same stem, bottleneck blocks [3, 4, 6, 3] of widths 64/128/256/512
  expanded 4 times (stride on the 3x3 convolution, as torchvision's ResNet-50 v1.5),
  global average pooling (2048 features; the parameters of the torch ``resnet50``).
- ``tiny``: three stride-2 3x3 convolutions (16/32/64 filters, padding 1 as torch's,
  bias, ReLU), global average pooling (64 features; no batch norm): fast on CPU, for
  tests and the demo.

Prototypical Networks (Snell et al., 2017, as Meta-Dataset uses them): a class
prototype is the mean embedding of its support images, a query's logit for a class
is the negative squared Euclidean distance to its prototype, and the loss is the
softmax cross-entropy of the query labels. Prototypes and the loss are computed
with one-hot matrix products rather than segment reductions or the fused sparse
kernel, so both are deterministic on every device under op determinism.

Batch normalisation uses momentum 0.9 (PyTorch's default 0.1, written the Keras way)
so its running statistics settle within the few hundred steps of a small run.

The same function as ``clients.torch.models`` given the same weights (``clients.init_weights``
maps them): a strided convolution and the stem's max-pool pad like torch's (``padding=k // 2``
on every side; Keras's "same" pads a stride-2 layer of an even side (0, 1) or (2, 3) instead),
and in training batch norm updates its moving variance with the unbiased batch variance, as
torch does (Keras's own update takes the biased one; both normalise by the biased one). Only
``conv4``'s flatten differs: (H, W, C) order here, (C, H, W) in torch, a permutation of the
same features (distances between embeddings are equal).

Shape buckets (``clients.buckets``): an episode may arrive padded to a bucket of B rows
whose first n are valid. Under ``valid_rows(backbone, n)`` every batch norm
(``RowBatchNormalization``) in training normalises the first n rows exactly as the
unpadded batch, updates its moving statistics from them alone, and gives zeros for
the padding rows; every other layer treats rows independently.

Episode batch norm (``clients.batch_norm``): under ``episode_norm(backbone, mode, support,
query)`` every ``RowBatchNormalization`` takes its moments from the episode's rows as the mode
says (``md``: the support rows' mean and biased variance normalise the support and the query,
the gradient flowing through them, in training and inference alike; ``transductive``: each
set its own), never its moving statistics; padding rows enter no moment and come out as zeros.

Under a multi-worker strategy (``clients.tf.md_train``, TF_CONFIG) each worker
normalises its own episode with that episode's statistics, and the moving
statistics are averaged over the workers at every update (the variables' aggregation
is MEAN), so every worker holds the same ones and they see every worker's episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from clients.backbone_contract import MD_BACKBONES
from clients.md_fixed_features import KNN_DISTANCE, MATCHING_EPSILON, REFERENCE_EPSILON
from clients.md_learners import (CLASSIFIER_EPSILON, LINEAR, RELATION_BN_EPSILON, RELATION_DEPTH, RELATION_HIDDEN,
                                 WEIGHT_NORM_INIT_EPSILON, Classifier)
from clients.tf.layers import RowBatchNormalization, episode_batch_norms, episode_norm, valid_rows
from clients.tf.md_backbones import build_md_backbone

keras = tf.keras
BACKBONES = ("conv4", "resnet18", "resnet50", "tiny", *MD_BACKBONES)
_BN_MOMENTUM = 0.9
_BN_EPSILON = 1e-5


def _pad(x: tf.Tensor, pad: int, value: float) -> tf.Tensor:
    return tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]], constant_values=value) if pad else x


def _padded_shape(shape: tuple[Any, ...], pad: int) -> tuple[Any, ...]:
    return (shape[0], *(None if side is None else side + 2 * pad for side in shape[1:3]), shape[3])


class PaddedConv2D(keras.layers.Conv2D):
    """``Conv2D`` that zero-pads ``pad`` cells on every side, then convolves "valid": torch's
    ``Conv2d(padding=pad)``. The variables and the layer's place in the model are a
    ``Conv2D``'s, so tf checkpoints written before it load unchanged."""

    def __init__(self, *args: Any, pad: int = 0, **kwargs: Any) -> None:
        kwargs["padding"] = "valid"
        super().__init__(*args, **kwargs)
        self.pad = pad

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return super().call(_pad(inputs, self.pad, 0.0))

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return super().compute_output_shape(_padded_shape(tuple(input_shape), self.pad))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pad": self.pad}


class PaddedMaxPooling2D(keras.layers.MaxPooling2D):
    """``MaxPooling2D`` over an input padded with ``pad`` cells of -inf on every side, "valid":
    torch's ``MaxPool2d(padding=pad)``, whose padding never wins a window."""

    def __init__(self, *args: Any, pad: int = 0, **kwargs: Any) -> None:
        kwargs["padding"] = "valid"
        super().__init__(*args, **kwargs)
        self.pad = pad

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return super().call(_pad(inputs, self.pad, float("-inf")))

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return super().compute_output_shape(_padded_shape(tuple(input_shape), self.pad))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pad": self.pad}


def _conv_bn_relu(x: tf.Tensor, filters: int, kernel: int, stride: int, name: str, relu: bool = True) -> tf.Tensor:
    if stride > 1 and kernel > 1:  # torch's symmetric padding (Keras "same" would pad (0, 1) or (2, 3) here)
        conv: keras.layers.Layer = PaddedConv2D(filters, kernel, strides=stride, pad=kernel // 2, use_bias=False,
                                                name=f"{name}_conv")
    else:  # stride 1 "same" (or a 1x1 kernel) pads as torch's padding=kernel // 2 already
        conv = keras.layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                                   name=f"{name}_conv")
    x = conv(x)
    x = RowBatchNormalization(momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON, name=f"{name}_bn")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x) if relu else x


def conv4(image_size: int) -> keras.Model:
    """The four-layer convnet; needs image_size >= 16 so every pooling has input."""
    if image_size < 16:
        raise ValueError(f"image_size: got {image_size}, the conv4 backbone needs at least 16")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = inputs
    for block in range(4):
        x = _conv_bn_relu(x, 64, 3, 1, f"block{block}")
        x = keras.layers.MaxPooling2D(2, name=f"block{block}_pool")(x)
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name="conv4")


def _basic_block(x: tf.Tensor, filters: int, stride: int, name: str) -> tf.Tensor:
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _conv_bn_relu(x, filters, 1, stride, f"{name}_down", relu=False)
    y = _conv_bn_relu(x, filters, 3, stride, f"{name}_a")
    y = _conv_bn_relu(y, filters, 3, 1, f"{name}_b", relu=False)
    return keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")([y, shortcut]))


def resnet18(image_size: int) -> keras.Model:
    """ResNet-18 with basic blocks [2, 2, 2, 2] and global average pooling."""
    if image_size < 8:
        raise ValueError(f"image_size: got {image_size}, the resnet18 backbone needs at least 8")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = _conv_bn_relu(inputs, 64, 7, 2, "stem")
    x = PaddedMaxPooling2D(3, strides=2, pad=1, name="stem_pool")(x)
    for stage, (filters, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2))):
        x = _basic_block(x, filters, stride, f"stage{stage}_0")
        x = _basic_block(x, filters, 1, f"stage{stage}_1")
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="pool")(x), name="resnet18")


def _bottleneck_block(x: tf.Tensor, width: int, stride: int, name: str) -> tf.Tensor:
    filters = width * 4
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _conv_bn_relu(x, filters, 1, stride, f"{name}_down", relu=False)
    y = _conv_bn_relu(x, width, 1, 1, f"{name}_a")
    y = _conv_bn_relu(y, width, 3, stride, f"{name}_b")
    y = _conv_bn_relu(y, filters, 1, 1, f"{name}_c", relu=False)
    return keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")([y, shortcut]))


def resnet50(image_size: int) -> keras.Model:
    """ResNet-50 with bottleneck blocks [3, 4, 6, 3] and global average pooling (2048 features)."""
    if image_size < 8:
        raise ValueError(f"image_size: got {image_size}, the resnet50 backbone needs at least 8")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = _conv_bn_relu(inputs, 64, 7, 2, "stem")
    x = PaddedMaxPooling2D(3, strides=2, pad=1, name="stem_pool")(x)
    for stage, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512))):
        for block in range(blocks):
            x = _bottleneck_block(x, width, 2 if stage > 0 and block == 0 else 1, f"stage{stage}_{block}")
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="pool")(x), name="resnet50")


def tiny(image_size: int) -> keras.Model:
    """Three stride-2 3x3 convolutions with ReLU (zero padding 1 on each side, as torch's
    ``padding=1``, so the torch ``tiny`` computes the same with the same weights), global
    average pooling: 64 features."""
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = inputs
    for block, filters in enumerate((16, 32, 64)):
        x = keras.layers.ZeroPadding2D(1, name=f"block{block}_pad")(x)
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="valid", activation="relu", name=f"block{block}_conv")(x)
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="pool")(x), name="tiny")


def build_backbone(name: str, image_size: int) -> keras.Model:
    if name == "conv4":
        return conv4(image_size)
    if name == "resnet18":
        return resnet18(image_size)
    if name == "resnet50":
        return resnet50(image_size)
    if name == "tiny":
        return tiny(image_size)
    if name in MD_BACKBONES:  # Meta-Dataset's own (``clients.tf.md_backbones``)
        return build_md_backbone(name, image_size)
    raise ValueError(f"backbone: got {name!r}, expected one of {', '.join(BACKBONES)}")


class ClassifierLayer(keras.layers.Layer):
    """The batch learners' training head of the form ``classifier``, as
    ``clients.torch.models.LinearHead``: a Dense-like ``kernel`` [D, C] and ``bias`` (none for
    cosine), and under weight norm a ``gain`` and the ``initialised`` flag of its
    data-dependent init (``initialise``)."""

    def __init__(self, num_classes: int, classifier: Classifier, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_classes, self.classifier = num_classes, classifier

    def build(self, input_shape: Any) -> None:
        dim = int(input_shape[-1])
        self.kernel = self.add_weight(name="kernel", shape=(dim, self.num_classes), initializer="glorot_uniform")
        self.bias = (None if self.classifier.cosine else
                     self.add_weight(name="bias", shape=(self.num_classes,), initializer="zeros"))
        if self.classifier.weight_norm:
            self.gain = self.add_weight(name="gain", shape=(self.num_classes,), initializer="ones")
            self.initialised = self.add_weight(name="initialised", shape=(), dtype="int64", initializer="zeros",
                                               trainable=False)

    @property
    def needs_initialising(self) -> bool:
        return self.classifier.weight_norm and not int(self.initialised.numpy())

    def initialise(self, features: tf.Tensor, average: Callable[[tf.Tensor], tf.Tensor] | None = None) -> None:
        """As ``clients.torch.models.LinearHead.initialise``; ``average`` the mean over the workers."""
        directions = tf.math.l2_normalize(tf.transpose(self.kernel), axis=1, epsilon=0.0)
        outputs = tf.matmul(tf.cast(features, tf.float32), directions, transpose_b=True)
        mean, variance = tf.nn.moments(outputs, axes=[0])
        gain = tf.math.rsqrt(variance + WEIGHT_NORM_INIT_EPSILON)
        values = [gain] if self.bias is None else [gain, -mean * gain]
        if average is not None:
            values = [average(value) for value in values]
        self.gain.assign(values[0])
        if self.bias is not None:
            self.bias.assign(values[1])
        self.initialised.assign(1)

    def call(self, features: tf.Tensor) -> tf.Tensor:
        bias = self.bias if self.bias is not None else tf.zeros(())
        gain = self.gain if self.classifier.weight_norm else tf.ones(())
        return classifier_logits(features, (tf.transpose(self.kernel), bias, gain), self.classifier)

    def decayed_kernels(self) -> list[Any]:
        return [] if self.classifier.weight_norm else [self.kernel]


def build_head(num_classes: int, embedding_dim: int, classifier: Classifier = LINEAR) -> keras.Model:
    """The batch learners' classifier over the embedding: a Dense layer, or a ``ClassifierLayer``
    for the other forms."""
    inputs = keras.Input(shape=(embedding_dim,), dtype="float32", name="embedding")
    layer = (keras.layers.Dense(num_classes, name="logits") if classifier == LINEAR else
             ClassifierLayer(num_classes, classifier, name="logits"))
    return keras.Model(inputs, layer(inputs), name="head")


def prototype_logits(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, ways: tf.Tensor) -> tf.Tensor:
    """Logits [num query, ways]: minus the squared distance of each query to each class mean."""
    one_hot = tf.one_hot(support_labels, ways, dtype=support.dtype)  # [Ns, ways]
    counts = tf.reduce_sum(one_hot, axis=0)[:, None]
    prototypes = tf.matmul(one_hot, support, transpose_a=True) / tf.maximum(counts, 1.0)
    distances = (
        tf.reduce_sum(query * query, axis=1, keepdims=True)
        - 2.0 * tf.matmul(query, prototypes, transpose_b=True)
        + tf.reduce_sum(prototypes * prototypes, axis=1)[None, :]
    )
    return -distances


def matching_logits(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, ways: tf.Tensor,
                    exact_cosine: bool = False) -> tf.Tensor:
    """Logits [num query, ways]: Meta-Dataset's Matching Networks, as
    ``clients.torch.models.matching_logits``."""
    support = tf.math.l2_normalize(support, axis=1, epsilon=MATCHING_EPSILON)
    if exact_cosine:
        query = tf.math.l2_normalize(query, axis=1, epsilon=MATCHING_EPSILON)
    attention = tf.nn.softmax(tf.matmul(query, support, transpose_b=True), axis=1)
    return tf.math.log(tf.matmul(attention, tf.one_hot(support_labels, ways, dtype=attention.dtype)))


def nearest_neighbour_logits(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, ways: tf.Tensor,
                             distance: str = KNN_DISTANCE) -> tf.Tensor:
    """Logits [num query, ways]: the one-hot label of each query's nearest support row, as
    ``clients.torch.models.nearest_neighbour_logits``."""
    if distance == "l2":
        squared = (tf.reduce_sum(query * query, axis=1, keepdims=True)
                   - 2.0 * tf.matmul(query, support, transpose_b=True)
                   + tf.reduce_sum(support * support, axis=1)[None, :])
        distances = tf.sqrt(tf.maximum(squared, 0.0))
    else:
        distances = -tf.matmul(tf.math.l2_normalize(query, axis=1, epsilon=REFERENCE_EPSILON),
                               tf.math.l2_normalize(support, axis=1, epsilon=REFERENCE_EPSILON), transpose_b=True)
    nearest = tf.math.top_k(-distances, k=1).indices[:, 0]  # the reference's lookup: the first on ties
    return tf.one_hot(tf.gather(support_labels, nearest), ways, dtype=query.dtype)


def classifier_logits(features: tf.Tensor, head: Sequence[tf.Tensor], classifier: Classifier) -> tf.Tensor:
    """Logits [N, ways] of a head (W, b, g) of the form ``classifier``, as
    ``clients.torch.models.classifier_logits``."""
    weight, bias, gain = head
    if classifier.weight_norm:
        weight = weight * (gain * tf.math.rsqrt(tf.reduce_sum(weight * weight, axis=1)))[:, None]
    if not classifier.cosine:
        return tf.matmul(features, weight, transpose_b=True) + bias
    features = tf.math.l2_normalize(features, axis=1, epsilon=CLASSIFIER_EPSILON)
    if not classifier.weight_norm:
        weight = tf.math.l2_normalize(weight, axis=1, epsilon=CLASSIFIER_EPSILON)
    return classifier.multiplier * tf.matmul(features, weight, transpose_b=True)


EPISODE_HEADS = {"protonet": prototype_logits, "matchingnet": matching_logits, "knn": nearest_neighbour_logits}
"""Each episode head of ``clients.md_learners``, as ``clients.torch.models.EPISODE_HEADS``."""


class PairBatchNorm(keras.layers.Layer):
    """The relation module's batch norm: the batch's own moments, in training and evaluation
    alike (the reference's ``bn`` without moments), learned scale and offset."""

    def build(self, input_shape: Any) -> None:
        channels = int(input_shape[-1])
        self.gamma = self.add_weight(name="gamma", shape=(channels,), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(channels,), initializer="zeros")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(x, axes=[0, 1, 2])
        return tf.nn.batch_normalization(x, mean, variance, self.beta, self.gamma, RELATION_BN_EPSILON)


def relation_module(channels: int, side: int) -> keras.Model:
    """RelationNet's relation module, as ``clients.torch.models.RelationModule``: pairs
    [P, S, S, 2C] -> scores [P] (its Keras layers named as ``init_weights.relation_layout`` says)."""
    pairs = keras.Input(shape=(side, side, 2 * channels), dtype="float32", name="pairs")
    x, current = pairs, side
    for block in (1, 2):
        x = keras.layers.Conv2D(RELATION_DEPTH, 3, padding="same", use_bias=False, name=f"relation_conv{block}")(x)
        x = keras.layers.ReLU()(PairBatchNorm(name=f"relation_bn{block}")(x))
        if current > 1:
            x = keras.layers.MaxPooling2D(2, 2, padding="valid")(x)
            current //= 2
    x = keras.layers.Dense(RELATION_HIDDEN, activation="relu", name="relation_fc1")(keras.layers.Flatten()(x))
    scores = keras.layers.Dense(1, activation="sigmoid", name="relation_fc2")(x)
    return keras.Model(pairs, keras.layers.Reshape(())(scores), name="relation_module")


def relation_scores(module: keras.Model, channels: int, side: int, support: tf.Tensor, support_labels: tf.Tensor,
                    query: tf.Tensor, ways: tf.Tensor) -> tf.Tensor:
    """Scores [Nq, ways] of flattened embeddings (tf's (H, W, C) order), as
    ``clients.torch.models.RelationModule.scores``."""
    one_hot = tf.one_hot(support_labels, ways, dtype=support.dtype)
    counts = tf.maximum(tf.reduce_sum(one_hot, axis=0), 1.0)[:, None]
    prototypes = tf.reshape(tf.matmul(one_hot, support, transpose_a=True) / counts, [1, -1, side, side, channels])
    count = tf.shape(query)[0]
    maps = tf.reshape(query, [-1, 1, side, side, channels])
    pairs = tf.concat([tf.tile(prototypes, [count, 1, 1, 1, 1]), tf.tile(maps, [1, ways, 1, 1, 1])], axis=4)
    return tf.reshape(module(tf.reshape(pairs, [-1, side, side, 2 * channels]), training=True), [count, ways])


def head_loss(head: str, logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """The loss of an episode's query logits under ``head``: RelationNet's mean squared error
    to the one-hot labels, else cross-entropy (``episode_loss``)."""
    if head != "relationnet":
        return episode_loss(logits, labels)
    return tf.reduce_mean(tf.square(logits - tf.one_hot(labels, tf.shape(logits)[1], dtype=logits.dtype)))


def episode_loss(logits: tf.Tensor, labels: tf.Tensor, classes: int | None = None) -> tf.Tensor:
    """Mean softmax cross-entropy of ``labels``. Written as a one-hot product of the
    log-softmax: the fused sparse kernel has no deterministic GPU implementation."""
    depth = classes if classes is not None else tf.shape(logits)[1]
    one_hot = tf.one_hot(labels, depth, dtype=logits.dtype)
    return -tf.reduce_mean(tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=1), axis=1))


def parameter_count(*models: keras.Model) -> int:
    return int(sum(int(tf.size(v)) for model in models for v in model.trainable_variables))


__all__ = ["BACKBONES", "ClassifierLayer", "PaddedConv2D", "PaddedMaxPooling2D", "PairBatchNorm", "RowBatchNormalization",
           "build_backbone", "build_head", "classifier_logits", "conv4", "episode_batch_norms", "episode_loss",
           "episode_norm", "head_loss", "parameter_count", "prototype_logits", "relation_module", "relation_scores",
           "resnet18", "resnet50", "tiny", "valid_rows"]
