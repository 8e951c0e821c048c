"""Stored record -> RGB pixels of a requested square size.

By resize method:
- ``BILINEAR`` (default, the Meta-Dataset reference's pixels): JPEG is decoded at full
  size by libjpeg-turbo (simplejpeg) with the IFAST DCT, which is what TensorFlow's
  ``decode_jpeg`` uses by default (identical pixels; tests/fidelity), then resized
  on TF1's align-corners bilinear grid (``imaging.resize_align_corners``);
- ``FAST_BILINEAR``: JPEG is decoded at the smallest DCT scale whose output still
  covers the target in both dimensions (1/2, 1/4, 1/8 decodes cost a fraction of a
  full decode; shared/reference/performance.md), with the accurate DCT, then resized
  on the half-pixel grid. Faster on large JPEGs; its pixels are not the reference's
  (``bench/serve_bench.py`` prints how far);
- ``ANTIALIAS``: full-size IFAST decode, then PIL's antialiased bilinear.
- ``LEGACY_BILINEAR`` (VTAB's default, the VTAB reference's pixels): full-size IFAST
  decode (TFDS decodes with ``decode_jpeg``'s default), then bilinear on the legacy
  grid of ``tf.compat.v1.image.resize`` (``imaging.resize_legacy``), which
  task_adaptation's data_loader calls.
- ``TF2_BILINEAR``: the same decode, then TF2's half-pixel bilinear (``imaging``).
- ``SHORTER_BICUBIC_CENTER_CROP`` (ImageNet-CoG's): every encoding, JPEG included,
  is decoded by Pillow and converted to RGB, as the reference's
  ``Image.open(path).convert("RGB")`` does (Pillow's libjpeg-turbo with its default
  accurate DCT and fancy upsampling; CMYK and grey converted by Pillow), then the
  shorter side is resized to S with PIL's bicubic and the centre S x S cropped
  (``imaging.resize_shorter_center_crop``). Using Pillow for the decode too makes
  the pixels torchvision's by construction; simplejpeg with the accurate DCT gives
  the same RGB JPEG pixels (tests/fidelity/test_cog_preprocess.py) but would need
  a copy into a PIL image for the resize, which costs what it saves.
PNG and other formats are decoded by Pillow (lossless, so any decoder agrees), grey
replicated to RGB. RAW records are the stored pixels: the assembler serves them only
at the size and with the method they were packed with. The output is a pure function
of (record bytes, size, method), whichever process computes it.
"""

from __future__ import annotations

import io

import numpy as np
import simplejpeg
from PIL import Image

from sampler_server.errors import DataLoss
from sampler_server.imaging import (
    ResizeMethod,
    resize_align_corners,
    resize_legacy,
    resize_shorter_center_crop,
    resize_square,
    to_rgb_array,
    to_rgb_image,
)
from sampler_server.store.record import Encoding, read_header


def record_pixels(
    value: bytes | memoryview,
    size: int,
    method: ResizeMethod = ResizeMethod.BILINEAR,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """size x size x 3 uint8 pixels of one stored record value.

    Args:
        value: a stored record (header + payload).
        size: the side of the square output.
        method: the resize method (which also decides the JPEG decode, see above).
        out: a contiguous size x size x 3 uint8 array to fill (the default path then
            writes there without an intermediate copy).

    Returns:
        ``out`` if given, else a new array.
    """
    encoding, width, height, channels, offset = read_header(value)
    payload = memoryview(value)[offset:]
    if method is ResizeMethod.SHORTER_BICUBIC_CENTER_CROP and encoding is not Encoding.RAW:
        image = to_rgb_image(_open_with_pillow(payload))
        return resize_shorter_center_crop(image, size, out)
    if encoding is Encoding.RAW:
        pixels = np.frombuffer(payload, dtype=np.uint8).reshape(height, width, channels)
        if channels == 1:
            pixels = np.repeat(pixels, 3, axis=2)
    elif encoding is Encoding.JPEG:
        fast = method is ResizeMethod.FAST_BILINEAR
        pixels = _decode_jpeg(payload, min_side=size if fast else 0, fastdct=not fast)
    else:
        pixels = _decode_with_pillow(payload)
    if pixels.shape[:2] != (size, size):  # the remap grids write into ``out`` directly
        if method is ResizeMethod.BILINEAR:
            return resize_align_corners(pixels, size, out)
        if method is ResizeMethod.LEGACY_BILINEAR:
            return resize_legacy(pixels, size, out)
    resized = resize_square(pixels, size, method)
    if out is None:
        return resized
    out[...] = resized
    return out


def _decode_jpeg(payload: memoryview, min_side: int, fastdct: bool) -> np.ndarray:
    try:
        return simplejpeg.decode_jpeg(
            payload, colorspace="RGB", fastdct=fastdct, min_height=min_side, min_width=min_side, strict=True
        )
    except ValueError:
        # damaged data (strict mode) or a layout libjpeg-turbo will not convert (CMYK):
        # Pillow decodes what is decodable (with its own DCT, so not bit-exact with the
        # reference) and raises DataLoss for the rest
        return _decode_with_pillow(payload, draft_side=min_side)


def _decode_with_pillow(payload: memoryview, draft_side: int = 0) -> np.ndarray:
    return to_rgb_array(_open_with_pillow(payload, draft_side))


def _open_with_pillow(payload: memoryview, draft_side: int = 0) -> Image.Image:
    """The decoded image in the file's own mode (DataLoss if it cannot be decoded)."""
    try:
        image = Image.open(io.BytesIO(payload))
        if draft_side and image.format == "JPEG":
            image.draft("RGB", (draft_side, draft_side))
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise DataLoss(f"cannot decode stored image ({error})") from None
    return image
