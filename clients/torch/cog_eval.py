"""``python -m clients.torch cog``: the ImageNet-CoG linear evaluation in PyTorch (the run
itself is ``clients.cog_eval``; this file holds the backbone and the linear classifier).

``--backbone`` is one of:
- a TorchScript file (``torch.jit.save`` of a module mapping a float32 NCHW batch to
  features [B, D]), or a ``.pt2`` exported program (``torch.export.save``, exported in
  eval mode with a dynamic batch dimension);
- ``module:callable``: imported and called with the ``--backbone-checkpoint`` path, it
  returns an ``nn.Module`` (or any callable on tensors) mapping NCHW to [B, D];
- ``builtin``: a small random-init convolutional network (three stride-2 3x3
  convolutions, ReLU, global average pooling, 64 features) for tests and demos. Its
  weights are drawn once from a fixed seed and kept in a file (``--backbone-checkpoint``
  or ``<feature-cache>/builtin-torch.pt``), so it has a checksum like any checkpoint.

The backbone runs in eval mode under ``torch.inference_mode``; its input is the server's
uint8 RGB crop divided by 255 and normalised per channel with ``--mean``/``--std``, as the
reference's feature extraction does. The classifier is ``nn.Linear`` trained by
``torch.optim.SGD`` (momentum 0.9, ``weight_decay`` on weight and bias, as the reference
passes ``model.parameters()``) with mean cross-entropy; a step whose loss is not finite
is not applied (the run stops that fit). On the CPU deterministic algorithms are on.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.cog_eval import BackboneSpec, CogBackend, backbone_spec, load_callable, run_cog_main
from clients.cog_protocol import MOMENTUM
from clients.torch.md_train import select_device
from clients.errors import UsageError

BUILTIN_FILE = "builtin-torch.pt"
BUILTIN_SEED = 20210607
PREDICT_ROWS = 8192


class BuiltinBackbone(nn.Module):
    """Three stride-2 3x3 convolutions with ReLU, global average pooling: 64 features."""

    out_dim = 64

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images)


def builtin_backbone(path: Path) -> nn.Module:
    """The builtin network with the weights kept at ``path`` (drawn from a fixed seed, written there when missing)."""
    model = BuiltinBackbone()
    if path.exists():
        try:
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as error:  # pickle, zip, key and shape errors alike
            detail = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
            raise UsageError(f"argument --backbone-checkpoint: got {str(path)!r}, expected the builtin torch "
                             f"backbone's weights ({detail})") from None
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(BUILTIN_SEED)
        model = BuiltinBackbone()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)
    return model


def load_backbone(spec: BackboneSpec, device: torch.device) -> Any:
    """The user's backbone, on ``device``, in eval mode."""
    if spec.kind == "builtin":
        model: Any = builtin_backbone(spec.checkpoint)
    elif spec.kind == "file":
        exported = spec.target.endswith(".pt2")
        try:
            if exported:  # an ExportedProgram is traced in the mode it was exported in: no .eval() to call
                return torch.export.load(spec.target).module().to(device)
            model = torch.jit.load(spec.target, map_location=device)
        except Exception as error:  # not a TorchScript archive / exported program
            kind = "an exported program (torch.export.save)" if exported else "a TorchScript file (torch.jit.save)"
            detail = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
            raise UsageError(f"argument --backbone: got {spec.target!r}, expected {kind}, builtin or "
                             f"module:callable ({detail})") from None
    else:
        model = load_callable(spec.target)(str(spec.checkpoint))
        if not callable(model):
            raise UsageError(f"argument --backbone: {spec.target} returned a {type(model).__name__}, "
                             "expected an nn.Module")
    if isinstance(model, nn.Module):
        model = model.to(device).eval()
    return model


class TorchCogBackend(CogBackend):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, backbone_spec(args, BUILTIN_FILE))
        self.device = select_device(args.device)
        if self.device.type == "cpu":
            torch.use_deterministic_algorithms(True)
        self.backbone = load_backbone(self.spec, self.device)
        shape = (1, 3, 1, 1)
        self.mean = torch.tensor(args.mean, dtype=torch.float32, device=self.device).reshape(shape)
        self.std = torch.tensor(args.std, dtype=torch.float32, device=self.device).reshape(shape)
        self.linear: nn.Linear | None = None

    def describe(self) -> dict[str, Any]:
        parameters = sum(p.numel() for p in self.backbone.parameters()) if hasattr(self.backbone, "parameters") else 0
        return {"framework": self.name, "torch_version": str(torch.__version__), "device": str(self.device),
                "backbone_parameter_count": int(parameters)}

    def extract(self, images: np.ndarray) -> np.ndarray:
        pixels = images if images.flags.writeable else np.array(images)  # wire arrays are read-only views
        x = torch.from_numpy(np.ascontiguousarray(pixels)).to(self.device).permute(0, 3, 1, 2).float().div(255.0)
        with torch.inference_mode():
            out = self.backbone((x - self.mean) / self.std)
        if not isinstance(out, torch.Tensor):
            raise UsageError(f"argument --backbone: it returned a {type(out).__name__}, expected a tensor of "
                             "features [B, D]")
        return out.float().cpu().numpy()

    def classifier_data(self, features: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.from_numpy(np.ascontiguousarray(features, np.float32)).to(self.device),
                torch.from_numpy(np.asarray(labels, np.int64)).to(self.device))

    def reset(self, weight: np.ndarray, bias: np.ndarray, weight_decay: float) -> None:
        classes, dim = weight.shape
        self.linear = nn.Linear(dim, classes).to(self.device)
        with torch.no_grad():
            self.linear.weight.copy_(torch.from_numpy(weight))
            self.linear.bias.copy_(torch.from_numpy(bias))
        self.optimizer = torch.optim.SGD(self.linear.parameters(), lr=1.0, momentum=MOMENTUM,
                                         weight_decay=weight_decay)

    def train_step(self, data: tuple[torch.Tensor, torch.Tensor], indices: np.ndarray, lr: float) -> float:
        assert self.linear is not None
        rows = torch.from_numpy(np.asarray(indices, np.int64)).to(self.device)
        self.linear.train()
        loss = F.cross_entropy(self.linear(data[0][rows]), data[1][rows])
        value = float(loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        if np.isfinite(value):
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss.backward()
            self.optimizer.step()
        return value

    def predict(self, data: tuple[torch.Tensor, torch.Tensor]) -> np.ndarray:
        assert self.linear is not None
        self.linear.eval()
        x = data[0]
        with torch.inference_mode():
            return torch.cat([self.linear(x[i:i + PREDICT_ROWS]).argmax(1) for i in range(0, len(x), PREDICT_ROWS)]
                             or [torch.zeros(0, dtype=torch.int64)]).cpu().numpy()

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, torch.OutOfMemoryError):
            return 1, f"out of memory on {self.device} (try a smaller --extract-batch-size or --batch-size)"
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CoG evaluation; exit status 0, 2 bad input, 3 server fault."""
    return run_cog_main("torch", TorchCogBackend, argv)
