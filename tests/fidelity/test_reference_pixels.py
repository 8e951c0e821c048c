"""Served MD pixels reproduce the Meta-Dataset reference's computation.

The reference decodes with ``tf.image.decode_image(..., channels=3)`` (JPEG: libjpeg
with TensorFlow's default IFAST DCT) and resizes with TF1
``resize_images(..., BILINEAR, align_corners=True)``; its float output is then only
rescaled to [-1, 1]. The default resize must come within 1 level of that float output
(we round it to uint8), for JPEG and PNG records, decoded on request or packed with
``--raw-size``. The fast path must differ measurably (so this test can tell them
apart), and a raw store never serves its pixels under another method's name.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import grpc
import numpy as np
import pytest
from conftest import pack_fixture
from PIL import Image

from sampler_server.assembly.assembler import Assembler
from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import FailedPrecondition
from sampler_server.fixtures.base import Fixture
from sampler_server.imaging import ResizeMethod
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

import tensorflow as tf

SIZES = (84, 126)
# (height, width, mode, format): ~300 px like DTD, grey, non-square, a small Omniglot-like
# 1-bit PNG, a palette PNG, and an upscale (60 px -> 84/126)
IMAGES = (
    (300, 300, "RGB", "JPEG"),
    (283, 331, "RGB", "JPEG"),
    (317, 290, "L", "JPEG"),
    (180, 340, "RGB", "JPEG"),
    (60, 75, "RGB", "JPEG"),
    (260, 300, "RGB", "PNG"),
    (301, 240, "L", "PNG"),
    (105, 105, "1", "PNG"),
    (200, 210, "P", "PNG"),
)


def _pixels(height: int, width: int, seed: int) -> np.ndarray:
    """Texture with sharp edges: smooth colour field + noise + hard bands (worst case
    for a sampling grid that is off by a fraction of a pixel)."""
    rng = np.random.RandomState(seed)
    coarse = rng.randint(0, 256, (height // 16 + 2, width // 16 + 2, 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.int16)
    noise = rng.randint(-40, 41, (height, width, 3))
    pixels = np.clip(field + noise, 0, 255).astype(np.uint8)
    pixels[height // 3 : height // 3 + 7] = 255
    pixels[:, width // 2 : width // 2 + 3] = 0
    return pixels


def _write(path: Path, height: int, width: int, mode: str, file_format: str, seed: int) -> None:
    image = Image.fromarray(_pixels(height, width, seed))
    if mode == "1":
        image = image.convert("L").point(lambda v: 255 if v > 110 else 0).convert("1")
    elif mode == "P":
        image = image.quantize(64)
    elif mode != "RGB":
        image = image.convert(mode)
    if file_format == "JPEG":
        image.save(path, format="JPEG", quality=90)
    else:
        image.save(path, format="PNG")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Fixture:
    root = tmp_path_factory.mktemp("fidelity") / "original"
    for index, (height, width, mode, file_format) in enumerate(IMAGES):
        for copy in range(2):  # two classes, so the store has a split to sample from
            directory = root / f"class_{copy}"
            directory.mkdir(parents=True, exist_ok=True)
            suffix = "jpg" if file_format == "JPEG" else "png"
            _write(directory / f"{index:02d}.{suffix}", height, width, mode, file_format, seed=10 * index + copy)
    return Fixture(source="image_folder", input_dir=root, class_images={}, class_splits={})


@pytest.fixture(scope="module")
def encoded(folder, tmp_path_factory) -> StoreReader:
    return StoreReader(pack_fixture(folder, tmp_path_factory.mktemp("enc"), use_split_file=False).store_dir)


def reference(payload: bytes, size: int) -> np.ndarray:
    """The reference's image before its [-1, 1] rescale: float32, size x size x 3."""
    decoded = tf.io.decode_image(payload, channels=3, expand_animations=False)
    resized = tf.compat.v1.image.resize_images(
        decoded, [size, size], method=tf.compat.v1.image.ResizeMethod.BILINEAR, align_corners=True
    )
    return tf.cast(resized, tf.float32).numpy()


def _payloads(reader: StoreReader) -> list[bytes]:
    return [reader.read(record_id).payload for record_id in range(reader.num_records)]


def test_stored_records_are_the_original_files(folder, encoded):
    originals = {p.read_bytes() for p in folder.input_dir.rglob("*") if p.is_file()}
    assert set(_payloads(encoded)) == originals
    encodings = {encoded.read(r).encoding for r in range(encoded.num_records)}
    assert encodings == {Encoding.JPEG, Encoding.PNG}


def test_simplejpeg_fastdct_decodes_as_tensorflow(encoded):
    import simplejpeg

    for payload in _payloads(encoded):
        if payload[:2] == b"\xff\xd8":
            ours = simplejpeg.decode_jpeg(payload, colorspace="RGB", fastdct=True)
            assert np.array_equal(ours, tf.io.decode_jpeg(payload, channels=3).numpy())


@pytest.mark.parametrize("size", SIZES)
def test_default_decode_is_within_one_level_of_the_reference(encoded, size):
    for record_id in range(encoded.num_records):
        ours = record_pixels(encoded.read_value(record_id), size)
        assert ours.shape == (size, size, 3) and ours.dtype == np.uint8
        difference = np.abs(ours.astype(np.float64) - reference(encoded.read(record_id).payload, size))
        assert difference.max() <= 1.0, f"record {record_id}: {difference.max():.2f} levels from the reference"
        assert difference.mean() < 0.3  # rounding only


