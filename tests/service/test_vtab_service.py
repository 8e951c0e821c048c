"""VTAB-1k over gRPC: task batches and the full-way episode equal `sampler-server vtab split`;
resumption; bounded chunks; task results into the VTAB tables; bad inputs' statuses."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
import tfds_builders as tb
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

IMAGES = pb.ImageOptions(image_size=16)


BIG_KITTI = {"train": 800, "validation": 200, "test": 30}  # enough for train800val200


def _pack(name: str, tfds_data: object, out: object) -> None:
    assert main(["pack", "vtab", "--tfds-name", name, "--tfds-data-dir", str(tfds_data), "--output", str(out),
                 "--quiet", "--workers", "1"]) == 0


@pytest.fixture(scope="module")
def vtab(tfds_dir, tmp_path_factory):
    """A server over the CLEVR store and a KITTI store holding train800val200."""
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("vtab-service")
    big = root / "tfds"
    tb.prepare(tb.TestKitti, big, shards=2, SIZES=BIG_KITTI)
    data = root / "data"
    _pack("clevr", tfds_dir, data)
    _pack("kitti", big, data)
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    yield data, server.address, pb_grpc.SamplerStub(channel)
    channel.close()
    server.stop(grace=0.5)


def split_listing(data, task: str, split: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["vtab", "split", "--data", str(data), "--task", task, "--split", split, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_tasks_shows_served_tasks_and_split_availability(vtab):
    _, _, stub = vtab
    tasks = {t.task: t for t in stub.ListTasks(pb.ListTasksRequest()).tasks}
    assert sorted(tasks) == ["clevr_count", "clevr_distance", "kitti_distance"]
    kitti = tasks["kitti_distance"]
    assert (kitti.group, kitti.store, kitti.tfds, kitti.num_classes) == ("structured", "tfds_kitti", "kitti:3.1.0", 4)
    splits = {s.split: s for s in kitti.splits}
    assert splits["train800val200"].available and splits["train800val200"].size == 1000
    assert splits["test"].size == 30
    clevr = {s.split: s for s in tasks["clevr_count"].splits}
    assert not clevr["train800"].available and clevr["train800"].reason
    assert dict(tasks["clevr_count"].tfds_split_sizes) == {"train": 70, "validation": 40}


def test_eval_batches_equal_the_cli_split_in_order(vtab, capsys):
    data, _, stub = vtab
    listing = split_listing(data, "clevr_count", "test", capsys)
    batches = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task="clevr_count", split="test", batch_size=16, images=IMAGES)))
    assert [len(b.record_ids) for b in batches] == [16, 16, 8]  # every example once, the last batch short
    assert [b.last for b in batches] == [False, False, True]
    ids = [r for b in batches for r in b.record_ids]
    labels = [int(v) for b in batches for v in np.frombuffer(b.labels.data, np.int64)]
    assert ids == [r["record_id"] for r in listing["records"]]
    assert labels == [r["label"] for r in listing["records"]]
    assert {b.split_fingerprint for b in batches} == {listing["fingerprint"]}
    assert batches[0].images.shape == [16, 16, 16, 3] and batches[0].resize == pb.RESIZE_METHOD_LEGACY_BILINEAR
    assert batches[0].num_classes == 8 and not batches[0].shuffle


def test_shuffled_batches_cover_each_epoch_and_resume_identically(vtab, capsys):
    data, _, stub = vtab
    listing = split_listing(data, "clevr_distance", "train", capsys)
    label_of = {r["record_id"]: r["label"] for r in listing["records"]}
    request = pb.StreamTaskBatchesRequest(task="clevr_distance", split="train", seed=7, batch_size=21,
                                          shuffle=True, count=6, images=IMAGES)
    batches = list(stub.StreamTaskBatches(request))
    assert len(batches) == 6 and batches[-1].last
    first_epoch = [r for b in batches[:3] for r in b.record_ids]  # 63 examples, 3 batches
    assert sorted(first_epoch) == sorted(label_of) and first_epoch != sorted(first_epoch)
    assert [b.epoch for b in batches] == [0, 0, 0, 1, 1, 1]
    for batch in batches:
        assert [label_of[r] for r in batch.record_ids] == list(np.frombuffer(batch.labels.data, np.int64))
        assert batch.split_fingerprint == listing["fingerprint"]
    request.start_index, request.count = 4, 2
    resumed = list(stub.StreamTaskBatches(request))
    assert [b.SerializeToString() for b in resumed] == [b.SerializeToString() for b in batches[4:]]
    request.seed, request.start_index = 8, 0
    assert list(stub.StreamTaskBatches(request))[0].fingerprint != batches[0].fingerprint


def test_full_way_episode_is_train800val200_then_test_in_bounded_chunks(vtab, capsys):
    data, _, stub = vtab
    support = split_listing(data, "kitti_distance", "train800val200", capsys)
    query = split_listing(data, "kitti_distance", "test", capsys)
    chunks = list(stub.StreamTaskEpisode(pb.StreamTaskEpisodeRequest(task="kitti_distance", chunk_size=128,
                                                                      images=pb.ImageOptions(image_size=8))))
    assert max(len(c.record_ids) for c in chunks) <= 128 and len(chunks) == 8 + 1
    assert [c.index for c in chunks] == list(range(9)) and chunks[-1].last and chunks[0].num_chunks == 9
    for part, listing in ((pb.EPISODE_PART_SUPPORT, support), (pb.EPISODE_PART_QUERY, query)):
        mine = [c for c in chunks if c.part == part]
        assert [r for c in mine for r in c.record_ids] == [r["record_id"] for r in listing["records"]]
        assert [int(v) for c in mine for v in np.frombuffer(c.labels.data, np.int64)] == \
            [r["label"] for r in listing["records"]]
        assert all(c.images.shape == [len(c.record_ids), 8, 8, 3] for c in mine)
    assert chunks[0].support_fingerprint == support["fingerprint"]
    assert chunks[0].query_fingerprint == query["fingerprint"]
    assert (chunks[0].support_size, chunks[0].query_size, chunks[0].num_classes) == (1000, 30, 4)
    resumed = list(stub.StreamTaskEpisode(pb.StreamTaskEpisodeRequest(
        task="kitti_distance", chunk_size=128, start_index=7, images=pb.ImageOptions(image_size=8))))
    assert [c.SerializeToString() for c in resumed] == [c.SerializeToString() for c in chunks[7:]]


def test_task_results_reach_the_vtab_tables(vtab):
    _, _, stub = vtab
    report = pb.MetricReport(run_id="vtab-run", protocol="vtab-task", task="clevr_count", task_split="test",
                             examples=40, metrics={"accuracy": 0.625})
    reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report], run_config_json="{}"))
    assert (reply.stored, reply.duplicates) == (1, 0)
    again = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report]))
    assert (again.stored, again.duplicates) == (0, 1)
    text = stub.GetReport(pb.GetReportRequest(run_ids=["vtab-run"], table="vtab")).text
    assert "clevr_count" in text and "62.5" in text
    table = json.loads(stub.GetReport(pb.GetReportRequest(run_ids=["vtab-run"], table="vtab-md", format="json")).text)
    assert "vtab-run" in json.dumps(table)


@pytest.mark.parametrize(("request_", "code", "words"), [
    (pb.StreamTaskBatchesRequest(task="nope", split="test", batch_size=4), grpc.StatusCode.INVALID_ARGUMENT,
     ["nope", "clevr_count"]),
    (pb.StreamTaskBatchesRequest(task="clevr_count", split="tset", batch_size=4), grpc.StatusCode.INVALID_ARGUMENT,
     ["tset", "train800val200"]),
    (pb.StreamTaskBatchesRequest(task="clevr_count", split="train800", batch_size=4),
     grpc.StatusCode.FAILED_PRECONDITION, ["train800", "tfds_clevr"]),
    (pb.StreamTaskBatchesRequest(task="dsprites_location", split="test", batch_size=4), grpc.StatusCode.NOT_FOUND,
     ["dsprites", "clevr_count"]),
    (pb.StreamTaskBatchesRequest(task="clevr_count", split="test", batch_size=4, start_index=10),
     grpc.StatusCode.INVALID_ARGUMENT, ["start_index", "9"]),
])
def test_bad_inputs_get_one_line_statuses(vtab, request_, code, words):
    _, _, stub = vtab
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamTaskBatches(request_))
    assert caught.value.code() == code
    assert "\n" not in caught.value.details()
    for word in words:
        assert word in caught.value.details()


def test_bad_report_and_table_are_invalid_arguments(vtab):
    _, _, stub = vtab
    for report in (pb.MetricReport(run_id="r", protocol="vtab-task", task="nope", task_split="test", examples=1,
                                   metrics={"accuracy": 0.5}),
                   pb.MetricReport(run_id="r", protocol="vtab-task", task="clevr_count", task_split="test",
                                   examples=1)):
        with pytest.raises(grpc.RpcError) as caught:
            stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report]))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetReport(pb.GetReportRequest(run_ids=["vtab-run"], table="cogs"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "vtab-md" in caught.value.details()
