"""``python -m clients.torch evaluate``: one checkpoint on every protocol, in PyTorch (the job
itself is ``clients.evaluate``; this file names the torch parts it runs).

The backbone is loaded by the contract (``clients.torch.backbones.load_backbone``) and
embeds Meta-Dataset episodes through ``TorchFeatures`` (eval mode, inference mode, bf16
autocast on CUDA); VTAB-1k runs the ``transfer`` command's ``TorchTransferLearner`` and
ImageNet-CoG the ``cog`` command's ``TorchCogBackend``, each built from that command's own
parsed arguments. ``--deterministic`` and ``--threads`` are applied once
(``clients.torch.determinism``) before the backbone is built; the ``transfer`` and ``cog``
parts are parsed with the same flags (``clients.evaluate_args``), so every part runs, and
records, the same settings.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clients.backbone_contract import FeatureExtractor, LoadedBackbone
from clients.cog_eval import CogBackend
from clients.evaluate import EvaluateFramework, run_evaluate_main
from clients.seeds import EVALUATE_BACKBONE_SEED_NAME
from clients.trainer_args import MD_IMAGE_SIZE
from clients.torch.backbones import TorchFeatures, load_backbone
from clients.torch.determinism import apply_determinism, classify_determinism, load_checked, torch_record
from clients.torch.cog_eval import TorchCogBackend
from clients.torch.md_train import select_device
from clients.torch.vtab_transfer import TorchTransferLearner
from clients.vtab_transfer import TransferLearner


class TorchEvaluate(EvaluateFramework):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before CUDA starts and any model exists

    def load(self, args: argparse.Namespace) -> LoadedBackbone:
        return load_checked(lambda: load_backbone(args, self.device, MD_IMAGE_SIZE, EVALUATE_BACKBONE_SEED_NAME),
                            self.determinism, self.device)

    def extractor(self, backbone: LoadedBackbone, batch_size: int) -> FeatureExtractor:
        return TorchFeatures(backbone, self.device, batch_size)

    def transfer_learner(self, args: argparse.Namespace) -> TransferLearner:
        return TorchTransferLearner(args)

    def cog_backend(self, args: argparse.Namespace) -> CogBackend:
        return TorchCogBackend(args)

    def save_weights(self, backbone: LoadedBackbone, directory: Path) -> str | None:
        if not isinstance(backbone.model, nn.Module):
            return None
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{backbone.fingerprint}.pt"
        tmp = directory / f".{os.getpid()}.{path.name}"
        torch.save(backbone.model.state_dict(), tmp)
        os.replace(tmp, path)
        return str(path)

    def describe(self) -> dict[str, Any]:
        return {"framework": self.name, **self.determinism.as_config(), **torch_record(self.device),
                "device": str(self.device)}

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, torch.OutOfMemoryError):
            return 1, f"out of memory on {self.device} (try a smaller --extract-batch-size or --vtab-batch-size)"
        return classify_determinism(error, self.determinism, self.device)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation; exit status 0, 2 bad input, 3 server fault."""
    return run_evaluate_main("torch", TorchEvaluate, argv)
