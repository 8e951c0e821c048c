"""Episodes onto the training device ahead of use, in the bucketed layout.

``Stager.stage(episode)`` packs an episode (``clients.buckets``: support rows, query
rows, zero padding up to its bucket, or no padding with buckets off) into a
``StagedEpisode`` whose tensors live on the device. On CUDA:

- pixels stay uint8 on the bus (a quarter of float32's bytes); conversion to float
  and the scaling the backbone declares happen on the GPU in the step (``backbones.to_model_input``);
- the valid rows are copied into a ring of pinned host buffers (one memcpy; NumPy
  and PyTorch copies release the GIL) and from there to the device on a side stream,
  so the copy overlaps the step running on the default stream; only the valid rows
  cross the bus, the padding rows are zeroed on the device;
- nothing waits on the host: the step's stream waits on the copy's event
  (``StagedEpisode.ready``); a pinned buffer is reused only after its previous copy
  finished (the stager's thread waits for that, never the training thread).

On CPU the same layout is built in ordinary memory, so every code path but the
CUDA calls runs in CPU tests. A stager is used by one thread at a time (the trainer
keeps one for its background feed and one for inline use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from clients.buckets import DEFAULT_RATIO, EpisodeBounds, Ladder, pack_episode

RING = 3  # pinned buffers: one being filled, up to two copies in flight


@dataclass
class StagedEpisode:
    """An episode on the device: ``images`` uint8 [B, S, S, 3] and ``labels`` int64 [B]
    (support rows, query rows, then padding); ``event`` marks its copy's end (CUDA)."""

    images: torch.Tensor
    labels: torch.Tensor
    support: int
    query: int
    ways: int
    index: int
    event: Any = None

    @property
    def rows(self) -> int:
        return self.support + self.query

    @property
    def padded(self) -> bool:
        return self.images.shape[0] > self.rows

    def ready(self) -> "StagedEpisode":
        """Make the current stream wait for the copy (no host wait) and keep the memory
        reserved for it; call on the thread that uses the tensors."""
        if self.event is not None:
            stream = torch.cuda.current_stream(self.images.device)
            stream.wait_event(self.event)
            self.images.record_stream(stream)
            self.labels.record_stream(stream)
            self.event = None
        return self


@dataclass
class _Slot:
    images: torch.Tensor   # pinned uint8 [capacity, S, S, 3]
    labels: torch.Tensor   # pinned int64 [capacity]
    event: Any = None      # the last copy out of this slot


class Stager:
    """Packs episodes to their bucket (``buckets`` True; the grid's ``ratio``) on ``device``
    (see the module docstring)."""

    def __init__(self, device: torch.device, buckets: bool, ratio: float = DEFAULT_RATIO) -> None:
        self.device = device
        self.buckets = buckets
        self.ratio = ratio
        self.cuda = device.type == "cuda"
        self._ladders: dict[bytes, Ladder] = {}
        self._slots: list[_Slot | None] = [None] * RING
        self._turn = 0
        self._stream = torch.cuda.Stream(device) if self.cuda else None

    def ladder(self, episode: Any) -> Ladder | None:
        """The ladder of the episode's request (its bounds), None with buckets off."""
        if not self.buckets:
            return None
        request = getattr(episode, "request", None)
        key = request.SerializeToString() if request is not None else b""
        if key not in self._ladders:
            self._ladders[key] = (Ladder.for_bounds(EpisodeBounds.of_request(request), self.ratio)
                                  if request is not None else Ladder(ratio=self.ratio))
        return self._ladders[key]

    def stage(self, episode: Any) -> StagedEpisode:
        """``episode``: anything with support/query images (uint8 NHWC) and labels and
        ``ways`` (``clients.protocols.md.EpisodeArrays``)."""
        ladder = self.ladder(episode)
        if not self.cuda:
            packed = pack_episode(episode, ladder)
            return StagedEpisode(torch.from_numpy(packed.images), torch.from_numpy(packed.labels), packed.support,
                                 packed.query, packed.ways, packed.index)
        return self._stage_cuda(episode, ladder)

    def _slot(self, rows: int, shape: tuple[int, ...]) -> _Slot:
        position = self._turn % RING
        self._turn += 1
        slot = self._slots[position]
        if slot is not None and slot.event is not None:
            slot.event.synchronize()  # its previous copy is done: the buffer is free
        if slot is None or slot.images.shape[0] < rows or tuple(slot.images.shape[1:]) != shape:
            slot = _Slot(torch.empty((rows, *shape), dtype=torch.uint8, pin_memory=True),
                         torch.empty((rows,), dtype=torch.int64, pin_memory=True))
            self._slots[position] = slot
        return slot

    def stage_batch(self, images: np.ndarray, labels: np.ndarray) -> StagedEpisode:
        """A plain batch (the batch learners'), every row support and no padding: on CUDA
        copied through the same pinned ring and side stream as an episode, so neither the
        feed's thread nor the training thread waits for the device."""
        if not self.cuda:
            # copies: the arrays may be views of a receiving buffer that is reused (``clients.receiver``)
            return StagedEpisode(torch.from_numpy(np.array(images, copy=True)),
                                 torch.from_numpy(np.array(labels, dtype=np.int64, copy=True)), len(images), 0, 0, -1)
        with torch.cuda.device(self.device):
            return self._copy_rows((images,), (labels,), len(images), 0, 0, -1)

    def _stage_cuda(self, episode: Any, ladder: Ladder | None) -> StagedEpisode:
        # the caller's thread (the feed's) may have another current device than the trainer's:
        # pinned buffers and events belong to this stager's device (cuda:LOCAL_RANK under torchrun)
        support, query = episode.support_images, episode.query_images
        rows = len(support) + len(query)
        size = ladder.size(rows) if ladder is not None else rows
        capacity = max(size, ladder.cap or 0) if ladder is not None else size
        with torch.cuda.device(self.device):
            return self._copy_rows((support, query), (episode.support_labels, episode.query_labels), size,
                                   len(query), int(episode.ways), int(getattr(episode, "index", -1)), capacity)

    def _copy_rows(self, images: tuple[np.ndarray, ...], labels: tuple[np.ndarray, ...], size: int, query: int,
                   ways: int, index: int, capacity: int | None = None) -> StagedEpisode:
        """``images`` and ``labels`` laid end to end, zero rows up to ``size``, on the device;
        the last part's rows are the query."""
        rows = sum(len(part) for part in images)
        slot = self._slot(capacity or size, tuple(images[0].shape[1:]))
        host, host_labels = slot.images.numpy(), slot.labels.numpy()
        at = 0
        for part, part_labels in zip(images, labels, strict=True):
            host[at:at + len(part)] = part
            host_labels[at:at + len(part)] = part_labels
            at += len(part)
        host_labels[rows:size] = 0
        assert self._stream is not None
        with torch.cuda.stream(self._stream):
            device_images = torch.empty((size, *images[0].shape[1:]), dtype=torch.uint8, device=self.device)
            device_images[:rows].copy_(slot.images[:rows], non_blocking=True)
            if size > rows:
                device_images[rows:].zero_()
            device_labels = slot.labels[:size].to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        slot.event = event
        return StagedEpisode(device_images, device_labels, rows - query, query, ways, index, event)
