"""Backbones as a user writes them, passed to the tf commands as ``module:callable``
(``tests/clients`` is on the import path of the tests and of the commands they run)."""

from __future__ import annotations

import tensorflow as tf

keras = tf.keras

SMALL_SIDE = 16
SMALL_RANGE = (0.0, 1.0)
SMALL_MEAN = (0.5, 0.4, 0.3)
SMALL_STD = (0.25, 0.5, 0.2)


def small() -> keras.Model:
    """A convolution, Keras's own batch norm, ReLU, pooling: 8 features. Its side is fixed by
    its input (16); it declares its range and normalisation as attributes."""
    inputs = keras.Input(shape=(SMALL_SIDE, SMALL_SIDE, 3))
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    model.input_range, model.mean, model.std = SMALL_RANGE, SMALL_MEAN, SMALL_STD
    return model


class Flat(tf.Module):
    """Features = the input itself, flattened: what the model is given, for the tests to read."""

    input_size = 8
    input_range = (0.0, 1.0)
    mean = (0.485, 0.456, 0.406)
    std = (0.229, 0.224, 0.225)

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        return tf.reshape(images, [tf.shape(images)[0], -1])


def flat() -> Flat:
    return Flat()


class WrongRank(tf.Module):
    """Returns [N, 3, 1]: pooled but not flattened."""

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(images, axis=[1, 2])[:, :, None]


class Integers(tf.Module):
    """Returns int32 [N, 3]."""

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        return tf.cast(tf.reduce_mean(images, axis=[1, 2]), tf.int32)


def wrong_rank() -> WrongRank:
    return WrongRank()


def integers() -> Integers:
    return Integers()
