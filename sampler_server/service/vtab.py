"""VTAB-1k handlers behind the one servicer: task listing, task batches, the full-way episode.

The servicer delegates its VTAB RPCs here; this module only unpacks requests, asks the
task catalog (``catalog.tasks``: the store of a task, its split listings, cached) for
records and labels, and packs replies through the stream engine (``service.stream``:
admission, lookahead and send budgets, ``Prepared``), so VTAB streams are bounded
exactly as MD streams are. A batch stream naming a regime reads that regime's part from
the control baselines (``service.baselines``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from sampler_server.catalog import wire_values
from sampler_server.catalog.tasks import TaskCatalog, TaskHandle, split_availability, tasks_of
from sampler_server.catalog.wire_values import ImageRequest, resize_to_wire
from sampler_server.core.baselines.sources import SOURCE_SPLITS, is_source_task
from sampler_server.core.vtab import SPLITS, Task, get_task
from sampler_server.core.vtab.batches import TaskBatchSampler, episode_fingerprint
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.service import messages
from sampler_server.service.baselines import BaselineHandlers, check_regime_request
from sampler_server.service.stream import IMAGES, Prepared, StreamEnd, StreamEngine, stream_window
from sampler_server.store.vtab_records import TfdsRecords
from sampler_common.splits import REGIME_STREAM
from sampler_common.splits import VTAB as VTAB_SPLIT_NAMES
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

DEFAULT_IMAGE_SIZE = 224  # task_adaptation's default
DEFAULT_CHUNK = 256
MAX_CHUNK = 4096
SUPPORT_SPLIT = "train800val200"
QUERY_SPLIT = "test"


def images_from_wire(message: pb.ImageOptions) -> ImageRequest:
    """VTAB's defaults where the request leaves them: 224 px and the reference's resize,
    ``tf.compat.v1.image.resize``'s legacy grid (task_adaptation's data_loader)."""
    options = pb.ImageOptions()
    options.CopyFrom(message)
    if not options.image_size:
        options.image_size = DEFAULT_IMAGE_SIZE
    if options.resize == pb.RESIZE_METHOD_UNSPECIFIED:
        options.resize = pb.RESIZE_METHOD_LEGACY_BILINEAR
    return wire_values.images_from_wire(options)


def check_split(split: str, field: str, task: str, regime: int = 0) -> str:
    """The canonical name of a requested split, read as the client and the CLI read it
    (``sampler_common.splits``): a regime's part with ``regime`` > 0, a packed source's
    held-out split for a source task, else a VTAB split."""
    with field_checks():
        if regime:
            return REGIME_STREAM.canonical(split, field, f" with regime {regime}")
        if is_source_task(task):
            return VTAB_SPLIT_NAMES.within(SOURCE_SPLITS).canonical(split, field, f" for task {task}")
        return VTAB_SPLIT_NAMES.canonical(split, field)


def split_sizes(task: Task, records: TfdsRecords) -> list[pb.TaskSplitSize]:
    counts, unavailable = split_availability(task, records)
    return [pb.TaskSplitSize(split=split, size=counts[split], available=True) if split in counts
            else pb.TaskSplitSize(split=split, available=False, reason=unavailable[split]) for split in SPLITS]


class VtabHandlers:
    """The VTAB RPCs over the tasks of ``tasks``, streamed by ``streams``; a batch stream naming a
    regime reads its records from ``baselines``."""

    def __init__(self, tasks: TaskCatalog, streams: StreamEngine, baselines: BaselineHandlers) -> None:
        self.tasks = tasks
        self.streams = streams
        self.baselines = baselines

    # ---- RPCs ------------------------------------------------------------------------

    def list_tasks(self, request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        if is_source_task(request.task):
            return pb.ListTasksResponse(tasks=[self._source_summary(self.tasks.handle(request.task))])
        wanted = get_task(request.task) if request.task else None
        response = pb.ListTasksResponse()
        for records in self.tasks.tfds_stores():
            sizes = records.split_sizes()
            for task in tasks_of(records):
                if wanted is not None and task.name != wanted.name:
                    continue
                response.tasks.append(pb.TaskSummary(
                    task=task.name, group=task.group.value, store=records.manifest.name,
                    tfds=f"{records.name}:{records.version}", num_classes=task.num_classes,
                    splits=split_sizes(task, records), tfds_split_sizes=sizes,
                    store_fingerprint=records.manifest.fingerprint,
                ))
        response.tasks.sort(key=lambda t: (t.task, t.store))
        if wanted is not None and not response.tasks:
            self.tasks.store_for(wanted)  # NOT_FOUND naming what is served
        return response

    def _source_summary(self, task: TaskHandle) -> pb.TaskSummary:
        """A source task as ListTasks names one: group "source", its held-out splits' sizes."""
        splits = [pb.TaskSplitSize(split=split, size=len(task.listing(split).record_ids), available=True)
                  for split in task.splits]
        fingerprint = task.listing("train").store_fingerprint
        return pb.TaskSummary(task=task.name, group="source", store=task.store, num_classes=task.num_classes,
                              splits=splits, store_fingerprint=fingerprint)

    def _serving_store(self, task: TaskHandle, images: ImageRequest) -> str:
        self.tasks.registry.get(task.store, images.size, images.resize.value)  # quarantined: FAILED_PRECONDITION
        return task.store

    def stream_task_batches(self, request: pb.StreamTaskBatchesRequest, end: StreamEnd) -> Iterator[Any]:
        if not is_source_task(request.task):  # a VTAB request's own fields are checked before any store
            get_task(request.task)
        split = check_split(request.split, "split", request.task, request.regime)
        images = images_from_wire(request.images)
        task = self.tasks.handle(request.task, request.store)
        split = task.check_split(split)
        # control baselines: with regime > 0 the split names a part of that data regime (service.baselines)
        check_regime_request(request)
        if request.regime:
            listing: Any = self.baselines.part(task, request.regime, request.regime_seed, split, request.regime_sampling)
            shuffle_split = listing.shuffle_split
        else:
            listing, shuffle_split = task.listing(split), split
        store = self._serving_store(task, images)
        sampler = TaskBatchSampler(task.name, shuffle_split, listing.fingerprint, listing.record_ids, listing.labels,
                                   request.batch_size, shuffle=request.shuffle)
        self.streams.check_message(images, sampler.batch_size, f"batch_size {sampler.batch_size}")
        last_index = sampler.max_index
        count = request.count
        if not sampler.shuffle and count == 0:
            count = max(0, last_index + 1 - request.start_index) or 1  # past the end: start_index names the range
        start, count, step = stream_window(request.start_index, count, 1, last_index,
                                           f" (the last batch of {split} at batch_size {sampler.batch_size})")
        seed = request.seed
        resize = resize_to_wire(images.resize)

        def prepare(index: int) -> Prepared:
            batch = sampler.sample(seed, index)
            header = pb.TaskBatch(
                task=task.name, split=split, seed=seed, index=index, epoch=batch.epoch, fingerprint=batch.fingerprint,
                record_ids=batch.record_ids, num_classes=task.num_classes, shuffle=sampler.shuffle,
                split_fingerprint=listing.fingerprint, split_size=sampler.size, store=store,
                image_size=images.size, resize=resize,
            )
            if not sampler.shuffle and index == last_index:
                header.last = True
            messages.fill_tensor(header.labels, np.asarray(batch.labels, dtype=np.int64))
            return self.streams.prepared_images(header, store, images, [(IMAGES, list(batch.record_ids))])

        label = f"{task.name} {split}{f' regime={request.regime}/{request.regime_seed}' if request.regime else ''} " \
                f"{'shuffled' if sampler.shuffle else 'in-order'} seed={seed} batch_size={sampler.batch_size}"
        yield from self.streams.stream(end, prepare, start, count, step, label, last_index)

    def stream_task_episode(self, request: pb.StreamTaskEpisodeRequest, end: StreamEnd) -> Iterator[Any]:
        if not is_source_task(request.task):  # a VTAB request's own fields are checked before any store
            get_task(request.task)
        support_split = check_split(request.support_split or SUPPORT_SPLIT, "support_split", request.task)
        query_split = check_split(request.query_split or QUERY_SPLIT, "query_split", request.task)
        task = self.tasks.handle(request.task, request.store)
        support_split = task.check_split(support_split, "support_split")
        query_split = task.check_split(query_split, "query_split")
        images = images_from_wire(request.images)
        chunk = request.chunk_size or DEFAULT_CHUNK
        if not 1 <= chunk <= MAX_CHUNK:
            raise InvalidArgument(f"chunk_size: got {chunk}, expected 1 to {MAX_CHUNK} (0 = {DEFAULT_CHUNK})")
        self.streams.check_message(images, chunk, f"chunk_size {chunk}")
        support = task.listing(support_split)
        query = task.listing(query_split)
        store = self._serving_store(task, images)
        parts = [(pb.EPISODE_PART_SUPPORT, support), (pb.EPISODE_PART_QUERY, query)]
        counts = [-(-len(listing.record_ids) // chunk) for _, listing in parts]
        num_chunks = sum(counts)
        last_index = num_chunks - 1
        start, count, step = stream_window(request.start_index, max(1, num_chunks - request.start_index), 1,
                                           last_index, f" (the episode has {num_chunks} chunks of {chunk})")
        fingerprint = episode_fingerprint(task.name, support.fingerprint, query.fingerprint)
        resize = resize_to_wire(images.resize)

        def prepare(index: int) -> Prepared:
            part, listing = parts[0] if index < counts[0] else parts[1]
            offset = (index if index < counts[0] else index - counts[0]) * chunk
            ids = list(listing.record_ids[offset: offset + chunk])
            header = pb.TaskEpisodeChunk(
                task=task.name, index=index, part=part, offset=offset, record_ids=ids, num_classes=task.num_classes,
                support_size=len(support.record_ids), query_size=len(query.record_ids), num_chunks=num_chunks,
                fingerprint=fingerprint, support_fingerprint=support.fingerprint,
                query_fingerprint=query.fingerprint, support_split=support_split, query_split=query_split,
                last=index == last_index, store=store, image_size=images.size, resize=resize,
            )
            messages.fill_tensor(header.labels, np.asarray(listing.labels[offset: offset + chunk], dtype=np.int64))
            return self.streams.prepared_images(header, store, images, [(IMAGES, ids)])

        label = f"{task.name} episode {support_split}+{query_split} chunk_size={chunk}"
        yield from self.streams.stream(end, prepare, start, count, step, label, last_index)

