"""Control baselines on a packed source that is not a VTAB task (``source:<store>``): GetRegime equals
`sampler-server regime --json`; ListTasks lists the source when named; batches of its held-out splits
and regime parts hold exactly those records; the calibrated report's blind risk is the source's; a
torch transfer run at regimes and a max run report through the server; bad requests are one line."""

from __future__ import annotations

import json
from collections import Counter

import grpc
import numpy as np
import pytest
import tfds_builders as tb
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main
from sampler_server.core.baselines import blind_guess
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

STORE = "vgg_flower"
TASK = f"source:{STORE}"
CLASSES, PER_CLASS = 6, 12  # per class: 2 test, 2 val, 8 train
IMAGES = pb.ImageOptions(image_size=8)


@pytest.fixture(scope="module")
def running(tfds_dir, tmp_path_factory):  # noqa: F811
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("source-regimes")
    assert main(["fixtures", "--output", str(root / "raw"), "--classes", str(CLASSES), "--images-per-class",
                 str(PER_CLASS), STORE]) == 0
    assert main(["pack", STORE, "--input", str(root / "raw" / STORE), "--output", str(root / "data"), "--quiet",
                 "--workers", "1"]) == 0
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(tfds_dir), "--output",
                 str(root / "data"), "--quiet", "--workers", "1"]) == 0
    server = RunningServer(ServerConfig(data_dir=root / "data", port=0, workers=1, threads=8,
                                        grace_seconds=0.5)).start()
    yield root / "data", server
    server.stop(grace=0.5)


@pytest.fixture(scope="module")
def stub(running):
    with grpc.insecure_channel(running[1].address) as channel:
        yield pb_grpc.SamplerStub(channel)


def _cli_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def _labels(batch) -> list[int]:
    return [int(v) for v in np.frombuffer(batch.labels.data, np.int64)]


@pytest.mark.parametrize(("n", "split"), [(0, "train"), (14, "train"), (14, "val"), (48, "val")])
def test_get_regime_equals_the_regime_command(running, stub, capsys, n, split):
    data, _ = running
    got = stub.GetRegime(pb.RegimeRequest(task=TASK, n=n, seed=5, split=split))
    cli = _cli_json(capsys, "regime", "--data", str(data), "--task", TASK, "--n", str(n), "--seed", "5", "--split",
                    split, "--json")
    assert got.fingerprint == cli["fingerprint"] and list(got.record_ids) == [r["record_id"] for r in cli["records"]]
    assert list(got.labels) == [r["label"] for r in cli["records"]] and got.store == cli["store"] == STORE
    assert got.pool_size == cli["pool_size"] == CLASSES * 8 and got.num_classes == CLASSES
    assert list(got.default_regimes) == cli["default_regimes"]
    assert got.blind.label == cli["blind"]["label"] and got.blind.test_error == cli["blind"]["test_error"]
    assert got.blind.test_examples == CLASSES * 2


def test_list_tasks_names_a_source_only_when_asked(stub):
    summary, = stub.ListTasks(pb.ListTasksRequest(task=TASK)).tasks
    sizes = {s.split: s.size for s in summary.splits}
    assert summary.group == "source" and summary.store == STORE and summary.num_classes == CLASSES
    assert sizes == {"train": 48, "val": 12, "trainval": 60, "test": 12}
    assert all(s.available for s in summary.splits)
    assert TASK not in {t.task for t in stub.ListTasks(pb.ListTasksRequest()).tasks}


def test_batches_hold_the_held_out_splits_and_the_regime_parts(stub):
    listing = {}
    for split in ("test", "trainval"):
        batches = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
            task=TASK, split=split, batch_size=7, images=IMAGES)))
        listing[split] = ([i for b in batches for i in b.record_ids], [v for b in batches for v in _labels(b)])
        assert all(b.num_classes == CLASSES and b.store == STORE for b in batches)
        assert batches[-1].last and all(len(b.images.data) == len(b.record_ids) * 8 * 8 * 3 for b in batches)
    test_ids, test_labels = listing["test"]
    assert Counter(test_labels) == {c: 2 for c in range(CLASSES)} and test_ids == sorted(test_ids)
    assert not set(test_ids) & set(listing["trainval"][0])
    assert len(set(test_ids) | set(listing["trainval"][0])) == CLASSES * PER_CLASS
    train = stub.GetRegime(pb.RegimeRequest(task=TASK, n=20, seed=2, split="train"))
    val = stub.GetRegime(pb.RegimeRequest(task=TASK, n=20, seed=2, split="val"))
    whole = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task=TASK, split="trainval", batch_size=5, shuffle=True, seed=9, count=4, regime=20, regime_seed=2,
        images=IMAGES)))
    served = [i for b in whole for i in b.record_ids]
    assert sorted(served) == sorted(list(train.record_ids) + list(val.record_ids))  # 4 x 5 = one pass of 20
    assert len(val.record_ids) == 4 and set(train.labels) == set(range(CLASSES))


