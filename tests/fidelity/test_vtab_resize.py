"""Served VTAB pixels are the VTAB reference's.

task_adaptation decodes with TFDS (``decode_image``; JPEG with TensorFlow's default
IFAST DCT), and its ``data_loader.preprocess_fn`` (which imports
``tensorflow.compat.v1``) resizes with ``tf.image.resize(image, [s, s])``: TF1
``resize_images``, bilinear on the legacy grid (source = i * in / out; no
align_corners, no half-pixel centres), before its /255 (../shared/reference/vtab.md,
Preprocessing). The default VTAB resize (``legacy_bilinear``) must come within 1
level of ``tf.compat.v1.image.resize`` on TF's own decode of the stored bytes,
through the served path: a real server over a store packed from TFDS-written data,
for task batches, the full-way task episode and data regimes, up- and downscaling,
square and not, JPEG and PNG. TF2's half-pixel grid stays available as
``tf2_bilinear``, within 1 level of TF2's ``tf.image.resize``.
"""

from __future__ import annotations

import io

import grpc
import numpy as np
import pytest
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.fixtures import tfds as tfds_fixtures
from sampler_server.store.reader import StoreReader
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

import tensorflow as tf

# (height, width, mode, format): a CIFAR-like 32 px upscale, ~300x400 photos, KITTI's
# 375x1242 frame, a portrait downscaled to 32, a non-square upscale, a grey JPEG
SHAPES = (
    (32, 32, "RGB", "PNG"),
    (300, 400, "RGB", "JPEG"),
    (375, 1242, "RGB", "JPEG"),
    (500, 333, "RGB", "PNG"),
    (48, 80, "RGB", "JPEG"),
    (283, 331, "L", "JPEG"),
)
SIZES = (224, 32)
TASK = "kitti_distance"


