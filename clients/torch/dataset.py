"""``torch.utils.data.IterableDataset``s over the service, resumable from a small state.

Items (use ``DataLoader(dataset, batch_size=None)``: one item is one episode or batch).
Every adapter of both frameworks yields, per protocol, the same keys as its TensorFlow
twin (``clients.tf.dataset``, ``docs/api.md``); images are uint8 NHWC by default and
float32 in [0, 1] with ``dtype="float32"`` (``clients.adapter_options``):

- ``EpisodeDataset``: a dict with ``support_images`` / ``query_images`` torch.uint8
  [N, S, S, 3] (NHWC, RGB, values 0..255, S = the spec's ``image_size``),
  ``support_labels`` / ``query_labels`` torch.int64 [N] with values 0 .. ways - 1,
  ``index`` (int), ``fingerprint`` (str), ``source`` (str, the source kind), ``ways``
  (int) and ``request`` (bytes: the serialised request it came from, plain bytes so
  items cross DataLoader worker processes): the item itself can be passed to
  ``SamplerClient.report_episode``.
- ``EpisodeDataset(..., shape_buckets=True)``: the same keys, plus the episode in the
  bucketed layout (``clients.buckets``): ``images`` uint8 [B, S, S, 3] (support rows,
  query rows, zero padding up to one of a few sizes), ``labels`` int64 [B], and the
  counts ``support`` and ``query``; the four support/query tensors are views of them.
  Feed it to ``clients.torch.models.ProtoNet.packed``: the padding changes nothing
  learned, and a GPU meets a few dozen shapes instead of one per episode.
- ``BatchDataset``: ``images`` torch.uint8 [B, S, S, 3], ``labels`` torch.int64 [B]
  with values 0 .. num_classes - 1, ``index``, ``fingerprint``, ``num_classes``.
- ``TaskBatchDataset`` (VTAB): ``images`` torch.uint8 [B, S, S, 3] by default (0..255:
  convert on the device), torch.float32 in [0, 1] with ``dtype="float32"``; ``labels``
  and ``record_ids`` torch.int64 [B], ``index``, ``fingerprint``, ``split_fingerprint``,
  ``num_classes``, ``last``. Training splits (``train...``) come shuffled and unbounded
  unless ``count`` is set, evaluation splits once in order, as the VTAB reference reads
  them; ``shuffle=True|False`` overrides.

Sharding: the window [start, start + count) is one canonical index space; DataLoader
worker w of rank r (W ranks, n workers each) takes the indices i with
(i - start) % (W * n) == w * W + r. Together the shards cover every index exactly
once whatever the worker and rank counts, and each rank consumes start + r,
start + r + W, ... in order, whatever its worker count.

Resume (``clients.state``): ``state_dict()`` is the window's next index. Iterating
the dataset in this process (no DataLoader workers) advances it; with workers the
items are made in other processes, so pass the ``index`` of the last item you
consumed: ``dataset.state_dict(last_index=item["index"])``. A new dataset of the
same request and window that loads the state yields the rest of the window.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from clients.buckets import DEFAULT_RATIO, EpisodeBounds, Ladder, pack_episode
from clients.client import SamplerClient
from clients.adapter_options import check_image_dtype, connection_options, images_as, vtab_shuffles
from clients.protocols.md import BatchArrays, EpisodeArrays, EpisodeSpec, batch_request
from clients.protocols.vtab import TaskBatchArrays, TaskEpisodeArrays
from clients.state import StreamCursor, shard_window


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=True))


def _images(array: np.ndarray, dtype: str) -> torch.Tensor:
    """Images in ``dtype`` (``clients.adapter_options.images_as``), in a tensor that owns them."""
    return torch.from_numpy(images_as(array, dtype))


def episode_to_torch(episode: EpisodeArrays, dtype: str = "uint8") -> dict[str, Any]:
    """An episode as the dict ``EpisodeDataset`` yields (tensors copied out of the message)."""
    return {
        "support_images": _images(episode.support_images, dtype),
        "support_labels": _tensor(episode.support_labels),
        "query_images": _images(episode.query_images, dtype),
        "query_labels": _tensor(episode.query_labels),
        "index": episode.index,
        "fingerprint": episode.fingerprint,
        "source": episode.source,
        "ways": episode.ways,
        "request": episode.request.SerializeToString() if episode.request is not None else b"",
    }


def packed_episode_to_torch(episode: EpisodeArrays, ladder: Ladder | None, dtype: str = "uint8") -> dict[str, Any]:
    """An episode as ``EpisodeDataset(..., shape_buckets=True)`` yields it (padded to
    ``ladder``'s bucket; None: no padding rows)."""
    packed = pack_episode(episode, ladder)  # a new array: uint8 needs no copy
    pixels = packed.images if check_image_dtype(dtype) == "uint8" else images_as(packed.images, dtype)
    images, labels = torch.from_numpy(pixels), torch.from_numpy(packed.labels)
    support, rows = packed.support, packed.rows
    return {
        "images": images, "labels": labels, "support": support, "query": packed.query,
        "support_images": images[:support], "support_labels": labels[:support],
        "query_images": images[support:rows], "query_labels": labels[support:rows],
        "index": episode.index, "fingerprint": episode.fingerprint, "source": episode.source, "ways": episode.ways,
        "request": episode.request.SerializeToString() if episode.request is not None else b"",
    }


def _ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: got {rank}, expected 0 to {world_size - 1}")
    return rank, world_size


def _shard(rank: int, world_size: int) -> tuple[int, int]:
    """(shard id, shard count) of this process and DataLoader worker: worker-major, so a
    rank's consumer sees its indices in order whatever its worker count."""
    info = get_worker_info()
    workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
    return worker * world_size + rank, world_size * workers


class _Resumable(IterableDataset):
    """The shared part: a cursor over the window, sharded iteration, state."""

    kind = ""

    def __init__(self, address: str, request: Any, start: int, count: int, rank: int | None,
                 world_size: int | None, client_options: Mapping[str, Any] | None) -> None:
        super().__init__()
        self.address = address
        self.rank, self.world_size = rank, world_size
        self.client_options = connection_options(client_options)
        self.cursor = StreamCursor(self.kind, request, start, count)

    @property
    def start(self) -> int:
        return self.cursor.start

    @property
    def count(self) -> int:
        return self.cursor.count

    def _read(self, client: SamplerClient, start: int, count: int, step: int) -> Iterator[Any]:
        """The items of this shard's indices (each subclass reads its own stream)."""
        raise NotImplementedError(f"{type(self).__name__} reads no stream")

    def _client(self) -> SamplerClient:
        return SamplerClient(self.address, **self.client_options)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rank, ranks = _ranks(self.rank, self.world_size)
        shard, shards = _shard(rank, ranks)
        first, left = self.cursor.begin_pass()
        start, count, step = shard_window(first, left, shard, shards)
        if count < 0:
            return
        in_process = get_worker_info() is None
        with self._client() as client:
            for item in self._read(client, start, count, step):
                if in_process:  # consumed once handed over (the consumer's own order)
                    self.cursor.consumed(item["index"], ranks)
                yield item

    def state_dict(self, last_index: int | None = None) -> dict[str, Any]:
        """The resume state (JSON-able). Without ``last_index``: the items this process
        iterated; with DataLoader workers pass the ``index`` of the last item consumed."""
        return self.cursor.state_dict(None if last_index is None else int(last_index), _ranks(self.rank, self.world_size)[1])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at the state's next index (a state of this request and window only)."""
        self.cursor.load_state_dict(state)


class EpisodeDataset(_Resumable):
    """Episodes ``start .. start + count - 1`` (count 0 = unbounded) of one request;
    ``shape_buckets``: also in the bucketed layout (see the module docstring), on the grid of
    ``bucket_ratio`` (the trainers' ``--bucket-ratio``)."""

    kind = "episodes"

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
        shape_buckets: bool = False,
        dtype: str = "uint8",
        bucket_ratio: float = DEFAULT_RATIO,
    ) -> None:
        self.spec = spec
        self.prefetch = prefetch
        self.dtype = check_image_dtype(dtype)
        self.ladder = (Ladder.for_bounds(EpisodeBounds.of_request(spec.to_request()), bucket_ratio) if shape_buckets
                       else None)
        super().__init__(address, spec.to_request(), start, count, rank, world_size, client_options)

    def _client(self) -> SamplerClient:
        return SamplerClient(self.address, prefetch=self.prefetch, **self.client_options)

    def _read(self, client: SamplerClient, start: int, count: int, step: int) -> Iterator[dict[str, Any]]:
        for episode in client.episodes(self.spec, start, count, step):
            if self.ladder is None:
                yield episode_to_torch(episode, self.dtype)
            else:
                yield packed_episode_to_torch(episode, self.ladder, self.dtype)


