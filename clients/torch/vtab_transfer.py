"""``python -m clients.torch transfer``: the VTAB-1k transfer learner in PyTorch (the run
itself is ``clients.vtab_transfer``; this file holds weights, steps and predictions).

Images arrive as the adapter gives them (``task_batch_to_torch``: float32 in [0, 1]) and
are mapped to [-1, 1], the range the MD trainers' backbones were trained on. The head is
a zero-initialised linear layer (as BiT does), so a fit's only randomness is the
server's batch order. Linear mode embeds each (task, split, record) once with the
frozen backbone in inference mode and reuses the feature across steps and settings.

``--init`` takes our MD trainer's ``checkpoint.pt``, a plain state_dict of our backbone,
or a torchvision ResNet-18 state_dict (keys renamed, ``fc`` dropped). A torchvision
model expects ImageNet mean/std normalisation; we feed [-1, 1] (not converted here).
"""

from __future__ import annotations

import argparse
import copy
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.protocols.vtab import TaskBatchArrays, TaskEpisodeArrays
from clients.torch.dataset import task_batch_to_torch
from clients.torch.models import build_backbone, parameter_count, prototype_logits
from clients.torch.md_train import CHECKPOINT_FORMAT, select_device
from clients.errors import UsageError
from clients.seeds import derive_seed
from clients.vtab_transfer import TransferLearner, run_transfer_main
from clients.vtab_transfer_protocols import MOMENTUM

_TORCHVISION_BLOCK = re.compile(r"^layer([1-4])\.([01])\.(.*)$")


def from_torchvision(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A torchvision ResNet-18 state_dict under our ``ResNet18``'s names (its ``fc`` dropped)."""
    renamed: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith("fc."):
            continue
        key = key.replace("conv1.", "stem.0.", 1) if key.startswith("conv1.") else key
        key = key.replace("bn1.", "stem.1.", 1) if key.startswith("bn1.") else key
        match = _TORCHVISION_BLOCK.match(key)
        if match:
            index = 2 * (int(match.group(1)) - 1) + int(match.group(2))
            key = f"blocks.{index}.{match.group(3).replace('downsample.', 'shortcut.')}"
        renamed[key] = value
    return renamed


def load_init(backbone: nn.Module, path: str, name: str) -> None:
    """Load ``--init`` into ``backbone``; a file that is not one of the allowed kinds is a one-line UsageError."""
    allowed = f"our MD trainer's checkpoint.pt or a state_dict of the {name} backbone (ours or torchvision's)"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle, zip and format errors alike: the file is not a torch checkpoint
        raise UsageError(f"argument --init: got {path!r}, expected {allowed} "
                         f"({type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''})") from None
    if isinstance(state, dict) and state.get("format") == CHECKPOINT_FORMAT and isinstance(state.get("backbone"), dict):
        weights = state["backbone"]
    elif isinstance(state, dict) and state and all(isinstance(v, torch.Tensor) for v in state.values()):
        weights = from_torchvision(state) if "conv1.weight" in state else state
    else:
        raise UsageError(f"argument --init: got {path!r}, expected {allowed} (it holds a {type(state).__name__} "
                         "of another layout)")
    try:
        backbone.load_state_dict(weights)
    except RuntimeError as error:
        raise UsageError(f"argument --init: got {path!r}, which does not fit the {name} backbone at this "
                         f"--image-size ({' '.join(str(error).split())[:240]})") from None


class TorchTransferLearner(TransferLearner):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.device = select_device(args.device)
        if self.device.type == "cpu":
            torch.use_deterministic_algorithms(True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(args.seed, "scratch", args.backbone))
            self.backbone = build_backbone(args.backbone, args.image_size)
        if args.init != "scratch":
            load_init(self.backbone, args.init, args.backbone)
        self.backbone.to(self.device)
        self.initial = copy.deepcopy(self.backbone.state_dict())
        self.features: dict[tuple[str, str, int], torch.Tensor] = {}
        self.head = nn.Linear(self.backbone.out_dim, 1).to(self.device)

    def describe(self) -> dict[str, Any]:
        return {"framework": self.name, "torch_version": str(torch.__version__), "device": str(self.device),
                "backbone_parameter_count": parameter_count(self.backbone), "embedding_dim": self.backbone.out_dim}

    def _input(self, images: torch.Tensor) -> torch.Tensor:
        """[0, 1] NHWC (the adapter's) -> [-1, 1] NCHW on the device."""
        return images.to(self.device).permute(0, 3, 1, 2).mul(2.0).sub(1.0).contiguous()

    def reset(self, num_classes: int, seed: int) -> None:
        self.backbone.load_state_dict(self.initial)
        self.head = nn.Linear(self.backbone.out_dim, num_classes).to(self.device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        finetune = self.args.mode == "finetune"
        parameters = list(self.head.parameters()) + (list(self.backbone.parameters()) if finetune else [])
        self.optimizer = torch.optim.SGD(parameters, lr=self.args.lrs[0], momentum=MOMENTUM)

    def _frozen_features(self, batch: TaskBatchArrays, images: torch.Tensor) -> torch.Tensor:
        keys = [(batch.task, batch.split, int(r)) for r in batch.record_ids]
        missing = [i for i, key in enumerate(keys) if key not in self.features]
        if missing:
            self.backbone.eval()
            with torch.inference_mode():
                embedded = self.backbone(self._input(images[missing]))
            for i, row in zip(missing, embedded):
                self.features[keys[i]] = row.clone()
        return torch.stack([self.features[key] for key in keys])

    def train_step(self, batch: TaskBatchArrays, lr: float) -> float:
        item = task_batch_to_torch(batch)
        labels = item["labels"].to(self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.args.mode == "linear":
            features = self._frozen_features(batch, item["images"])
        else:
            self.backbone.train()
            features = self.backbone(self._input(item["images"]))
        loss = F.cross_entropy(self.head(features), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def predict(self, batch: TaskBatchArrays) -> np.ndarray:
        item = task_batch_to_torch(batch)
        if self.args.mode == "linear":
            features = self._frozen_features(batch, item["images"])
        else:
            self.backbone.eval()
            with torch.inference_mode():
                features = self.backbone(self._input(item["images"]))
        with torch.inference_mode():
            return self.head(features).argmax(1).cpu().numpy()

    def _embed(self, images: np.ndarray) -> torch.Tensor:
        self.backbone.eval()
        step = self.args.eval_batch_size
        with torch.inference_mode():
            return torch.cat([self.backbone(self._input(torch.from_numpy(images[i:i + step]).float().div(255.0)))
                              for i in range(0, len(images), step)]).float()

    def protonet_predict(self, episode: TaskEpisodeArrays) -> np.ndarray:
        support = self._embed(episode.support_images)
        query = self._embed(episode.query_images)
        labels = torch.from_numpy(np.asarray(episode.support_labels, dtype=np.int64)).to(self.device)
        return prototype_logits(support, labels, query, episode.num_classes).argmax(1).cpu().numpy()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the transfer learner; exit status 0, 2 bad input, 3 server fault."""
    return run_transfer_main("torch", TorchTransferLearner, argv)
