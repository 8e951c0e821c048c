"""Record value layout (version 1).

    offset size  field
    0      2     magic b"SR"
    2      1     layout version (1)
    3      1     encoding (Encoding)
    4      4     width  (uint32, big-endian)
    8      4     height (uint32)
    12     1     channels (1 or 3; for encoded images: as the file decodes)
    13     4     metadata length M (uint32)
    17     M     metadata: UTF-8 JSON object, sorted keys ({} when empty)
    17+M   ...   payload: the encoded file bytes, or raw uint8 pixels H x W x C

Metadata carries what label derivations need (bounding boxes, object
attributes) and where the record came from (``origin``), so a corrupt record can be
named. The layout is fixed-width up front so a reader can slice the payload without
parsing JSON.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from sampler_server.errors import DataLoss

MAGIC = b"SR"
LAYOUT_VERSION = 1
_HEADER = struct.Struct(">2sBBIIBI")
HEADER_SIZE = _HEADER.size


class Encoding(enum.IntEnum):
    """How the payload is stored. RAW is uint8 H x W x C pixels."""

    RAW = 0
    JPEG = 1
    PNG = 2
    PPM = 3
    BMP = 4
    GIF = 5
    TIFF = 6
    WEBP = 7

    @classmethod
    def from_pil_format(cls, pil_format: str | None) -> "Encoding":
        mapping = {
            "JPEG": cls.JPEG,
            "MPO": cls.JPEG,
            "PNG": cls.PNG,
            "PPM": cls.PPM,
            "BMP": cls.BMP,
            "GIF": cls.GIF,
            "TIFF": cls.TIFF,
            "WEBP": cls.WEBP,
        }
        if pil_format not in mapping:
            raise DataLoss(f"unsupported image format {pil_format!r}; allowed: {sorted(mapping)}")
        return mapping[pil_format]

    @property
    def pil_format(self) -> str:
        if self is Encoding.RAW:
            raise ValueError("RAW records have no file format")
        return self.name


@dataclass(frozen=True)
class Record:
    """One stored example: image payload plus label-side metadata."""

    encoding: Encoding
    width: int
    height: int
    channels: int
    payload: bytes
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        return str(self.metadata.get("origin", "?"))


def encode_record(record: Record) -> bytes:
    meta = json.dumps(record.metadata, sort_keys=True, separators=(",", ":")).encode("utf-8")
    header = _HEADER.pack(
        MAGIC,
        LAYOUT_VERSION,
        int(record.encoding),
        record.width,
        record.height,
        record.channels,
        len(meta),
    )
    return b"".join((header, meta, record.payload))


def read_header(value: bytes | memoryview) -> tuple[Encoding, int, int, int, int]:
    """(encoding, width, height, channels, payload offset), without copying the payload."""
    if len(value) < HEADER_SIZE:
        raise DataLoss(f"record of {len(value)} bytes is shorter than its {HEADER_SIZE}-byte header")
    magic, version, encoding, width, height, channels, meta_len = _HEADER.unpack_from(value, 0)
    if magic != MAGIC:
        raise DataLoss(f"record has magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != LAYOUT_VERSION:
        raise DataLoss(f"record layout version {version} is not supported (this build reads {LAYOUT_VERSION})")
    try:
        encoding_enum = Encoding(encoding)
    except ValueError:
        raise DataLoss(f"record has unknown encoding code {encoding}") from None
    offset = HEADER_SIZE + meta_len
    if offset > len(value):
        raise DataLoss("record metadata runs past the end of the record")
    if encoding_enum is Encoding.RAW and len(value) - offset != width * height * channels:
        raise DataLoss(
            f"raw record holds {len(value) - offset} pixel bytes, expected {width}x{height}x{channels}"
        )
    return encoding_enum, width, height, channels, offset


def decode_record(value: bytes | memoryview) -> Record:
    encoding, width, height, channels, offset = read_header(value)
    meta_bytes = bytes(value[HEADER_SIZE:offset])
    try:
        metadata = json.loads(meta_bytes.decode("utf-8")) if meta_bytes else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataLoss(f"record metadata is not valid JSON: {error}") from None
    return Record(encoding, width, height, channels, bytes(value[offset:]), metadata)


def record_key(record_id: int) -> bytes:
    """Fixed-width big-endian key: LMDB's byte order equals id order."""
    return record_id.to_bytes(8, "big")
