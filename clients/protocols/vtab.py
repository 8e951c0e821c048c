"""VTAB-1k: task batches and full-way task episodes as NumPy arrays, their requests, their calls.

Tasks are named as the server lists them (ListTasks). Training batches are shuffled
and resumable by batch index; evaluation batches read a split once, in order; a task
episode is the support split then the query split, whole, assembled from chunks. A
task's result is reported under protocol ``sampler_common.protocols.VTAB``, keyed by
the control baselines' role and data regime where those apply (``clients.protocols.
baselines`` draws the regimes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sampler_common.checks import check_batch_size, check_seed
from sampler_common.protocols import VTAB
from sampler_common.splits import REGIME_STREAM
from sampler_common.splits import VTAB as VTAB_SPLIT_NAMES
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.segments import SegmentMaps

from clients.protocols import Rpc, check_window
from clients.reporting import run_config_json
from clients.tensors import image_options, resize_name, to_array

VTAB_RESIZE = "legacy_bilinear"
"""VTAB's default: the reference's pixels, ``tf.compat.v1.image.resize``'s legacy grid
(task_adaptation's data_loader); "tf2_bilinear" names TF2's half-pixel grid."""


@dataclass(frozen=True)
class TaskBatchArrays:
    """One VTAB task batch: ``images`` uint8 [B, S, S, 3] (0..255), ``labels`` int64 [B]
    task labels; ``split_fingerprint`` is the split's, as ``sampler-server vtab split`` prints."""

    task: str
    split: str
    index: int
    epoch: int
    fingerprint: str
    split_fingerprint: str
    images: np.ndarray
    labels: np.ndarray
    record_ids: tuple[int, ...]
    num_classes: int
    last: bool
    image_size: int = 0
    resize: str = ""  # the resize the server applied, e.g. "legacy_bilinear"

    @classmethod
    def from_bytes(cls, data: bytes) -> "TaskBatchArrays":
        message = pb.TaskBatch.FromString(data)
        maps = SegmentMaps()
        return cls(message.task, message.split, message.index, message.epoch, message.fingerprint,
                   message.split_fingerprint, to_array(message.images, maps), to_array(message.labels, maps),
                   tuple(message.record_ids), message.num_classes, message.last, message.image_size,
                   resize_name(message.resize))


@dataclass(frozen=True)
class TaskEpisodeArrays:
    """A VTAB task as one full-way episode: the support split then the query split, whole,
    assembled from the server's chunks (uint8 images, int64 task labels)."""

    task: str
    fingerprint: str
    support_fingerprint: str
    query_fingerprint: str
    support_images: np.ndarray
    support_labels: np.ndarray
    support_record_ids: tuple[int, ...]
    query_images: np.ndarray
    query_labels: np.ndarray
    query_record_ids: tuple[int, ...]
    num_classes: int
    image_size: int = 0
    resize: str = ""  # the resize the server applied, e.g. "legacy_bilinear"


@dataclass(frozen=True)
class TaskChunk:
    """One TaskEpisodeChunk with its arrays (mapped on receipt, as every reply is)."""

    message: pb.TaskEpisodeChunk
    images: np.ndarray
    labels: np.ndarray

    @property
    def index(self) -> int:
        return self.message.index

    @property
    def last(self) -> bool:
        return self.message.last

    @classmethod
    def from_bytes(cls, data: bytes) -> "TaskChunk":
        message = pb.TaskEpisodeChunk.FromString(data)
        maps = SegmentMaps()
        return cls(message, to_array(message.images, maps), to_array(message.labels, maps))


def join_chunks(chunks: Sequence[TaskChunk], image_size: int) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """(images, labels, record ids) of one part of a task episode, its chunks in order."""
    empty = np.zeros((0, image_size, image_size, 3), np.uint8)
    images = np.concatenate([c.images for c in chunks]) if chunks else empty
    labels = np.concatenate([c.labels for c in chunks]) if chunks else np.zeros(0, np.int64)
    return images, labels, tuple(r for c in chunks for r in c.message.record_ids)


def task_batch_request(task: str, split: str, batch_size: int, *, shuffle: bool, seed: int = 0,
                       image_size: int = 224, resize: str = VTAB_RESIZE, store: str = "", regime: int = 0,
                       regime_seed: int = 0, regime_sampling: str = "") -> pb.StreamTaskBatchesRequest:
    """The StreamTaskBatches request of a task split (without its index window). The split name, seeds,
    batch size and image size are checked as the server checks them (``sampler_common``: "valid" and
    "validation" read as "val"); the task's name by the server. With ``regime`` > 0, ``split`` names a
    part of that data regime ("train", "val", or "trainval": the whole regime) drawn with ``regime_seed``
    and ``regime_sampling`` (see ``get_regime``)."""
    if regime:
        split = REGIME_STREAM.canonical(split, "split", f" with regime {regime}")
    else:  # a packed source's held-out splits are among VTAB's names; the server checks which it has
        split = VTAB_SPLIT_NAMES.canonical(split)
    return pb.StreamTaskBatchesRequest(
        task=task, split=split, seed=check_seed(seed), batch_size=check_batch_size(batch_size),
        shuffle=shuffle, store=store, images=image_options(image_size, resize), regime=regime,
        regime_seed=check_seed(regime_seed, "regime_seed"), regime_sampling=regime_sampling,
    )


class VtabCalls(Rpc):
    """VTAB-1k calls of ``SamplerClient`` (resumable streams, retried unary calls)."""

    def list_tasks(self, task: str = "") -> list[pb.TaskSummary]:
        """The VTAB tasks served (one entry per task and store), with split sizes and availability."""
        return list(self.call("ListTasks", pb.ListTasksRequest(task=task)).tasks)

    def _task_batches(self, base: pb.StreamTaskBatchesRequest, start: int, count: int) -> Iterator[TaskBatchArrays]:
        def window(next_index: int, remaining: int, token: str) -> pb.StreamTaskBatchesRequest:
            request = pb.StreamTaskBatchesRequest()
            request.CopyFrom(base)
            request.start_index, request.count = next_index, remaining
            request.images.same_host_token = token
            return request

        for batch in self.stream("StreamTaskBatches", window, TaskBatchArrays.from_bytes, start=start, count=count):
            yield batch
            if batch.last and not base.shuffle:
                return

    def task_batches(self, task: str, split: str, batch_size: int, seed: int = 0, start: int = 0, count: int = 0,
                     image_size: int = 224, resize: str = VTAB_RESIZE, store: str = "", regime: int = 0,
                     regime_seed: int = 0, regime_sampling: str = "") -> Iterator[TaskBatchArrays]:
        """Shuffled batches of a VTAB task split (training), resumable by batch index; count 0 = unbounded.
        With ``regime`` > 0: of that part of the data regime (``get_regime``)."""
        base = task_batch_request(task, split, batch_size, shuffle=True, seed=seed, image_size=image_size,
                                  resize=resize, store=store, regime=regime, regime_seed=regime_seed,
                                  regime_sampling=regime_sampling)
        check_window(start, count)
        return self._task_batches(base, start, count)

    def eval_batches(self, task: str, split: str, batch_size: int, start: int = 0, image_size: int = 224,
                     resize: str = VTAB_RESIZE, store: str = "", regime: int = 0,
                     regime_seed: int = 0, regime_sampling: str = "") -> Iterator[TaskBatchArrays]:
        """Every example of a VTAB task split (or, with ``regime`` > 0, of that part of the data
        regime) once, in order (the last batch short)."""
        base = task_batch_request(task, split, batch_size, shuffle=False, image_size=image_size, resize=resize,
                                  store=store, regime=regime, regime_seed=regime_seed,
                                  regime_sampling=regime_sampling)
        check_window(start, 0)
        return self._task_batches(base, start, 0)

    def task_episode(self, task: str, image_size: int = 224, resize: str = VTAB_RESIZE, chunk_size: int = 0,
                     support_split: str = "", query_split: str = "", store: str = "") -> TaskEpisodeArrays:
        """A VTAB task as one full-way episode (support = train800val200, query = test by default),
        assembled from chunks; a broken stream resumes at the next chunk."""
        base = pb.StreamTaskEpisodeRequest(
            task=task, chunk_size=chunk_size, store=store, images=image_options(image_size, resize),
            support_split=VTAB_SPLIT_NAMES.canonical(support_split, "support_split") if support_split else "",
            query_split=VTAB_SPLIT_NAMES.canonical(query_split, "query_split") if query_split else "")

        def window(next_index: int, remaining: int, token: str) -> pb.StreamTaskEpisodeRequest:
            request = pb.StreamTaskEpisodeRequest()
            request.CopyFrom(base)
            request.start_index = next_index
            request.images.same_host_token = token
            return request

        parts: dict[int, list[TaskChunk]] = {pb.EPISODE_PART_SUPPORT: [], pb.EPISODE_PART_QUERY: []}
        first = None
        for chunk in self.stream("StreamTaskEpisode", window, TaskChunk.from_bytes):
            first = first or chunk.message
            parts[chunk.message.part].append(chunk)
            if chunk.last:
                break
        assert first is not None
        support = join_chunks(parts[pb.EPISODE_PART_SUPPORT], image_size)
        query = join_chunks(parts[pb.EPISODE_PART_QUERY], image_size)
        return TaskEpisodeArrays(first.task, first.fingerprint, first.support_fingerprint, first.query_fingerprint,
                                 *support, *query, first.num_classes, first.image_size,
                                 resize_name(first.resize))

    def report_task(self, run_id: str, task: str, split: str, accuracy: float, examples: int, *,
                    run_config: Mapping[str, Any] | None = None, role: str = "", regime: int = 0,
                    regime_seed: int = 0) -> pb.ReportMetricsResponse:
        """Report one VTAB task's top-1 ``accuracy`` (in [0, 1]) over ``examples`` of ``split``; idempotent.
        ``role`` ("model", "scratch", "max"; empty = "model") and the data ``regime`` (0 = the task's
        usual training split) with its ``regime_seed`` key the result (control baselines)."""
        report = pb.MetricReport(run_id=run_id, protocol=VTAB, task=task, task_split=split,
                                 examples=examples, metrics={"accuracy": float(accuracy)}, role=role,
                                 regime=regime, regime_seed=regime_seed)
        return self.report([report], run_config_json=run_config_json(run_config))

    def get_vtab_report(self, run_ids: Sequence[str], table: str = "vtab", fmt: str = "table",
                        benchmark: str = "", split: str = "") -> str:
        """The VTAB ("vtab") or VTAB+MD ("vtab-md") table of runs."""
        request = pb.GetReportRequest(run_ids=list(run_ids), format=fmt, table=table, vtab_benchmark=benchmark,
                                      vtab_split=split)
        return self.call("GetReport", request).text
