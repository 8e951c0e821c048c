"""ImageNet-CoG over gRPC on a real server: ListCogLevels, GetCogSplit and StreamCogBatches
equal `sampler-server cog split` (records, labels, fingerprints), the images are the CoG
preprocessing of the stored bytes, a broken stream resumes identically, and bad
requests are one line naming the field. The IN-21K source is served as two shards, packed
from the run's shared IN-21K layout (``served_cog``)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture
from PIL import Image
from served_cog import cog_layout

from clients.core import RetryPolicy, SamplerClient, SamplerClientError
from sampler_server.cli.main import main
from sampler_server.core.cog.levels import compute_levels
from sampler_server.core.cog.splits import batch_fingerprint
from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES, cog_counts
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

CONFIG = {"level_size": LEVEL_SIZE, "min_images": MIN_IMAGES}
IN1K_IMAGES = 56  # train images per IN-1K class: all train (its test images are the fixture's validation images)
SMALL = pb.ImageOptions(image_size=16)


def _pack_cog_data(root, layout):
    """IN-21K (the cog_counts concepts, packed as 2 shards) and a 4-class ILSVRC store."""
    data = root / "data"
    for shard in ("0/2", "1/2"):
        assert main(["pack", "imagenet21k", "--input", str(layout), "--output", str(data), "--shard", shard,
                     "--quiet", "--workers", "2"]) == 0
    ilsvrc = generate_fixture("ilsvrc_2012", root, num_classes=4, images_per_class=IN1K_IMAGES)
    pack_fixture(ilsvrc, data, name="ilsvrc_2012")
    return data


@pytest.fixture(scope="module")
def cog(tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    data = _pack_cog_data(tmp_path_factory.mktemp("cog-service"), cog_layout(tmp_path_factory))
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    yield data, server.address, pb_grpc.SamplerStub(channel)
    channel.close()
    server.stop(grace=0.5)


def cli_split(data, capsys, level: str, split: str, shots: int = 0, seed: int = 0) -> dict:
    capsys.readouterr()
    assert main(["cog", "split", "--data", str(data), "--level", level, "--split", split, "--shots", str(shots),
                 "--seed", str(seed), "--level-size", str(LEVEL_SIZE), "--min-images", str(MIN_IMAGES),
                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def request(level: str, split: str, shots: int = 0, seed: int = 0) -> pb.CogSplitRequest:
    return pb.CogSplitRequest(level=level, split=split, shots=shots, seed=seed, **CONFIG)


CASES = [("L1", "test", 0, 0), ("L3", "train", 0, 0), ("L5", "train", 8, 2), ("L2", "val", 0, 1),
         ("L4", "search", 16, 5), ("L1", "search", 1, 3), ("IN-1K", "test", 0, 0), ("IN-1K", "train", 4, 1)]


def test_levels_are_in1k_then_l1_to_l5_as_computed_from_the_served_counts(cog):
    _, _, stub = cog
    reply = stub.ListCogLevels(pb.ListCogLevelsRequest(**CONFIG))
    assert [level.level for level in reply.levels] == ["IN-1K", "L1", "L2", "L3", "L4", "L5"]
    expected = compute_levels(cog_counts(), **CONFIG)
    assert reply.levels_fingerprint == expected.fingerprint and reply.eligible == len(expected.eligible) == 30
    assert (reply.level_size, reply.min_images) == (LEVEL_SIZE, MIN_IMAGES)
    counts = cog_counts()
    for summary in reply.levels[1:]:
        level = expected.level(summary.level)
        assert tuple(summary.wnids) == level.concepts
        assert (summary.similarity_min, summary.similarity_max) == level.similarity_range
        assert summary.test_size == 50 * LEVEL_SIZE
        assert summary.train_size == sum(counts[w] - 50 for w in level.concepts)
        assert summary.store == "imagenet21k"
    seen = reply.levels[0]
    assert len(seen.wnids) == 4 and list(seen.wnids) == sorted(seen.wnids) and seen.store == "ilsvrc_2012"
    from sampler_server.fixtures.ilsvrc import DEFAULT_VALIDATION_IMAGES  # the fixture's, per class

    assert (seen.train_size, seen.test_size) == (4 * IN1K_IMAGES, 4 * DEFAULT_VALIDATION_IMAGES)
    sizes = {s.level: s for s in reply.levels}
    for level in ("IN-1K", "L2"):  # the summary's sizes are the splits' sizes
        assert len(stub.GetCogSplit(request(level, "train")).record_ids) == sizes[level].train_size
        assert len(stub.GetCogSplit(request(level, "test")).record_ids) == sizes[level].test_size


@pytest.mark.parametrize("level,split,shots,seed", CASES)
def test_get_cog_split_equals_the_cli(cog, capsys, level, split, shots, seed):
    data, _, stub = cog
    listing = cli_split(data, capsys, level, split, shots, seed)
    reply = stub.GetCogSplit(request(level, split, shots, seed))
    assert list(reply.record_ids) == [r["record_id"] for r in listing["records"]]
    assert list(reply.labels) == [r["label"] for r in listing["records"]]
    assert reply.fingerprint == listing["fingerprint"] and list(reply.wnids) == listing["wnids"]
    assert reply.store == listing["store"] and reply.num_classes == len(listing["wnids"])
    assert (reply.level, reply.split, reply.shots, reply.seed) == (level, split, shots, seed if shots or
                                                                   split in ("val", "search") else 0)
    if (split, shots) == ("search", 1):
        assert list(reply.labels) == list(range(reply.num_classes))  # one image per concept


def test_stream_cog_batches_is_the_split_in_order_with_fingerprinted_batches(cog, capsys):
    data, _, stub = cog
    listing = cli_split(data, capsys, "L2", "train", 0, 0)
    batches = list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(split=request("L2", "train"), batch_size=16,
                                                                    images=SMALL)))
    size = listing["count"]
    assert size > 3 * 16
    assert [len(b.record_ids) for b in batches] == [16] * (size // 16) + ([size % 16] if size % 16 else [])
    assert [b.index for b in batches] == list(range(len(batches))) and [b.last for b in batches][-2:] == [False, True]
    assert [r for b in batches for r in b.record_ids] == [r["record_id"] for r in listing["records"]]
    labels = [np.frombuffer(b.labels.data, np.int64) for b in batches]
    assert [int(v) for batch in labels for v in batch] == [r["label"] for r in listing["records"]]
    for batch, batch_labels in zip(batches, labels):
        assert batch.split_fingerprint == listing["fingerprint"] and batch.split_size == size
        assert batch.fingerprint == batch_fingerprint(listing["fingerprint"], batch.index, batch.record_ids, batch_labels)
        assert list(batch.images.shape) == [len(batch.record_ids), 16, 16, 3]
        assert batch.resize == pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP and batch.num_classes == LEVEL_SIZE
    again = list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(split=request("L2", "train"), batch_size=16,
                                                                  start_index=2, count=1, images=SMALL)))
    assert len(again) == 1 and again[0].last  # the final message of a bounded stream, as in every stream
    again[0].last = False
    assert again[0].SerializeToString() == batches[2].SerializeToString()


def test_images_are_the_cog_preprocessing_of_the_stored_bytes(cog):
    from sampler_server.imaging import resize_shorter_center_crop

    _, _, stub = cog
    split = request("L4", "train", 2, 1)
    encoded = list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(
        split=split, batch_size=5, images=pb.ImageOptions(mode=pb.IMAGE_MODE_ENCODED))))
    decoded = list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(split=split, batch_size=5)))  # defaults: 224
    assert [b.record_ids for b in encoded] == [b.record_ids for b in decoded]
    assert decoded[0].image_size == 224 and decoded[0].resize == pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP
    for enc, dec in zip(encoded, decoded):
        pixels = np.frombuffer(dec.images.data, np.uint8).reshape(len(dec.record_ids), 224, 224, 3)
        assert len(enc.encoded.data) == len(dec.record_ids)
        for payload, image in zip(enc.encoded.data, pixels):
            reference = resize_shorter_center_crop(Image.open(io.BytesIO(payload)).convert("RGB"), 224)
            assert np.array_equal(reference, image)


def test_a_one_shot_search_set_streams_one_image_per_concept_in_one_last_batch(cog):
    _, address, stub = cog
    batches = list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(split=request("L1", "search", 1, 1), images=SMALL)))
    assert len(batches) == 1 and batches[0].last and batches[0].split_size == len(batches[0].record_ids) == 4
    assert list(batches[0].images.shape) == [4, 16, 16, 3]
    with SamplerClient(address) as client:
        (only,) = list(client.stream_cog_batches("L1", "search", 1, 1, image_size=16, **CONFIG))
        assert only.images.shape == (4, 16, 16, 3) and only.labels.tolist() == [0, 1, 2, 3] and only.last


def test_client_methods_equal_the_wire(cog):
    _, address, stub = cog
    with SamplerClient(address) as client:
        assert [s.level for s in client.cog_levels(**CONFIG)] == ["IN-1K", "L1", "L2", "L3", "L4", "L5"]
        assert client.cog_levels_response(**CONFIG) == stub.ListCogLevels(pb.ListCogLevelsRequest(**CONFIG))
        split = client.cog_split("IN-1K", "train", shots=4, seed=1, **CONFIG)
        assert split == stub.GetCogSplit(request("IN-1K", "train", 4, 1))
        batches = list(client.stream_cog_batches("IN-1K", "train", 4, 1, batch_size=3, image_size=16, **CONFIG))
        assert [b.index for b in batches] == list(range(6)) and batches[-1].last
        assert tuple(r for b in batches for r in b.record_ids) == tuple(split.record_ids)
        assert np.concatenate([b.labels for b in batches]).tolist() == list(split.labels)
        assert batches[0].images.shape == (3, 16, 16, 3) and batches[0].images.dtype == np.uint8
        tail = list(client.stream_cog_batches("IN-1K", "train", 4, 1, batch_size=3, start_index=4, image_size=16,
                                              **CONFIG))
        assert [b.fingerprint for b in tail] == [b.fingerprint for b in batches[4:]]
        assert np.array_equal(tail[0].images, batches[4].images)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(data, port, log):
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", str(port), "--workers", "1"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE, stderr=log, text=True,
    )
    line = process.stdout.readline()
    assert "listening on" in line, line
    return process


@pytest.mark.slow
def test_a_broken_stream_resumes_at_the_next_batch_identically(cog, tmp_path):
    data, address, _ = cog
    arguments = ("L3", "test", 0, 0, 16)  # 200 images, 13 batches of 2.4 MB at 224 px: they cannot all be in flight
    with SamplerClient(address) as client:
        expected = [(b.index, b.fingerprint, b.images.sum()) for b in client.stream_cog_batches(*arguments, **CONFIG)]
    assert len(expected) == 13
    port = _free_port()
    first, second = (tmp_path / "first.log").open("w"), (tmp_path / "second.log").open("w")
    server = _start_server(data, port, first)
    received = []
    try:
        client = SamplerClient(f"127.0.0.1:{port}", prefetch=1, retry=RetryPolicy(max_attempts=20, initial_backoff=0.1))
        for batch in client.stream_cog_batches(*arguments, **CONFIG):
            received.append((batch.index, batch.fingerprint, batch.images.sum()))
            if len(received) == 3:
                server.send_signal(signal.SIGKILL)
                server.wait()
                time.sleep(0.5)
                server = _start_server(data, port, second)
        client.close()
        deadline = time.monotonic() + 10  # the server logs a stream once it has ended
        while "stream cog-batches" not in (tmp_path / "second.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        server.kill()
        server.wait()
        first.close(), second.close()
    assert received == expected
    resumed = re.findall(r"stream cog-batches cog L3 test batch_size=16 start=(\d+)", (tmp_path / "second.log").read_text())
    assert len(resumed) == 1 and 3 <= int(resumed[0]) < 13  # the second server sent the rest, from the next batch


BAD = [
    (request("L9", "train"), grpc.StatusCode.INVALID_ARGUMENT, "level: got 'L9', expected one of IN-1K, L1"),
    (request("L1", "trainval"), grpc.StatusCode.INVALID_ARGUMENT, "split: got 'trainval', expected one of train"),
    (request("L1", "train", 3, 1), grpc.StatusCode.INVALID_ARGUMENT, "shots: got 3, expected 0 (all images) or one of"),
    (request("L1", "train", 4, 0), grpc.StatusCode.INVALID_ARGUMENT, "seed: a 4-shot train set is drawn at random"),
    (request("L1", "test", 4, 1), grpc.StatusCode.INVALID_ARGUMENT, "shots: got 4 for split test"),
    (pb.CogSplitRequest(level="L1", split="test", level_size=4), grpc.StatusCode.FAILED_PRECONDITION,
     "store imagenet21k: 0 of 189 concepts are eligible, the levels need 20 (5 x level_size 4)"),
]


@pytest.mark.parametrize("message,code,text", BAD)
def test_bad_requests_are_one_line_naming_the_field(cog, capsys, message, code, text):
    data, _, stub = cog
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetCogSplit(message)
    assert caught.value.code() == code and text in caught.value.details() and "\n" not in caught.value.details()
    capsys.readouterr()
    argv = ["cog", "split", "--data", str(data), "--level", message.level, "--split", message.split, "--shots",
            str(message.shots), "--seed", str(message.seed), "--level-size", str(message.level_size),
            "--min-images", str(message.min_images)]
    assert main(argv) != 0
    assert text in capsys.readouterr().err


def test_in1k_test_split_holds_no_train_partition_record(cog, capsys):
    """IN-1K as naver/cog evaluates it: test = each class's official validation images, train =
    every train image of the class. (It held 50 train images per class out as test: images
    every IN-1K-pretrained backbone has trained on.)"""
    from sampler_server.store.reader import StoreReader

    data, _, stub = cog
    reader = StoreReader(data / "ilsvrc_2012")
    manifest = reader.manifest
    test = stub.GetCogSplit(request("IN-1K", "test"))
    assert len(test.record_ids) and min(test.record_ids) >= manifest.num_records  # no train-partition record
    assert list(test.partitions) == ["validation"] * len(test.record_ids)
    held_out = manifest.validation
    ranges = {info.wnid: held_out.ranges[info.id] for info in manifest.classes}
    validation_dir = data.parent / "original" / "ilsvrc_2012_val"
    labels = list(test.labels)
    for label, wnid in enumerate(test.wnids):
        ids = [r for r, l in zip(test.record_ids, labels) if l == label]
        assert ids == list(range(*ranges[wnid]))  # the class's validation records, all of them, in name order
        assert [reader.read(r).origin for r in ids] == sorted(p.name for p in (validation_dir / wnid).iterdir())
    train = stub.GetCogSplit(request("IN-1K", "train"))
    assert list(train.record_ids) == list(range(manifest.num_records))  # every train image, none held out
    assert set(train.partitions) == {"train"}
    for split, shots, seed in (("val", 0, 1), ("search", 4, 2), ("train", 2, 3)):
        drawn = stub.GetCogSplit(request("IN-1K", split, shots, seed))
        assert set(drawn.record_ids) <= set(train.record_ids) and set(drawn.partitions) == {"train"}
    listing = cli_split(data, capsys, "IN-1K", "test")
    assert [r["record_id"] for r in listing["records"]] == list(test.record_ids)
    assert {r["partition"] for r in listing["records"]} == {"validation"} and listing["fingerprint"] == test.fingerprint
    batches = list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(split=request("IN-1K", "test"), images=SMALL)))
    assert [r for b in batches for r in b.record_ids] == list(test.record_ids)
    assert batches[0].images.shape[1:] == [16, 16, 3]


def test_in1k_without_a_validation_partition_is_failed_precondition_everywhere(tmp_path, capsys):
    """Nothing falls back to train images: the split, its stream and the CLI refuse, naming the
    pack command that adds the validation images; the levels listing leaves IN-1K out and says
    why in ``unavailable`` (so L1..L5 stay servable beside an MD store packed without it)."""
    from sampler_server.service.server import RunningServer, ServerConfig

    fixture = generate_fixture("ilsvrc_2012", tmp_path, num_classes=2, images_per_class=3)
    pack_fixture(fixture, tmp_path / "data", name="ilsvrc_2012", converter_overrides={"validation": None})
    text = ("level IN-1K: store ilsvrc_2012 has no validation partition; IN-1K tests on ILSVRC-2012's official "
            "validation images (never on train images): repack it with `sampler-server pack ilsvrc_2012 --input "
            "TRAIN_DIR --validation VAL_DIR`")
    server = RunningServer(ServerConfig(data_dir=tmp_path / "data", port=0, workers=1, threads=4,
                                        grace_seconds=0.5)).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.SamplerStub(channel)
            listing = stub.ListCogLevels(pb.ListCogLevelsRequest())
            assert [summary.level for summary in listing.levels] == []
            assert dict(listing.unavailable) == {"IN-1K": text}
            calls = [lambda: stub.GetCogSplit(request("IN-1K", "test")),
                     lambda: stub.GetCogSplit(request("IN-1K", "train", 2, 1)),
                     lambda: list(stub.StreamCogBatches(pb.StreamCogBatchesRequest(split=request("IN-1K", "test"),
                                                                                   images=SMALL)))]
            for call in calls:
                with pytest.raises(grpc.RpcError) as caught:
                    call()
                assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert caught.value.details() == text
    finally:
        server.stop(grace=0.5)
    capsys.readouterr()
    assert main(["cog", "split", "--data", str(tmp_path / "data"), "--level", "IN-1K", "--split", "test"]) != 0
    assert capsys.readouterr().err == f"sampler-server cog: error: {text}\n"


def test_stream_window_and_batch_size_are_checked(cog):
    _, address, stub = cog
    split = request("L1", "test")  # 200 images: batches 0..1 at 128
    for message, text in (
        (pb.StreamCogBatchesRequest(split=split, batch_size=128, start_index=2, images=SMALL),
         "start_index: got 2, expected 0 to 1 (the last batch of 200 images at batch_size 128)"),
        (pb.StreamCogBatchesRequest(split=split, batch_size=5000, images=SMALL),
         "batch_size: got 5000, expected an integer in [1, 4096]"),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.StreamCogBatches(message))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in caught.value.details()
    with SamplerClient(address) as client, pytest.raises(SamplerClientError, match="INVALID_ARGUMENT: level: got 'L0'"):
        next(iter(client.stream_cog_batches("L0", "test")))


def test_levels_need_a_served_store(tmp_path, capsys):
    from sampler_server.service.server import RunningServer, ServerConfig

    fixture = generate_fixture("ilsvrc_2012", tmp_path, num_classes=2, images_per_class=3)
    pack_fixture(fixture, tmp_path / "data", name="ilsvrc_2012")
    server = RunningServer(ServerConfig(data_dir=tmp_path / "data", port=0, workers=1, threads=4,
                                        grace_seconds=0.5)).start()
    try:
        with SamplerClient(server.address) as client:
            assert [s.level for s in client.cog_levels()] == ["IN-1K"]
            with pytest.raises(SamplerClientError, match="NOT_FOUND: level L2: the server has no imagenet21k store"):
                client.cog_split("L2", "test")
    finally:
        server.stop(grace=0.5)
    capsys.readouterr()
    assert main(["cog", "split", "--data", str(tmp_path / "data"), "--level", "L2", "--split", "test"]) != 0
    assert f"level L2: --data {tmp_path / 'data'} has no imagenet21k store (pack it with" in capsys.readouterr().err


def test_cli_text_output_and_an_unsharded_pack_give_the_same_split(cog, capsys, tmp_path, tmp_path_factory):
    data, _, _ = cog
    listing = cli_split(data, capsys, "L5", "search", 8, 2)
    assert main(["cog", "split", "--data", str(data), "--level", "L5", "--split", "search", "--shots", "8", "--seed", "2",
                 "--level-size", "4", "--min-images", "60"]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    assert head == (f"L5 search 8-shot seed 2: {listing['count']} records, 4 concepts, store imagenet21k, "
                    f"fingerprint {listing['fingerprint']}")
    assert [row.split() for row in rows] == [[str(r["record_id"]), str(r["label"]), r["wnid"]]
                                             for r in listing["records"]]
    whole = tmp_path / "whole"
    assert main(["pack", "imagenet21k", "--input", str(cog_layout(tmp_path_factory)), "--output", str(whole),
                 "--quiet", "--workers", "2"]) == 0
    assert cli_split(whole, capsys, "L5", "search", 8, 2) == listing


def test_level_configurations_a_client_names_are_cached_within_a_bound(cog):
    """Any client may name any (level_size, min_images): each is computed (a walk of WordNet),
    and the cache of them stays bounded, least recently used first out."""
    from sampler_server.catalog.cog import LEVELS_CACHE
    from sampler_server.service.server import RunningServer, ServerConfig

    data, _, _ = cog
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.SamplerStub(channel)
            configs = [(LEVEL_SIZE, MIN_IMAGES - k) for k in range(LEVELS_CACHE + 2)]
            for level_size, min_images in configs:
                reply = stub.ListCogLevels(pb.ListCogLevelsRequest(level_size=level_size, min_images=min_images))
                assert reply.min_images == min_images
        cached = server.servicer.cog.catalog._levels
        assert len(cached) == LEVELS_CACHE
        assert [key[1:] for key in cached] == configs[-LEVELS_CACHE:]
    finally:
        server.stop(grace=0.2)
