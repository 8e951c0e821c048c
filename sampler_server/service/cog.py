"""ImageNet-CoG handlers behind the one servicer: the levels, a level split, its images in order.

The servicer delegates its CoG RPCs here; this module only unpacks requests, asks the
pure core (``core.cog.levels`` for the levels, ``core.cog.splits`` for the splits) over
the served stores' manifests, and packs replies through the servicer's shared stream
machinery (admission, lookahead and send budgets, ``Prepared``), so CoG streams are
bounded exactly as the others are. Levels L1..L5 come from the served IN-21K source's
class counts (all its shards as one store) and are cached per (store content,
level_size, min_images): computing them walks WordNet. Splits hold only ids and labels
(16 bytes per image) and are cached in a small LRU. ``sampler-server cog split``
computes the same split from the same manifests, so fingerprints agree.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from sampler_server.core.cog import LEVEL_NAMES, SEEN_LEVEL, SOURCE
from sampler_server.core.cog.splits import (
    SEEN_SOURCE,
    CogSplit,
    SplitRequest,
    batch_fingerprint,
    build_split,
    held_out_test,
    level_config,
    level_source,
    missing_store,
    num_batches,
    records_by_wnid,
    seen_concepts,
    seen_sizes,
    split_sizes,
)
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from sampler_server.service import messages
from sampler_server.service.cog_files import CogFiles
from sampler_server.service.registry import ServedStore
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

if TYPE_CHECKING:
    from sampler_server.service.servicer import Prepared, SamplerServicer

DEFAULT_IMAGE_SIZE = 224  # the CoG reference's
DEFAULT_BATCH = 256
MAX_BATCH = 4096
SPLIT_CACHE = 8  # a trainer works on one level at a time: its train, val and test splits
LEVELS_CACHE = 4  # level configurations kept (a request may name any: the cache stays bounded)
COG_BATCH_IMAGES = pb.CogBatch.DESCRIPTOR.fields_by_name["images"].number


def images_from_wire(message: pb.ImageOptions) -> messages.ImageRequest:
    """CoG's defaults where the request leaves them: 224 px, shorter side bicubic + centre crop."""
    options = pb.ImageOptions()
    options.CopyFrom(message)
    if not options.image_size:
        options.image_size = DEFAULT_IMAGE_SIZE
    if options.resize == pb.RESIZE_METHOD_UNSPECIFIED:
        options.resize = pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP
    return messages.images_from_wire(options)


