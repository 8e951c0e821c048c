"""Pixel operations shared by packing and serving.

The default resize (``ResizeMethod.BILINEAR``) is the Meta-Dataset reference's: TF1
``tf.compat.v1.image.resize_images(..., BILINEAR, align_corners=True)``, bilinear
WITHOUT antialiasing on the align-corners grid, where output pixel ``i`` samples
source coordinate ``i * (in - 1) / (out - 1)`` (TensorFlow computes that product in
float32, as we do). That is NOT the half-pixel grid of TF2's ``tf.image.resize`` or
OpenCV's ``INTER_LINEAR`` (``(i + 0.5) * in / out - 0.5``): on ~300 px textures at
84 px the half-pixel grid is 6.4 levels off on average, max 55.

We sample the align-corners grid with ``cv2.remap`` and float32 coordinate maps
(cached per input shape and size). OpenCV 5 interpolates float maps in float (no
1/32-pixel quantisation; fixed-point ``CV_16SC2`` maps would be up to 7 levels off on
hard edges), and rounds to the nearest uint8, ties to even. The reference keeps the
float and rescales it to [-1, 1]; our uint8 is that float rounded, so within 0.5 level
(tests/fidelity checks at most 1 level against TensorFlow itself).

Other methods, each named in every episode that uses it:
- ``FAST_BILINEAR``: OpenCV ``INTER_LINEAR`` on the half-pixel grid (after a
  reduced-scale JPEG decode, see ``assembly.decode``): faster, other pixels.
- ``ANTIALIAS``: PIL's bilinear filter widened by the scale factor when downscaling.
- ``LEGACY_BILINEAR``: the VTAB reference's pixels. task_adaptation's
  ``data_loader.preprocess_fn`` imports ``tensorflow.compat.v1`` and calls
  ``tf.image.resize(image, [s, s])``, which there is TF1 ``resize_images``: bilinear,
  no antialiasing, no align_corners and no half-pixel centres, so output pixel ``i``
  samples source coordinate ``i * (in / out)`` (TensorFlow computes ``in / out`` and
  the product in float32, as we do; see ../shared/reference/vtab.md, Preprocessing).
  Upscaling, the last coordinates fall past ``in - 1``; TF clamps the upper index
  there, which ``BORDER_REPLICATE`` reproduces. Sampled with ``cv2.remap`` on cached
  float32 maps, as for ``BILINEAR``, after a full decode; within 1 level of TF.
- ``TF2_BILINEAR``: TF2's ``tf.image.resize(image, [s, s])`` (half-pixel centres, no
  antialiasing) after a full decode: what a TF2 port of the VTAB loader would give,
  not the reference's grid (4 to 69 levels off it on average on the textured
  images of tests/fidelity/test_vtab_resize.py, by shape and size).
  OpenCV's ``INTER_LINEAR`` samples that same grid without antialiasing; its 11-bit
  fixed-point weights keep the uint8 within 1 level of TF's float result.
- ``SHORTER_BICUBIC_CENTER_CROP``: the ImageNet-CoG reference's torchvision
  ``Resize(S, BICUBIC)`` then ``CenterCrop(S)`` on a PIL image opened with
  ``.convert("RGB")``: the shorter side becomes S and the longer
  ``int(S * long / short)`` (torchvision's truncation), resized with PIL's bicubic
  (antialiased when downscaling, as torchvision always is on PIL images), then the
  S x S centre at torchvision's offsets ``int(round((side - S) / 2.0))`` (Python's
  round, ties to even). Since the shorter side is S the crop never pads. We call
  the same PIL ``resize`` on the same RGB image, so the pixels are torchvision's
  exactly (tests/fidelity/test_cog_preprocess.py). A resize with a ``box`` (only
  the cropped part) would be cheaper but is not the same: PIL takes the box in
  float32 and shifts every tap, up to 26 levels off on noise.

Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import enum
import functools

import cv2
import numpy as np
from PIL import Image

cv2.setNumThreads(1)  # parallelism comes from worker processes, not OpenCV threads


class ResizeMethod(str, enum.Enum):
    BILINEAR = "bilinear"  # the MD reference's: full IFAST decode + TF1 align-corners bilinear (default)
    ANTIALIAS = "antialias"  # PIL bilinear with antialiasing when downscaling
    FAST_BILINEAR = "fast_bilinear"  # reduced-scale decode + half-pixel bilinear: faster, other pixels
    TF2_BILINEAR = "tf2_bilinear"  # full decode + TF2 tf.image.resize bilinear (half-pixel grid)
    SHORTER_BICUBIC_CENTER_CROP = "shorter_bicubic_center_crop"  # CoG's: PIL decode, torchvision Resize + CenterCrop
    LEGACY_BILINEAR = "legacy_bilinear"  # VTAB's: full decode + tf.compat.v1.image.resize (legacy grid)


def to_rgb_image(image: Image.Image) -> Image.Image:
    """The image in mode RGB, whatever the file's mode (palette, grey, 1-bit, CMYK, alpha).

    Grey is replicated to three channels, as ``decode_image(..., channels=3)`` does;
    alpha is dropped (not composited), as it does. For every mode a file opens in
    this equals PIL's own ``image.convert("RGB")`` (the CoG reference's), 16-bit,
    32-bit and float grey included: both clamp to 0..255.
    """
    if image.mode != "RGB":
        if image.mode in ("1", "I", "I;16", "F"):
            image = image.convert("L")
        image = image.convert("RGB")
    return image


def to_rgb_array(image: Image.Image) -> np.ndarray:
    """H x W x 3 uint8 pixels of ``to_rgb_image(image)``."""
    return np.asarray(to_rgb_image(image), dtype=np.uint8)


def shorter_side_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(height, width) after torchvision's ``Resize(size)``: the shorter side becomes
    ``size``, the longer ``int(size * long / short)``, truncated in float as torchvision
    computes it (so the aspect ratio is kept to within one pixel, never rounded up)."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


def center_crop_offsets(height: int, width: int, size: int) -> tuple[int, int]:
    """(top, left) of torchvision's ``CenterCrop(size)`` in a height x width image that
    is at least size x size: ``int(round((side - size) / 2.0))``, ties to even."""
    return int(round((height - size) / 2.0)), int(round((width - size) / 2.0))


def resize_shorter_center_crop(image: Image.Image, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """size x size x C uint8: the CoG reference's ``Resize(size, BICUBIC)`` +
    ``CenterCrop(size)`` of a PIL image in mode RGB or L (C = 3 or 1).

    The whole image is resized, as torchvision does (see the module docstring for
    why a cropped resize would not be the same pixels). ``out`` (size x size x C
    uint8) receives the result; else a new writable array is returned."""
    if image.mode not in ("RGB", "L"):
        raise ValueError(f"resize_shorter_center_crop: got a {image.mode} image, expected RGB or L")
    new_height, new_width = shorter_side_size(image.height, image.width, size)
    if (new_height, new_width) != (image.height, image.width):  # torchvision skips a no-op resize
        image = image.resize((new_width, new_height), Image.Resampling.BICUBIC)
    top, left = center_crop_offsets(new_height, new_width, size)
    if (top, left, new_height, new_width) != (0, 0, size, size):
        image = image.crop((left, top, left + size, top + size))
    pixels = np.asarray(image, dtype=np.uint8)  # read-only, over PIL's bytes
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if out is None:
        return pixels.copy()
    out[...] = pixels
    return out


def _source_coordinates(in_size: int, out_size: int, align_corners: bool) -> np.ndarray:
    """TF1's source coordinate of each output index, ``i * scale`` in float32.

    TensorFlow's ``CalculateResizeScale`` takes ``scale`` as ``(in - 1) / (out - 1)`` on
    the align-corners grid (when out > 1) and ``in / out`` otherwise (the legacy grid,
    and one output pixel on either), each division in float32.
    """
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    return np.arange(out_size, dtype=np.float32) * np.float32(scale)


def _remap_maps(height: int, width: int, size: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray]:
    xs = _source_coordinates(width, size, align_corners)
    ys = _source_coordinates(height, size, align_corners)
    map_x = np.ascontiguousarray(np.broadcast_to(xs[None, :], (size, size)))
    map_y = np.ascontiguousarray(np.broadcast_to(ys[:, None], (size, size)))
    map_x.flags.writeable = False
    map_y.flags.writeable = False
    return map_x, map_y


@functools.lru_cache(maxsize=256)
def align_corners_maps(height: int, width: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(map_x, map_y) for ``cv2.remap``: size x size float32 each, read-only, cached.

    The last coordinate can round a hair past ``in - 1``; ``BORDER_REPLICATE`` then
    reads the last pixel with a near-zero weight, as TensorFlow clamps its upper index.
    """
    return _remap_maps(height, width, size, align_corners=True)


