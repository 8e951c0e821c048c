"""``pack vtab``, ``vtab tasks``, ``vtab split`` as a user runs them, and serving beside MD stores."""

from __future__ import annotations

import json

import grpc
import pytest
import tfds_builders as tb
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)
from conftest import generate_fixture, pack_fixture, start_serve

from sampler_server.cli.main import main
from sampler_server.core.vtab import get_task
from sampler_server.store.reader import StoreReader
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def data(tfds_dir, tmp_path_factory):
    """A data directory with an MD store (image_folder) and the CLEVR and KITTI TFDS stores."""
    root = tmp_path_factory.mktemp("vtab-cli")
    pack_fixture(generate_fixture("image_folder", root, num_classes=14, images_per_class=6), root / "data",
                 name="folder")
    for name in ("clevr", "kitti"):
        assert main(["pack", "vtab", "--tfds-name", name, "--tfds-data-dir", str(tfds_dir),
                     "--output", str(root / "data"), "--quiet", "--workers", "1"]) == 0
    return root / "data"


def test_pack_vtab_prints_tfds_splits_and_json_summary(tfds_dir, tmp_path, capsys):
    code, out, err = _run(capsys, "pack", "vtab", "--tfds-name", "dsprites", "--tfds-data-dir", tfds_dir,
                          "--output", tmp_path, "--quiet", "--workers", "1")
    assert code == 0, err
    assert f"packed tfds:dsprites -> {tmp_path / 'tfds_dsprites'}" in out
    assert "  tfds     dsprites 2.0.0: train 60 records; attributes label_orientation, label_x_position" in out
    code, out, err = _run(capsys, "pack", "vtab", "--tfds-name", "dsprites:2.*.*", "--tfds-data-dir", tfds_dir,
                          "--output", tmp_path, "--name", "dsprites_raw", "--raw-size", "8", "--json", "--workers", "1")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["tfds"] == {"name": "dsprites", "version": "2.0.0", "split_sizes": {"train": 60},
                               "records": {"train": 60}, "attributes": ["label_orientation", "label_x_position"]}
    assert summary["store"] == str(tmp_path / "dsprites_raw") and summary["images"] == 60
    code, out, _ = _run(capsys, "inspect", tmp_path, "--json")
    fingerprints = {store["name"]: store["fingerprint"] for store in json.loads(out)["stores"]}
    assert fingerprints["dsprites_raw"] == fingerprints["tfds_dsprites"] == summary["fingerprint"]


def test_vtab_tasks_lists_one_entry_per_task_of_each_packed_dataset(data, capsys):
    code, out, err = _run(capsys, "vtab", "tasks", "--data", data, "--json")
    assert code == 0, err
    entries = {entry["task"]: entry for entry in json.loads(out)["tasks"]}
    assert sorted(entries) == ["clevr_count", "clevr_distance", "kitti_distance"]
    count = entries["clevr_count"]
    assert (count["group"], count["store"], count["tfds"], count["num_classes"]) == ("structured", "tfds_clevr", "clevr:3.1.0", 8)
    assert count["tfds_split_sizes"] == {"train": 70, "validation": 40}
    assert count["splits"]["test"] == 40 and count["splits"]["val"] == 7 and count["splits"]["train"] == 63
    assert "train800" in count["unavailable"]  # 70 training examples cannot give train[:800]
    assert entries["kitti_distance"]["num_classes"] == 4
    code, out, _ = _run(capsys, "vtab", "tasks", "--data", data)
    assert code == 0 and "clevr_distance" in out and "store tfds_clevr (clevr:3.1.0)" in out