class CogHandlers:
    """The CoG RPCs of one servicer (its registry, assembler and stream machinery)."""

    def __init__(self, servicer: "SamplerServicer") -> None:
        self.servicer = servicer
        self._lock = threading.Lock()
        self._levels: collections.OrderedDict[tuple[str, int, int], Any] = collections.OrderedDict()
        self._splits: collections.OrderedDict[tuple[Any, ...], CogSplit] = collections.OrderedDict()
        self.files = CogFiles(servicer.registry.data_dir)  # naver/cog's level and split files (L1..L5)

    # ---- stores, levels and splits ----------------------------------------------------

    def _store(self, source: str) -> ServedStore | None:
        """The served store of a source kind (IN-21K: all shards as one), None if none is.
        A store quarantined is FAILED_PRECONDITION, as for every other request."""
        try:
            return self.servicer.registry.get(source)
        except NotFound:
            return None

    def _levels_of(self, store: ServedStore, level_size: int, min_images: int) -> Any:
        key = (store.manifest.fingerprint, level_size, min_images)
        with self._lock:
            cached = self._levels.get(key)
            if cached is not None:
                self._levels.move_to_end(key)
        if cached is None:
            from sampler_server.core.cog.levels import compute_levels

            counts = {c.wnid: c.count for c in store.manifest.classes if c.wnid}
            cached = compute_levels(counts, level_size=level_size, min_images=min_images,
                                    source=f"store {store.name}")
            with self._lock:
                self._levels[key] = cached
                while len(self._levels) > LEVELS_CACHE:
                    self._levels.popitem(last=False)
        return cached

    def split(self, message: pb.CogSplitRequest) -> tuple[CogSplit, ServedStore]:
        """The split a request names, and the store serving its images."""
        level_size, min_images = level_config(message.level_size, message.min_images)
        request = SplitRequest.parse(message.level, message.split, message.shots, message.seed)
        store = self._store(level_source(request.level))
        if store is None:
            raise missing_store(request.level, "the server")
        if request.level != SEEN_LEVEL and (message.levels_file or message.concepts_split_file):
            files = self.files.load(message.levels_file, message.concepts_split_file)
            assert files is not None
            return self.files.split(store, files, request), store
        manifest = store.manifest
        # IN-1K tests on the store's validation partition: none is FAILED_PRECONDITION, never train images
        held_out = held_out_test(manifest, store.name) if request.level == SEEN_LEVEL else None
        key = (store.name, store.manifest.fingerprint, held_out and held_out.fingerprint, request, level_size,
               min_images)
        with self._lock:
            if key in self._splits:
                self._splits.move_to_end(key)
                return self._splits[key], store
        if request.level == SEEN_LEVEL:
            concepts = seen_concepts(manifest.classes)
        else:
            concepts = self._levels_of(store, level_size, min_images).level(request.level).concepts
        split = build_split(manifest.fingerprint, records_by_wnid(manifest.classes), concepts, request,
                            level_size=level_size, min_images=min_images, held_out=held_out)
        with self._lock:
            self._splits[key] = split
            while len(self._splits) > SPLIT_CACHE:
                self._splits.popitem(last=False)
        return split, store

    # ---- RPCs ------------------------------------------------------------------------

    def list_levels(self, request: pb.ListCogLevelsRequest) -> pb.ListCogLevelsResponse:
        level_size, min_images = level_config(request.level_size, request.min_images)
        response = pb.ListCogLevelsResponse(level_size=level_size, min_images=min_images)
        ilsvrc, in21k = self._store(SEEN_SOURCE), self._store(SOURCE)
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
        files = self.files.load(request.levels_file, request.concepts_split_file)
        if in21k is not None and files is not None:  # the levels file's concepts, not ours
            summaries, response.levels_fingerprint = self.files.summaries(in21k, files)
            response.level_size = response.min_images = 0
            for summary in summaries:
                response.levels.append(pb.CogLevelSummary(**summary, store=in21k.name,
                                                          store_fingerprint=in21k.manifest.fingerprint))
        elif in21k is not None:
            levels = self._levels_of(in21k, level_size, min_images)
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

    def _batch_images(self, header: pb.CogBatch, store: str, ids: list[int],
                      images: messages.ImageRequest) -> "Prepared":
        from sampler_server.service.servicer import Prepared

        assembler = self.servicer.assembler
        if not ids:  # the one batch of an empty split: nothing to read
            messages.fill_tensor(header.images, np.zeros((0, images.size, images.size, 3), np.uint8))

            def nothing() -> tuple[Callable[[], bytes], None, int]:
                return header.SerializeToString, None, header.ByteSize()

            return Prepared(header, 0, nothing)
        if images.encoded:
            def read() -> tuple[Callable[[], bytes], None, int]:
                header.encoded.CopyFrom(messages.encoded_images(assembler.encoded(store, ids)))
                return header.SerializeToString, None, header.ByteSize()

            return Prepared(header, self.servicer._record_bytes(store) * len(ids), read)
        pixel_bytes = len(ids) * images.size * images.size * 3

        def decode() -> tuple[Callable[[], bytes], Any, int]:
            pending = assembler.submit(store, ids, images.size, images.resize)
            return (lambda: messages.pixels_reply(header, [COG_BATCH_IMAGES], pending, [len(ids)], images.size)), \
                pending, pixel_bytes

        return Prepared(header, pixel_bytes, decode)

    def stream_batches(self, request: pb.StreamCogBatchesRequest, end: Any) -> Iterator[Any]:
        from sampler_server.service.servicer import _stream_window

        images = images_from_wire(request.images)
        batch_size = request.batch_size or DEFAULT_BATCH
        if not 1 <= batch_size <= MAX_BATCH:
            raise InvalidArgument(f"batch_size: got {batch_size}, expected 1 to {MAX_BATCH} (0 = {DEFAULT_BATCH})")
        limit = self.servicer.limits.max_message_bytes
        if not images.encoded and batch_size * images.size * images.size * 3 > limit:
            raise ResourceExhausted(f"batch_size {batch_size} at image_size {images.size} needs "
                                    f"{batch_size * images.size * images.size * 3} bytes; the server's message "
                                    f"limit is {limit}")
        split, store = self.split(request.split)
        name = store.name
        self.servicer.registry.get(name, images.size, images.resize.value)  # quarantined: FAILED_PRECONDITION
        batches = num_batches(split.size, batch_size)
        last_index = batches - 1
        count = request.count or max(1, batches - request.start_index)
        start, count, step = _stream_window(request.start_index, count, 1, last_index,
                                            f" (the last batch of {split.size} images at batch_size {batch_size})")
        resize = messages._RESIZE_BACK[images.resize]

        def prepare(index: int) -> "Prepared":
            ids = split.record_ids[index * batch_size: (index + 1) * batch_size]
            labels = split.labels[index * batch_size: (index + 1) * batch_size]
            header = pb.CogBatch(
                level=split.level, split=split.split, shots=split.shots, seed=split.seed, index=index,
                record_ids=ids.tolist(), num_classes=split.num_classes, split_size=split.size,
                split_fingerprint=split.fingerprint, fingerprint=batch_fingerprint(split.fingerprint, index, ids, labels),
                last=index == last_index, store=name, image_size=images.size, resize=resize,
            )
            messages.fill_tensor(header.labels, labels.astype(np.int64))
            return self._batch_images(header, name, ids.tolist(), images)

        shots = f" {split.shots}-shot seed={split.seed}" if split.shots else (f" seed={split.seed}" if split.seed else "")
        label = f"cog {split.level} {split.split}{shots} batch_size={batch_size}"
        yield from self.servicer._stream(end, prepare, start, count, step, label, last_index)


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

