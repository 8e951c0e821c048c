"""The CoG resize (``SHORTER_BICUBIC_CENTER_CROP``) reproduces the CoG reference's preprocessing.

naver/cog opens each file with ``Image.open(path).convert("RGB")`` and applies
torchvision's ``Resize(S, interpolation=BICUBIC)`` and ``CenterCrop(S)`` (before
``ToTensor`` and ``Normalize``). We compare with torchvision itself (the installed
0.28.0), side by side, through ``record_pixels`` and through the assembler (decode
pool and raw store) on a packed store: JPEGs of many sizes and aspect ratios
(hypothesis), up- and downscaled, odd crop margins (``round`` ties to even), grey
and CMYK JPEGs, PNGs of several modes. The task allows 1 level per pixel; we
measure 0 pixels differing, because the server calls the same Pillow ``resize`` on
the same Pillow-decoded RGB image, so every comparison asserts equality and prints
the count and maximum if that ever changes.

torchvision's package ``__init__`` loads its C extension, which needs a CUDA torch;
``transforms`` needs none of it, so it is imported under an empty package module
and ``sys.modules`` is put back afterwards. Without torch or torchvision the
comparisons skip.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from conftest import examples, pack_fixture
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from sampler_server.assembly.assembler import Assembler
from sampler_server.assembly.decode import record_pixels
from sampler_server.catalog import wire_values
from sampler_server.fixtures.base import Fixture
from sampler_server.imaging import ResizeMethod, center_crop_offsets, resize_square, shorter_side_size
from sampler_server.service import messages
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, Record, encode_record
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

COG = ResizeMethod.SHORTER_BICUBIC_CENTER_CROP
PAPER_SIZES = (224, 299, 384, 240, 380)  # 224 is the default; the others appear in the paper's tables
Reference = Callable[[bytes, int], np.ndarray]


def _load_transforms() -> types.ModuleType:
    """torchvision.transforms without torchvision's package init; sys.modules restored."""
    spec = importlib.util.find_spec("torchvision")
    assert spec is not None and spec.submodule_search_locations, "torchvision (the dev extra) is not installed"
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "torchvision"}
    package = types.ModuleType("torchvision")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchvision"] = package
    try:
        from torchvision import transforms

        return transforms
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def reference() -> Reference:
    transforms = _load_transforms()

    def preprocess(payload: bytes, size: int) -> np.ndarray:
        """The reference's image before ToTensor: S x S x 3 uint8."""
        image = Image.open(io.BytesIO(payload)).convert("RGB")
        pipeline = transforms.Compose([
            transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(size),
        ])
        return np.asarray(pipeline(image))

    return preprocess


