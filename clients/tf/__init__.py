"""TensorFlow adapter (imports tensorflow, never torch): resumable ``EpisodeSource`` and
``BatchSource`` (``.dataset()`` is a ``tf.data.Dataset``) and the one-shot
``episode_dataset`` / ``batch_dataset`` (Meta-Dataset), ``task_batch_dataset`` (VTAB),
``cog_batch_dataset`` (ImageNet-CoG), and each one's element signature. Every element has
the keys of its protocol's ``clients.torch`` item, images uint8 NHWC unless
``dtype="float32"``; ``docs/api.md`` has the schema table."""

import os

# TensorFlow's start-up chatter off unless the user asked for it (must precede its import)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from sampler_common.startup import collector_held_off  # noqa: E402

with collector_held_off():  # TensorFlow's import, without the collector's scans (1-2 s)
    from clients.tf.cog_dataset import cog_batch_dataset, cog_batch_signature
    from clients.tf.dataset import (
        BatchSource,
        EpisodeSource,
        batch_dataset,
        batch_signature,
        episode_dataset,
        episode_signature,
        packed_episode_signature,
        task_batch_dataset,
        task_batch_signature,
        task_episode_to_tf,
    )

__all__ = ["BatchSource", "EpisodeSource", "batch_dataset", "batch_signature", "cog_batch_dataset",
           "cog_batch_signature", "episode_dataset", "episode_signature", "packed_episode_signature",
           "task_batch_dataset", "task_batch_signature", "task_episode_to_tf"]
