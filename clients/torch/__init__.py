"""PyTorch adapter (imports torch, never tensorflow): resumable ``EpisodeDataset`` and
``BatchDataset``, VTAB's ``TaskBatchDataset`` (images uint8 unless ``dtype="float32"``); see
``clients.torch.dataset`` for the item schema and resume state."""

from clients.torch.dataset import (
    BatchDataset,
    EpisodeDataset,
    TaskBatchDataset,
    batch_to_torch,
    episode_to_torch,
    packed_episode_to_torch,
    task_batch_to_torch,
    task_episode_to_torch,
)

__all__ = ["BatchDataset", "EpisodeDataset", "TaskBatchDataset", "batch_to_torch", "episode_to_torch",
           "packed_episode_to_torch", "task_batch_to_torch", "task_episode_to_torch"]
