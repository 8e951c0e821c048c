"""One small network with batch norms in PyTorch and in Keras with the same weights, for the
adapting learners of ``evaluate`` (``--backbone adapting_backbones:torch_backbone`` /
``:keras_backbone``).

``evaluate_backbones``'s two convolutions and weights, each followed by a batch norm (scale 1,
offset 0, epsilon 1e-5 in both; its running statistics are buffers an adapting learner must
leave as loaded), then ReLU and a global average pool: 16 features. It declares its range, mean
and std but no input size, so Meta-Dataset's learners serve it at 84 px and bit-md at 224 px;
the Keras model takes any side (``Input((None, None, 3))``).
"""

from __future__ import annotations

from evaluate_backbones import CHANNELS, INPUT_RANGE, MEAN, STD, weights

EPSILON = 1e-5


def _declare(model):
    model.input_range, model.mean, model.std = INPUT_RANGE, MEAN, STD
    return model


def torch_backbone():
    import torch
    from torch import nn

    layers = []
    for c_in, c_out in CHANNELS:
        layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.BatchNorm2d(c_out, eps=EPSILON), nn.ReLU()]
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with torch.no_grad():
        for conv, (kernel, bias) in zip([m for m in model if isinstance(m, nn.Conv2d)], weights()):
            conv.weight.copy_(torch.from_numpy(kernel))
            conv.bias.copy_(torch.from_numpy(bias))
    return _declare(model)


def keras_backbone():
    import tensorflow as tf

    keras = tf.keras
    inputs = keras.Input((None, None, 3))
    x = inputs
    convs = []
    for _, c_out in CHANNELS:
        x = keras.layers.ZeroPadding2D(1)(x)
        conv = keras.layers.Conv2D(c_out, 3, strides=2, padding="valid")
        x = keras.layers.ReLU()(keras.layers.BatchNormalization(epsilon=EPSILON)(conv(x)))
        convs.append(conv)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    for conv, (kernel, bias) in zip(convs, weights()):
        conv.set_weights([kernel.transpose(2, 3, 1, 0), bias])
    return _declare(model)