@functools.lru_cache(maxsize=64)
def legacy_maps(height: int, width: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(map_x, map_y) of the legacy grid for ``cv2.remap``: read-only, cached.

    Downscaling every coordinate stays within ``in - in / out`` <= ``in - 1``.
    Upscaling, those past ``in - 1`` interpolate towards a pixel beyond the edge;
    TensorFlow clamps that upper index to ``in - 1`` (so the edge pixel repeats) and
    ``BORDER_REPLICATE`` reads the same pixel there. Fewer entries than the
    align-corners cache: VTAB's 224 px maps are 400 KB each, and a miss costs ~2% of
    a decode.
    """
    return _remap_maps(height, width, size, align_corners=False)


def _remap(pixels: np.ndarray, maps: tuple[np.ndarray, np.ndarray], out: np.ndarray | None) -> np.ndarray:
    map_x, map_y = maps
    if out is not None:
        cv2.remap(pixels, map_x, map_y, cv2.INTER_LINEAR, dst=out, borderMode=cv2.BORDER_REPLICATE)
        return out
    return cv2.remap(pixels, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def resize_align_corners(pixels: np.ndarray, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """TF1 ``resize_images(align_corners=True)`` bilinear, rounded to uint8.

    ``out`` (size x size x C uint8, contiguous) receives the result without a copy.
    """
    height, width = pixels.shape[:2]
    return _remap(pixels, align_corners_maps(height, width, size), out)


def resize_legacy(pixels: np.ndarray, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """``tf.compat.v1.image.resize`` bilinear (legacy grid: no align_corners, no
    half-pixel centres), rounded to uint8.

    ``out`` (size x size x C uint8, contiguous) receives the result without a copy.
    """
    height, width = pixels.shape[:2]
    return _remap(pixels, legacy_maps(height, width, size), out)


def resize_square(pixels: np.ndarray, size: int, method: ResizeMethod = ResizeMethod.BILINEAR) -> np.ndarray:
    """Resize H x W x C uint8 pixels to size x size x C (for
    ``SHORTER_BICUBIC_CENTER_CROP``: the centre of the shorter-side resize)."""
    height, width = pixels.shape[:2]
    if height == size and width == size:
        return np.ascontiguousarray(pixels)
    if method is ResizeMethod.BILINEAR:
        out = resize_align_corners(np.ascontiguousarray(pixels), size)
    elif method is ResizeMethod.LEGACY_BILINEAR:
        out = resize_legacy(np.ascontiguousarray(pixels), size)
    elif method in (ResizeMethod.FAST_BILINEAR, ResizeMethod.TF2_BILINEAR):
        out = cv2.resize(pixels, (size, size), interpolation=cv2.INTER_LINEAR)
    elif method is ResizeMethod.SHORTER_BICUBIC_CENTER_CROP:
        grey = pixels.ndim == 2 or pixels.shape[2] == 1
        image = Image.fromarray(np.ascontiguousarray(pixels.reshape(height, width) if grey else pixels))
        out = resize_shorter_center_crop(image, size)  # size x size x C
        return out[:, :, 0] if pixels.ndim == 2 else out
    else:
        mode = "RGB" if pixels.ndim == 3 and pixels.shape[2] == 3 else "L"
        image = Image.fromarray(pixels.reshape(height, width, -1).squeeze(-1) if mode == "L" else pixels, mode)
        out = np.asarray(image.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8)
    if out.ndim == 2 and pixels.ndim == 3:
        out = out[:, :, None]
    return out
