"""A ``tf.data.Dataset`` over one ImageNet-CoG level split, in split order.

Elements (dicts of tensors), one per served batch: ``images`` tf.uint8 [B, S, S, 3]
(NHWC, RGB, 0..255, preprocessed by the server as the CoG reference does: shorter
side to S bicubic, S x S centre crop), ``labels`` tf.int64 [B] (label i = the level's
i-th concept in sorted wnid order), ``record_ids`` tf.int64 [B], ``index`` tf.int64
(the batch index), ``fingerprint`` / ``split_fingerprint`` tf.string (the latter equal
to ``sampler-server cog split``'s), ``split_size`` tf.int64, ``num_classes`` tf.int32
and ``last`` tf.bool: the same keys and values, batch for batch, as
``clients.torch.cog_dataset.CogBatchDataset`` for the same arguments (``dtype="float32"``:
images tf.float32 in [0, 1], the option every adapter takes: ``clients.adapter_options``).

Every image of the split comes once per pass, from batch ``start`` to the last
(``count`` batches when given); a broken stream resumes at the next batch. To resume a
pass yourself, make a dataset with ``start`` = the next batch index.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from clients.adapter_options import check_image_dtype, connection_options, images_as
from clients.client import SamplerClient


def cog_batch_signature(image_size: int, dtype: str = "uint8") -> dict[str, tf.TensorSpec]:
    """Elements of ``cog_batch_dataset``."""
    return {
        "images": tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.as_dtype(check_image_dtype(dtype))),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "record_ids": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "split_fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "split_size": tf.TensorSpec(shape=(), dtype=tf.int64),
        "num_classes": tf.TensorSpec(shape=(), dtype=tf.int32),
        "last": tf.TensorSpec(shape=(), dtype=tf.bool),
    }


def cog_batch_dataset(address: str, level: str, split: str, *, shots: int = 0, seed: int = 0, batch_size: int = 256,
                      start: int = 0, count: int = 0, image_size: int = 224,
                      resize: str = "shorter_bicubic_center_crop", level_size: int = 0, min_images: int = 0,
                      client_options: Mapping[str, Any] | None = None, dtype: str = "uint8") -> tf.data.Dataset:
    """The batches of one level split (``level`` "IN-1K" or "L1".."L5"; ``split`` "train",
    "val" or "test"; ``shots`` > 0 with a ``seed`` for a few-shot subset) in split order."""
    if start < 0 or count < 0:
        raise ValueError(f"start, count: got {start}, {count}, expected integers >= 0")
    check_image_dtype(dtype)
    options = connection_options(client_options)

    def generate() -> Iterator[dict[str, Any]]:
        with SamplerClient(address, **options) as client:
            for batch in client.stream_cog_batches(level, split, shots, seed, batch_size, start, count, image_size,
                                                   resize, level_size, min_images):
                yield {
                    "images": batch.images if dtype == "uint8" else images_as(batch.images, dtype),
                    "labels": batch.labels,
                    "record_ids": np.asarray(batch.record_ids, dtype=np.int64),
                    "index": np.int64(batch.index),
                    "fingerprint": batch.fingerprint.encode(),
                    "split_fingerprint": batch.split_fingerprint.encode(),
                    "split_size": np.int64(batch.split_size),
                    "num_classes": np.int32(batch.num_classes),
                    "last": np.bool_(batch.last),
                }

    return tf.data.Dataset.from_generator(generate, output_signature=cog_batch_signature(image_size, dtype))
