"""The batch norm every Keras backbone of ours shares: ``RowBatchNormalization`` takes an
episode's own moments (``episode_norm``; what each mode computes: ``clients.batch_norm``) or
counts a bucket's valid rows (``valid_rows``; the layout: ``clients.buckets``), with torch's
moving-variance update. ``clients.tf.models`` and ``clients.tf.md_backbones`` build their
backbones with it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from clients.batch_norm import EPISODE_MOMENTS, check_batch_norm

keras = tf.keras


class RowBatchNormalization(keras.layers.BatchNormalization):
    """Keras batch normalisation with torch's training step: normalised by the batch's
    biased variance, the moving variance updated with the unbiased one (``_train``). With
    ``valid_rows`` set (a scalar tensor) the batch moments and the update come from the
    first ``valid_rows`` rows only: the slice is the unpadded batch, so the same step applies
    unchanged (rather than a masked moment); padding rows come out as zeros. Same variables
    and names as ``BatchNormalization``, so checkpoints and saved weights load unchanged."""

    valid_rows: tf.Tensor | None = None
    episode: tuple[str, tf.Tensor, tf.Tensor] | None = None  # ``episode_norm``: (mode, support, query)

    def add_weight(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("trainable") is False:  # the moving statistics: the mean over replicas (workers)
            kwargs.setdefault("aggregation", "mean")
        return super().add_weight(*args, **kwargs)

    def call(self, inputs: tf.Tensor, training: bool | None = None, mask: tf.Tensor | None = None) -> tf.Tensor:
        if self.episode is not None and mask is None and not self.renorm:
            return self._episode(inputs, *self.episode, update=bool(training) and self.trainable)
        if not training or not self.trainable or mask is not None or self.renorm:
            return super().call(inputs, training=training, mask=mask)
        rows = self.valid_rows
        if rows is None:
            return self._train(inputs)
        valid = self._train(inputs[:rows])
        return tf.concat([valid, tf.zeros_like(inputs[rows:], dtype=valid.dtype)], 0)

    def _episode(self, inputs: tf.Tensor, mode: str, support: tf.Tensor, query: tf.Tensor,
                 update: bool) -> tf.Tensor:
        """An episode laid out support, query, padding, normalised by its own moments (``md``:
        the support's for both sets; ``transductive``: each set's own), the gradient through
        them; padding rows enter no moment and come out as zeros. In training the moving
        statistics move towards the support's moments (the variance unbiased, as ``_train``)."""
        x = tf.cast(inputs, tf.float32)
        rows = support + query
        beta, gamma = self.beta if self.center else None, self.gamma if self.scale else None
        axes = list(range(len(x.shape) - 1))  # every axis but the channels (the last)
        mean, variance = tf.nn.moments(x[:support], axes=axes)
        if mode == "md":
            out = tf.nn.batch_normalization(x[:rows], mean, variance, beta, gamma, self.epsilon)
        else:
            query_mean, query_variance = tf.nn.moments(x[support:rows], axes=axes)
            out = tf.concat([tf.nn.batch_normalization(x[:support], mean, variance, beta, gamma, self.epsilon),
                             tf.nn.batch_normalization(x[support:rows], query_mean, query_variance, beta, gamma,
                                                       self.epsilon)], 0)
        out = tf.concat([out, tf.zeros_like(x[rows:])], 0)
        if update:
            count = tf.cast(support * tf.reduce_prod(tf.shape(x)[1:-1]), tf.float32)
            unbiased = variance * count / tf.maximum(count - 1.0, 1.0)
            keep = tf.constant(self.momentum, tf.float32)
            self.moving_mean.assign(self.moving_mean * keep + tf.stop_gradient(mean) * (1.0 - keep))
            self.moving_variance.assign(self.moving_variance * keep + tf.stop_gradient(unbiased) * (1.0 - keep))
        return tf.cast(out, self.compute_dtype)

    def _train(self, inputs: tf.Tensor) -> tf.Tensor:
        """Keras's training step with torch's moving-variance update: normalised by the batch's
        biased variance, the moving variance moved towards its unbiased one (n / (n - 1) times,
        n values per channel; Keras would move it towards the biased one)."""
        x = tf.cast(inputs, tf.float32)  # as Keras: statistics in float32 even for bf16 inputs
        mean, variance = self._moments(x, None)
        count = tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)
        unbiased = variance * count / tf.maximum(count - 1.0, 1.0)
        keep = tf.constant(self.momentum, tf.float32)
        self.moving_mean.assign(self.moving_mean * keep + mean * (1.0 - keep))
        self.moving_variance.assign(self.moving_variance * keep + unbiased * (1.0 - keep))
        out = tf.nn.batch_normalization(x, mean, variance, self.beta if self.center else None,
                                        self.gamma if self.scale else None, self.epsilon)
        return tf.cast(out, self.compute_dtype)


