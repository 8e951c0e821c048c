"""``tf.data.Dataset`` sources over the service, with a full output signature.

Shards take indices exactly as the PyTorch adapter's do (``clients.core.shard_window``),
so for the same request both adapters yield the same episodes, pixel for pixel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from clients.core import EpisodeSpec, SamplerClient, shard_window


def episode_signature(image_size: int) -> dict[str, tf.TensorSpec]:
    image = tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.uint8)
    label = tf.TensorSpec(shape=(None,), dtype=tf.int64)
    return {
        "support_images": image,
        "support_labels": label,
        "query_images": image,
        "query_labels": label,
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "source": tf.TensorSpec(shape=(), dtype=tf.string),
        "ways": tf.TensorSpec(shape=(), dtype=tf.int32),
    }


def episode_dataset(
    address: str,
    spec: EpisodeSpec,
    *,
    start: int = 0,
    count: int = 0,
    shard: int = 0,
    num_shards: int = 1,
    prefetch: int = 2,
    client_options: dict[str, Any] | None = None,
) -> tf.data.Dataset:
    """Episodes start .. start + count - 1 (count 0 = unbounded) of this shard."""
    first, mine, step = shard_window(start, count, shard, num_shards)
    options = dict(client_options or {})

    def generate() -> Iterator[dict[str, Any]]:
        if mine < 0:
            return
        with SamplerClient(address, prefetch=prefetch, **options) as client:
            for episode in client.episodes(spec, first, mine, step):
                yield {
                    "support_images": episode.support_images,
                    "support_labels": episode.support_labels,
                    "query_images": episode.query_images,
                    "query_labels": episode.query_labels,
                    "index": np.int64(episode.index),
                    "fingerprint": episode.fingerprint.encode(),
                    "source": episode.source.encode(),
                    "ways": np.int32(episode.ways),
                }

    return tf.data.Dataset.from_generator(generate, output_signature=episode_signature(spec.image_size))


def batch_dataset(
    address: str,
    source: str,
    split: str,
    batch_size: int,
    *,
    seed: int = 0,
    start: int = 0,
    count: int = 0,
    image_size: int = 84,
    shard: int = 0,
    num_shards: int = 1,
    client_options: dict[str, Any] | None = None,
) -> tf.data.Dataset:
    """Plain labelled batches of a split (non-episodic training)."""
    first, mine, step = shard_window(start, count, shard, num_shards)
    options = dict(client_options or {})

    def generate() -> Iterator[dict[str, Any]]:
        if mine < 0:
            return
        with SamplerClient(address, **options) as client:
            for batch in client.batches(source, split, batch_size, seed, first, mine, step, image_size=image_size):
                yield {"images": batch.images, "labels": batch.labels, "index": np.int64(batch.index),
                       "num_classes": np.int32(batch.num_classes)}

    signature = {
        "images": tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.uint8),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "num_classes": tf.TensorSpec(shape=(), dtype=tf.int32),
    }
    return tf.data.Dataset.from_generator(generate, output_signature=signature)