class BatchDataset(_Resumable):
    """Plain labelled batches of a split (non-episodic training), sharded like episodes.
    ``source``: a store name or source kind; ``preset``: whose class splits apply."""

    kind = "batches"

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
        resize: str = "bilinear",
        preset: str = "",
        rank: int | None = None,
        world_size: int | None = None,
        client_options: dict[str, Any] | None = None,
        dtype: str = "uint8",
    ) -> None:
        self.dtype = check_image_dtype(dtype)
        self.source, self.split, self.batch_size = source, split, batch_size
        self.seed, self.image_size, self.resize, self.preset = seed, image_size, resize, preset
        request = batch_request(source, split, batch_size, seed=seed, image_size=image_size, resize=resize,
                                preset=preset)
        super().__init__(address, request, start, count, rank, world_size, client_options)

    def _read(self, client: SamplerClient, start: int, count: int, step: int) -> Iterator[dict[str, Any]]:
        for batch in client.batches(self.source, self.split, self.batch_size, self.seed, start, count, step,
                                    image_size=self.image_size, resize=self.resize, preset=self.preset):
            yield batch_to_torch(batch, self.dtype)


def batch_to_torch(batch: BatchArrays, dtype: str = "uint8") -> dict[str, Any]:
    """A batch as the dict ``BatchDataset`` yields."""
    return {"images": _images(batch.images, dtype), "labels": _tensor(batch.labels), "index": batch.index,
            "fingerprint": batch.fingerprint, "num_classes": batch.num_classes}


