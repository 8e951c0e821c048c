"""PyTorch adapter (imports torch, never tensorflow): resumable ``EpisodeDataset`` and
``BatchDataset`` (Meta-Dataset), ``TaskBatchDataset`` (VTAB), ``CogBatchDataset``
(ImageNet-CoG), and the functions that turn the core client's arrays into their items.
Every item has the keys of its protocol's ``clients.tf`` element, images uint8 NHWC unless
``dtype="float32"``; ``docs/api.md`` has the schema table."""

from sampler_common.startup import collector_held_off

with collector_held_off():  # PyTorch's import, without the collector's scans
    from clients.torch.cog_dataset import CogBatchDataset, cog_batch_to_torch
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

__all__ = ["BatchDataset", "CogBatchDataset", "EpisodeDataset", "TaskBatchDataset", "batch_to_torch",
           "cog_batch_to_torch", "episode_to_torch", "packed_episode_to_torch", "task_batch_to_torch",
           "task_episode_to_torch"]