def _payload(height: int, width: int, mode: str, file_format: str, seed: int) -> bytes:
    """Texture with hard edges: a smooth colour field, noise and sharp bands (the worst
    case for a grid off by a fraction of a pixel)."""
    rng = np.random.RandomState(seed)
    coarse = rng.randint(0, 256, (height // 8 + 2, width // 8 + 2, 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.int16)
    pixels = np.clip(field + rng.randint(-40, 41, (height, width, 3)), 0, 255).astype(np.uint8)
    pixels[height // 3: height // 3 + 3] = 255
    pixels[:, width // 2: width // 2 + 2] = 0
    image = Image.fromarray(pixels)
    if mode != "RGB":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=file_format, quality=90)
    return buffer.getvalue()


class ShapedKitti(tfds_fixtures.TestKitti, skip_registration=True):
    """KITTI 3.1.0 whose images take every shape of ``SHAPES`` in turn (unique bytes each)."""

    name, pkg_dir_path = tfds_fixtures.TestKitti.name, tfds_fixtures.TestKitti.pkg_dir_path
    SIZES = {"train": 12, "validation": 6, "test": len(SHAPES)}

    def _generate_examples(self, split, n):
        offset = {"train": 0, "validation": 100, "test": 200}[split]
        for key, example in super()._generate_examples(split, n):
            number = int(key.rsplit("-", 1)[1])
            yield key, {**example, "image": _payload(*SHAPES[number % len(SHAPES)], seed=offset + number)}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server over an encoded KITTI store and one packed with ``--raw-size 32`` (the
    pack's default resize for vtab); the stored values by record id."""
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("vtab-resize")
    tfds_fixtures.prepare(ShapedKitti, root / "tfds", shards=1)
    data = root / "data"
    for extra in ([], ["--raw-size", "32", "--name", "kitti_raw32"]):
        assert main(["pack", "vtab", "--tfds-name", "kitti", "--tfds-data-dir", str(root / "tfds"),
                     "--output", str(data), "--quiet", "--workers", "1", *extra]) == 0
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    yield server.address, pb_grpc.SamplerStub(channel), StoreReader(data / "tfds_kitti"), StoreReader(
        data / "kitti_raw32")
    channel.close()
    server.stop(grace=0.5)


def _decoded(payload: bytes) -> tf.Tensor:
    """TFDS's decode of a stored image (``decode_image``, JPEG with TF's default DCT)."""
    return tf.io.decode_image(payload, channels=3, expand_animations=False)


def legacy_reference(payload: bytes, size: int) -> np.ndarray:
    """What data_loader's preprocess holds before its /255: tf.compat.v1.image.resize."""
    return tf.compat.v1.image.resize(_decoded(payload), [size, size]).numpy()


def tf2_reference(payload: bytes, size: int) -> np.ndarray:
    return tf.image.resize(_decoded(payload), [size, size]).numpy()


def _check(images: np.ndarray, record_ids, reader: StoreReader, size: int, reference) -> None:
    assert images.shape == (len(record_ids), size, size, 3) and images.dtype == np.uint8
    for image, record_id in zip(images, record_ids):
        payload = reader.read(record_id).payload
        difference = np.abs(image.astype(np.float64) - reference(payload, size))
        shape = Image.open(io.BytesIO(payload)).size[::-1]
        assert difference.max() <= 1.0, (f"record {record_id} {shape} -> {size}: max {difference.max():.2f}, "
                                         f"mean {difference.mean():.2f} levels from the reference")
        assert difference.mean() < 0.3  # rounding only


def _stub_batches(stub, size: int, resize: int = pb.RESIZE_METHOD_UNSPECIFIED, store: str = "tfds_kitti"):
    return list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task=TASK, split="test", batch_size=len(SHAPES), store=store,
        images=pb.ImageOptions(image_size=size, resize=resize))))


def _images(batch) -> np.ndarray:
    return np.frombuffer(batch.images.data, np.uint8).reshape(tuple(batch.images.shape))


@pytest.mark.parametrize("size", SIZES)
def test_default_vtab_batches_are_tf_compat_v1_resize(served, size):
    """The server's default (resize unspecified) and the client's default, every shape."""
    from clients.core import SamplerClient

    address, stub, reader, _ = served
    (batch,) = _stub_batches(stub, size)
    _check(_images(batch), list(batch.record_ids), reader, size, legacy_reference)
    assert batch.resize == pb.RESIZE_METHOD_LEGACY_BILINEAR and batch.image_size == size
    with SamplerClient(address) as client:
        (arrays,) = list(client.eval_batches(TASK, "test", len(SHAPES), image_size=size, store="tfds_kitti"))
    _check(arrays.images, arrays.record_ids, reader, size, legacy_reference)
    assert np.array_equal(arrays.images, _images(batch))
    assert (arrays.resize, arrays.image_size) == ("legacy_bilinear", size)


def test_default_task_episode_and_regime_are_tf_compat_v1_resize(served):
    from clients.core import SamplerClient

    address, stub, reader, _ = served
    chunks = list(stub.StreamTaskEpisode(pb.StreamTaskEpisodeRequest(
        task=TASK, support_split="val", query_split="test", store="tfds_kitti", images=pb.ImageOptions(image_size=32))))
    assert {c.resize for c in chunks} == {pb.RESIZE_METHOD_LEGACY_BILINEAR}
    for chunk in chunks:
        _check(_images(chunk), list(chunk.record_ids), reader, 32, legacy_reference)
    with SamplerClient(address) as client:
        episode = client.task_episode(TASK, image_size=32, support_split="val", query_split="test",
                                      store="tfds_kitti")
        assert episode.resize == "legacy_bilinear"
        _check(episode.query_images, episode.query_record_ids, reader, 32, legacy_reference)
        regime = list(client.eval_batches(TASK, "train", 4, image_size=32, store="tfds_kitti", regime=8,
                                          regime_seed=1))
    assert {b.resize for b in regime} == {"legacy_bilinear"}
    for batch in regime:
        _check(batch.images, batch.record_ids, reader, 32, legacy_reference)


def test_tf2_bilinear_is_tf2_image_resize_by_its_name(served):
    from clients.core import SamplerClient

    address, stub, reader, _ = served
    (batch,) = _stub_batches(stub, 224, pb.RESIZE_METHOD_TF2_BILINEAR)
    _check(_images(batch), list(batch.record_ids), reader, 224, tf2_reference)
    assert batch.resize == pb.RESIZE_METHOD_TF2_BILINEAR
    with SamplerClient(address) as client:
        (arrays,) = list(client.eval_batches(TASK, "test", len(SHAPES), image_size=32, resize="tf2_bilinear",
                                             store="tfds_kitti"))
    _check(arrays.images, arrays.record_ids, reader, 32, tf2_reference)
    assert arrays.resize == "tf2_bilinear"
    legacy = _images(_stub_batches(stub, 224)[0]).astype(np.float64)
    assert np.abs(_images(batch) - legacy).mean() > 1.0  # the grids differ: the test can tell them apart


def test_raw_vtab_store_records_and_serves_the_legacy_grid(served):
    """``pack vtab --raw-size`` resizes with the VTAB default and serves it by default;
    another method's name is refused (a raw store keeps no source bytes)."""
    _, stub, reader, raw = served
    assert raw.manifest.pack_options["raw_resize"] == "legacy_bilinear"
    (batch,) = _stub_batches(stub, 32, store="kitti_raw32")
    assert batch.resize == pb.RESIZE_METHOD_LEGACY_BILINEAR
    _check(_images(batch), list(batch.record_ids), reader, 32, legacy_reference)
    listed = {t.store: t for t in stub.ListTasks(pb.ListTasksRequest(task=TASK)).tasks}
    assert set(listed) == {"tfds_kitti", "kitti_raw32"}
    with pytest.raises(grpc.RpcError) as caught:
        _stub_batches(stub, 32, pb.RESIZE_METHOD_TF2_BILINEAR, store="kitti_raw32")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "legacy_bilinear" in caught.value.details() and "tf2_bilinear" in caught.value.details()


def test_decode_workers_serve_the_legacy_grid(served):
    """Large requests are decoded by the assembler's worker processes: same pixels."""
    from sampler_server.assembly.assembler import Assembler
    from sampler_server.imaging import ResizeMethod

    _, _, reader, _ = served
    ids = list(range(reader.num_records))[::-1] * 2  # >= 16 ids: the pool path
    assembler = Assembler({"kitti": reader}, workers=2)
    try:
        assembler.warm_up()
        images = assembler.images("kitti", ids, 32, ResizeMethod("legacy_bilinear"))
    finally:
        assembler.close()
    _check(images, ids, reader, 32, legacy_reference)


def _tf_legacy(pixels: np.ndarray, size: int) -> np.ndarray:
    return tf.compat.v1.image.resize(pixels, [size, size]).numpy()


# (height, width, size): odd sizes, up and down, extreme aspect ratios, 1 px in and out
UNIT_SHAPES = ((7, 13, 5), (5, 3, 17), (33, 31, 224), (301, 299, 150), (3, 500, 224), (375, 1242, 224),
               (500, 333, 32), (1, 1, 4), (9, 9, 1), (224, 224, 224), (64, 64, 63))


@pytest.mark.parametrize(("height", "width", "size"), UNIT_SHAPES)
def test_legacy_resize_matches_tf_compat_v1_on_random_images(height, width, size):
    from sampler_server.imaging import ResizeMethod, resize_square

    pixels = np.random.RandomState(height * 1000 + width).randint(0, 256, (height, width, 3)).astype(np.uint8)
    ours = resize_square(pixels, size, ResizeMethod("legacy_bilinear"))
    assert ours.shape == (size, size, 3) and ours.dtype == np.uint8
    difference = np.abs(ours.astype(np.float64) - _tf_legacy(pixels, size))
    assert difference.max() <= 0.5 + 1e-3, f"{height}x{width} -> {size}: {difference.max():.3f} levels"


@pytest.mark.parametrize(("height", "width", "size"), ((6, 5, 23), (31, 47, 7), (2, 9, 40)))
def test_legacy_resize_clamps_the_edges_as_tf(height, width, size):
    """Upscaling, the last outputs sample past ``in - 1``: TF clamps its upper index, so a
    bright last row and column stay bright there (a zero border would darken them);
    downscaling, the grid never reaches the last pixel's far side."""
    from sampler_server.imaging import ResizeMethod, resize_square

    pixels = np.zeros((height, width, 1), np.uint8)
    pixels[-1, :], pixels[:, -1] = 255, 200
    ours = resize_square(pixels, size, ResizeMethod("legacy_bilinear"))[:, :, 0].astype(np.float64)
    reference = _tf_legacy(pixels, size)[:, :, 0]
    assert np.abs(ours - reference).max() <= 0.5 + 1e-3
    assert np.abs(ours[-1] - reference[-1]).max() <= 0.5 + 1e-3
    assert np.abs(ours[:, -1] - reference[:, -1]).max() <= 0.5 + 1e-3
