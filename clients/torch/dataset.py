"""``torch.utils.data.IterableDataset``s over the service.

Sharding: the requested window of indices [start, start + count) is one canonical
index space; DataLoader worker w of rank r takes the indices i with
(i - start) % (world_size * num_workers) == r * num_workers + w. Together the shards
cover every index exactly once, whatever the worker and rank counts, and each
index's episode is the server's pure function of (request, seed, index).
Use ``DataLoader(dataset, batch_size=None)``: one item is one episode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from clients.core import (
    BatchArrays,
    EpisodeArrays,
    EpisodeSpec,
    SamplerClient,
    shard_window,
)


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=True))


def episode_to_torch(episode: EpisodeArrays) -> dict[str, Any]:
    return {
        "support_images": _tensor(episode.support_images),
        "support_labels": _tensor(episode.support_labels),
        "query_images": _tensor(episode.query_images),
        "query_labels": _tensor(episode.query_labels),
        "index": episode.index,
        "fingerprint": episode.fingerprint,
        "source": episode.source,
        "ways": episode.ways,
    }


def _shard(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(shard id, shard count) of this process and DataLoader worker."""
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        else:
            rank, world_size = 0, 1
    info = get_worker_info()
    workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
    return rank * workers + worker, world_size * workers


class EpisodeDataset(IterableDataset):
    """Episodes ``start .. start + count - 1`` (count 0 = unbounded) of one request."""

    def __init__(
        self,
        address: str,
        spec: EpisodeSpec,
        *,
        start: int = 0,
        count: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch: int = 2,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.address = address
        self.spec = spec
        self.start = start
        self.count = count
        self.rank = rank
        self.world_size = world_size
        self.prefetch = prefetch
        self.client_options = dict(client_options or {})

    def __iter__(self) -> Iterator[dict[str, Any]]:
        shard, shards = _shard(self.rank, self.world_size)
        start, count, step = shard_window(self.start, self.count, shard, shards)
        if count < 0:
            return
        with SamplerClient(self.address, prefetch=self.prefetch, **self.client_options) as client:
            for episode in client.episodes(self.spec, start, count, step):
                yield episode_to_torch(episode)


class BatchDataset(IterableDataset):
    """Plain labelled batches of a split (non-episodic training), sharded like episodes."""

    def __init__(
        self,
        address: str,
        source: str,
        split: str,
        batch_size: int,
        *,
        seed: int = 0,
        start: int = 0,
        count: int = 0,
        image_size: int = 84,
        rank: int | None = None,
        world_size: int | None = None,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.address, self.source, self.split, self.batch_size = address, source, split, batch_size
        self.seed, self.start, self.count, self.image_size = seed, start, count, image_size
        self.rank, self.world_size = rank, world_size
        self.client_options = dict(client_options or {})

    def __iter__(self) -> Iterator[dict[str, Any]]:
        shard, shards = _shard(self.rank, self.world_size)
        start, count, step = shard_window(self.start, self.count, shard, shards)
        if count < 0:
            return
        with SamplerClient(self.address, **self.client_options) as client:
            for batch in client.batches(self.source, self.split, self.batch_size, self.seed, start, count, step,
                                        image_size=self.image_size):
                yield _batch_to_torch(batch)


def _batch_to_torch(batch: BatchArrays) -> dict[str, Any]:
    return {"images": _tensor(batch.images), "labels": _tensor(batch.labels), "index": batch.index,
            "fingerprint": batch.fingerprint, "num_classes": batch.num_classes}
