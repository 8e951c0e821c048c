"""Packed tensors on the wire with one copy of the pixels, in standard protobuf.

A message with large ``Tensor`` fields is written as the serialised small fields
followed by each tensor field spelled out by hand (tag, length, dtype, shape, then
the data as one length-delimited field). Protobuf parsers merge fields in any order,
so the bytes are an ordinary message any client can parse; but building them is a
single ``b"".join`` over the pixel buffers (no intermediate ``bytes``, no protobuf
copy), and ``split_tensors`` reads them back as zero-copy views of the received
buffer. Only length-delimited and varint fields occur at the top level of the
messages this is used for; anything else is rejected rather than guessed.

A tensor may instead name where its data lies in a shared-memory segment
(``Tensor.segment``, the same-host transport of ``wire.segments``): it is then written
and read with that reference and no data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from sampler_common.wire.segments import SegmentRef

_LENGTH_DELIMITED = 2
_VARINT = 0
_FIXED64 = 1
_FIXED32 = 5


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: memoryview, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


@dataclass(frozen=True)
class TensorField:
    """One tensor to append: field number in the outer message, Tensor dtype enum
    value, shape, and the data as buffers concatenated in order, or (``segment``
    set, ``buffers`` ignored) where the data lies in shared memory."""

    field: int
    dtype: int
    shape: Sequence[int]
    buffers: Sequence[bytes | memoryview]
    segment: SegmentRef | None = None

    @property
    def nbytes(self) -> int:
        return sum(len(b) if isinstance(b, bytes) else b.nbytes for b in self.buffers)


def _segment_bytes(segment: SegmentRef) -> bytes:
    name = segment.name.encode()
    body = varint((1 << 3) | _LENGTH_DELIMITED) + varint(len(name)) + name
    body += varint((2 << 3) | _VARINT) + varint(segment.offset) + varint((3 << 3) | _VARINT) + varint(segment.size)
    return varint((4 << 3) | _LENGTH_DELIMITED) + varint(len(body)) + body


def encode_with_tensors(header: Message, tensors: Iterable[TensorField]) -> bytes:
    parts: list[bytes | memoryview] = [header.SerializeToString()]
    for tensor in tensors:
        head = varint((1 << 3) | _VARINT) + varint(tensor.dtype)
        if tensor.shape:
            packed = b"".join(varint(int(d)) for d in tensor.shape)
            head += varint((2 << 3) | _LENGTH_DELIMITED) + varint(len(packed)) + packed
        if tensor.segment is not None:
            head += _segment_bytes(tensor.segment)
            parts.append(varint((tensor.field << 3) | _LENGTH_DELIMITED) + varint(len(head)) + head)
            continue
        size = tensor.nbytes
        head += varint((3 << 3) | _LENGTH_DELIMITED) + varint(size)
        parts.append(varint((tensor.field << 3) | _LENGTH_DELIMITED) + varint(len(head) + size) + head)
        parts.extend(tensor.buffers)
    return b"".join(parts)


@dataclass(frozen=True)
class RawTensor:
    """A tensor read back: its data as a view of the received buffer, or (``segment``
    set, ``data`` empty) where the data lies in shared memory."""

    dtype: int
    shape: tuple[int, ...]
    data: memoryview
    segment: SegmentRef | None = None


def _parse_segment(body: memoryview) -> SegmentRef:
    name, offset, size = "", 0, 0
    position = 0
    while position < len(body):
        key, position = _read_varint(body, position)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, position = _read_varint(body, position)
            if number == 2:
                offset = value
            elif number == 3:
                size = value
        elif wire == _LENGTH_DELIMITED:
            length, position = _read_varint(body, position)
            if number == 1:
                name = bytes(body[position : position + length]).decode("utf-8", "replace")
            position += length
        else:
            raise ValueError(f"unexpected wire type {wire} in a SharedSegment")
    return SegmentRef(name, offset, size)


def _parse_tensor(body: memoryview) -> RawTensor:
    dtype, shape, data, segment = 0, [], body[0:0], None
    position = 0
    while position < len(body):
        key, position = _read_varint(body, position)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, position = _read_varint(body, position)
            if number == 1:
                dtype = value
            elif number == 2:
                shape.append(value)
        elif wire == _LENGTH_DELIMITED:
            length, position = _read_varint(body, position)
            chunk = body[position : position + length]
            position += length
            if number == 2:
                inner = 0
                while inner < len(chunk):
                    value, inner = _read_varint(chunk, inner)
                    shape.append(value)
            elif number == 3:
                data = chunk
            elif number == 4:
                segment = _parse_segment(chunk)
        else:
            raise ValueError(f"unexpected wire type {wire} in a Tensor")
    return RawTensor(dtype, tuple(shape), data, segment)


def split_tensors(data: bytes, fields: frozenset[int]) -> tuple[bytes, dict[int, RawTensor]]:
    """(the message without those tensor fields, field -> tensor as views of ``data``)."""
    view = memoryview(data)
    rest: list[memoryview] = []
    tensors: dict[int, RawTensor] = {}
    position = 0
    while position < len(view):
        start = position
        key, position = _read_varint(view, position)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, position = _read_varint(view, position)
        elif wire == _LENGTH_DELIMITED:
            length, position = _read_varint(view, position)
            if number in fields:
                tensors[number] = _parse_tensor(view[position : position + length])
                position += length
                continue
            position += length
        elif wire == _FIXED64:
            position += 8
        elif wire == _FIXED32:
            position += 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
        if position > len(view):
            raise ValueError("truncated message")
        rest.append(view[start:position])
    return b"".join(rest), tensors
