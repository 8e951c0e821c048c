"""``python -m clients.torch cog``: the ImageNet-CoG linear evaluation in PyTorch (the run
itself is ``clients.cog_eval``; this file holds the backbone and the linear classifier).

``--backbone`` is any backbone of the contract (``clients.torch.backbones``): a named one
(``tiny`` is a small random-init network for tests and demos), ``module:callable``, a
TorchScript or ``.pt2`` file; ``--weights`` loads a state dict into a named or
module:callable one. It runs in eval mode under ``torch.inference_mode``, in float32 (the
reference's) or, with ``--precision bf16``, under bf16 autocast on the device; its input is the server's uint8 RGB crop mapped as it declares, by default as
the reference's feature extraction does (divided by 255, ImageNet's mean and std). The
classifier is ``nn.Linear`` trained by ``torch.optim.SGD`` (momentum 0.9,
``weight_decay`` on weight and bias, as the reference passes ``model.parameters()``) with
mean cross-entropy; a step whose loss is not finite is not applied (the run stops that
fit). ``--deterministic`` is applied (``clients.torch.determinism``) before the backbone is
built; the classifier's initial weights and batch orders come from ``clients.cog_eval``'s
named seeds.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.determinism import weights_sha256
from clients.cog_eval import CogBackend, run_cog_main
from clients.seeds import COG_BACKBONE_SEED_NAME
from clients.cog_protocol import IMAGE_SIZE, MOMENTUM
from clients.torch.backbones import TorchFeatures, load_backbone
from clients.torch.determinism import apply_determinism, classify_determinism, load_checked, torch_record
from clients.torch.md_train import select_device

PREDICT_ROWS = 8192


class TorchCogBackend(CogBackend):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before CUDA starts and any model exists
        super().__init__(args, load_checked(
            lambda: load_backbone(args, self.device, IMAGE_SIZE, COG_BACKBONE_SEED_NAME), self.determinism,
            self.device))
        self.extractor = TorchFeatures(self.backbone, self.device, args.extract_batch_size, args.precision)
        self.linear: nn.Linear | None = None

    def describe(self) -> dict[str, Any]:
        model = self.backbone.model
        parameters = sum(p.numel() for p in model.parameters()) if isinstance(model, nn.Module) else 0
        return {"framework": self.name, **self.determinism.as_config(), **torch_record(self.device),
                "device": str(self.device), "backbone_parameter_count": int(parameters),
                "embedding_dim": self.backbone.out_dim}

    def extract(self, images: np.ndarray) -> np.ndarray:
        return self.extractor.features(images)

    def extract_many(self, batches: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        return self.extractor.features_stream(batches)

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

    def weights_sha256(self) -> str:
        assert self.linear is not None
        return weights_sha256((name, tensor.detach().cpu().numpy()) for name, tensor in self.linear.state_dict().items())

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, torch.OutOfMemoryError):
            return 1, f"out of memory on {self.device} (try a smaller --extract-batch-size or --batch-size)"
        return classify_determinism(error, self.determinism, self.device)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CoG evaluation; exit status 0, 2 bad input, 3 server fault."""
    return run_cog_main("torch", TorchCogBackend, argv)
