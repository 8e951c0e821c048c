"""TensorFlow adapter (imports tensorflow, never torch): ``episode_dataset``, ``batch_dataset``."""

import os

# TensorFlow's start-up chatter off unless the user asked for it (must precede its import)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from clients.tf.dataset import batch_dataset, episode_dataset, episode_signature  # noqa: E402

__all__ = ["batch_dataset", "episode_dataset", "episode_signature"]
