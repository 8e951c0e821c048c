"""``trainval1000`` against TFDS itself: the first 1000 examples of TFDS's default read.

task_adaptation's ``run_all_tasks.sh`` trains on ``data.take(1000)`` of TFDS's default
read of the task's trainval expression (``../shared/reference/vtab.md``, "Caveat" and
"Full splits"). Here datasets are written by TFDS's own writer with several shards per
split (uneven; more than 16 files, so interleave's slot refill matters; shards that end
exactly on a block of 16; a trainval that slices ``train[:N]`` or cuts a test shard in
two), read back with ``builder.as_dataset(split=<trainval expression>,
shuffle_files=False).take(1000)``, and compared example by example, in order, with
what ``sampler-server vtab split`` lists and what the server streams. Every fixture
image encodes its example's own number, so image bytes identify examples.
"""

from __future__ import annotations

import json
import shutil

import grpc
import pytest
import tfds_builders as tb

from sampler_server.cli.main import main
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import decode_record
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

tfds = tb.tfds
pytestmark = pytest.mark.slow

# task -> (builder, config, SIZES, shard files per split, the reference's trainval expression)
CASES = {
    "dtd": (tb.TestDtd, None, {"train": 817, "validation": 203, "test": 30},
            {"train": 3, "validation": 2, "test": 1}, "train+validation"),
    "caltech101": (tb.TestCaltech101, None, {"train": 2010, "test": 30}, {"train": 48, "test": 1}, "train"),
    "dmlab": (tb.TestDmlab, None, {"train": 1024, "validation": 210, "test": 30},
              {"train": 32, "validation": 2, "test": 1}, "train+validation"),  # 32 per train shard: 2 blocks
    "eurosat": (tb.TestEurosat, "rgb", {"train": 1340}, {"train": 30}, "train[:1072]"),  # 60% + 20% of 1340
    "smallnorb_azimuth": (tb.TestSmallnorb, None, {"train": 810, "test": 420}, {"train": 20, "test": 3},
                          "train+test[:50%]"),  # test[:50%] ends inside the second of 3 test shards
}
TFDS_NAMES = {"dtd": "dtd", "caltech101": "caltech101", "dmlab": "dmlab", "eurosat": "eurosat/rgb",
              "smallnorb_azimuth": "smallnorb"}
OLD_STORE = "tfds_dtd_before_shard_layout"


