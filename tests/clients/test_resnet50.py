"""The named ``resnet50`` backbone in both frameworks: 2048 features per image at 64 px,
the standard ResNet-50 body's 23,508,032 parameters (torchvision's ``resnet50`` less its
1000-way ``fc``: 25,557,032 - 2,049,000) in torch and in Keras, and, in torch,
torchvision's state dict names and shapes (so its weights, less ``fc.*``, load as they are)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

RESNET50_BODY_PARAMETERS = 23_508_032
SIDE, ROWS = 64, 2


def test_torch_resnet50_maps_images_to_2048_features_with_the_standard_parameters():
    import torch
    from clients.torch.backbones import named_preprocessing, to_model_input
    from clients.torch.models import BACKBONES, RowBatchNorm2d, build_backbone, parameter_count

    assert "resnet50" in BACKBONES
    model = build_backbone("resnet50", SIDE).eval()
    assert model.out_dim == 2048
    assert parameter_count(model) == RESNET50_BODY_PARAMETERS
    assert sum(isinstance(m, RowBatchNorm2d) for m in model.modules()) == 53  # every norm counts valid rows
    images = torch.from_numpy(np.random.RandomState(0).randint(0, 256, (ROWS, SIDE, SIDE, 3), dtype=np.uint8))
    with torch.inference_mode():
        features = model(to_model_input(images, named_preprocessing(SIDE), torch.device("cpu")))
    assert features.shape == (ROWS, 2048) and features.dtype == torch.float32
    assert torch.isfinite(features).all()


def test_torch_resnet50_lays_out_its_state_dict_as_torchvision_does():
    """torchvision's ``resnet50`` state dict has 320 entries; less ``fc.weight`` and
    ``fc.bias`` that is 318 (53 convolutions, 53 batch norms of 5 entries each)."""
    from clients.torch.models import build_backbone

    shapes = {key: tuple(value.shape) for key, value in build_backbone("resnet50", SIDE).state_dict().items()}
    assert len(shapes) == 318
    assert shapes["conv1.weight"] == (64, 3, 7, 7)
    assert shapes["layer1.0.downsample.0.weight"] == (256, 64, 1, 1)
    assert shapes["layer2.0.conv2.weight"] == (128, 128, 3, 3)  # the stride sits on the 3x3 (v1.5)
    assert shapes["layer3.5.bn3.running_var"] == (1024,)
    assert shapes["layer4.2.conv3.weight"] == (2048, 512, 1, 1)
    assert shapes["layer4.0.downsample.1.num_batches_tracked"] == ()
    assert not any(key.startswith("fc.") for key in shapes)


@pytest.mark.slow
def test_keras_resnet50_maps_images_to_2048_features_with_the_standard_parameters():
    import tensorflow as tf
    from clients.tf.backbones import named_preprocessing, to_model_input
    from clients.tf.models import BACKBONES, RowBatchNormalization, build_backbone, parameter_count

    assert "resnet50" in BACKBONES
    model = build_backbone("resnet50", SIDE)
    assert parameter_count(model) == RESNET50_BODY_PARAMETERS
    assert sum(isinstance(layer, RowBatchNormalization) for layer in model.layers) == 53
    images = tf.constant(np.random.RandomState(0).randint(0, 256, (ROWS, SIDE, SIDE, 3), dtype=np.uint8))
    features = model(to_model_input(images, named_preprocessing(SIDE)), training=False)
    assert tuple(features.shape) == (ROWS, 2048) and features.dtype == tf.float32
    assert bool(tf.reduce_all(tf.math.is_finite(features)))
