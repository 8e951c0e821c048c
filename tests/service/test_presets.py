"""Benchmark variants over gRPC on a real ILSVRC-2012 store of all 1000 classes.

Every request that picks or reports classes by split names its variant: MD-v1
splits ILSVRC 712/158/130 by WordNet, MD-v2 puts all 1000 classes in train. Batches,
episodes, ListSources and DescribeSource must all agree with that, and
``sampler-server batches --json`` must print exactly what StreamBatches sends (run
in-process: the command's output is the point, not a fresh interpreter's start-up).
"""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, run_pack
from sampler_server.pack.plan import ConverterOptions
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

IMAGES_PER_CLASS = 2


@pytest.fixture(scope="module")
def ilsvrc(tmp_path_factory, shared_reference):
    """A packed ILSVRC store: the real 1000 wnids, two tiny JPEGs each, and a server over it."""
    wnids = sorted(json.loads((shared_reference / "md_specs" / "ilsvrc_2012_num_leaf_images.json").read_text()))
    assert len(wnids) == 1000
    root = tmp_path_factory.mktemp("ilsvrc")
    train = root / "ILSVRC2012_img_train"
    rng = np.random.RandomState(0)
    for wnid in wnids:
        (train / wnid).mkdir(parents=True)
        for number in range(IMAGES_PER_CLASS):
            pixels = rng.randint(0, 256, size=(12, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(train / wnid / f"{wnid}_{number}.JPEG", quality=90)
    data = root / "data"
    plan = sources.get_converter("ilsvrc_2012").plan(train, ConverterOptions())
    run_pack(plan, data, PackOptions(progress=False, workers=2))
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    yield data, pb_grpc.SamplerStub(channel)
    channel.close()
    server.stop(grace=0.5)


def _train_class_ids(stub, preset: str) -> set[int]:
    description = stub.DescribeSource(pb.DescribeSourceRequest(name="ilsvrc_2012", preset=preset))
    assert description.summary.preset == (preset or "md-v1")
    return {c.class_id for c in description.classes if c.split == pb.SPLIT_TRAIN}


def test_sources_and_descriptions_report_the_variant_asked_for(ilsvrc):
    _, stub = ilsvrc
    (v1,) = stub.ListSources(pb.ListSourcesRequest()).sources
    assert (v1.preset, v1.train_classes, v1.valid_classes, v1.test_classes) == ("md-v1", 712, 158, 130)
    (v2,) = stub.ListSources(pb.ListSourcesRequest(preset="md-v2")).sources
    assert (v2.preset, v2.train_classes, v2.valid_classes, v2.test_classes) == ("md-v2", 1000, 0, 0)
    assert len(_train_class_ids(stub, "")) == 712
    assert len(_train_class_ids(stub, "md-v2")) == 1000
    with pytest.raises(grpc.RpcError) as caught:
        stub.ListSources(pb.ListSourcesRequest(preset="md-v3"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "preset: got 'md-v3', expected one of md-v1, md-v2" in caught.value.details()


def _epoch_of_batches(stub, preset: str, batch_size: int = 200) -> list[pb.Batch]:
    request = pb.StreamBatchesRequest(
        source="ilsvrc_2012", split=pb.SPLIT_TRAIN, seed=3, batch_size=batch_size, count=10, preset=preset,
        images=pb.ImageOptions(image_size=8),
    )
    return list(stub.StreamBatches(request))


@pytest.mark.parametrize("preset, classes", [("md-v1", 712), ("md-v2", 1000)])
def test_batches_cover_exactly_the_variants_train_classes(ilsvrc, preset, classes):
    _, stub = ilsvrc
    batches = _epoch_of_batches(stub, preset)
    train = _train_class_ids(stub, preset)
    records = [r for b in batches for r in b.record_ids]
    assert {b.num_classes for b in batches} == {classes}
    assert {b.preset for b in batches} == {preset}
    # the first epoch visits every train record once (10 x 200 >= 1000 x 2 records)
    epoch_size = classes * IMAGES_PER_CLASS
    assert sorted(records[:epoch_size]) == sorted(
        r for c in sorted(train) for r in range(c * IMAGES_PER_CLASS, (c + 1) * IMAGES_PER_CLASS)
    )
    labels = np.concatenate([np.frombuffer(b.labels.data, dtype=np.int64) for b in batches])
    assert set(labels.tolist()) == set(range(classes))


def test_batches_command_prints_what_the_server_sends(ilsvrc, capsys):
    data, stub = ilsvrc
    for preset in ("md-v1", "md-v2"):
        sent = _epoch_of_batches(stub, preset)[3:6]
        capsys.readouterr()
        assert main(["batches", "--data", str(data), "--source", "ilsvrc_2012", "--split", "train", "--seed", "3",
                     "--index", "3", "--count", "3", "--batch-size", "200", "--preset", preset, "--json"]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert len(printed) == 3
        for line, message in zip(printed, sent):
            batch = json.loads(line)
            assert batch["fingerprint"] == message.fingerprint
            assert batch["record_ids"] == list(message.record_ids)
            assert batch["labels"] == np.frombuffer(message.labels.data, dtype=np.int64).tolist()
            assert (batch["epoch"], batch["index"], batch["preset"]) == (message.epoch, message.index, preset)


def _episode(stub, preset: str, split: int, index: int) -> pb.Episode:
    request = pb.EpisodeRequest(sources=["ilsvrc_2012"], preset=preset, split=split, seed=5,
                                config=pb.EpisodeConfig(num_support=1, num_query=1),
                                images=pb.ImageOptions(image_size=8))
    return stub.GetEpisode(pb.GetEpisodeRequest(request=request, index=index))


def test_episodes_of_both_variants_draw_from_their_splits(ilsvrc):
    _, stub = ilsvrc
    for preset, split, allowed in (
        ("md-v1", pb.SPLIT_TRAIN, _train_class_ids(stub, "md-v1")),
        ("md-v2", pb.SPLIT_TRAIN, _train_class_ids(stub, "md-v2")),
    ):
        seen: set[int] = set()
        for index in range(20):
            episode = _episode(stub, preset, split, index)
            assert episode.preset == preset
            seen |= {c.class_id for c in episode.classes}
        assert seen <= allowed
        if preset == "md-v2":
            # MD-v2 train includes what MD-v1 holds out (carnivores, devices)
            assert seen - _train_class_ids(stub, "md-v1")
    valid_v1 = {c.class_id for c in stub.DescribeSource(pb.DescribeSourceRequest(name="ilsvrc_2012")).classes
                if c.split == pb.SPLIT_VALID}
    assert {c.class_id for c in _episode(stub, "md-v1", pb.SPLIT_VALID, 0).classes} <= valid_v1
    with pytest.raises(grpc.RpcError) as caught:
        _episode(stub, "md-v2", pb.SPLIT_VALID, 0)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "has no classes in it" in caught.value.details()
