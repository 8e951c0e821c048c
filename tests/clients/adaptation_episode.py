"""A small episode for the MAML family's and Finetune's tests, on Meta-Dataset's four-layer
convnet at 16 pixels (a 64-d embedding, the same order in both frameworks) from the same
neutral weights in torch and tf."""

from __future__ import annotations

import numpy as np

SIZE, SUPPORT, QUERY, WAYS, DIM = 16, 10, 6, 3, 64  # 4, 3 and 3 support images: no gradient is zero by symmetry
BACKBONE = "md-conv4"


def episode(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images NHWC float in [-1, 1], labels): smooth images, as photographs are."""
    rng = np.random.RandomState(seed)
    coarse = rng.uniform(-1, 1, (SUPPORT + QUERY, 4, 4, 3)).astype(np.float32)
    images = np.repeat(np.repeat(coarse, SIZE // 4, axis=1), SIZE // 4, axis=2)
    labels = np.concatenate([np.arange(SUPPORT) % WAYS, rng.randint(0, WAYS, QUERY)]).astype(np.int64)
    return images, labels


def torch_adaptation(images: np.ndarray, labels: np.ndarray):
    import torch

    from clients.init_weights import neutral_weights
    from clients.torch import models
    from clients.torch.adaptation import TorchAdaptation

    model = models.build_backbone(BACKBONE, SIZE)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in neutral_weights(BACKBONE, SIZE, 3).items()})
    models.adopt_batch_norms(model, "md")
    x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    return TorchAdaptation(model, x, torch.from_numpy(labels), SUPPORT, QUERY, WAYS, "md", DIM)


def tf_adaptation(images: np.ndarray, labels: np.ndarray):
    import tensorflow as tf

    from clients.init_weights import neutral_weights
    from clients.tf import models
    from clients.tf.adaptation import TFAdaptation
    from clients.tf.backbones import assign_neutral

    model = models.build_backbone(BACKBONE, SIZE)
    assign_neutral(model, BACKBONE, SIZE, neutral_weights(BACKBONE, SIZE, 3), "test")
    models.episode_batch_norms(model, "md")
    return TFAdaptation(model, tf.constant(images), tf.constant(labels), tf.constant(SUPPORT), tf.constant(QUERY),
                        tf.constant(WAYS), "md", DIM, False, False)
