"""The VTAB resize (``TF2_BILINEAR``) reproduces the VTAB reference's preprocessing.

task_adaptation decodes with TFDS (``decode_image``; JPEG with TensorFlow's default
IFAST DCT), resizes with TF2 ``tf.image.resize(image, [s, s])`` (bilinear, half-pixel
centres, no antialias) and divides by 255. Our uint8 must be within 1 level of TF's
float result, up- and downscaling, JPEG and PNG, square and not.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from sampler_server.assembly.decode import record_pixels
from sampler_server.imaging import ResizeMethod
from sampler_server.store.record import Encoding, Record, encode_record

tf = pytest.importorskip("tensorflow")

# (height, width, mode, format): down- and upscales, non-square, grey, a 64 px dSprites-like mask
IMAGES = (
    (300, 300, "RGB", "JPEG"),
    (283, 331, "RGB", "JPEG"),
    (32, 32, "RGB", "PNG"),
    (64, 64, "L", "PNG"),
    (375, 500, "RGB", "PNG"),
    (96, 120, "L", "JPEG"),
)
SIZES = (224, 84, 37)


def _payload(height: int, width: int, mode: str, file_format: str, seed: int) -> bytes:
    rng = np.random.RandomState(seed)
    coarse = rng.randint(0, 256, (height // 8 + 2, width // 8 + 2, 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.int16)
    pixels = np.clip(field + rng.randint(-40, 41, (height, width, 3)), 0, 255).astype(np.uint8)
    pixels[height // 3: height // 3 + 3] = 255  # hard edges: worst case for an off grid
    pixels[:, width // 2: width // 2 + 2] = 0
    image = Image.fromarray(pixels)
    if mode != "RGB":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=file_format, quality=90)
    return buffer.getvalue()


def _reference(payload: bytes, size: int) -> np.ndarray:
    """What data_loader's preprocess holds before its /255: TF2 resize of the decoded image."""
    decoded = tf.io.decode_image(payload, channels=3, expand_animations=False)
    return tf.image.resize(decoded, [size, size]).numpy()


@pytest.mark.parametrize("size", SIZES)
def test_tf2_bilinear_is_within_one_level_of_tf_image_resize(size):
    for seed, (height, width, mode, file_format) in enumerate(IMAGES):
        payload = _payload(height, width, mode, file_format, seed)
        encoding = Encoding.JPEG if file_format == "JPEG" else Encoding.PNG
        value = encode_record(Record(encoding, width, height, 3 if mode == "RGB" else 1, payload))
        ours = record_pixels(value, size, ResizeMethod.TF2_BILINEAR)
        assert ours.shape == (size, size, 3) and ours.dtype == np.uint8
        reference = _reference(payload, size)
        difference = np.abs(ours.astype(np.float64) - reference)
        assert difference.max() <= 1.0, f"{height}x{width} {file_format} -> {size}: {difference.max():.2f} levels"
        assert difference.mean() < 0.3
        # compared as the model sees them, after the reference's /255
        assert np.abs(ours / 255.0 - reference / 255.0).max() <= 1.0 / 255 + 1e-6


def test_tf2_bilinear_differs_from_the_md_align_corners_grid():
    payload = _payload(300, 300, "RGB", "PNG", 7)
    value = encode_record(Record(Encoding.PNG, 300, 300, 3, payload))
    md = record_pixels(value, 84, ResizeMethod.BILINEAR).astype(np.float64)
    vtab = record_pixels(value, 84, ResizeMethod.TF2_BILINEAR).astype(np.float64)
    assert np.abs(md - vtab).mean() > 1.0
