"""Pixel operations shared by packing and serving.

The default resize is the one the Meta-Dataset reference applies: bilinear WITHOUT
antialiasing, straight to a square of the requested size, with half-pixel centres
(TensorFlow 2's ``tf.image.resize(..., 'bilinear', antialias=False)``). OpenCV's
``INTER_LINEAR`` computes exactly that sampling grid; it is native and fast.
Antialiased resizing (PIL's bilinear filter widened by the scale factor) is the
alternative; every episode states which one it used.
"""

from __future__ import annotations

import enum

import cv2
import numpy as np
from PIL import Image

cv2.setNumThreads(1)  # parallelism comes from worker processes, not OpenCV threads


class ResizeMethod(str, enum.Enum):
    BILINEAR = "bilinear"  # no antialiasing: the MD reference's resize (default)
    ANTIALIAS = "antialias"  # PIL bilinear with antialiasing when downscaling
    FAST_BILINEAR = "fast_bilinear"  # reduced-scale decode + half-pixel bilinear: faster, other pixels


def to_rgb_array(image: Image.Image) -> np.ndarray:
    """H x W x 3 uint8, whatever the file's mode (palette, grey, 1-bit, CMYK, alpha)."""
    if image.mode != "RGB":
        if image.mode in ("1", "I", "I;16", "F"):
            image = image.convert("L")
        image = image.convert("RGB")
    return np.asarray(image, dtype=np.uint8)


def resize_square(pixels: np.ndarray, size: int, method: ResizeMethod = ResizeMethod.BILINEAR) -> np.ndarray:
    """Resize H x W x C uint8 pixels to size x size x C."""
    height, width = pixels.shape[:2]
    if height == size and width == size:
        return np.ascontiguousarray(pixels)
    if method is ResizeMethod.BILINEAR:
        out = cv2.resize(pixels, (size, size), interpolation=cv2.INTER_LINEAR)
    else:
        mode = "RGB" if pixels.ndim == 3 and pixels.shape[2] == 3 else "L"
        image = Image.fromarray(pixels.reshape(height, width, -1).squeeze(-1) if mode == "L" else pixels, mode)
        out = np.asarray(image.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8)
    if out.ndim == 2 and pixels.ndim == 3:
        out = out[:, :, None]
    return out
