"""Worker-side work for one record: read, check, derive, encode.

Runs in pool processes, so it takes and returns plain picklable values and never
raises for a bad input file: a problem comes back as ``Failed`` naming the file,
and the pipeline decides (``--on-error``) whether it stops the pack.

What is stored (``DeriveOptions.reference_encoding``, on for the Meta-Dataset
sources): the reference converter keeps an original file's bytes only when it is an
RGB JPEG it does not change; anything it derives (crop, inversion, bitmap row) or
that is not an RGB JPEG (PNG, PPM, grey or CMYK JPEG) it converts to RGB and writes
as a JPEG at PIL's default quality, 75. We store the same, so served pixels can
match its pixels. With ``lossless_derived`` (or for non-MD sources) derived images
are PNG instead and originals are kept whatever their format: no generation loss,
but not the reference's pixels. ``--raw-size`` records hold exactly what serving
the corresponding encoded record at that size gives (same decoder, same resize).
None of this enters the content fingerprint, which covers the derivation only.
"""

from __future__ import annotations

import functools
import hashlib
import io
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import DataLoss
from sampler_server.imaging import ResizeMethod
from sampler_server.pack.plan import SourceItem
from sampler_server.store.record import Encoding, Record, encode_record

_SINGLE_CHANNEL_MODES = {"1", "L", "LA", "I", "I;16", "F"}
_KEEP_FORMATS = {"JPEG": "JPEG", "PNG": "PNG", "PPM": "PPM"}
_NPY_CACHE: "OrderedDict[str, np.ndarray]" = OrderedDict()
_NPY_CACHE_SIZE = 4
REFERENCE_JPEG_QUALITY = 75  # PIL's default, which the reference converter saves with


@dataclass(frozen=True)
class DeriveOptions:
    max_side: int | None = None
    raw_size: int | None = None
    jpeg_quality: int = 95  # for --max-side re-encodes
    raw_resize: ResizeMethod = ResizeMethod.BILINEAR
    reference_encoding: bool = False
    lossless_derived: bool = False

    @property
    def as_reference(self) -> bool:
        return self.reference_encoding and not self.lossless_derived


@dataclass(frozen=True)
class Derived:
    record: Record
    origin: str
    derivation: str
    source_digest: bytes


@dataclass(frozen=True)
class Failed:
    origin: str
    path: str
    problem: str


class _BadInput(Exception):
    """A problem with one input file; becomes a ``Failed`` naming it."""


def _npy_rows(path: Path) -> np.ndarray:
    key = str(path)
    if key in _NPY_CACHE:
        _NPY_CACHE.move_to_end(key)
        return _NPY_CACHE[key]
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise _BadInput(f"not a readable .npy array ({error})") from None
    if array.ndim != 2 or array.dtype not in (np.uint8, np.bool_):
        raise _BadInput(f"expected a 2-D uint8 bitmap array, got shape {array.shape} dtype {array.dtype}")
    side = int(round(array.shape[1] ** 0.5))
    if side * side != array.shape[1]:
        raise _BadInput(f"rows of {array.shape[1]} values are not square bitmaps")
    _NPY_CACHE[key] = array
    if len(_NPY_CACHE) > _NPY_CACHE_SIZE:
        _NPY_CACHE.popitem(last=False)
    return array


def _read_source(item: SourceItem) -> tuple[bytes, Image.Image | None]:
    """(original bytes for the digest, an image when it came from a bitmap row)."""
    if item.data is not None:
        return item.data, None
    if item.derivation.npy_row is not None:
        rows = _npy_rows(item.path)
        row_index = item.derivation.npy_row
        if row_index >= rows.shape[0]:
            raise _BadInput(f"row {row_index} is past the end ({rows.shape[0]} rows)")
        row = np.asarray(rows[row_index])
        if row.dtype == np.bool_:
            row = row.astype(np.uint8) * 255
        side = int(round(row.shape[0] ** 0.5))
        return row.tobytes(), Image.fromarray(row.reshape(side, side), "L")
    try:
        return item.path.read_bytes(), None
    except FileNotFoundError:
        raise _BadInput("file not found") from None
    except OSError as error:
        raise _BadInput(f"cannot read ({error.strerror or error})") from None


