"""ImageNet-CoG handlers behind the one servicer: the levels, a level split, its images in order.

The servicer delegates its CoG RPCs here; this module only unpacks requests, asks the
CoG catalog (``catalog.cog``: levels and splits over the served stores' manifests,
cached) and packs replies through the stream engine (``service.stream``: admission,
lookahead and send budgets, ``Prepared``), so CoG streams are bounded exactly as the
others are. ``sampler-server cog split`` asks the same catalog over ``--data``, so
records and fingerprints agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from sampler_server.catalog import wire_values
from sampler_server.catalog.cog import CogCatalog
from sampler_server.catalog.registry import ServedStore
from sampler_server.catalog.wire_values import ImageRequest, resize_to_wire
from sampler_server.core.cog import LEVEL_NAMES, SEEN_LEVEL, SOURCE
from sampler_server.core.cog.splits import (
    SEEN_SOURCE,
    CogSplit,
    SplitRequest,
    batch_fingerprint,
    level_config,
    num_batches,
    seen_concepts,
    seen_sizes,
    split_sizes,
)
from sampler_server.errors import FailedPrecondition, NotFound, field_checks
from sampler_server.service import messages
from sampler_server.service.stream import IMAGES, Prepared, StreamEnd, StreamEngine, stream_window
from sampler_common.checks import MAX_COG_BATCH_SIZE, check_batch_size
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

DEFAULT_IMAGE_SIZE = 224  # the CoG reference's
DEFAULT_BATCH = 256


def images_from_wire(message: pb.ImageOptions) -> ImageRequest:
    """CoG's defaults where the request leaves them: 224 px, shorter side bicubic + centre crop."""
    options = pb.ImageOptions()
    options.CopyFrom(message)
    if not options.image_size:
        options.image_size = DEFAULT_IMAGE_SIZE
    if options.resize == pb.RESIZE_METHOD_UNSPECIFIED:
        options.resize = pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP
    return wire_values.images_from_wire(options)


