"""``python -m clients.tf evaluate``: one checkpoint on every protocol, in TensorFlow (the job
itself is ``clients.evaluate``; this file names the TensorFlow parts it runs).

The backbone is loaded by the contract (``clients.tf.backbones.load_backbone``) on the
chosen device and embeds Meta-Dataset episodes through ``TFFeatures`` (``training=False``);
VTAB-1k runs the ``transfer`` command's ``TFTransferLearner`` and ImageNet-CoG the ``cog``
command's ``TFCogBackend``, each built from that command's own parsed arguments. The adapting
Meta-Dataset learners (``TFEpisodes``) run ``clients.md_learners``'s loops over ``TFAdaptation``
(Keras's ``stateless_call`` on copies of the variables' values, so the model's variables are never
assigned), one ``tf.function`` per learner's settings for episodes of any shape.
Determinism (``clients.tf.determinism``, applied before any model is built): with
``--deterministic`` on (the default on CPU) op determinism is on; thread counts are fixed
and draws seeded, so a repeated run reports the same numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from clients.backbone_contract import FeatureExtractor, LoadedBackbone
from clients.cog_eval import CogBackend
from clients.errors import UsageError
from clients.evaluate import EvaluateFramework, run_evaluate_main
from clients.md_learners import Finetuning, InnerLoop, adapted_query_logits, finetuned_query_logits
from clients.protocols.md import EpisodeArrays
from clients.seeds import EVALUATE_BACKBONE_SEED_NAME
from clients.trainer_args import MD_IMAGE_SIZE
from clients.tf.adaptation import TFAdaptation
from clients.tf.backbones import TFFeatures, load_backbone, probe, to_model_input
from clients.tf.cog_eval import TFCogBackend, check_precision
from clients.tf.determinism import apply_determinism, determinism_failure, tf_record
from clients.tf.md_train import select_device
from clients.tf.vtab_transfer import TFTransferLearner
from clients.vtab_transfer import TransferLearner


class TFEpisodes:
    """``clients.evaluate.AdaptingEpisodes`` in TensorFlow."""

    def __init__(self, backbone: LoadedBackbone, device: str, batch_norm: str) -> None:
        if not isinstance(backbone.model, keras.Model):
            raise UsageError(f"argument --md-learners: the adapting learners need the backbone's weights as a Keras "
                             f"model; {backbone.spec.target} is a {type(backbone.model).__name__} (give a "
                             "module:callable, a named backbone or a .keras file)")
        self.backbone, self.device, self.batch_norm = backbone, device, batch_norm
        self._compiled: dict[Any, Any] = {}  # by the learner's settings

    def _adaptation(self, images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor,
                    ways: tf.Tensor) -> TFAdaptation:
        return TFAdaptation(self.backbone.model, to_model_input(images, self.backbone.preprocessing), labels, support,
                            query, ways, self.batch_norm, self.backbone.out_dim, False, False)

    def _signature(self) -> list[tf.TensorSpec]:
        size, count = self.backbone.preprocessing.size, tf.TensorSpec((), tf.int32)
        return [tf.TensorSpec((None, size, size, 3), tf.uint8), tf.TensorSpec((None,), tf.int64), count, count, count]

    def _run(self, episode: EpisodeArrays, function: Any, *extra: Any) -> np.ndarray:
        pixels = np.concatenate([episode.support_images, episode.query_images])
        labels = np.concatenate([episode.support_labels, episode.query_labels]).astype(np.int64)
        with tf.device(self.device):
            predicted = function(pixels, labels, np.int32(len(episode.support_labels)),
                                 np.int32(len(episode.query_labels)), np.int32(episode.ways), *extra)
        return predicted.numpy()

    def finetuned(self, episode: EpisodeArrays, settings: Finetuning, head: tuple[np.ndarray, ...],
                  rows: np.ndarray | None) -> np.ndarray:
        if settings not in self._compiled:
            heads = [tf.TensorSpec((None, None), tf.float32), tf.TensorSpec((None,), tf.float32),
                     tf.TensorSpec((None,), tf.float32)]
            batches = [] if settings.batch is None else [tf.TensorSpec((None, None), tf.int64)]

            @tf.function(input_signature=[*self._signature(), *heads, *batches], autograph=False)
            def predict(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor, ways: tf.Tensor,
                        weight: tf.Tensor, bias: tf.Tensor, gain: tf.Tensor, *rows: tf.Tensor) -> tf.Tensor:
                logits = finetuned_query_logits(self._adaptation(images, labels, support, query, ways), settings,
                                                (weight, bias, gain), rows[0] if rows else None)
                return tf.argmax(logits, 1)

            self._compiled[settings] = predict
        return self._run(episode, self._compiled[settings], *head, *([] if rows is None else [rows]))

    def adapted(self, episode: EpisodeArrays, loop: InnerLoop) -> np.ndarray:
        if loop not in self._compiled:

            @tf.function(input_signature=self._signature(), autograph=False)
            def predict(images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor, query: tf.Tensor,
                        ways: tf.Tensor) -> tf.Tensor:
                logits = adapted_query_logits(self._adaptation(images, labels, support, query, ways), loop,
                                              training=False)
                return tf.argmax(logits, 1)

            self._compiled[loop] = predict
        return self._run(episode, self._compiled[loop])


class TFEvaluate(EvaluateFramework):
    name = "tf"

    def __init__(self, args: argparse.Namespace) -> None:
        check_precision(args)  # before a device or a model: TensorFlow extracts in float32 only
        super().__init__(args)
        self.device = select_device(args.device)
        self.determinism = apply_determinism(args, self.device)  # before any model is built

    def load(self, args: argparse.Namespace) -> LoadedBackbone:
        with tf.device(self.device):
            return load_backbone(args, MD_IMAGE_SIZE, EVALUATE_BACKBONE_SEED_NAME)

    def extractor(self, backbone: LoadedBackbone, batch_size: int) -> FeatureExtractor:
        return TFFeatures(backbone, batch_size, self.device)

    def adapting(self, backbone: LoadedBackbone, batch_norm: str) -> TFEpisodes:
        return TFEpisodes(backbone, self.device, batch_norm)

    def resized(self, backbone: LoadedBackbone, size: int) -> LoadedBackbone:
        preprocessing = dataclasses.replace(backbone.preprocessing, size=size)
        with tf.device(self.device):
            out_dim = probe(backbone.model, backbone.spec, preprocessing)
        return dataclasses.replace(backbone, preprocessing=preprocessing, out_dim=out_dim)

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