def _pack(name: str, tfds_data, data) -> None:
    assert main(["pack", "vtab", "--tfds-name", name, "--tfds-data-dir", str(tfds_data), "--output", str(data),
                 "--quiet", "--workers", "1"]) == 0


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Each case's dataset prepared by TFDS and packed; a copy of DTD's store whose manifest
    lacks what a store packed before this change lacks; a server over them all."""
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("trainval1000")
    data = root / "data"
    versions = {}
    for task, (builder_cls, config, sizes, shards, _) in CASES.items():
        versions[task] = tb.prepare(builder_cls, root / "tfds", shards=shards, config=config, SIZES=sizes)
        _pack(TFDS_NAMES[task], root / "tfds", data)
    shutil.copytree(data / "tfds_dtd", data / OLD_STORE)
    manifest_path = data / OLD_STORE / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["name"] = OLD_STORE
    manifest["tfds"].pop("disable_shuffling", None)
    manifest_path.write_text(json.dumps(manifest))
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    yield versions, data, pb_grpc.SamplerStub(channel)
    channel.close()
    server.stop(grace=0.5)


def _images(version_dir, split: str, read_config=None, count: int = 1000) -> list[bytes]:
    builder = tfds.builder_from_directory(str(version_dir))
    undecoded = {name: tfds.decode.SkipDecoding() for name, feature in builder.info.features.items()
                 if isinstance(feature, tfds.features.Image)}  # smallNORB's image2 too
    dataset = builder.as_dataset(split=split, shuffle_files=False, decoders=undecoded,
                                 **({"read_config": read_config} if read_config else {}))
    images = dataset.take(count).map(lambda example: example["image"]).batch(4096)  # in order; a step per batch
    return [bytes(image) for batch in tfds.as_numpy(images) for image in batch]


def _listing(data, task: str, split: str, capsys, store: str | None = None) -> dict:
    capsys.readouterr()
    extra = ["--store", store] if store else []
    assert main(["vtab", "split", "--data", str(data), "--task", task, "--split", split, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _stored(data, listing: dict) -> list[bytes]:
    values = StoreReader(data / listing["store"]).read_values([entry["record_id"] for entry in listing["records"]])
    return [bytes(decode_record(value).payload) for value in values]  # one read transaction


def test_the_datasets_are_sharded_as_the_cases_say(prepared):
    versions, _, _ = prepared
    for task, (_, _, sizes, shards, _) in CASES.items():
        info = tfds.builder_from_directory(str(versions[task])).info
        assert {name: len(split.shard_lengths) for name, split in info.splits.items()} == shards
        assert {name: split.num_examples for name, split in info.splits.items()} == sizes
        assert not info.disable_shuffling


@pytest.mark.parametrize("task", list(CASES))
def test_trainval1000_is_tfds_default_read_take_1000(task, prepared, capsys):
    versions, data, stub = prepared
    expression = CASES[task][-1]
    reference = _images(versions[task], expression)  # TFDS's default read config
    everything = _images(versions[task], expression, tfds.ReadConfig(interleave_cycle_length=1), count=-1)
    position = {image: index for index, image in enumerate(everything)}  # canonical position in trainval
    assert len(reference) == 1000 and len(position) == len(everything)  # bytes identify examples
    assert [position[image] for image in reference] != list(range(1000))  # the two orders differ here

    listing = _listing(data, task, "trainval1000", capsys)
    assert listing["count"] == 1000
    assert [position[image] for image in _stored(data, listing)] == [position[image] for image in reference]
    canonical = _stored(data, _listing(data, task, "trainval1000-canonical", capsys))
    assert [position[image] for image in canonical] == list(range(1000))

    batches = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task=task, split="trainval1000", batch_size=300, store=listing["store"],
        images=pb.ImageOptions(mode=pb.IMAGE_MODE_ENCODED))))
    assert [bytes(image) for batch in batches for image in batch.encoded.data] == reference
    assert [r for batch in batches for r in batch.record_ids] == [r["record_id"] for r in listing["records"]]
    assert {batch.split_fingerprint for batch in batches} == {listing["fingerprint"]}


def test_dtd_trainval1000_reads_validation_files_too(prepared, capsys):
    _, data, _ = prepared
    listing = _listing(data, "dtd", "trainval1000", capsys)
    splits = [entry["tfds_split"] for entry in listing["records"]]
    assert splits.count("validation") > 150  # two of five files are validation


def test_a_store_packed_without_the_shard_layout_refuses_trainval1000_only(prepared, capsys):
    versions, data, stub = prepared
    request = pb.StreamTaskBatchesRequest(task="dtd", split="trainval1000", batch_size=100, store=OLD_STORE,
                                          images=pb.ImageOptions(mode=pb.IMAGE_MODE_ENCODED))
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamTaskBatches(request))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    message = caught.value.details()
    assert "\n" not in message and "re-pack" in message and "sampler-server pack vtab --tfds-name dtd" in message

    listed = [t for t in stub.ListTasks(pb.ListTasksRequest(task="dtd")).tasks if t.store == OLD_STORE]
    sizes = {size.split: size for size in listed[0].splits}
    assert not sizes["trainval1000"].available and "re-pack" in sizes["trainval1000"].reason
    assert sizes["trainval1000-canonical"].available and sizes["trainval1000-canonical"].size == 1000
    assert sizes["train800"].available and sizes["train800"].size == 800

    request.split = "trainval1000-canonical"
    canonical = [bytes(image) for batch in stub.StreamTaskBatches(request) for image in batch.encoded.data]
    assert canonical == _images(versions["dtd"], "train+validation", tfds.ReadConfig(interleave_cycle_length=1))
    assert main(["vtab", "split", "--data", str(data), "--task", "dtd", "--split", "trainval1000",
                 "--store", OLD_STORE]) != 0
    assert "re-pack" in capsys.readouterr().err