class CogHandlers:
    """The CoG RPCs over the levels and splits of ``catalog``, streamed by ``streams``."""

    def __init__(self, catalog: CogCatalog, streams: StreamEngine) -> None:
        self.catalog = catalog
        self.streams = streams

    def split(self, message: pb.CogSplitRequest) -> tuple[CogSplit, ServedStore]:
        """The split a request names, and the store serving its images."""
        level_size, min_images = level_config(message.level_size, message.min_images)
        request = SplitRequest.parse(message.level, message.split, message.shots, message.seed)
        return self.catalog.split(request, level_size, min_images, message.levels_file, message.concepts_split_file)

    # ---- RPCs ------------------------------------------------------------------------

    def list_levels(self, request: pb.ListCogLevelsRequest) -> pb.ListCogLevelsResponse:
        level_size, min_images = level_config(request.level_size, request.min_images)
        response = pb.ListCogLevelsResponse(level_size=level_size, min_images=min_images)
        ilsvrc, in21k = self.catalog.store(SEEN_SOURCE), self.catalog.store(SOURCE)
        if ilsvrc is None and in21k is None:
            raise NotFound(f"the server has no {SOURCE} or {SEEN_SOURCE} store: ImageNet-CoG needs them (pack them "
                           f"with `sampler-server pack {SOURCE}` and `sampler-server pack {SEEN_SOURCE}`)")
        if ilsvrc is not None:  # IN-1K's sizes: every train image, the validation images
            try:
                sizes = seen_sizes(ilsvrc.manifest, ilsvrc.name)
            except FailedPrecondition as error:  # no validation partition: listed as unavailable, L1..L5 still served
                response.unavailable[SEEN_LEVEL] = str(error)
            else:
                response.levels.append(_summary(SEEN_LEVEL, seen_concepts(ilsvrc.manifest.classes), {}, (0.0, 0.0),
                                                ilsvrc, sizes=sizes))
        files = self.catalog.files.load(request.levels_file, request.concepts_split_file)
        if in21k is not None and files is not None:  # the levels file's concepts, not ours
            summaries, response.levels_fingerprint = self.catalog.files.summaries(in21k, files)
            response.level_size = response.min_images = 0
            for summary in summaries:
                response.levels.append(pb.CogLevelSummary(**summary, store=in21k.name,
                                                          store_fingerprint=in21k.manifest.fingerprint))
        elif in21k is not None:
            levels = self.catalog.levels(in21k, level_size, min_images)
            counts = {c.wnid: c.count for c in in21k.manifest.classes if c.wnid}
            for name in LEVEL_NAMES:
                level = levels.level(name)
                response.levels.append(_summary(name, level.concepts, counts, level.similarity_range, in21k))
            response.eligible = len(levels.eligible)
            response.levels_fingerprint = levels.fingerprint
        return response

    def get_split(self, request: pb.CogSplitRequest) -> pb.CogSplit:
        split, store = self.split(request)
        return pb.CogSplit(level=split.level, split=split.split, shots=split.shots, seed=split.seed,
                           record_ids=split.record_ids.tolist(), labels=split.labels.tolist(),
                           num_classes=split.num_classes, fingerprint=split.fingerprint, store=store.name,
                           wnids=list(split.wnids), partitions=split.partitions)

    def stream_batches(self, request: pb.StreamCogBatchesRequest, end: StreamEnd) -> Iterator[Any]:
        images = images_from_wire(request.images)
        with field_checks():  # a wire 0 is the field left unset: CoG's default
            batch_size = check_batch_size(request.batch_size or DEFAULT_BATCH, upper=MAX_COG_BATCH_SIZE)
        self.streams.check_message(images, batch_size, f"batch_size {batch_size}")
        split, store = self.split(request.split)
        name = store.name
        self.catalog.registry.get(name, images.size, images.resize.value)  # quarantined: FAILED_PRECONDITION
        batches = num_batches(split.size, batch_size)
        last_index = batches - 1
        count = request.count or max(1, batches - request.start_index)
        start, count, step = stream_window(request.start_index, count, 1, last_index,
                                           f" (the last batch of {split.size} images at batch_size {batch_size})")
        resize = resize_to_wire(images.resize)

        def prepare(index: int) -> Prepared:
            ids = split.record_ids[index * batch_size: (index + 1) * batch_size]
            labels = split.labels[index * batch_size: (index + 1) * batch_size]
            header = pb.CogBatch(
                level=split.level, split=split.split, shots=split.shots, seed=split.seed, index=index,
                record_ids=ids.tolist(), num_classes=split.num_classes, split_size=split.size,
                split_fingerprint=split.fingerprint, fingerprint=batch_fingerprint(split.fingerprint, index, ids, labels),
                last=index == last_index, store=name, image_size=images.size, resize=resize,
            )
            messages.fill_tensor(header.labels, labels.astype(np.int64))
            return self.streams.prepared_images(header, name, images, [(IMAGES, ids.tolist())])

        shots = f" {split.shots}-shot seed={split.seed}" if split.shots else (f" seed={split.seed}" if split.seed else "")
        label = f"cog {split.level} {split.split}{shots} batch_size={batch_size}"
        yield from self.streams.stream(end, prepare, start, count, step, label, last_index)


def _summary(name: str, concepts: Any, counts: dict[str, int], similarity: tuple[float, float],
             store: ServedStore, sizes: dict[str, tuple[int, int]] | None = None) -> pb.CogLevelSummary:
    """``sizes``: (train, test) per wnid where they are not ``split_sizes`` of ``counts`` (IN-1K)."""
    per_concept = [sizes[wnid] if sizes is not None else split_sizes(counts[wnid]) for wnid in concepts]
    return pb.CogLevelSummary(
        level=name, wnids=list(concepts), train_size=sum(t for t, _ in per_concept),
        test_size=sum(s for _, s in per_concept),
        similarity_min=similarity[0], similarity_max=similarity[1], store=store.name,
        store_fingerprint=store.manifest.fingerprint,
    )

