"""Conversions between wire messages and core values (no I/O, no gRPC calls).

Validation of wire-level fields happens here and raises the project's errors with
the field's wire name; the status mapping turns them into gRPC codes.

Pixel replies go where the stream building them says: ``pixels_to(sink)`` around the
build puts them in a same-host sink (``service.shared_memory``: a shared-memory segment
the reply names); without one, or when the sink has no room, they are in the message.
The handlers of every protocol build replies through ``pixels_reply``, so each of
their streams gets the same-host transport without knowing of it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from sampler_server.assembly.assembler import PendingImages
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.episode import Episode
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument
from sampler_server.imaging import ResizeMethod
from sampler_server.store.record import Encoding
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.tensors import TensorField, encode_with_tensors

DEFAULT_IMAGE_SIZE = 84
MAX_IMAGE_SIZE = 1024
MAX_INDEX = 2**63 - 1

_SPLITS = {pb.SPLIT_TRAIN: Split.TRAIN, pb.SPLIT_VALID: Split.VALID, pb.SPLIT_TEST: Split.TEST}
_SPLITS_BACK = {value: key for key, value in _SPLITS.items()}
_RESIZE = {
    pb.RESIZE_METHOD_UNSPECIFIED: ResizeMethod.BILINEAR,
    pb.RESIZE_METHOD_BILINEAR: ResizeMethod.BILINEAR,
    pb.RESIZE_METHOD_ANTIALIAS: ResizeMethod.ANTIALIAS,
    pb.RESIZE_METHOD_FAST_BILINEAR: ResizeMethod.FAST_BILINEAR,
    pb.RESIZE_METHOD_TF2_BILINEAR: ResizeMethod.TF2_BILINEAR,
    pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP: ResizeMethod.SHORTER_BICUBIC_CENTER_CROP,
    pb.RESIZE_METHOD_LEGACY_BILINEAR: ResizeMethod.LEGACY_BILINEAR,
}
_RESIZE_BACK = {method: code for code, method in _RESIZE.items() if code != pb.RESIZE_METHOD_UNSPECIFIED}
_ENCODINGS = {
    Encoding.RAW: pb.ENCODING_RAW,
    Encoding.JPEG: pb.ENCODING_JPEG,
    Encoding.PNG: pb.ENCODING_PNG,
    Encoding.PPM: pb.ENCODING_PPM,
}
_DTYPES = {np.dtype(np.uint8): pb.DTYPE_UINT8, np.dtype(np.int32): pb.DTYPE_INT32,
           np.dtype(np.int64): pb.DTYPE_INT64, np.dtype(np.float32): pb.DTYPE_FLOAT32}
_CONFIG_FIELDS = (
    "num_ways", "num_support", "num_query", "min_ways", "max_ways_upper_bound", "max_num_query",
    "max_support_set_size", "max_support_size_contrib_per_class", "min_log_weight", "max_log_weight",
    "min_examples_in_class", "ignore_hierarchy_probability", "max_span_leaves",
)


def split_from_wire(value: int, field: str = "split") -> Split:
    if value not in _SPLITS:
        raise InvalidArgument(f"{field}: got {pb.Split.Name(value) if value in pb.Split.values() else value}, "
                              "expected SPLIT_TRAIN, SPLIT_VALID or SPLIT_TEST")
    return _SPLITS[value]


def split_to_wire(split: Split | None) -> int:
    return _SPLITS_BACK[split] if split is not None else pb.SPLIT_UNSPECIFIED


def config_from_wire(message: pb.EpisodeConfig) -> EpisodeConfig:
    kwargs = {name: getattr(message, name) for name in _CONFIG_FIELDS if message.HasField(name)}
    return EpisodeConfig(all_classes=message.all_classes, **kwargs)


def config_to_wire(config: EpisodeConfig) -> pb.EpisodeConfig:
    message = pb.EpisodeConfig(all_classes=config.all_classes)
    defaults = EpisodeConfig()
    for name in _CONFIG_FIELDS:
        value = getattr(config, name)
        if value is not None and value != getattr(defaults, name):
            setattr(message, name, value)
    return message


@dataclass(frozen=True)
class ImageRequest:
    size: int
    encoded: bool
    resize: ResizeMethod


def images_from_wire(message: pb.ImageOptions) -> ImageRequest:
    size = message.image_size or DEFAULT_IMAGE_SIZE
    if not 1 <= size <= MAX_IMAGE_SIZE:
        raise InvalidArgument(f"images.image_size: got {size}, expected 1 to {MAX_IMAGE_SIZE} (0 = {DEFAULT_IMAGE_SIZE})")
    if message.mode not in (pb.IMAGE_MODE_UNSPECIFIED, pb.IMAGE_MODE_DECODED, pb.IMAGE_MODE_ENCODED):
        raise InvalidArgument(f"images.mode: got {message.mode}, expected IMAGE_MODE_DECODED or IMAGE_MODE_ENCODED")
    if message.resize not in _RESIZE:
        allowed = [pb.ResizeMethod.Name(code) for code in _RESIZE_BACK.values()]
        raise InvalidArgument(f"images.resize: got {message.resize}, "
                              f"expected {', '.join(allowed[:-1])} or {allowed[-1]}")
    return ImageRequest(size, message.mode == pb.IMAGE_MODE_ENCODED, _RESIZE[message.resize])


def raw_resize_to_wire(pack_options: dict[str, Any]) -> int:
    """How a raw store's pixels were resized at pack time (UNSPECIFIED for encoded stores
    and for raw stores packed before the method was recorded)."""
    value = pack_options.get("raw_resize")
    if not pack_options.get("raw_size") or not value:
        return pb.RESIZE_METHOD_UNSPECIFIED
    try:
        return _RESIZE_BACK[ResizeMethod(value)]
    except ValueError:
        return pb.RESIZE_METHOD_UNSPECIFIED


def tensor(array: np.ndarray) -> pb.Tensor:
    message = pb.Tensor()
    fill_tensor(message, array)
    return message


def fill_tensor(target: pb.Tensor, array: np.ndarray) -> None:
    """Write in place: no intermediate message, so the pixels are copied once less."""
    array = np.ascontiguousarray(array)
    target.dtype = _DTYPES[array.dtype]
    target.shape[:] = list(array.shape)
    target.data = array.tobytes()


def encoded_images(items: list[tuple[bytes, Encoding, int, int, int]]) -> pb.EncodedImages:
    return pb.EncodedImages(
        data=[bytes(payload) for payload, *_ in items],
        encoding=[_ENCODINGS.get(encoding, pb.ENCODING_OTHER) for _, encoding, *_ in items],
        width=[width for _, _, width, _, _ in items],
        height=[height for *_, height, _ in items],
        channels=[channels for *_, channels in items],
    )


def episode_labels(episode: Episode) -> tuple[np.ndarray, np.ndarray]:
    support = np.repeat(np.arange(episode.ways, dtype=np.int64), episode.shots)
    query = np.repeat(np.arange(episode.ways, dtype=np.int64), [len(q) for q in episode.query])
    return support, query


def episode_header(episode: Episode, class_names: list[str], class_wnids: list[str | None],
                   images: ImageRequest) -> pb.Episode:
    """Everything but the pixels: composition, labels, provenance."""
    support_labels, query_labels = episode_labels(episode)
    message = pb.Episode(
        source=episode.source,
        split=split_to_wire(episode.split),
        seed=episode.seed,
        index=episode.index,
        fingerprint=episode.fingerprint,
        store_fingerprint=episode.store_fingerprint,
        config_hash=episode.config_hash,
        classes=[
            pb.EpisodeClass(
                class_id=class_id,
                name=class_names[class_id],
                wnid=class_wnids[class_id] or "",
                num_support=len(episode.support[label]),
                num_query=len(episode.query[label]),
            )
            for label, class_id in enumerate(episode.class_ids)
        ],
        support_record_ids=[r for ids in episode.support for r in ids],
        query_record_ids=[r for ids in episode.query for r in ids],
        image_size=images.size,
        resize=_RESIZE_BACK[images.resize],
    )
    fill_tensor(message.support_labels, support_labels)
    fill_tensor(message.query_labels, query_labels)
    return message


SUPPORT_IMAGES = pb.Episode.DESCRIPTOR.fields_by_name["support_images"].number
QUERY_IMAGES = pb.Episode.DESCRIPTOR.fields_by_name["query_images"].number
BATCH_IMAGES = pb.Batch.DESCRIPTOR.fields_by_name["images"].number


class PixelSink(Protocol):
    def reply(self, header: Any, tensors: Sequence[TensorField]) -> bytes | None:
        """The serialised reply with ``tensors`` placed elsewhere, or None to send them in it."""


_SINK: contextvars.ContextVar[PixelSink | None] = contextvars.ContextVar("pixel_sink", default=None)


@contextlib.contextmanager
def pixels_to(sink: PixelSink | None) -> Iterator[None]:
    """Pixel replies built inside go to ``sink`` (None: in the message)."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def pixels_reply(header: Any, fields: list[int], pending: PendingImages, counts: list[int], size: int) -> bytes:
    """Serialised ``header`` plus its pixel tensors, each image group copied once (into
    the message, or into the current sink's shared memory)."""
    try:
        groups = pending.pieces(counts)
        tensors = [
            TensorField(field, pb.DTYPE_UINT8, (count, size, size, 3), group)
            for field, count, group in zip(fields, counts, groups)
        ]
        sink = _SINK.get()
        if sink is not None:
            reply = sink.reply(header, tensors)
            if reply is not None:
                return reply
        return encode_with_tensors(header, tensors)
    finally:
        pending.release()