@pytest.mark.parametrize("size", SIZES)
def test_assembler_pool_serves_the_reference_pixels(encoded, size):
    ids = list(range(encoded.num_records))[::-1] * 2  # >= 16 ids: the pool path
    assembler = Assembler({"enc": encoded}, workers=2)
    try:
        assembler.warm_up()
        out = assembler.images("enc", ids, size)
    finally:
        assembler.close()
    for position, record_id in enumerate(ids):
        difference = np.abs(out[position].astype(np.float64) - reference(encoded.read(record_id).payload, size))
        assert difference.max() <= 1.0


@pytest.mark.parametrize("size", SIZES)
def test_raw_size_pack_stores_the_reference_pixels(folder, encoded, tmp_path, size):
    raw = StoreReader(pack_fixture(folder, tmp_path, use_split_file=False, raw_size=size).store_dir)
    assert raw.manifest.pack_options["raw_resize"] == ResizeMethod.BILINEAR.value
    assert raw.manifest.fingerprint == encoded.manifest.fingerprint
    assembler = Assembler({"raw": raw}, workers=1)
    ids = list(range(raw.num_records))
    served = assembler.images("raw", ids, size)
    for record_id in ids:
        assert raw.read(record_id).encoding is Encoding.RAW
        difference = np.abs(served[record_id].astype(np.float64) - reference(encoded.read(record_id).payload, size))
        assert difference.max() <= 1.0
        # and exactly what the encoded store serves at that size
        assert np.array_equal(served[record_id], record_pixels(encoded.read_value(record_id), size))


def test_fast_path_is_measurably_off_the_reference(encoded):
    errors = []
    for record_id in range(encoded.num_records):
        payload = encoded.read(record_id).payload
        if payload[:2] != b"\xff\xd8" or min(Image.open(io.BytesIO(payload)).size) < 2 * 84:
            continue  # reduced-scale decoding needs a JPEG at least twice the target
        fast = record_pixels(encoded.read_value(record_id), 84, ResizeMethod.FAST_BILINEAR)
        errors.append(np.abs(fast.astype(np.float64) - reference(payload, 84)).mean())
    assert errors and min(errors) > 1.0


def test_raw_store_refuses_another_method_at_its_size(folder, tmp_path):
    store = pack_fixture(folder, tmp_path, use_split_file=False, name="raw84", raw_size=84).store_dir
    assembler = Assembler({"raw84": StoreReader(store)}, workers=1)
    assert assembler.images("raw84", [0, 1], 84, ResizeMethod.BILINEAR).shape == (2, 84, 84, 3)
    for method in (ResizeMethod.ANTIALIAS, ResizeMethod.FAST_BILINEAR):
        with pytest.raises(FailedPrecondition) as caught:
            assembler.submit("raw84", [0, 1], 84, method)
        message = str(caught.value)
        assert "raw84" in message and "bilinear" in message and method.value in message


def test_raw_store_packed_with_another_method_serves_only_that_method(folder, tmp_path):
    store = pack_fixture(
        folder, tmp_path, use_split_file=False, name="raw84aa", raw_size=84, raw_resize=ResizeMethod.ANTIALIAS
    ).store_dir
    reader = StoreReader(store)
    assert reader.manifest.pack_options["raw_resize"] == "antialias"
    assembler = Assembler({"raw84aa": reader}, workers=1)
    assert assembler.images("raw84aa", [0], 84, ResizeMethod.ANTIALIAS).shape == (1, 84, 84, 3)
    with pytest.raises(FailedPrecondition, match="antialias"):
        assembler.submit("raw84aa", [0], 84, ResizeMethod.BILINEAR)


def test_raw_store_without_a_recorded_method_is_refused(folder, tmp_path):
    """Packed by older code: a half-pixel resize that matches no method; repack it."""
    store = pack_fixture(folder, tmp_path, use_split_file=False, name="old", raw_size=84).store_dir
    manifest_path = store / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["pack_options"]["raw_resize"]
    manifest_path.write_text(json.dumps(manifest))
    assembler = Assembler({"old": StoreReader(store)}, workers=1)
    for method in ResizeMethod:
        with pytest.raises(FailedPrecondition, match="repack"):
            assembler.submit("old", [0], 84, method)


def test_raw_store_refuses_another_size(folder, tmp_path):
    """A raw store keeps no source bytes: resizing its pixels again is no method's output."""
    store = pack_fixture(folder, tmp_path, use_split_file=False, name="raw84", raw_size=84).store_dir
    assembler = Assembler({"raw84": StoreReader(store)}, workers=1)
    with pytest.raises(FailedPrecondition, match="84"):
        assembler.submit("raw84", [0], 126, ResizeMethod.BILINEAR)


def test_grpc_raw_store_asked_for_another_method_is_failed_precondition(served):
    channel = grpc.insecure_channel(served.address)
    try:
        stub = pb_grpc.SamplerStub(channel)
        request = pb.EpisodeRequest(
            sources=["folder_raw32"], split=pb.SPLIT_TRAIN, seed=1,
            images=pb.ImageOptions(image_size=32, resize=pb.RESIZE_METHOD_ANTIALIAS),
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetEpisode(pb.GetEpisodeRequest(request=request, index=0))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "folder_raw32" in caught.value.details() and "antialias" in caught.value.details()
        fine = pb.EpisodeRequest(
            sources=["folder_raw32"], split=pb.SPLIT_TRAIN, seed=1,
            images=pb.ImageOptions(image_size=32, resize=pb.RESIZE_METHOD_BILINEAR),
        )
        assert stub.GetEpisode(pb.GetEpisodeRequest(request=fine, index=0)).image_size == 32
    finally:
        channel.close()
