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

from evaluate_backbones import INPUT_RANGE, MEAN, STD, build_keras, build_torch

EPSILON = 1e-5


def _declare(model):
    model.input_range, model.mean, model.std = INPUT_RANGE, MEAN, STD
    return model


def torch_backbone():
    return _declare(build_torch(EPSILON))


def keras_backbone():
    return _declare(build_keras(None, EPSILON))
