"""Meta-Dataset's own backbones (``--backbone md-conv4 | md-resnet18 | md-wrn |
md-relationnet-convnet``) as the reference defines them (../shared/reference/md_learners.md,
section 3): their embedding sizes at MD's 84 px and their structure. That the TensorFlow
models (the reference's own SAME/VALID padding and ``resize_bilinear`` with aligned corners)
and the PyTorch ones compute the same function from the same ``--init-seed`` weights is
``test_init_weights.py::test_torch_and_tf_compute_the_same_function_from_the_same_weights``."""

from __future__ import annotations

import numpy as np
import pytest

import torch

from clients.init_weights import layout, neutral_weights  # noqa: E402
from clients.torch.backbones import named_preprocessing, to_model_input  # noqa: E402
from clients.backbone_contract import md_aligned_side  # noqa: E402
from clients.torch.md_backbones import MDResNet18, tf_same_pad  # noqa: E402
from clients.torch.models import build_backbone, episode_norm  # noqa: E402

SUPPORT, QUERY = 5, 3
# backbone -> embedding size at 84 px: MD's 1600-d conv4, 512-d ResNet-18, 128-d WRN
SIZES = {"md-conv4": 1600, "md-resnet18": 512, "md-wrn": 128, "md-relationnet-convnet": 4096}


@pytest.mark.parametrize("backbone", sorted(SIZES))
def test_embedding_sizes_at_84_px(backbone):
    model = build_backbone(backbone, 84)
    images = torch.from_numpy(np.random.RandomState(2).randint(0, 256, (SUPPORT + QUERY, 84, 84, 3)).astype(np.uint8))
    with torch.no_grad(), episode_norm(model, "md", SUPPORT, QUERY):
        embedded = model(to_model_input(images, named_preprocessing(84), torch.device("cpu")))
    assert tuple(embedded.shape) == (SUPPORT + QUERY, SIZES[backbone]) and model.out_dim == SIZES[backbone]
    assert torch.isfinite(embedded).all()
def test_the_structure_is_the_references():
    # ResNet-18: every stage's first block projects, no convolution has a bias
    resnet = MDResNet18(126)
    names = [name for name, _ in resnet.named_parameters()]
    assert [n for n in names if n.endswith("shortcut.0.weight")] == [f"blocks.{i}.shortcut.0.weight" for i in (0, 2, 4, 6)]
    assert not [n for n in names if ".bias" in n and "bn" not in n and "shortcut.1" not in n and "stem.1" not in n]
    assert all(m.bias is None for m in resnet.modules() if isinstance(m, torch.nn.Conv2d))
    # the DeepLab-aligned side and TensorFlow's SAME padding (an odd total: the extra cell after)
    assert (md_aligned_side(84), md_aligned_side(126), md_aligned_side(32)) == (97, 129, 33)
    padded = tf_same_pad(torch.ones(1, 1, 84, 84), 3, 2)
    assert padded.shape[2:] == (85, 85) and padded[0, 0, 0, 0] == 1 and padded[0, 0, -1, -1] == 0
    # kernels: N(0, 0.1^2) truncated at two deviations, in torch and in the neutral draw
    kernels = torch.cat([m.weight.detach().flatten() for m in resnet.modules() if isinstance(m, torch.nn.Conv2d)])
    assert kernels.abs().max() <= 0.2 and abs(float(kernels.std()) - 0.088) < 0.005  # a truncated N(0, 0.1)'s 0.088
    drawn = np.concatenate([v.ravel() for k, v in neutral_weights("md-wrn", 84, 1).items() if "conv" in k])
    assert np.abs(drawn).max() <= 0.2 and abs(float(drawn.std()) - 0.088) < 0.005
    # every WRN block projects its pre-activated input; one final batch norm
    wrn = [t.name for t in layout("md-wrn", 84)]
    assert sum(name.endswith("shortcut.weight") for name in wrn) == 6 and "final_bn.weight" in wrn