def _open_checked(data: bytes) -> Image.Image:
    """Decode fully, so truncated or corrupt files are caught at pack time."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            image.load()
    except UnidentifiedImageError:  # its message shows a BytesIO's address: say what it means instead
        raise _BadInput("corrupt or truncated image, or not an image at all (no image format recognised)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning, Image.DecompressionBombError) as error:
        raise _BadInput(f"corrupt or truncated image ({error})") from None
    if image.format is None:
        raise _BadInput("unrecognised image format")
    return image


@functools.lru_cache(maxsize=4)
def _scale_table(scale: int) -> list[int]:
    """One band's lookup table for multiplying values by ``scale``, capped at 255."""
    return [min(255, value * scale) for value in range(256)]


def _channels(image: Image.Image) -> int:
    return 1 if image.mode in _SINGLE_CHANNEL_MODES else 3


def _clip_box(box: tuple[int, int, int, int], width: int, height: int) -> tuple[int, int, int, int]:
    left, upper, right, lower = box
    clipped = (max(0, left), max(0, upper), min(width, right), min(height, lower))
    if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
        raise _BadInput(f"crop box {box} lies outside the {width}x{height} image")
    return clipped


def _encode(image: Image.Image, file_format: str, quality: int) -> bytes:
    buffer = io.BytesIO()
    if file_format == "JPEG":
        if image.mode not in ("L", "RGB"):
            image = image.convert("L" if image.mode in _SINGLE_CHANNEL_MODES else "RGB")
        image.save(buffer, format="JPEG", quality=quality)
    elif file_format == "PPM":
        if image.mode not in ("L", "RGB"):
            image = image.convert("RGB")
        image.save(buffer, format="PPM")
    else:
        image.save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def derive_item(item: SourceItem, options: DeriveOptions) -> Derived | Failed:
    derivation = item.derivation
    try:
        data, bitmap = _read_source(item)
        digest = hashlib.sha256(data).digest()
        image = bitmap if bitmap is not None else _open_checked(data)
        source_format = "PNG" if bitmap is not None else str(image.format)
        metadata = {"origin": item.origin, **dict(item.metadata)}
        too_large = bool(options.max_side) and max(image.size) > options.max_side
        as_reference = options.as_reference and (
            derivation.changes_pixels or source_format != "JPEG" or image.mode != "RGB"
        )
        needs_pixels = derivation.changes_pixels or as_reference or too_large
        if not needs_pixels:
            encoding = Encoding.from_pil_format(source_format)
            record = Record(encoding, image.width, image.height, _channels(image), data, metadata)
        else:
            if as_reference:  # the reference converts to RGB first, then crops and inverts
                image = image.convert("RGB")
            if derivation.crop is not None:
                box = _clip_box(derivation.crop, image.width, image.height)
                image = image.crop(box)
                metadata["crop"] = list(box)
            if derivation.invert:
                image = ImageOps.invert(image.convert("L" if _channels(image) == 1 else "RGB"))
            if derivation.scale is not None:
                image = image.convert("L" if _channels(image) == 1 else "RGB")
                image = image.point(_scale_table(derivation.scale) * len(image.getbands()))
            if too_large:
                if image.mode in ("1", "P"):
                    image = image.convert("L" if image.mode == "1" else "RGB")
                scale = options.max_side / max(image.size)  # type: ignore[operator]
                new_size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
                image = image.resize(new_size, Image.Resampling.LANCZOS)
                out_format, quality = _KEEP_FORMATS.get(source_format, "PNG"), options.jpeg_quality
            elif as_reference:
                out_format, quality = "JPEG", REFERENCE_JPEG_QUALITY
            else:  # lossless: the derived pixels exactly
                out_format, quality = "PNG", options.jpeg_quality
            payload = _encode(image, out_format, quality)
            encoding = Encoding.from_pil_format(out_format)
            record = Record(encoding, image.width, image.height, _channels(image), payload, metadata)
        if options.raw_size:
            # what serving the encoded record at this size gives: same decoder, same resize
            pixels = record_pixels(encode_record(record), options.raw_size, options.raw_resize)
            size = options.raw_size
            record = Record(Encoding.RAW, size, size, 3, pixels.tobytes(), record.metadata)
        return Derived(record, item.origin, derivation.describe(), digest)
    except (_BadInput, DataLoss) as error:
        return Failed(item.origin, item.location, str(error))


def derive_batch(batch: list[tuple[int, SourceItem]], options: DeriveOptions) -> list[tuple[int, Derived | Failed]]:
    """Pool entry point: one round trip per batch keeps IPC overhead small."""
    return [(class_index, derive_item(item, options)) for class_index, item in batch]