class TaskBatchDataset(IterableDataset):
    """VTAB task batches as torch tensors: ``images`` [B, S, S, 3] (NHWC, RGB) in ``dtype``,
    ``labels`` int64. ``dtype="uint8"`` (default): the served pixels, 0..255, to be converted
    on the device in the model's first op; ``"float32"``: the reference's ``/ 255`` in [0, 1],
    done here on the receiving thread (``clients.adapter_options`` says what that costs).
    ``shuffle``: None (default) as the VTAB reference reads the split: a training split
    (``train...``) shuffled by ``seed``, ``count`` batches (0: unbounded); ``val200``,
    ``val``, ``test`` in the evaluation form (every example once, in order). True or False
    overrides."""

    def __init__(self, address: str, task: str, split: str, batch_size: int, *, shuffle: bool | None = None,
                 seed: int = 0, start: int = 0, count: int = 0, image_size: int = 224,
                 resize: str = "legacy_bilinear", dtype: str = "uint8",
                 client_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.address, self.task, self.split, self.batch_size = address, task, split, batch_size
        self.shuffle, self.seed, self.start, self.count = vtab_shuffles(split, shuffle), seed, start, count
        self.image_size, self.resize, self.dtype = image_size, resize, check_image_dtype(dtype)
        self.client_options = connection_options(client_options)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        if info is not None and info.num_workers > 1:  # each worker would read the whole stream
            raise ValueError(
                f"TaskBatchDataset: DataLoader num_workers={info.num_workers} would repeat every batch; use "
                "num_workers 0 or 1 (the server decodes, the client only receives)"
            )
        with SamplerClient(self.address, **self.client_options) as client:
            if self.shuffle:
                batches = client.task_batches(self.task, self.split, self.batch_size, self.seed, self.start,
                                              self.count, self.image_size, self.resize)
            else:
                batches = client.eval_batches(self.task, self.split, self.batch_size, self.start, self.image_size,
                                              self.resize)
            for batch in batches:
                yield task_batch_to_torch(batch, self.dtype)


def task_batch_to_torch(batch: TaskBatchArrays, dtype: str = "uint8") -> dict[str, Any]:
    """A VTAB task batch as ``TaskBatchDataset`` yields it: images uint8 0..255 by default,
    ``dtype="float32"`` for [0, 1] (see the class)."""
    return {"images": _images(batch.images, dtype), "labels": _tensor(batch.labels),
            "record_ids": torch.tensor(batch.record_ids, dtype=torch.int64), "index": batch.index,
            "fingerprint": batch.fingerprint, "split_fingerprint": batch.split_fingerprint,
            "num_classes": batch.num_classes, "last": batch.last}


def task_episode_to_torch(episode: TaskEpisodeArrays, dtype: str = "uint8") -> dict[str, Any]:
    """A VTAB full-way episode as torch tensors: images uint8 0..255 by default,
    ``dtype="float32"`` for [0, 1] (see ``TaskBatchDataset``)."""
    return {"support_images": _images(episode.support_images, dtype),
            "support_labels": _tensor(episode.support_labels),
            "query_images": _images(episode.query_images, dtype), "query_labels": _tensor(episode.query_labels),
            "fingerprint": episode.fingerprint, "num_classes": episode.num_classes, "task": episode.task}
