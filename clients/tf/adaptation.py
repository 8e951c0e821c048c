"""The MAML family's, the Finetune baseline's and the transfer learners' episodes in TensorFlow: ``clients.md_learners``'s
``Adaptation`` and ``Finetunable`` over explicit weights (Keras's ``stateless_call``), so the
loops of ``md_learners`` run as in torch (``clients.torch.adaptation`` says how an episode is laid out).

The inner gradients are taken with the outer tape's recording paused (``paused``, where a
training step's tape is open): nothing of the support passes reaches the outer gradient but
the identity of theta - alpha g, as first order means."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from clients.md_learners import Finetuning
from clients.tf.layers import all_layers, episode_norm
from clients.tf.models import classifier_logits


class TFAdaptation:
    def __init__(self, backbone: keras.Model, images: tf.Tensor, labels: tf.Tensor, support: tf.Tensor,
                 query: tf.Tensor, ways: tf.Tensor, batch_norm: str, out_dim: int, padded: bool, training: bool,
                 paused: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> None:
        self.backbone, self.images, self.batch_norm, self.padded = backbone, images, batch_norm, padded
        self.training = training  # a training step's passes (dropout on) or an evaluation's
        self.support, self.query, self.ways, self.out_dim = support, query, ways, out_dim
        self.support_labels = labels[:support]
        self.paused = paused or contextlib.nullcontext

    def _embed(self, weights: list[tf.Tensor], rows: tf.Tensor, query: tf.Tensor) -> tf.Tensor:
        with episode_norm(self.backbone, self.batch_norm, self.support, query, self.padded):
            fixed = [v.value for v in self.backbone.non_trainable_variables]
            embedded, _ = self.backbone.stateless_call(weights, fixed, self.images[:rows], training=self.training)
        return tf.cast(embedded, tf.float32)

    def _loss(self, logits: tf.Tensor) -> tf.Tensor:
        one_hot = tf.one_hot(self.support_labels, self.ways, dtype=logits.dtype)
        return -tf.reduce_mean(tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=1), axis=1))

    def initial_weights(self) -> list[tf.Tensor]:
        return [tf.identity(v.value) for v in self.backbone.trainable_variables]

    def zero_head(self) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.zeros([self.ways, self.out_dim]), tf.zeros([self.ways])

    def prototype_head(self, weights: list[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        embedded = self._embed(weights, self.support, tf.constant(0))
        one_hot = tf.one_hot(self.support_labels, self.ways, dtype=embedded.dtype)
        counts = tf.maximum(tf.reduce_sum(one_hot, axis=0), 1.0)[:, None]
        prototypes = tf.matmul(one_hot, embedded, transpose_a=True) / counts
        return 2.0 * prototypes, -tf.reduce_sum(prototypes * prototypes, axis=1)

    def support_gradients(self, weights: list[tf.Tensor], head: tuple[Any, Any]
                          ) -> tuple[list[tf.Tensor], tuple[Any, Any]]:
        weight, bias = head
        with self.paused():
            with tf.GradientTape() as tape:
                tape.watch([*weights, weight, bias])
                logits = tf.matmul(self._embed(weights, self.support, tf.constant(0)), weight, transpose_b=True) + bias
                loss = self._loss(logits)
            found = tape.gradient(loss, [*weights, weight, bias],
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
        gradients = [tf.stop_gradient(g) for g in found]
        return gradients[:-2], (gradients[-2], gradients[-1])

    def query_logits(self, weights: list[tf.Tensor], head: tuple[Any, Any]) -> tf.Tensor:
        weight, bias = head
        embedded = self._embed(weights, tf.shape(self.images)[0], self.query)
        return tf.matmul(embedded[self.support:self.support + self.query], weight, transpose_b=True) + bias

    # ---- the Finetune baseline (``md_learners.Finetunable``) ------------------------------------

    def support_features(self) -> tf.Tensor:
        return tf.stop_gradient(self._embed(self.initial_weights(), self.support, tf.constant(0)))

    def head_gradients(self, weights: list[tf.Tensor] | None, features: tf.Tensor | None,
                       head: tuple[Any, ...], settings: Finetuning, rows: tf.Tensor | None
                       ) -> tuple[list[tf.Tensor], tuple[Any, ...]]:
        """As ``clients.torch.adaptation.TorchAdaptation.head_gradients``."""
        sources = [*(weights or []), *head]
        labels = self.support_labels if rows is None else tf.gather(self.support_labels, rows)
        with tf.GradientTape() as tape:
            tape.watch(sources)
            if weights is not None:
                images = self.images[:self.support] if rows is None else tf.gather(self.images, rows)
                with episode_norm(self.backbone, self.batch_norm, tf.shape(images)[0], tf.constant(0), self.padded):
                    fixed = [v.value for v in self.backbone.non_trainable_variables]
                    features, _ = self.backbone.stateless_call(weights, fixed, images, training=self.training)
                features = tf.cast(features, tf.float32)
            elif rows is not None:
                features = tf.gather(features, rows)
            logits = classifier_logits(features, head, settings.classifier)
            one_hot = tf.one_hot(labels, self.ways, dtype=logits.dtype)
            losses = -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=1), axis=1)
            loss = tf.reduce_sum(losses) if settings.summed else tf.reduce_mean(losses)
        found = tape.gradient(loss, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return found[:-len(head)], tuple(found[-len(head):])

    def batch_norm_parameters(self) -> list[bool]:
        norms = {id(v) for layer in all_layers(self.backbone) if isinstance(layer, keras.layers.BatchNormalization)
                 for v in layer.trainable_weights}
        return [id(v) in norms for v in self.backbone.trainable_variables]

    def query_alone_logits(self, weights: list[tf.Tensor], head: tuple[Any, ...], settings: Finetuning) -> tf.Tensor:
        with episode_norm(self.backbone, self.batch_norm, self.query, tf.constant(0), self.padded):
            fixed = [v.value for v in self.backbone.non_trainable_variables]
            rows = self.images[self.support:self.support + self.query]
            embedded, _ = self.backbone.stateless_call(weights, fixed, rows, training=self.training)
        return classifier_logits(tf.cast(embedded, tf.float32), head, settings.classifier)