def test_vtab_split_matches_tfds_slicing_of_the_task_spec(data, tfds_dir, capsys):
    task = get_task("clevr_count")
    code, out, err = _run(capsys, "vtab", "split", "--data", data, "--task", "clevr_count", "--split", "val", "--json")
    assert code == 0, err
    listing = json.loads(out)
    assert (listing["count"], listing["num_classes"], listing["store"]) == (7, 8, "tfds_clevr")
    spec = task.spec("val", {"train": 70, "validation": 40})
    builder = tb.tfds.builder_from_directory(str(tfds_dir / "clevr" / "3.1.0"))
    reference = list(tb.tfds.as_numpy(builder.as_dataset(split=spec, decoders={"image": tb.tfds.decode.SkipDecoding()})))
    reader = StoreReader(data / "tfds_clevr")
    assert len(reference) == len(listing["records"])
    for entry, example in zip(listing["records"], reference):
        assert reader.read(entry["record_id"]).payload == bytes(example["image"])
        assert entry["tfds_split"] == "train" and entry["label"] == len(example["objects"]["pixel_coords"]) - 3
    assert [entry["tfds_index"] for entry in listing["records"]] == list(range(63, 70))
    code, out, _ = _run(capsys, "vtab", "split", "--data", data, "--task", "clevr_count", "--split", "val", "--json")
    assert json.loads(out)["fingerprint"] == listing["fingerprint"]
    code, out, _ = _run(capsys, "vtab", "split", "--data", data, "--task", "clevr_distance", "--split", "val", "--json")
    assert json.loads(out)["fingerprint"] != listing["fingerprint"]
    code, out, _ = _run(capsys, "vtab", "split", "--data", data, "--task", "kitti_distance", "--split", "test")
    assert code == 0 and out.startswith("kitti_distance test: 20 records, 4 classes, store tfds_kitti, fingerprint sha256:")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pack", "vtab", "--tfds-data-dir", "{tfds}", "--output", "{tmp}/o"], "pack vtab needs --tfds-name"),
        (["pack", "vtab", "--tfds-name", "clevr", "--output", "{tmp}/o"], "pack vtab needs --tfds-data-dir"),
        (["pack", "vtab", "--tfds-name", "clevr", "--input", "{tmp}", "--output", "{tmp}/o"],
         "--input does not apply to source 'vtab' (it reads --tfds-data-dir)"),
        (["pack", "dtd", "--input", "{tmp}", "--tfds-data-dir", "{tmp}", "--output", "{tmp}/o"],
         "--tfds-data-dir does not apply to source 'dtd'"),
        (["pack", "dtd", "--input", "{tmp}", "--tfds-name", "dtd", "--output", "{tmp}/o"],
         "--tfds-name does not apply to source 'dtd'"),
        (["pack", "vtab", "--tfds-name", "kitti:3.3.0", "--tfds-data-dir", "{tfds}", "--output", "{tmp}/o"],
         "no version 3.3.0 of TFDS dataset 'kitti' (versions here: 3.1.0)"),
        (["vtab", "split", "--data", "{data}", "--task", "nosuch", "--split", "val"], "unknown VTAB task 'nosuch'"),
        (["vtab", "split", "--data", "{data}", "--task", "clevr_count", "--split", "dev"], "split: got 'dev', expected one of train800, val200, "),
        (["vtab", "split", "--data", "{data}", "--task", "cifar100", "--split", "val"],
         "no store in {data} holds TFDS dataset 'cifar100'"),
        (["vtab", "split", "--data", "{data}", "--task", "clevr_count", "--split", "train800"],
         "which has 70 examples"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(data, tfds_dir, tmp_path, capsys, argv, message):
    fill = {"tmp": tmp_path, "tfds": tfds_dir, "data": data}
    code, out, err = _run(capsys, *[a.format(**fill) for a in argv])
    assert code == 2, out
    assert message.format(**fill) in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("sampler-server ")
    assert not (tmp_path / "o").exists()


def test_serve_with_md_and_vtab_stores_keeps_serving_md_episodes(data):
    process, address = start_serve(data, "--workers", "1")
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.SamplerStub(channel)
            sources = {s.name: s for s in stub.ListSources(pb.ListSourcesRequest()).sources}
            assert set(sources) == {"folder", "tfds_clevr", "tfds_kitti"}
            clevr = sources["tfds_clevr"]
            assert clevr.source == "tfds:clevr" and clevr.num_records == 110
            assert (clevr.train_classes, clevr.valid_classes, clevr.test_classes) == (0, 0, 0)
            request = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, images=pb.ImageOptions(image_size=16))
            first = stub.GetEpisode(pb.GetEpisodeRequest(request=request, index=0))
            vtab = pb.EpisodeRequest(sources=["tfds_clevr"], split=pb.SPLIT_TRAIN, images=pb.ImageOptions(image_size=16))
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetEpisode(pb.GetEpisodeRequest(request=vtab, index=0))
            assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "is a TFDS (VTAB) store" in refused.value.details()
            again = stub.GetEpisode(pb.GetEpisodeRequest(request=request, index=0))
            assert again.fingerprint == first.fingerprint and len(first.support_labels.data) > 0
    finally:
        process.kill()
        process.wait(timeout=30)