def test_the_calibrated_blind_risk_is_the_sources(running, stub, capsys):
    from clients.core import SamplerClient

    data, server = running
    pool = stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(task=TASK, split="train", batch_size=64,
                                                              images=IMAGES))
    test = stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(task=TASK, split="test", batch_size=64, images=IMAGES))
    expected = blind_guess([v for b in pool for v in _labels(b)], [v for b in test for v in _labels(b)]).risk
    with SamplerClient(server.address) as client:
        for n, (model, scratch) in {12: (0.5, 0.4), 24: (0.7, 0.5)}.items():
            client.report_task("src-model", TASK, "test", model, 12, role="model", regime=n, regime_seed=1)
            client.report_task("src-scratch", TASK, "test", scratch, 12, role="scratch", regime=n, regime_seed=1)
        client.report_task("src-max", TASK, "test", 0.9, 12, role="max")
    reply = stub.GetReport(pb.GetReportRequest(run_ids=["src-model"], table="calibrated", scratch_run="src-scratch",
                                               max_run="src-max", format="json"))
    served = json.loads(reply.text)["tasks"][TASK]
    assert served["blind_risk"] == pytest.approx(expected) and served["max_risk"] == pytest.approx(0.1)
    cli = _cli_json(capsys, "report", "--calibrate", "--run", "src-model", "--scratch", "src-scratch", "--max",
                    "src-max", "--data", str(data), "--format", "json")
    assert cli["tasks"][TASK] == served
    first = served["runs"]["src-model"]["regimes"][0]
    assert first["cR"] == pytest.approx((0.5 - 0.1) / (expected - 0.1))


def test_a_torch_transfer_run_at_regimes_and_a_max_run(running, tmp_path):
    from clients.torch.vtab_transfer import main as transfer

    _, server = running
    small = ["--server", server.address, "--tasks", TASK, "--backbone", "conv4", "--image-size", "16", "--batch-size",
             "8", "--eval-batch-size", "64", "--lrs", "0.1", "--steps", "2", "--log-every", "1000", "--mode", "linear"]
    summary = tmp_path / "model.json"
    assert transfer([*small, "--run", "src-torch", "--regime", "12", "--regime", "24", "--regime-seed", "3",
                     "--json-summary", str(summary)]) == 0
    parts = json.loads(summary.read_text())["regimes"]
    assert [p["n"] for p in parts] == [12, 24]
    assert [p["tasks"][TASK]["val_examples"] for p in parts] == [2, 4]
    assert all(p["tasks"][TASK]["test_examples"] == 12 for p in parts)
    maximal = tmp_path / "max.json"
    assert transfer([*small, "--run", "src-torch-max", "--role", "max", "--json-summary", str(maximal)]) == 0
    result = json.loads(maximal.read_text())["tasks"][TASK]
    assert result["val_split"] == "val" and result["val_examples"] == 12 and result["test_examples"] == 12


@pytest.mark.parametrize(("request_", "code", "words"), [
    (pb.RegimeRequest(task="source:nothere", n=3, seed=0, split="train"), grpc.StatusCode.NOT_FOUND,
     ["source:nothere", "'nothere'", TASK]),
    (pb.RegimeRequest(task="source:tfds_clevr", n=3, seed=0, split="train"), grpc.StatusCode.FAILED_PRECONDITION,
     ["source:tfds_clevr", "TFDS", "VTAB tasks"]),
    (pb.RegimeRequest(task=TASK, n=3, seed=0, split="train", target="label"), grpc.StatusCode.INVALID_ARGUMENT,
     ["target", "'label'", TASK]),
    (pb.RegimeRequest(task=TASK, n=49, seed=0, split="train"), grpc.StatusCode.INVALID_ARGUMENT,
     [TASK, "n=49", "48 examples"]),
    (pb.RegimeRequest(task=TASK, n=3, seed=0, split="train", store="other"), grpc.StatusCode.INVALID_ARGUMENT,
     ["store", "'other'", TASK]),
    (pb.RegimeRequest(task="source:", n=3, seed=0, split="train"), grpc.StatusCode.INVALID_ARGUMENT,
     ["source:<store name>"]),
])
def test_bad_regime_requests_are_one_line(stub, request_, code, words):
    with pytest.raises(grpc.RpcError) as error:
        stub.GetRegime(request_)
    assert error.value.code() == code and "\n" not in error.value.details()
    assert all(w in error.value.details() for w in words), error.value.details()


def test_a_bad_source_split_is_one_line(stub):
    with pytest.raises(grpc.RpcError) as error:
        list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(task=TASK, split="train800", batch_size=4,
                                                                images=IMAGES)))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert all(w in error.value.details() for w in ("'train800'", TASK, "train, val, trainval, test"))
    with pytest.raises(grpc.RpcError) as error:
        list(stub.StreamTaskEpisode(pb.StreamTaskEpisodeRequest(task=TASK, images=IMAGES)))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "'train800val200'" in error.value.details()
