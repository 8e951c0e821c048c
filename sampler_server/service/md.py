"""Meta-Dataset handlers behind the one servicer: sources, episodes and plain batches.

This module only unpacks requests, asks the pure core (``core.md``) for compositions over
the registry's specs, and packs replies through the stream engine (``service.stream``),
so MD streams are bounded as every other stream is. Episodes are a pure function of
(store content, preset, config, sources, split, seed, index); the same request replays
them for a report (``catalog.replay``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from sampler_server.catalog.registry import StoreRegistry, parse_preset
from sampler_server.catalog.wire_values import (
    config_from_wire,
    images_from_wire,
    split_from_wire,
    split_to_wire,
)
from sampler_server.core.md.batches import BatchSampler
from sampler_server.core.md.multisource import MultiSourceSampler
from sampler_server.core.md.presets import benchmark_sources
from sampler_server.core.split import Split
from sampler_server.errors import field_checks
from sampler_server.service import messages
from sampler_server.service.stream import IMAGES, QUERY, SUPPORT, Prepared, StreamEnd, StreamEngine, stream_window
from sampler_common.checks import check_index
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


class MdHandlers:
    """The Meta-Dataset RPCs over ``registry``'s stores, streamed by ``streams``."""

    def __init__(self, registry: StoreRegistry, streams: StreamEngine) -> None:
        self.registry = registry
        self.streams = streams

    # ---- sources -------------------------------------------------------------------

    def _summary(self, name: str, preset: str) -> pb.SourceSummary:
        store = self.registry.get(name)
        manifest = store.manifest
        benchmark = parse_preset(preset)
        spec = self.registry.spec(store.name, benchmark)
        counts = {split: len(spec.classes_in(split)) for split in Split}
        return pb.SourceSummary(
            name=store.name,
            source=manifest.source,
            fingerprint=manifest.fingerprint,
            num_records=manifest.num_records,
            train_classes=counts[Split.TRAIN],
            valid_classes=counts[Split.VALID],
            test_classes=counts[Split.TEST],
            hierarchy=manifest.hierarchy or "",
            raw_size=store.raw_size or 0,
            preset=benchmark.value,
            raw_resize=messages.raw_resize_to_wire(store.manifest.pack_options),
        )

    def list_sources(self, request: pb.ListSourcesRequest) -> pb.ListSourcesResponse:
        response = pb.ListSourcesResponse(
            sources=[self._summary(name, request.preset) for name in sorted(self.registry.stores)]
        )
        if request.split != pb.SPLIT_UNSPECIFIED:
            split = split_from_wire(request.split, "split")
            kinds = benchmark_sources(parse_preset(request.preset), split)
            for kind in kinds:
                self.registry.get(kind)  # NOT_FOUND names what is served
            response.preset_sources[:] = kinds
        return response

    def describe_source(self, request: pb.DescribeSourceRequest) -> pb.SourceDescription:
        store = self.registry.get(request.name)
        spec = self.registry.spec(store.name, parse_preset(request.preset))
        return pb.SourceDescription(
            summary=self._summary(store.name, request.preset),
            classes=[
                pb.ClassDescription(class_id=c.id, name=c.name, split=split_to_wire(c.split),
                                    num_records=c.count, wnid=c.wnid or "", group=c.group or "")
                for c in spec.classes
            ],
        )

    # ---- episodes ------------------------------------------------------------------

    def _episodes(self, request: pb.EpisodeRequest) -> tuple[Callable[[int], Prepared], str]:
        """For this request (validated up front): index -> that episode, prepared; and the stream's label."""
        split = split_from_wire(request.split, "request.split")
        images = images_from_wire(request.images)
        config = config_from_wire(request.config)
        specs, stores = self.registry.resolve(list(request.sources), request.preset, split, images.size,
                                              images.resize.value)
        sampler = MultiSourceSampler(specs, list(specs), split, config,
                                     {source: store.name for source, store in stores.items()})
        seed = request.seed
        preset = parse_preset(request.preset).value
        names = {kind: [c.name for c in spec.classes] for kind, spec in specs.items()}
        wnids = {kind: [c.wnid for c in spec.classes] for kind, spec in specs.items()}

        def prepare(index: int) -> Prepared:
            """Sample now; the images are read or decoded once the stream starts it."""
            episode = sampler.sample(seed, index)
            store = stores[episode.source]
            header = messages.episode_header(episode, names[episode.source], wnids[episode.source], images)
            header.preset = preset
            support_ids = list(header.support_record_ids)
            query_ids = list(header.query_record_ids)
            self.streams.check_message(images, len(support_ids) + len(query_ids), f"episode {index}",
                                       " (request a smaller image_size or fewer shots)")
            return self.streams.prepared_images(header, store.name, images,
                                                [(SUPPORT, support_ids), (QUERY, query_ids)])

        label = ",".join(sorted(s.name for s in stores.values())) + f" {split.value} seed={seed}"
        return prepare, label

    def stream_episodes(self, request: pb.StreamEpisodesRequest, end: StreamEnd) -> Iterator[Any]:
        start, count, step = stream_window(request.start_index, request.count, request.index_step)
        prepare, label = self._episodes(request.request)
        yield from self.streams.stream(end, prepare, start, count, step, label)

    def get_episode(self, request: pb.GetEpisodeRequest) -> bytes:
        """The serialised episode (``service.handlers`` passes bytes through)."""
        with field_checks():
            check_index(request.index)
        prepare, _ = self._episodes(request.request)
        return self.streams.reply(prepare(request.index), request.request.images)

    # ---- plain batches ---------------------------------------------------------------

    def stream_batches(self, request: pb.StreamBatchesRequest, end: StreamEnd) -> Iterator[Any]:
        split = split_from_wire(request.split, "split")
        images = images_from_wire(request.images)
        benchmark = parse_preset(request.preset)
        store = self.registry.get(request.source, images.size, images.resize.value)
        sampler = BatchSampler(self.registry.spec(store.name, benchmark), split, request.batch_size,
                               preset=benchmark.value)
        last_index = (messages.MAX_INDEX + 1) // sampler.batch_size - 1  # its last position fits an int64
        start, count, step = stream_window(request.start_index, request.count, request.index_step, last_index,
                                           f" (the last batch at batch_size {sampler.batch_size})")
        seed = request.seed
        self.streams.check_message(images, request.batch_size, f"batch_size {request.batch_size}")

        def prepare(index: int) -> Prepared:
            batch = sampler.sample(seed, index)
            header = pb.Batch(
                source=store.name, split=request.split, seed=seed, index=index, epoch=batch.epoch,
                fingerprint=batch.fingerprint, record_ids=batch.record_ids, num_classes=batch.num_classes,
                preset=benchmark.value,
            )
            messages.fill_tensor(header.labels, np.asarray(batch.labels, dtype=np.int64))
            return self.streams.prepared_images(header, store.name, images, [(IMAGES, list(batch.record_ids))])

        label = f"{store.name} {split.value} seed={seed} batch_size={request.batch_size}"
        yield from self.streams.stream(end, prepare, start, count, step, label, last_index)
