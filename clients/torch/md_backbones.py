"""Meta-Dataset's own backbones in PyTorch, as the reference defines them
(google-research/meta-dataset ``models/functional_backbones.py``; facts in
../shared/reference/md_learners.md, section 3):

- ``md-conv4`` (``four_layer_convnet``): 4 x [3x3 conv 64 (SAME), batch norm, ReLU, 2x2/2
  max-pool], flattened: 1600 features at 84 px.
- ``md-resnet18`` (``resnet``): the input first resized bilinearly (corners aligned) to the
  next side of the form 32k + 1 (84 -> 97, 126 -> 129; "DeepLab alignment"), then a 7x7/2
  stem, a 3x3/2 max-pool and four stages of two basic blocks (64/128/256/512, stride 2 from
  the second stage); the first block of *every* stage has a 1x1 projection shortcut with batch
  norm; global average pooling to 512 features.
- ``md-wrn`` (``wide_resnet``, n = 2, k = 2: WRN-16-2): a 3x3 stem of 16 without batch norm,
  three groups of two pre-activation blocks (32/64/128, stride 2 at the second and third),
  each block [BN, ReLU, 3x3 conv (strided), BN, ReLU, 3x3 conv] plus a 1x1 projection of the
  block's pre-activated input (every block: the width is never 16); a final BN and ReLU,
  global average pooling to 128 features.
- ``md-relationnet-convnet`` (``relationnet_convnet``): 4 x [3x3 conv 64, batch norm, ReLU],
  the first three unpadded and followed by a 2x2/2 max-pool, the fourth SAME; flattened
  (4096 features at 84 px).

Common to all: no convolution has a bias; kernels start from a truncated normal of
standard deviation 0.1 (values beyond two deviations drawn again, as TensorFlow's); batch
norms (``RowBatchNorm2d``, epsilon 1e-5) start at scale 1 and offset 0. Convolutions pad as
TensorFlow's SAME does (``tf_same_pad``: the extra cell of an odd total after, not before),
which is symmetric everywhere in ``md-resnet18`` thanks to its 32k + 1 side but not in
``md-wrn`` at even sides. Flattened maps are in torch's (C, H, W) order; the tf models'
(``clients.tf.md_backbones``) are (H, W, C), a permutation of the same features.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from clients.backbone_contract import MD_BACKBONES, md_aligned_side
from clients.torch.layers import RowBatchNorm2d, global_average

INIT_STD = 0.1


def _same_pads(x: torch.Tensor, kernel: int, stride: int) -> list[int]:
    """``F.pad``'s list (the last axis first) for TensorFlow's SAME padding of a ``kernel`` x
    ``kernel`` window at ``stride``: the output side is ceil(side / stride); of an odd total,
    the extra cell goes after (bottom, right)."""
    pads = []
    for side in (x.shape[3], x.shape[2]):
        total = max((math.ceil(side / stride) - 1) * stride + kernel - side, 0)
        pads += [total // 2, total - total // 2]
    return pads


def tf_same_pad(x: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """``x`` zero-padded as TensorFlow's SAME padding (``_same_pads``)."""
    pads = _same_pads(x, kernel, stride)
    return F.pad(x, pads) if any(pads) else x


class SameConv2d(nn.Conv2d):
    """A bias-free convolution padded as TensorFlow's SAME (``tf_same_pad``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> None:
        super().__init__(in_channels, out_channels, kernel, stride=stride, padding=0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(tf_same_pad(x, self.kernel_size[0], self.stride[0]))


class SameMaxPool2d(nn.MaxPool2d):
    """A max-pool padded as TensorFlow's SAME: padding never wins a window."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size, stride = int(self.kernel_size), int(self.stride)
        pads = _same_pads(x, size, stride)
        return F.max_pool2d(F.pad(x, pads, value=float("-inf")) if any(pads) else x, size, stride)


