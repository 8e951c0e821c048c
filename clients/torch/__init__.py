"""PyTorch adapter (imports torch, never tensorflow): ``EpisodeDataset`` and ``BatchDataset``."""

from clients.torch.dataset import BatchDataset, EpisodeDataset, episode_to_torch

__all__ = ["BatchDataset", "EpisodeDataset", "episode_to_torch"]
