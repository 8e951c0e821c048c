"""User backbones that run an op without a deterministic kernel on the CPU
(``max_unpool2d``: torch raises under ``use_deterministic_algorithms(True)``), for
``--deterministic``'s tests (``--backbone torch_unpooling_backbones:always`` / ``:training``).

``always`` unpools in every forward pass, so a run meets it at start (the backbone's probe);
``training`` only in training mode, so a run meets it at its first training step.
"""

from __future__ import annotations

INPUT_SIZE = 16


def _unpooling(always: bool):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Unpooling(nn.Module):
        input_size = INPUT_SIZE

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv(x)
            if always or self.training:
                pooled, indices = F.max_pool2d(x, 2, return_indices=True)
                x = F.max_unpool2d(pooled, indices, 2)
            return x.mean(dim=(2, 3))

    return Unpooling()


def always():
    return _unpooling(True)


def training():
    return _unpooling(False)