def _pixels(height: int, width: int, seed: int) -> np.ndarray:
    """A smooth field, noise and hard edges (the worst case for an off-by-a-tap resize)."""
    rng = np.random.RandomState(seed)
    coarse = rng.randint(0, 256, (height // 8 + 2, width // 8 + 2, 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.int16)
    pixels = np.clip(field + rng.randint(-40, 41, (height, width, 3)), 0, 255).astype(np.uint8)
    pixels[height // 3: height // 3 + 2] = 255
    pixels[:, width // 2: width // 2 + 2] = 0
    return pixels


def _encode(pixels: np.ndarray, mode: str = "RGB", file_format: str = "JPEG", **options: object) -> bytes:
    image = Image.fromarray(pixels)
    if mode == "I;16":
        image = Image.fromarray(pixels[:, :, 0].astype(np.uint16) * 257)
    elif mode != "RGB":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=file_format, **({"quality": 90} if file_format == "JPEG" else {}) | options)
    return buffer.getvalue()


def _record(payload: bytes) -> bytes:
    image = Image.open(io.BytesIO(payload))
    encoding = Encoding.JPEG if image.format == "JPEG" else Encoding.PNG
    channels = 1 if image.mode in ("L", "I;16", "I", "1") else 3
    return encode_record(Record(encoding, image.width, image.height, channels, payload))


def _assert_same(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    assert ours.shape == theirs.shape and ours.dtype == np.uint8, f"{what}: {ours.shape} vs {theirs.shape}"
    difference = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    differing = int(np.count_nonzero(difference))
    assert differing == 0, f"{what}: {differing} of {difference.size} values differ, max {difference.max()} levels"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    height=st.integers(1, 640),
    width=st.integers(1, 640),
    size=st.sampled_from(PAPER_SIZES + (1, 17, 64)),
    subsampling=st.sampled_from((0, 1, 2)),  # 4:4:4, 4:2:2, 4:2:0
    quality=st.integers(40, 98),
    progressive=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decode_equals_torchvision_on_jpegs(reference, height, width, size, subsampling, quality, progressive, seed):
    """Any size and aspect ratio, smaller or larger than S (bounded so the resized image stays small)."""
    assume(size * size * max(height, width) / min(height, width) <= 2_500_000)
    if progressive:
        subsampling = 2  # Pillow cannot write progressive 4:4:4 into memory
    payload = _encode(_pixels(height, width, seed), quality=quality, subsampling=subsampling, progressive=progressive)
    ours = record_pixels(_record(payload), size, COG)
    _assert_same(ours, reference(payload, size), f"{height}x{width} -> {size}")


# (height, width, size): crop margins that are odd (round's ties: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2), exact squares,
# extreme aspect ratios, a 1-pixel image, and upscales to every paper size
SHAPES = (
    (224, 225, 224), (225, 224, 224), (224, 227, 224), (229, 224, 224), (300, 301, 299), (311, 400, 299),
    (224, 224, 224), (500, 500, 224), (3, 200, 16), (200, 2, 16), (1, 1, 224), (1, 300, 5),
    (375, 500, 224), (500, 333, 299), (100, 133, 384), (81, 60, 240), (120, 90, 380), (37, 53, 224),
)


@pytest.mark.parametrize("height,width,size", SHAPES)
def test_crop_offsets_and_sizes_equal_torchvision(reference, height, width, size):
    payload = _encode(_pixels(height, width, height * 1000 + width), file_format="PNG")
    ours = record_pixels(_record(payload), size, COG)
    _assert_same(ours, reference(payload, size), f"{height}x{width} -> {size}")


def test_size_and_offset_helpers_follow_torchvision():
    assert shorter_side_size(375, 500, 224) == (224, 298)  # int(224 * 500 / 375) = int(298.67)
    assert shorter_side_size(500, 375, 224) == (298, 224)
    assert shorter_side_size(10, 10, 299) == (299, 299)
    assert center_crop_offsets(224, 225, 224) == (0, 0)  # round(0.5) == 0
    assert center_crop_offsets(224, 227, 224) == (0, 2)  # round(1.5) == 2
    assert center_crop_offsets(229, 224, 224) == (2, 0)  # round(2.5) == 2


# grey and CMYK JPEGs (Pillow converts; simplejpeg cannot decode CMYK at all), PNGs of other modes
MODES = (
    ("L", "JPEG"), ("CMYK", "JPEG"), ("RGB", "PNG"), ("L", "PNG"), ("P", "PNG"), ("RGBA", "PNG"),
    ("LA", "PNG"), ("I;16", "PNG"), ("1", "PNG"),
)


@pytest.mark.parametrize("mode,file_format", MODES)
@pytest.mark.parametrize("size", PAPER_SIZES)
def test_decode_equals_torchvision_on_other_modes(reference, mode, file_format, size):
    for height, width in ((333, 500), (250, 180)):  # downscaled, and upscaled (shorter side < S)
        payload = _encode(_pixels(height, width, height + size), mode, file_format)
        assert Image.open(io.BytesIO(payload)).mode == mode
        ours = record_pixels(_record(payload), size, COG)
        _assert_same(ours, reference(payload, size), f"{mode} {file_format} {height}x{width} -> {size}")


def test_raw_pixels_are_treated_as_the_image(reference):
    """RAW records and ``resize_square`` on arrays take the stored pixels as the RGB image."""
    pixels = _pixels(150, 210, 5)
    payload = _encode(pixels, file_format="PNG")
    _assert_same(resize_square(pixels, 96, COG), reference(payload, 96), "array")
    raw = encode_record(Record(Encoding.RAW, 210, 150, 3, pixels.tobytes()))
    _assert_same(record_pixels(raw, 96, COG), reference(payload, 96), "raw record")
    grey = resize_square(pixels[:, :, :1], 96, COG)
    assert grey.shape == (96, 96, 1)
    grey_payload = _encode(pixels, "L", "PNG")
    _assert_same(np.repeat(resize_square(np.asarray(Image.open(io.BytesIO(grey_payload)))[:, :, None], 96, COG), 3, 2),
                 reference(grey_payload, 96), "grey array")


def test_simplejpeg_accurate_dct_decodes_as_pillow():
    """Why decoding with Pillow costs no fidelity elsewhere: for RGB and grey JPEGs libjpeg-turbo
    through simplejpeg (accurate DCT, fancy upsampling) gives Pillow's pixels exactly."""
    rng = np.random.RandomState(3)
    for trial in range(24):
        height, width = int(rng.randint(1, 400)), int(rng.randint(1, 400))
        mode = "L" if trial % 4 == 3 else "RGB"
        options = {} if mode == "L" else {"subsampling": trial % 3}
        payload = _encode(_pixels(height, width, trial), mode, quality=int(rng.randint(40, 98)), **options)
        pillow = np.asarray(Image.open(io.BytesIO(payload)).convert("RGB"))
        ours = simplejpeg.decode_jpeg(payload, colorspace="RGB", fastdct=False, fastupsample=False)
        _assert_same(ours, pillow, f"{mode} {height}x{width}")


def test_wire_maps_the_cog_method_both_ways():
    options = pb.ImageOptions(image_size=224, resize=pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP)
    request = wire_values.images_from_wire(options)
    assert request.resize is COG and request.size == 224
    raw_options = {"raw_size": 224, "raw_resize": COG.value}  # what a store packed with --raw-resize records
    assert messages.raw_resize_to_wire(raw_options) == pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP


# ---- through the assembler on a packed store ---------------------------------------------------

STORE_SIZE = 224
STORE_IMAGES = (  # (height, width, mode, format), each written into two classes
    (375, 500, "RGB", "JPEG"), (500, 333, "RGB", "JPEG"), (150, 199, "RGB", "JPEG"), (224, 227, "RGB", "JPEG"),
    (64, 300, "RGB", "JPEG"), (333, 500, "L", "JPEG"), (281, 400, "CMYK", "JPEG"), (320, 240, "RGB", "PNG"),
    (200, 260, "P", "PNG"), (180, 180, "I;16", "PNG"),
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Fixture:
    root = tmp_path_factory.mktemp("cog_preprocess") / "original"
    for index, (height, width, mode, file_format) in enumerate(STORE_IMAGES):
        for copy in range(2):
            directory = root / f"class_{copy}"
            directory.mkdir(parents=True, exist_ok=True)
            suffix = "jpg" if file_format == "JPEG" else "png"
            payload = _encode(_pixels(height, width, 10 * index + copy), mode, file_format)
            (directory / f"{index:02d}.{suffix}").write_bytes(payload)
    return Fixture(source="image_folder", input_dir=root, class_images={}, class_splits={})


def _originals(reader: StoreReader, input_dir: Path) -> list[bytes]:
    """The original file of each record, read from disk (as the reference reads it)."""
    return [(input_dir / reader.read(r).metadata["origin"]).read_bytes() for r in range(reader.num_records)]


def test_assembler_pool_and_raw_store_equal_torchvision(reference, folder, tmp_path):
    encoded = StoreReader(pack_fixture(folder, tmp_path / "enc", use_split_file=False, name="cog").store_dir)
    raw_summary = pack_fixture(folder, tmp_path / "raw", use_split_file=False, name="cog_raw",
                               raw_size=STORE_SIZE, raw_resize=COG)
    assert raw_summary.manifest.pack_options["raw_resize"] == COG.value
    raw = StoreReader(raw_summary.store_dir)
    originals = _originals(encoded, folder.input_dir)
    assert len(originals) == 2 * len(STORE_IMAGES)
    expected = np.stack([reference(payload, STORE_SIZE) for payload in originals])
    ids = list(range(encoded.num_records))[::-1] * 2  # 40 ids: more than one chunk, so the pool decodes
    assembler = Assembler({"cog": encoded, "cog_raw": raw}, workers=2)
    try:
        assembler.warm_up()
        pooled = assembler.images("cog", ids, STORE_SIZE, COG)
        copied = assembler.images("cog_raw", ids, STORE_SIZE, COG)
        small = assembler.images("cog", ids[:3], 299, COG)  # in-process path, another S
    finally:
        assembler.close()
    _assert_same(pooled, expected[ids], "assembler pool")
    _assert_same(copied, expected[ids], "raw store")
    _assert_same(small, np.stack([reference(originals[i], 299) for i in ids[:3]]), "in-process at 299")
