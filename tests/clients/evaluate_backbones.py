"""One small network in PyTorch and in Keras with the same weights, for ``evaluate``'s tests
(passed as ``--backbone evaluate_backbones:torch_backbone`` / ``:keras_backbone``).

Two 3x3 stride-2 convolutions (3 -> 8 -> 16 channels, ReLU) and a global average pool: 16
features. Keras pads explicitly (``ZeroPadding2D(1)``, then ``valid``), as torch's
``padding=1`` does (Keras's ``same`` would pad only the bottom and right at stride 2). The
weights are drawn once from a fixed NumPy seed (``WEIGHTS``, torch's layout) and copied
into each framework (Keras kernels transposed to [kh, kw, in, out]). Both declare what
they expect: 16 px, values [0, 1], then a per-channel mean and std.
"""

from __future__ import annotations

import numpy as np

INPUT_SIZE = 16
INPUT_RANGE = (0.0, 1.0)
MEAN = (0.5, 0.45, 0.4)
STD = (0.25, 0.25, 0.3)
CHANNELS = ((3, 8), (8, 16))


def weights() -> list[tuple[np.ndarray, np.ndarray]]:
    """(kernel [out, in, 3, 3], bias [out]) per convolution, float32, from a fixed seed."""
    rng = np.random.RandomState(20240607)
    return [(rng.normal(0.0, np.sqrt(2.0 / (9 * c_in)), (c_out, c_in, 3, 3)).astype(np.float32),
             rng.normal(0.0, 0.05, c_out).astype(np.float32)) for c_in, c_out in CHANNELS]


def _declare(model):
    model.input_size, model.input_range, model.mean, model.std = INPUT_SIZE, INPUT_RANGE, MEAN, STD
    return model


def build_torch(batch_norm_epsilon: float | None = None):
    """The network in torch; with ``batch_norm_epsilon`` a batch norm after each convolution."""
    import torch
    from torch import nn

    layers = []
    for c_in, c_out in CHANNELS:
        norm = [] if batch_norm_epsilon is None else [nn.BatchNorm2d(c_out, eps=batch_norm_epsilon)]
        layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), *norm, nn.ReLU()]
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with torch.no_grad():
        for conv, (kernel, bias) in zip([m for m in model if isinstance(m, nn.Conv2d)], weights()):
            conv.weight.copy_(torch.from_numpy(kernel))
            conv.bias.copy_(torch.from_numpy(bias))
    return model


def build_keras(side: int | None, batch_norm_epsilon: float | None = None):
    """The network in Keras for inputs of ``side`` pixels (None: any), as ``build_torch``."""
    import tensorflow as tf

    keras = tf.keras
    inputs = keras.Input((side, side, 3))
    x = inputs
    convs = []
    for _, c_out in CHANNELS:
        x = keras.layers.ZeroPadding2D(1)(x)
        if batch_norm_epsilon is None:
            conv = keras.layers.Conv2D(c_out, 3, strides=2, padding="valid", activation="relu")
            x = conv(x)
        else:
            conv = keras.layers.Conv2D(c_out, 3, strides=2, padding="valid")
            x = keras.layers.ReLU()(keras.layers.BatchNormalization(epsilon=batch_norm_epsilon)(conv(x)))
        convs.append(conv)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    for conv, (kernel, bias) in zip(convs, weights()):
        conv.set_weights([kernel.transpose(2, 3, 1, 0), bias])
    return model


def torch_backbone():
    return _declare(build_torch())


def keras_backbone():
    return _declare(build_keras(INPUT_SIZE))
