"""``python -m clients.torch evaluate``: one checkpoint on every protocol, in PyTorch (the job
itself is ``clients.evaluate``; this file names the torch parts it runs).

The backbone is loaded by the contract (``clients.torch.backbones.load_backbone``) and
embeds Meta-Dataset episodes through ``TorchFeatures`` (eval mode, inference mode, float32 or,
with ``--precision bf16``, bf16 autocast on the device); VTAB-1k runs the ``transfer`` command's ``TorchTransferLearner`` and
ImageNet-CoG the ``cog`` command's ``TorchCogBackend``, each built from that command's own
parsed arguments. The adapting Meta-Dataset learners (``TorchEpisodes``) run ``clients.md_learners``'s
loops over ``TorchAdaptation``: explicit weights through ``torch.func.functional_call``, each step
a new tensor, so the module's own parameters and buffers are never written (eval mode, its batch
norms taking the episode's moments under ``--batch-norm md``; in ``--precision`` as the frozen
features). ``--deterministic`` and ``--threads`` are applied once
(``clients.torch.determinism``) before the backbone is built; the ``transfer`` and ``cog``
parts are parsed with the same flags (``clients.evaluate_args``), so every part runs, and
records, the same settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from clients.backbone_contract import FeatureExtractor, LoadedBackbone
from clients.cog_eval import CogBackend
from clients.errors import UsageError
from clients.evaluate import EvaluateFramework, run_evaluate_main
from clients.md_learners import Finetuning, InnerLoop, adapted_query_logits, finetuned_query_logits
from clients.protocols.md import EpisodeArrays
from clients.seeds import EVALUATE_BACKBONE_SEED_NAME
from clients.trainer_args import MD_IMAGE_SIZE
from clients.torch.adaptation import TorchAdaptation
from clients.torch.backbones import TorchFeatures, autocast, load_backbone, probe, set_mode, to_model_input
from clients.torch.determinism import apply_determinism, classify_determinism, load_checked, torch_record
from clients.torch.cog_eval import TorchCogBackend
from clients.torch.md_train import select_device
from clients.torch.vtab_transfer import TorchTransferLearner
from clients.vtab_transfer import TransferLearner


class TorchEpisodes:
    """``clients.evaluate.AdaptingEpisodes`` in torch."""

    def __init__(self, backbone: LoadedBackbone, device: torch.device, batch_norm: str, precision: str) -> None:
        model = backbone.model
        if not isinstance(model, nn.Module) or isinstance(model, torch.jit.ScriptModule):
            raise UsageError(f"argument --md-learners: the adapting learners need the backbone's weights as a torch "
                             f"module; {backbone.spec.target} is a {type(model).__name__} (give a module:callable, a "
                             "named backbone or a .pt2 file)")
        for parameter in model.parameters():  # every layer adapts, as Meta-Dataset's loops adapt them
            parameter.requires_grad_(True)
        self.backbone, self.model, self.device, self.batch_norm = backbone, model, device, batch_norm
        self.precision = precision

    def _episode(self, episode: EpisodeArrays) -> TorchAdaptation:
        pixels = torch.from_numpy(np.concatenate([episode.support_images, episode.query_images]))
        labels = np.concatenate([episode.support_labels, episode.query_labels]).astype(np.int64)
        set_mode(self.model, False)
        return TorchAdaptation(self.model, to_model_input(pixels, self.backbone.preprocessing, self.device),
                               torch.from_numpy(labels).to(self.device), len(episode.support_labels),
                               len(episode.query_labels), episode.ways, self.batch_norm, self.backbone.out_dim)

    def finetuned(self, episode: EpisodeArrays, settings: Finetuning, head: tuple[np.ndarray, ...],
                  rows: np.ndarray | None) -> np.ndarray:
        adaptation = self._episode(episode)
        with torch.no_grad(), autocast(self.device, self.precision):  # each step takes its own gradients (``head_gradients``)
            logits = finetuned_query_logits(adaptation, settings, tuple(torch.from_numpy(t).to(self.device)
                                                                        for t in head),
                                            None if rows is None else torch.from_numpy(rows).to(self.device))
        return logits.argmax(1).cpu().numpy()

    def adapted(self, episode: EpisodeArrays, loop: InnerLoop) -> np.ndarray:
        adaptation = self._episode(episode)
        with autocast(self.device, self.precision):  # the inner loop takes gradients: no inference mode
            logits = adapted_query_logits(adaptation, loop, training=False)
        return logits.detach().argmax(1).cpu().numpy()


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
        return TorchFeatures(backbone, self.device, batch_size, self.args.precision)

    def adapting(self, backbone: LoadedBackbone, batch_norm: str) -> TorchEpisodes:
        return TorchEpisodes(backbone, self.device, batch_norm, self.args.precision)

    def resized(self, backbone: LoadedBackbone, size: int) -> LoadedBackbone:
        preprocessing = dataclasses.replace(backbone.preprocessing, size=size)
        return dataclasses.replace(backbone, preprocessing=preprocessing,
                                   out_dim=probe(backbone.model, backbone.spec, preprocessing, self.device))

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
