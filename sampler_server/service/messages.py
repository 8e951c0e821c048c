"""Replies as wire messages: tensors, encoded images, episode headers, pixel replies
(no I/O, no gRPC calls). Requests are read into core values by ``catalog.wire_values``.

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
from typing import Any, Protocol

import numpy as np

from sampler_server.assembly.assembler import PendingImages
from sampler_server.catalog.wire_values import ImageRequest, resize_to_wire, split_to_wire
from sampler_server.core.md.episode import Episode
from sampler_server.imaging import ResizeMethod
from sampler_server.store.record import Encoding
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.tensors import TensorField, encode_with_tensors

MAX_INDEX = 2**63 - 1

_ENCODINGS = {
    Encoding.RAW: pb.ENCODING_RAW,
    Encoding.JPEG: pb.ENCODING_JPEG,
    Encoding.PNG: pb.ENCODING_PNG,
    Encoding.PPM: pb.ENCODING_PPM,
}
_DTYPES = {np.dtype(np.uint8): pb.DTYPE_UINT8, np.dtype(np.int32): pb.DTYPE_INT32,
           np.dtype(np.int64): pb.DTYPE_INT64, np.dtype(np.float32): pb.DTYPE_FLOAT32}


def raw_resize_to_wire(pack_options: dict[str, Any]) -> int:
    """How a raw store's pixels were resized at pack time (UNSPECIFIED for encoded stores
    and for raw stores packed before the method was recorded)."""
    value = pack_options.get("raw_resize")
    if not pack_options.get("raw_size") or not value:
        return pb.RESIZE_METHOD_UNSPECIFIED
    try:
        return resize_to_wire(ResizeMethod(value))
    except ValueError:
        return pb.RESIZE_METHOD_UNSPECIFIED


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
        resize=resize_to_wire(images.resize),
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
