"""Stored record -> RGB pixels of a requested square size.

Paths, fastest first:
- RAW records at the requested size are a view of the stored bytes (no decode);
- JPEG is decoded by libjpeg-turbo (simplejpeg) at the smallest DCT scale whose
  output still covers the target in both dimensions (1/2, 1/4, 1/8 decodes cost a
  fraction of a full decode; shared/reference/performance.md), then resized;
- anything else through Pillow.
Resizing is ``imaging.resize_square``: bilinear without antialiasing by default (the
Meta-Dataset reference's), antialiased on request. The output is a pure function
of (record bytes, size, method, reduced_scale), whichever process computes it.
"""

from __future__ import annotations

import io

import numpy as np
import simplejpeg
from PIL import Image

from sampler_server.errors import DataLoss
from sampler_server.imaging import ResizeMethod, resize_square, to_rgb_array
from sampler_server.store.record import Encoding, read_header


def record_pixels(
    value: bytes | memoryview,
    size: int,
    method: ResizeMethod = ResizeMethod.BILINEAR,
    *,
    reduced_scale: bool = True,
) -> np.ndarray:
    """size x size x 3 uint8 pixels of one stored record value."""
    encoding, width, height, channels, offset = read_header(value)
    payload = memoryview(value)[offset:]
    if encoding is Encoding.RAW:
        pixels = np.frombuffer(payload, dtype=np.uint8).reshape(height, width, channels)
        if channels == 1:
            pixels = np.repeat(pixels, 3, axis=2)
    elif encoding is Encoding.JPEG:
        pixels = _decode_jpeg(payload, size if reduced_scale else 0)
    else:
        pixels = _decode_with_pillow(payload)
    return resize_square(pixels, size, method)


def _decode_jpeg(payload: memoryview, min_side: int) -> np.ndarray:
    try:
        return simplejpeg.decode_jpeg(
            payload, colorspace="RGB", min_height=min_side, min_width=min_side, strict=True
        )
    except ValueError:
        # damaged data (strict mode) or a layout libjpeg-turbo will not convert: Pillow
        # decodes what is decodable and raises DataLoss for the rest
        return _decode_with_pillow(payload, draft_side=min_side)


def _decode_with_pillow(payload: memoryview, draft_side: int = 0) -> np.ndarray:
    try:
        image = Image.open(io.BytesIO(payload))
        if draft_side and image.format == "JPEG":
            image.draft("RGB", (draft_side, draft_side))
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise DataLoss(f"cannot decode stored image ({error})") from None
    return to_rgb_array(image)


def decode_into(
    out: np.ndarray,
    values: list[bytes],
    method: ResizeMethod = ResizeMethod.BILINEAR,
    *,
    reduced_scale: bool = True,
) -> None:
    """Fill ``out`` (N x S x S x 3) with the decoded records, in order."""
    size = out.shape[1]
    for position, value in enumerate(values):
        out[position] = record_pixels(value, size, method, reduced_scale=reduced_scale)