def _md_init(model: nn.Module) -> nn.Module:
    """Every convolution's kernel from N(0, 0.1^2) truncated at two deviations (the reference's
    ``weight_variable``); batch norms at scale 1, offset 0 (``RowBatchNorm2d``'s own)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.trunc_normal_(module.weight, std=INIT_STD, a=-2 * INIT_STD, b=2 * INIT_STD)
    return model


class MDConv4(nn.Module):
    """``four_layer_convnet``: the names and layout of ``models.Conv4``, MD's initialisation."""

    def __init__(self, image_size: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for _ in range(4):
            layers += [SameConv2d(channels, 64, 3), RowBatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            channels = 64
        self.features = nn.Sequential(*layers)
        side = image_size
        for _ in range(4):
            side //= 2
        if side < 1:
            raise ValueError(f"image_size: got {image_size}, expected at least 16 for md-conv4")
        self.out_dim = 64 * side * side
        _md_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.features(x), 1)


class MDBasicBlock(nn.Module):
    """The reference's ResNet-18 block: [3x3 conv (strided), BN, ReLU, 3x3 conv, BN] plus the
    input, or its 1x1 projection with BN (``project``), then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, project: bool) -> None:
        super().__init__()
        self.conv1 = SameConv2d(in_channels, out_channels, 3, stride)
        self.bn1 = RowBatchNorm2d(out_channels)
        self.conv2 = SameConv2d(out_channels, out_channels, 3)
        self.bn2 = RowBatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if project:
            self.shortcut = nn.Sequential(SameConv2d(in_channels, out_channels, 1, stride), RowBatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class MDResNet18(nn.Module):
    """``resnet``: aligned resize, stem, four stages of two blocks (projection in each stage's
    first), global average pooling to 512 features."""

    out_dim = 512

    def __init__(self, image_size: int) -> None:
        super().__init__()
        if image_size < 1:
            raise ValueError(f"image_size: got {image_size}, expected a positive side for md-resnet18")
        self.side = md_aligned_side(image_size)
        self.stem = nn.Sequential(SameConv2d(3, 64, 7, 2), RowBatchNorm2d(64), nn.ReLU(), SameMaxPool2d(3, 2))
        blocks: list[nn.Module] = []
        channels = 64
        for stage, width in enumerate((64, 128, 256, 512)):
            blocks += [MDBasicBlock(channels, width, 1 if stage == 0 else 2, True), MDBasicBlock(width, width, 1, False)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        _md_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[2] != self.side or x.shape[3] != self.side:
            x = F.interpolate(x, size=(self.side, self.side), mode="bilinear", align_corners=True)
        return global_average(self.blocks(self.stem(x)))


class MDWideBlock(nn.Module):
    """The reference's pre-activation wide block: BN, ReLU (the pre-activated input), 3x3 conv
    (strided), BN, ReLU, 3x3 conv; plus the 1x1 projection of the pre-activated input."""

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        self.bn1 = RowBatchNorm2d(in_channels)
        self.conv1 = SameConv2d(in_channels, width, 3, stride)
        self.bn2 = RowBatchNorm2d(width)
        self.conv2 = SameConv2d(width, width, 3)
        self.shortcut = SameConv2d(in_channels, width, 1, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = F.relu(self.bn1(x))
        out = self.conv2(F.relu(self.bn2(self.conv1(activated))))
        return out + self.shortcut(activated)


class MDWideResNet(nn.Module):
    """``wide_resnet`` with n = 2, k = 2: stem, three groups of two blocks, final BN and ReLU,
    global average pooling to 128 features."""

    out_dim = 128

    def __init__(self) -> None:
        super().__init__()
        self.stem = SameConv2d(3, 16, 3)
        blocks: list[nn.Module] = []
        channels = 16
        for group, width in enumerate((32, 64, 128)):
            blocks += [MDWideBlock(channels, width, 1 if group == 0 else 2), MDWideBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.final_bn = RowBatchNorm2d(channels)
        _md_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_average(F.relu(self.final_bn(self.blocks(self.stem(x)))))


class MDRelationNetConvnet(nn.Module):
    """``relationnet_convnet``: three unpadded [conv, BN, ReLU, 2x2 max-pool] and one SAME
    [conv, BN, ReLU], flattened."""

    def __init__(self, image_size: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels, side = 3, image_size
        for block in range(4):
            conv = nn.Conv2d(channels, 64, 3, bias=False) if block < 3 else SameConv2d(channels, 64, 3)
            layers += [conv, RowBatchNorm2d(64), nn.ReLU(inplace=True)]
            if block < 3:
                layers.append(nn.MaxPool2d(2))
                side = (side - 2) // 2
            channels = 64
        if side < 1:
            raise ValueError(f"image_size: got {image_size}, expected at least 22 for md-relationnet-convnet")
        self.features = nn.Sequential(*layers)
        self.out_dim = 64 * side * side
        _md_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.features(x), 1)


def build_md_backbone(name: str, image_size: int) -> nn.Module:
    """One of ``MD_BACKBONES``; ``out_dim`` is its embedding size at ``image_size``."""
    if name == "md-conv4":
        return MDConv4(image_size)
    if name == "md-resnet18":
        return MDResNet18(image_size)
    if name == "md-wrn":
        return MDWideResNet()
    if name == "md-relationnet-convnet":
        return MDRelationNetConvnet(image_size)
    raise ValueError(f"backbone: got {name!r}, expected one of {', '.join(MD_BACKBONES)}")
