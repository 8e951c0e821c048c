"""``python -m clients.torch transfer``: the VTAB-1k transfer learner in PyTorch (the run
itself is ``clients.vtab_transfer``; this file holds weights, steps and predictions).

The backbone is any of the contract's (``clients.torch.backbones.load_backbone``): a named
one (random weights from ``--seed``), ``module:callable``, TorchScript or ``.pt2``, with
``--weights`` (our MD trainer's ``checkpoint.pt``, a state dict of the backbone, or a
torchvision ResNet state dict). Images arrive uint8 and become the model's input as it
declares (``to_model_input``: our named backbones take [-1, 1], the range the MD
trainers train them on; ``--input-range``/``--mean``/``--std`` for others). The head is
a zero-initialised linear layer (as BiT does), so a fit's only randomness is the
server's batch order and, finetuning, a user backbone's own draws (dropout), which come
from the fit's seed (``reset``: hashed from --seed and the fit by name).
``--deterministic`` is applied (``clients.torch.determinism``) before the backbone is built. Linear mode embeds each (task, split, record) once with the
frozen backbone in inference mode and reuses the feature across steps and settings.
Finetuning needs an ``nn.Module`` (its parameters train).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.determinism import weights_sha256
from clients.protocols.vtab import TaskBatchArrays, TaskEpisodeArrays
from clients.torch.backbones import TorchFeatures, load_backbone, set_mode, to_model_input
from clients.torch.determinism import apply_determinism, classify_determinism, load_checked, torch_record
from clients.torch.models import parameter_count, prototype_logits
from clients.torch.md_train import select_device
from clients.errors import UsageError
from clients.seeds import TRANSFER_BACKBONE_SEED_NAME
from clients.trainer_args import TRANSFER_IMAGE_SIZE
from clients.vtab_transfer import TransferLearner, run_transfer_main
from clients.vtab_transfer_protocols import MOMENTUM


class TorchTransferLearner(TransferLearner):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before CUDA starts and any model exists
        self.loaded = load_checked(
            lambda: load_backbone(args, self.device, TRANSFER_IMAGE_SIZE, TRANSFER_BACKBONE_SEED_NAME),
            self.determinism, self.device)
        self.backbone = self.loaded.model
        self.module = isinstance(self.backbone, nn.Module)
        if args.mode == "finetune" and not self.module:
            raise UsageError(f"argument --mode: got finetune, but --backbone {args.backbone} made a "
                             f"{type(self.backbone).__name__}, not an nn.Module with parameters to train")
        self.initial = copy.deepcopy(self.backbone.state_dict()) if self.module else {}
        self.features: dict[tuple[str, str, int], torch.Tensor] = {}
        self.head = nn.Linear(self.loaded.out_dim, 1).to(self.device)
        self._episodes: TorchFeatures | None = None  # ``episode_extractor``

    def describe(self) -> dict[str, Any]:
        return {"framework": self.name, **self.determinism.as_config(), **torch_record(self.device),
                "device": str(self.device),
                "backbone_parameter_count": parameter_count(self.backbone) if self.module else 0,
                "embedding_dim": self.loaded.out_dim, "backbone_sha256": self.loaded.fingerprint,
                "preprocessing": self.loaded.preprocessing.as_config()}

    def _input(self, images: np.ndarray) -> torch.Tensor:
        """uint8 NHWC (the wire's) -> the model's float NCHW input on the device."""
        pixels = images if images.flags.writeable else np.array(images)  # wire arrays are read-only views
        return to_model_input(torch.from_numpy(np.ascontiguousarray(pixels)), self.loaded.preprocessing, self.device)

    def _train_mode(self, training: bool) -> None:
        set_mode(self.backbone, training)

    def reset(self, num_classes: int, seed: int) -> None:
        torch.manual_seed(seed)  # the fit's own draws (a finetuned user backbone's dropout), named by the fit
        if self.module:
            self.backbone.load_state_dict(self.initial)
        self.head = nn.Linear(self.loaded.out_dim, num_classes).to(self.device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        finetune = self.args.mode == "finetune"
        parameters = list(self.head.parameters()) + (list(self.backbone.parameters()) if finetune else [])
        if self.args.optimizer == "adamw":  # the reference's: betas (0.9, 0.999), eps 1e-8, no amsgrad
            self.optimizer = torch.optim.AdamW(parameters, lr=self.args.lrs[0], weight_decay=self.args.weight_decay)
        else:
            self.optimizer = torch.optim.SGD(parameters, lr=self.args.lrs[0], momentum=MOMENTUM,
                                             weight_decay=self.args.weight_decay)

    def weights_sha256(self) -> str:
        trained = [("head", self.head)] + ([("backbone", self.backbone)] if self.args.mode == "finetune" else [])
        return weights_sha256((f"{part}.{name}", tensor.detach().cpu().numpy())
                              for part, module in trained for name, tensor in module.state_dict().items())

    def _frozen_features(self, batch: TaskBatchArrays) -> torch.Tensor:
        keys = [(batch.task, batch.split, int(r)) for r in batch.record_ids]
        missing = [i for i, key in enumerate(keys) if key not in self.features]
        if missing:
            self._train_mode(False)
            with torch.inference_mode():
                embedded = self.backbone(self._input(batch.images[missing]))
            for i, row in zip(missing, embedded):
                self.features[keys[i]] = row.clone()
        return torch.stack([self.features[key] for key in keys])

    def train_step(self, batch: TaskBatchArrays, lr: float) -> float:
        labels = torch.from_numpy(np.array(batch.labels, np.int64)).to(self.device)  # a copy: wire arrays are read-only
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.args.mode == "linear":
            features = self._frozen_features(batch)
        else:
            self._train_mode(True)
            features = self.backbone(self._input(batch.images))
        loss = F.cross_entropy(self.head(features), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        return classify_determinism(error, self.determinism, self.device)

    def _logits(self, batch: TaskBatchArrays) -> torch.Tensor:
        if self.args.mode == "linear":
            features = self._frozen_features(batch)
        else:
            self._train_mode(False)
            with torch.inference_mode():
                features = self.backbone(self._input(batch.images))
        with torch.inference_mode():
            return self.head(features)

    def predict(self, batch: TaskBatchArrays) -> np.ndarray:
        return self._logits(batch).argmax(1).cpu().numpy()

    def predict_with_loss(self, batch: TaskBatchArrays) -> tuple[np.ndarray, float]:
        logits = self._logits(batch)
        labels = torch.from_numpy(np.array(batch.labels, np.int64)).to(self.device)
        with torch.inference_mode():
            loss = F.cross_entropy(logits.float(), labels, reduction="sum")
        return logits.argmax(1).cpu().numpy(), float(loss)

    def _trained(self) -> dict[str, nn.Module]:
        return {"head": self.head, **({"backbone": self.backbone} if self.args.mode == "finetune" else {})}

    def snapshot(self) -> dict[str, dict[str, torch.Tensor]]:
        return {part: {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}
                for part, module in self._trained().items()}

    def restore(self, snapshot: dict[str, dict[str, torch.Tensor]]) -> None:
        for part, module in self._trained().items():
            module.load_state_dict(snapshot[part])

    def _embed(self, images: np.ndarray) -> torch.Tensor:
        self._train_mode(False)
        step = self.args.eval_batch_size
        with torch.inference_mode():
            return torch.cat([self.backbone(self._input(images[i:i + step]))
                              for i in range(0, len(images), step)]).float()

    def episode_extractor(self) -> TorchFeatures:
        if self._episodes is None:
            self._episodes = TorchFeatures(self.loaded, self.device, self.args.eval_batch_size)
        return self._episodes

    def protonet_predict(self, episode: TaskEpisodeArrays) -> np.ndarray:
        support = self._embed(episode.support_images)
        query = self._embed(episode.query_images)
        labels = torch.from_numpy(np.asarray(episode.support_labels, dtype=np.int64)).to(self.device)
        return prototype_logits(support, labels, query, episode.num_classes).argmax(1).cpu().numpy()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the transfer learner; exit status 0, 2 bad input, 3 server fault."""
    return run_transfer_main("torch", TorchTransferLearner, argv)
