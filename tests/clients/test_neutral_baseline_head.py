"""The MD baseline's classifier head from ``--init-seed``: torch and tf start from the same
function (the neutral backbone and the neutral head, permuted to tf's flatten over conv4)."""

from __future__ import annotations

import numpy as np
import pytest

import torch

from clients.tf.backbones import to_model_input as tf_input  # noqa: E402
from clients.tf.md_train import TFFramework  # noqa: E402
from clients.torch.backbones import to_model_input as torch_input  # noqa: E402
from clients.torch.md_train import TorchFramework  # noqa: E402
from clients.trainer_args import parse_args  # noqa: E402


@pytest.mark.parametrize("backbone", ["conv4", "tiny"])
def test_baseline_heads_from_the_same_init_seed_give_the_same_logits(backbone):
    argv = ["--server", "127.0.0.1:1", "--run", "head", "--sources", "a", "--model", "baseline", "--backbone",
            backbone, "--image-size", "32", "--init-seed", "3", "--device", "cpu"]
    torch_part, tf_part = TorchFramework(parse_args("torch", argv)), TFFramework(parse_args("tf", argv))
    torch_part.build(7)
    tf_part.build(7)
    images = np.random.RandomState(0).randint(0, 256, (4, 32, 32, 3)).astype(np.uint8)
    torch_part.backbone.eval()
    with torch.no_grad():
        features = torch_part.backbone(torch_input(torch.from_numpy(images), torch_part.preprocessing,
                                                   torch.device("cpu")))
        torch_logits = torch_part.head(features).numpy()
    tf_logits = tf_part.head(tf_part.backbone(tf_input(images, tf_part.preprocessing), training=False)).numpy()
    scale = float(np.abs(torch_logits).max())
    np.testing.assert_allclose(tf_logits, torch_logits, atol=1e-4 * scale, rtol=0)
