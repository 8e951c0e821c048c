"""TensorFlow adapter (imports tensorflow, never torch): ``episode_dataset``, ``batch_dataset``."""

from clients.tf.dataset import batch_dataset, episode_dataset, episode_signature

__all__ = ["batch_dataset", "episode_dataset", "episode_signature"]
