"""``python -m clients.tf evaluate``: one checkpoint on every protocol, in TensorFlow (the job
itself is ``clients.evaluate``; this file names the TensorFlow parts it runs).

The backbone is loaded by the contract (``clients.tf.backbones.load_backbone``) on the
chosen device and embeds Meta-Dataset episodes through ``TFFeatures`` (``training=False``);
VTAB-1k runs the ``transfer`` command's ``TFTransferLearner`` and ImageNet-CoG the ``cog``
command's ``TFCogBackend``, each built from that command's own parsed arguments.
Determinism (``clients.tf.determinism``, applied before any model is built): with
``--deterministic`` on (the default on CPU) op determinism is on; thread counts are fixed
and draws seeded, so a repeated run reports the same numbers.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from clients.backbone_contract import FeatureExtractor, LoadedBackbone
from clients.cog_eval import CogBackend
from clients.evaluate import EvaluateFramework, run_evaluate_main
from clients.seeds import EVALUATE_BACKBONE_SEED_NAME
from clients.trainer_args import MD_IMAGE_SIZE
from clients.tf.backbones import TFFeatures, load_backbone
from clients.tf.cog_eval import TFCogBackend
from clients.tf.determinism import apply_determinism, determinism_failure, tf_record
from clients.tf.md_train import select_device
from clients.tf.vtab_transfer import TFTransferLearner
from clients.vtab_transfer import TransferLearner


class TFEvaluate(EvaluateFramework):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before any model is built

    def load(self, args: argparse.Namespace) -> LoadedBackbone:
        with tf.device(self.device):
            return load_backbone(args, MD_IMAGE_SIZE, EVALUATE_BACKBONE_SEED_NAME)

    def extractor(self, backbone: LoadedBackbone, batch_size: int) -> FeatureExtractor:
        return TFFeatures(backbone, batch_size, self.device)

    def transfer_learner(self, args: argparse.Namespace) -> TransferLearner:
        return TFTransferLearner(args)

    def cog_backend(self, args: argparse.Namespace) -> CogBackend:
        return TFCogBackend(args)

    def save_weights(self, backbone: LoadedBackbone, directory: Path) -> str | None:
        if not isinstance(backbone.model, tf.keras.Model):
            return None
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{backbone.fingerprint}.weights.h5"
        tmp = directory / f".{os.getpid()}.{path.name}"  # Keras wants the .weights.h5 ending
        backbone.model.save_weights(str(tmp))
        os.replace(tmp, path)
        return str(path)

    def describe(self) -> dict[str, Any]:
        return {"framework": self.name, **self.determinism.as_config(), **tf_record(self.device)}

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return 1, f"out of memory on {self.device} (try a smaller --extract-batch-size or --vtab-batch-size)"
        return determinism_failure(error)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation; exit status 0, 2 bad input, 3 server fault."""
    return run_evaluate_main("tf", TFEvaluate, argv)
