"""Backbones that record the float images they are fed, for the tests of one input
convention per checkpoint (``--backbone input_probe_backbones:torch_backbone`` / ``:keras_backbone``).

Each is ``evaluate_backbones``'s small network behind a recorder and declares its side (16
px) but no ``input_range``, ``mean`` or ``std``, so it gets the one default for a backbone
that declares nothing. The recorder keeps the first two rows of every batch it is fed, under
the protocol ``PHASE`` names (a test sets it around each protocol's unit); TensorFlow's runs
inside ``tf.function``, so it records through ``tf.py_function`` at execution, not at tracing.

``write_torchvision_resnet18`` writes a state dict in torchvision's ResNet-18 layout.
``pixels_under`` inverts a convention: a recorded tensor is that convention's image of uint8
pixels only if the inverse gives integers in 0..255.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from evaluate_backbones import INPUT_SIZE, build_keras, build_torch

RECORDED: list[tuple[str, np.ndarray]] = []
"""(phase, the first rows of a batch as fed, NHWC float32)."""
PHASE = ["load"]


def record(rows: np.ndarray) -> None:
    RECORDED.append((PHASE[0], np.array(rows, np.float32)))


def torch_backbone():
    import torch
    from torch import nn

    class Recording(nn.Module):
        input_size = INPUT_SIZE

        def __init__(self) -> None:
            super().__init__()
            self.body = build_torch()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            record(x[:2].detach().float().permute(0, 2, 3, 1).cpu().numpy())
            return self.body(x)

    return Recording()


def keras_backbone():
    import tensorflow as tf

    keras = tf.keras

    class Recorder(keras.layers.Layer):
        def call(self, x):
            def keep(rows):
                record(rows.numpy()[:2])
                return np.int32(0)

            done = tf.py_function(keep, [x], Tout=tf.int32)
            with tf.control_dependencies([done]):
                return tf.identity(x)

    body = build_keras(INPUT_SIZE)
    inputs = keras.Input((INPUT_SIZE, INPUT_SIZE, 3))
    model = keras.Model(inputs, body(Recorder()(inputs)))
    model.input_size = INPUT_SIZE
    return model


def pixels_under(x: np.ndarray, input_range: Sequence[float], mean: Sequence[float],
                 std: Sequence[float]) -> np.ndarray:
    """The uint8 values ``x`` (NHWC) would come from under a convention, as floats."""
    low, high = input_range
    return ((x * np.asarray(std, np.float64) + np.asarray(mean, np.float64)) - low) * 255.0 / (high - low)


def fits(x: np.ndarray, input_range: Sequence[float], mean: Sequence[float], std: Sequence[float]) -> bool:
    """Whether ``x`` is exactly uint8 pixels under the convention (float32 rounding allowed)."""
    pixels = pixels_under(x.astype(np.float64), input_range, mean, std)
    return bool(np.abs(pixels - np.round(pixels)).max() < 2e-3 and pixels.min() > -2e-3 and pixels.max() < 255.002)


def write_torchvision_resnet18(path: Path) -> None:
    """Our ``resnet18``'s random weights under torchvision's names, with its 1000-way ``fc``
    (``clients.torch.backbones.from_torchvision`` read backwards)."""
    import torch

    from clients.torch.models import ResNet18

    state = {}
    for key, value in ResNet18().state_dict().items():
        key = re.sub(r"^stem\.0\.", "conv1.", re.sub(r"^stem\.1\.", "bn1.", key))
        block = re.match(r"^blocks\.(\d+)\.(.*)$", key)
        if block:
            index = int(block.group(1))
            key = f"layer{index // 2 + 1}.{index % 2}.{block.group(2).replace('shortcut.', 'downsample.')}"
        state[key] = value
    state["fc.weight"], state["fc.bias"] = torch.zeros(1000, 512), torch.zeros(1000)
    torch.save(state, path)