@contextlib.contextmanager
def valid_rows(model: keras.Model, rows: tf.Tensor | None) -> Iterator[None]:
    """Within (while a step is traced): the model's batch norms count only the first
    ``rows`` rows of each batch (None: all rows)."""
    norms = [layer for layer in model.layers if isinstance(layer, RowBatchNormalization)]
    for norm in norms:
        object.__setattr__(norm, "valid_rows", rows)  # a plain attribute, not tracked state
    try:
        yield
    finally:
        for norm in norms:
            object.__setattr__(norm, "valid_rows", None)


def all_layers(model: Any) -> Iterator[Any]:
    """Every layer of ``model``, nested models' included."""
    for layer in getattr(model, "layers", ()):
        yield layer
        yield from all_layers(layer)


def episode_batch_norms(model: Any, mode: str) -> int:
    """Under ``md`` or ``transductive``: every plain Keras ``BatchNormalization`` over the last
    axis (a user's model's) becomes a ``RowBatchNormalization`` (the same variables, one more
    behaviour), so it takes the episode's moments too; the number of batch norms that do.
    Another kind of batch norm (over another axis, a subclass, renormalising) cannot take
    them: refused (ValueError naming it)."""
    if check_batch_norm(mode) not in EPISODE_MOMENTS:
        return 0
    count = 0
    for layer in all_layers(model):
        last_axis = isinstance(layer, keras.layers.BatchNormalization) and (
            layer.axis == -1 or (layer.built and layer.axis == len(layer.input.shape) - 1))
        if type(layer) is keras.layers.BatchNormalization and last_axis and not layer.renorm:
            object.__setattr__(layer, "__class__", RowBatchNormalization)
        if isinstance(layer, RowBatchNormalization) and not layer.renorm:
            count += 1
        elif isinstance(layer, keras.layers.BatchNormalization):
            raise ValueError(f"batch_norm: got {mode}, but layer {layer.name} is a {type(layer).__name__} that "
                             "cannot take an episode's moments (over its last axis, without renormalisation); use "
                             "running")
    return count


@contextlib.contextmanager
def episode_norm(model: keras.Model, mode: str, support: tf.Tensor, query: tf.Tensor,
                 padded: bool = True) -> Iterator[None]:
    """Within (while a step is traced): the model's batch norms normalise each batch as one
    episode of ``support`` then ``query`` rows (then padding) under ``mode``
    (``clients.batch_norm``): ``md`` or ``transductive`` take the episode's moments in training
    and inference; ``running`` is Keras's batch norm over the valid rows in training
    (``valid_rows``, when ``padded``) and the moving statistics in inference."""
    if check_batch_norm(mode) not in EPISODE_MOMENTS:
        with valid_rows(model, support + query if padded else None):
            yield
        return
    norms = [layer for layer in all_layers(model) if isinstance(layer, RowBatchNormalization)]
    for norm in norms:
        object.__setattr__(norm, "episode", (mode, support, query))  # a plain attribute, not tracked state
    try:
        yield
    finally:
        for norm in norms:
            object.__setattr__(norm, "episode", None)
