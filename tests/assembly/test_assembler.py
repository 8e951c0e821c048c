"""Assembled pixels are a pure function of (record, size, method), whatever the path."""

from __future__ import annotations

import io
from dataclasses import replace

import lmdb
import numpy as np
import pytest
from conftest import generate_fixture, pack_fixture
from PIL import Image

from sampler_server.assembly.assembler import Assembler, decode_records
from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import DataLoss, FailedPrecondition
from sampler_server.imaging import ResizeMethod, resize_square, to_rgb_array
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import encode_record, decode_record, record_key


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("assembly")
    fixture = generate_fixture("image_folder", root, num_classes=4, images_per_class=12)
    encoded = pack_fixture(fixture, root / "data", name="folder")
    raw = pack_fixture(fixture, root / "data", name="folder_raw32", raw_size=32)
    return StoreReader(encoded.store_dir), StoreReader(raw.store_dir)


def test_decode_matches_a_direct_computation(stores):
    reader, _ = stores
    for record_id in range(reader.num_records):
        record = reader.read(record_id)
        image = Image.open(io.BytesIO(record.payload))
        expected = resize_square(to_rgb_array(image), 40, ResizeMethod.BILINEAR)
        exact = record_pixels(reader.read_value(record_id), 40)
        if image.format == "PNG":  # lossless: exactly decode + align-corners bilinear
            assert np.array_equal(exact, expected)
        else:  # libjpeg-turbo's IFAST DCT (the reference's) vs Pillow's accurate one
            assert np.abs(exact.astype(int) - expected).mean() < 3
        out = np.zeros((40, 40, 3), np.uint8)
        assert record_pixels(reader.read_value(record_id), 40, out=out) is out and np.array_equal(out, exact)


@pytest.mark.parametrize("method", list(ResizeMethod))
def test_pool_and_single_process_agree(stores, method):
    reader, _ = stores
    ids = list(range(reader.num_records))[::-1]
    single = decode_records(reader, ids, 36, method)
    assembler = Assembler({"folder": reader}, workers=2)
    try:
        assembler.warm_up()
        pooled = assembler.images("folder", ids, 36, method)
    finally:
        assembler.close()
    assert pooled.shape == (len(ids), 36, 36, 3) and pooled.dtype == np.uint8
    assert np.array_equal(pooled, single)


def test_raw_store_is_copied_and_equals_decoding_at_pack_size(stores):
    reader, raw = stores
    assembler = Assembler({"raw": raw}, workers=1)
    ids = [3, 1, 2]
    out = assembler.images("raw", ids, 32)
    for position, record_id in enumerate(ids):
        payload = raw.read(record_id).payload
        assert out[position].tobytes() == payload
        assert np.array_equal(out[position], record_pixels(reader.read_value(record_id), 32))
    with pytest.raises(FailedPrecondition, match="image_size 20"):  # no source bytes to resize from
        assembler.images("raw", ids, 20)


def test_corrupt_record_is_data_loss_naming_the_record(stores, tmp_path):
    reader, _ = stores
    import shutil

    copy = tmp_path / "corrupt"
    shutil.copytree(reader.directory, copy)
    env = lmdb.open(str(copy), subdir=True, lock=False)
    with env.begin(write=True) as txn:
        record = decode_record(txn.get(record_key(5)))
        truncated = record.payload[: len(record.payload) // 3]
        txn.put(record_key(5), encode_record(replace(record, payload=truncated)))
    env.close()
    damaged = StoreReader(copy)
    with pytest.raises(DataLoss, match=r"store 'folder', record 5: cannot decode stored image"):
        decode_records(damaged, [4, 5], 32, ResizeMethod.BILINEAR)
    assembler = Assembler({"folder": damaged}, workers=2)
    try:
        with pytest.raises(DataLoss, match="record 5"):
            assembler.images("folder", list(range(20)), 32)
        assert assembler.images("folder", list(range(6, 26)), 32).shape[0] == 20  # pool survives
    finally:
        assembler.close()


def test_pieces_are_views_and_buffers_can_be_retired_after_release(stores):
    from sampler_server.assembly.assembler import _BufferPool

    reader, _ = stores
    assembler = Assembler({"folder": reader}, workers=2)
    assembler._buffers = _BufferPool(keep=0)  # every returned buffer is retired at once
    try:
        ids = list(range(40))
        expected = decode_records(reader, ids, 24, ResizeMethod.BILINEAR)
        for _ in range(3):
            pending = assembler.submit("folder", ids, 24)
            support, query = pending.pieces([30, 10])
            joined = b"".join(support) + b"".join(query)
            assert joined == expected.tobytes()
            pending.release()  # used to fail: the retired buffer still had live views
            with pytest.raises(ValueError):
                bytes(support[0])  # released views are invalid, not dangling
    finally:
        assembler.close()


def test_large_raw_requests_are_copied_by_the_workers_with_the_same_bytes(stores, tmp_path):
    """With enough workers a large raw request is read, checked and copied in the pool
    (not under the server's GIL); its pixels are the in-process copy's, and a flipped
    byte is still a DataLoss naming the record."""
    import shutil

    from sampler_server.assembly.assembler import RAW_POOL_WORKERS, RAW_POOLED

    _, raw = stores
    ids = [(7 * i) % raw.num_records for i in range(RAW_POOLED + 5)]  # repeats allowed, any order
    in_process = Assembler({"raw": raw}, workers=1).images("raw", ids, 32)
    assembler = Assembler({"raw": raw}, workers=RAW_POOL_WORKERS)
    try:
        pending = assembler.submit("raw", ids, 32)
        assert pending._buffer is not None and pending._records is None  # the pool's path
        support, query = pending.pieces([20, len(ids) - 20])
        assert b"".join(support) + b"".join(query) == in_process.tobytes()
        pending.release()
        small = assembler.submit("raw", ids[:RAW_POOLED - 1], 32)
        assert small._records is not None  # below the threshold: views of the records, in process
        assert np.array_equal(small.result(), in_process[:RAW_POOLED - 1])
    finally:
        assembler.close()

    copy = tmp_path / "flipped"
    shutil.copytree(raw.directory, copy)
    env = lmdb.open(str(copy), subdir=True, lock=False)
    with env.begin(write=True) as txn:
        value = bytearray(txn.get(record_key(9)))
        value[-100] ^= 0x10
        txn.put(record_key(9), bytes(value))
    env.close()
    damaged = Assembler({"raw": StoreReader(copy)}, workers=RAW_POOL_WORKERS)
    try:
        with pytest.raises(DataLoss, match="record 9: checksum mismatch"):
            damaged.images("raw", list(range(raw.num_records)) * 2, 32)
        assert damaged.images("raw", [i for i in range(raw.num_records) if i != 9] * 2, 32).shape[0] == 2 * (
            raw.num_records - 1)
    finally:
        damaged.close()
