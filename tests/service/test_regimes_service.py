"""Data regimes over gRPC (control baselines): GetRegime equals `sampler-server regime --json`
and the pure core over the task's listings as `sampler-server vtab split` prints them; regime batches (eval and shuffled forms)
hold exactly the regime's records; nesting across n; a regression target's blind guess equals the command's and
a direct computation over the TFDS values; bad requests are one-line statuses."""

from __future__ import annotations

import json
from collections import Counter

import grpc
import numpy as np
import pytest
import tfds_builders as tb
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main
from sampler_server.core.baselines import build_regime
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

TASK = "clevr_count"
IMAGES = pb.ImageOptions(image_size=8)


@pytest.fixture(scope="module")
def running(tfds_dir, tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    data = tmp_path_factory.mktemp("regimes-service") / "data"
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(tfds_dir), "--output", str(data),
                 "--quiet", "--workers", "1"]) == 0
    assert main(["pack", "vtab", "--tfds-name", "dsprites", "--tfds-data-dir", str(tfds_dir), "--output",
                 str(data), "--quiet", "--workers", "1"]) == 0  # scalar attributes: regression targets
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    yield data, server.address
    server.stop(grace=0.5)


@pytest.fixture(scope="module")
def served(running):
    data, address = running
    channel = grpc.insecure_channel(address)
    yield data, pb_grpc.SamplerStub(channel)
    channel.close()


def _listing(data, split: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["vtab", "split", "--data", str(data), "--task", TASK, "--split", split, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _labels(batch: pb.TaskBatch) -> list[int]:
    return [int(v) for v in np.frombuffer(batch.labels.data, np.int64)]


def test_get_regime_equals_the_core_over_the_cli_listings(served, capsys):
    data, stub = served
    pool, test = _listing(data, "train", capsys), _listing(data, "test", capsys)
    ids = [r["record_id"] for r in pool["records"]]
    labels = [r["label"] for r in pool["records"]]
    test_labels = [r["label"] for r in test["records"]]
    fingerprint = pool["store_fingerprint"]
    for n, split in ((16, "train"), (16, "val"), (len(ids), "train"), (0, "train")):
        got = stub.GetRegime(pb.RegimeRequest(task=TASK, n=n, seed=5, split=split))
        want = build_regime(task=TASK, store_fingerprint=fingerprint, num_classes=8, pool_record_ids=ids,
                            pool_labels=labels, test_labels=test_labels, n=n, seed=5, split=split)
        assert (list(got.record_ids), list(got.labels)) == (list(want.record_ids), list(want.labels))
        assert (got.fingerprint, got.pool_size, got.num_classes) == (want.fingerprint, len(ids), 8)
        assert list(got.default_regimes) == list(want.default_regimes)
        assert (got.pool_split, got.store, got.n, got.seed, got.split) == ("train", "tfds_clevr", n, 5, split)
        # the blind guess, computed directly: the regime train part's most frequent label (ties: lowest)
        train = list(stub.GetRegime(pb.RegimeRequest(task=TASK, n=n, seed=5, split="train")).labels) or labels
        counts = Counter(train)
        label = min(c for c in counts if counts[c] == max(counts.values()))
        assert got.blind.label == label
        assert got.blind.test_accuracy == pytest.approx(test_labels.count(label) / len(test_labels))
        assert got.blind.test_error == pytest.approx(1 - got.blind.test_accuracy)
        assert got.blind.test_examples == len(test_labels)


@pytest.mark.parametrize(("n", "split"), [(16, "train"), (16, "val"), (0, "train")])
def test_get_regime_equals_the_regime_command(served, capsys, n, split):
    data, stub = served
    capsys.readouterr()
    assert main(["regime", "--data", str(data), "--task", TASK, "--n", str(n), "--seed", "11", "--split", split,
                 "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    got = stub.GetRegime(pb.RegimeRequest(task=TASK, n=n, seed=11, split=split))
    assert list(got.record_ids) == [r["record_id"] for r in cli["records"]]
    assert list(got.labels) == [r["label"] for r in cli["records"]]
    assert (got.fingerprint, got.pool_size, got.num_classes, got.store) == \
        (cli["fingerprint"], cli["pool_size"], cli["num_classes"], cli["store"])
    assert list(got.default_regimes) == cli["default_regimes"]
    assert {"label": got.blind.label, "test_accuracy": got.blind.test_accuracy, "test_error": got.blind.test_error,
            "test_examples": got.blind.test_examples} == cli["blind"]


def test_regimes_are_nested_and_split_into_train_then_val(served):
    _, stub = served

    def whole(n: int) -> list[int]:
        parts = [stub.GetRegime(pb.RegimeRequest(task=TASK, n=n, seed=3, split=s)) for s in ("train", "val")]
        assert len(parts[1].record_ids) == max(1, n // 5)
        return list(parts[0].record_ids) + list(parts[1].record_ids)

    small, large = whole(16), whole(40)
    assert set(small) <= set(large) and len(set(large)) == 40
    assert whole(16) == small  # deterministic
    assert set(whole(16)) != set(list(stub.GetRegime(pb.RegimeRequest(task=TASK, n=16, seed=4, split="train"))
                                      .record_ids) + list(stub.GetRegime(pb.RegimeRequest(
                                          task=TASK, n=16, seed=4, split="val")).record_ids))


def test_regime_batches_hold_exactly_the_regimes_records(served):
    _, stub = served
    parts = {s: stub.GetRegime(pb.RegimeRequest(task=TASK, n=20, seed=9, split=s)) for s in ("train", "val")}
    for split in ("train", "val", "trainval"):
        ids = (list(parts["train"].record_ids) + list(parts["val"].record_ids) if split == "trainval"
               else list(parts[split].record_ids))
        labels = (list(parts["train"].labels) + list(parts["val"].labels) if split == "trainval"
                  else list(parts[split].labels))
        batches = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
            task=TASK, split=split, batch_size=7, images=IMAGES, regime=20, regime_seed=9)))
        assert [r for b in batches for r in b.record_ids] == ids  # eval form: in regime order, each once
        assert [v for b in batches for v in _labels(b)] == labels
        assert batches[-1].last and {b.split for b in batches} == {split}
        assert {b.split_size for b in batches} == {len(ids)}
        if split != "trainval":
            assert {b.split_fingerprint for b in batches} == {parts[split].fingerprint}
        assert batches[0].images.shape == [7 if len(ids) >= 7 else len(ids), 8, 8, 3]
    train = list(parts["train"].record_ids)
    shuffled = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task=TASK, split="train", batch_size=4, images=IMAGES, regime=20, regime_seed=9, shuffle=True, seed=1,
        count=2 * len(train) // 4)))
    epoch = [r for b in shuffled[: len(train) // 4] for r in b.record_ids]
    assert sorted(epoch) == sorted(train) and epoch != train
    label_of = dict(zip(train, parts["train"].labels))
    assert all([label_of[r] for r in b.record_ids] == _labels(b) for b in shuffled)
    plain = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task=TASK, split="train", batch_size=4, images=IMAGES, shuffle=True, seed=1, count=1)))
    assert plain[0].fingerprint != shuffled[0].fingerprint  # the task's own split streams apart


def test_sampling_uniform_by_default_and_the_others_on_request(served, capsys):
    """GetRegime's sampling ("uniform" by default, also when empty as before samplings existed) is
    named in the reply, equals the command's --regime-sampling, and regime batches with the same
    regime_sampling hold the same records; "stratified" is sklearn's StratifiedShuffleSplit of the pool."""
    from sklearn.model_selection import StratifiedShuffleSplit

    data, stub = served
    default = stub.GetRegime(pb.RegimeRequest(task=TASK, n=50, seed=9, split="train"))
    uniform = stub.GetRegime(pb.RegimeRequest(task=TASK, n=50, seed=9, split="train", sampling="uniform"))
    first = stub.GetRegime(pb.RegimeRequest(task=TASK, n=20, seed=9, split="train", sampling="one-per-class-first"))
    stratified = stub.GetRegime(pb.RegimeRequest(task=TASK, n=50, seed=9, split="train", sampling="stratified"))
    stratified_val = stub.GetRegime(pb.RegimeRequest(task=TASK, n=50, seed=9, split="val", sampling="stratified"))
    assert default == uniform and default.sampling == "uniform" and stratified.sampling == "stratified"
    assert first.sampling == "one-per-class-first" and stratified.fingerprint != uniform.fingerprint
    assert set(first.labels) == set(range(8))  # n = 20 >= 2 x 8 classes: every class in train
    pool = _listing(data, "train", capsys)["records"]
    split = StratifiedShuffleSplit(n_splits=1, train_size=40, test_size=10, random_state=9)
    expected_train, expected_val = next(split.split(np.zeros(len(pool)), [r["label"] for r in pool]))
    assert list(stratified.record_ids) == [pool[i]["record_id"] for i in expected_train]
    assert list(stratified_val.record_ids) == [pool[i]["record_id"] for i in expected_val]
    for sampling, regime in (("uniform", uniform), ("one-per-class-first", first), ("stratified", stratified)):
        capsys.readouterr()
        assert main(["regime", "--data", str(data), "--task", TASK, "--n", str(regime.n), "--seed", "9", "--json",
                     "--regime-sampling", sampling]) == 0
        cli = json.loads(capsys.readouterr().out)
        assert (cli["sampling"], cli["fingerprint"]) == (sampling, regime.fingerprint)
        assert [r["record_id"] for r in cli["records"]] == list(regime.record_ids)
    for part, regime in (("train", stratified), ("val", stratified_val)):
        batches = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
            task=TASK, split=part, batch_size=7, images=IMAGES, regime=50, regime_seed=9,
            regime_sampling="stratified")))
        assert [r for b in batches for r in b.record_ids] == list(regime.record_ids)
        assert {b.split_fingerprint for b in batches} == {regime.fingerprint}
    with pytest.raises(grpc.RpcError) as caught:  # what sklearn refuses: one line
        stub.GetRegime(pb.RegimeRequest(task=TASK, n=20, seed=9, split="train", sampling="stratified"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == ("task clevr_count: regime n=20 drawn stratified (16 train, 4 val): The "
                                      "test_size = 4 should be greater or equal to the number of classes = 8")


@pytest.mark.parametrize(("request_", "words"), [
    (pb.RegimeRequest(task=TASK, n=100000, seed=0, split="train"), ["clevr_count", "100000", "larger"]),
    (pb.RegimeRequest(task=TASK, n=10, seed=0, split="test"), ["split", "test", "train, val"]),
    (pb.RegimeRequest(task="nope", n=10, seed=0, split="train"), ["nope"]),
    (pb.RegimeRequest(task=TASK, n=10, seed=0, split="train", sampling="random"),
     ["sampling: got 'random', expected one of uniform, stratified, one-per-class-first"]),
])
def test_get_regime_bad_requests_are_one_line_invalid_arguments(served, request_, words):
    _, stub = served
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRegime(request_)
    assert caught.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
    assert "\n" not in caught.value.details() and all(w in caught.value.details() for w in words)


DSPRITES = "dsprites_location"


def _dsprites_values(tfds_dir, records: list[dict], target: str) -> np.ndarray:
    version_dir = next((tfds_dir / "dsprites").iterdir())
    assert {r["tfds_split"] for r in records} == {"train"}
    return np.array([float(e[target]) for e in
                     tb.slice_examples(version_dir, "train", [r["tfds_index"] for r in records])])


@pytest.mark.parametrize(("n", "split", "target", "loss"), [
    (20, "train", "label_x_position", "l1"), (20, "val", "label_orientation", ""), (0, "val", "label_x_position", "l2"),
])
def test_regression_blind_guess_equals_the_command_and_numpy(served, tfds_dir, capsys, n, split, target, loss):
    data, stub = served
    got = stub.GetRegime(pb.RegimeRequest(task=DSPRITES, n=n, seed=6, split=split, target=target, loss=loss))
    capsys.readouterr()
    assert main(["regime", "--data", str(data), "--task", DSPRITES, "--n", str(n), "--seed", "6", "--split", split,
                 "--target", target, *(["--loss", loss] if loss else []), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["regression"]
    assert {"target": got.regression.target, "loss": got.regression.loss, "prediction": got.regression.prediction,
            "test_risk": got.regression.test_risk, "test_examples": got.regression.test_examples} == cli
    assert main(["vtab", "split", "--data", str(data), "--task", DSPRITES, "--split", "test", "--json"]) == 0
    test_records = json.loads(capsys.readouterr().out)["records"]
    if n:
        assert main(["regime", "--data", str(data), "--task", DSPRITES, "--n", str(n), "--seed", "6", "--json"]) == 0
    else:
        assert main(["vtab", "split", "--data", str(data), "--task", DSPRITES, "--split", "train", "--json"]) == 0
    train_records = json.loads(capsys.readouterr().out)["records"]
    train = _dsprites_values(tfds_dir, train_records, target)
    test = _dsprites_values(tfds_dir, test_records, target)
    prediction = float(np.median(train)) if loss == "l1" else float(train.mean())
    risk = float(np.mean(np.abs(test - prediction))) if loss == "l1" else float(np.mean((test - prediction) ** 2))
    assert got.regression.loss == (loss or "l2") and got.regression.target == target
    assert got.regression.prediction == pytest.approx(prediction, rel=1e-12)
    assert got.regression.test_risk == pytest.approx(risk, rel=1e-12) and risk > 0
    assert got.regression.test_examples == len(test_records)
    assert not stub.GetRegime(pb.RegimeRequest(task=DSPRITES, n=n, seed=6, split=split)).HasField("regression")


@pytest.mark.parametrize(("request_", "words"), [
    (pb.RegimeRequest(task=DSPRITES, n=10, seed=0, split="train", target="label_y_position"),
     ["target", "'label_y_position'", "tfds_dsprites", "label_orientation, label_x_position"]),
    (pb.RegimeRequest(task=TASK, n=10, seed=0, split="train", target="objects_pixel_z"),
     ["target", "'objects_pixel_z'", "tfds_clevr", "list per record", "numeric attributes: none"]),
    (pb.RegimeRequest(task=DSPRITES, n=10, seed=0, split="train", target="label_x_position", loss="l3"),
     ["loss", "'l3'", "l2, l1"]),
    (pb.RegimeRequest(task=DSPRITES, n=10, seed=0, split="train", loss="l1"), ["loss", "'l1'", "without a target"]),
])
def test_bad_regression_requests_are_one_line_invalid_arguments(served, request_, words):
    _, stub = served
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRegime(request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "\n" not in caught.value.details() and all(w in caught.value.details() for w in words)


@pytest.mark.parametrize(("request_", "words"), [
    (pb.StreamTaskBatchesRequest(task=TASK, split="test", batch_size=4, regime=10, images=IMAGES),
     ["split", "test", "regime 10", "trainval"]),
    (pb.StreamTaskBatchesRequest(task=TASK, split="train", batch_size=4, regime_seed=3, images=IMAGES),
     ["regime_seed", "3"]),
    (pb.StreamTaskBatchesRequest(task=TASK, split="train", batch_size=4, regime=100000, images=IMAGES),
     ["clevr_count", "100000"]),
    (pb.StreamTaskBatchesRequest(task=TASK, split="train", batch_size=4, regime=10, regime_sampling="strata",
                                 images=IMAGES),
     ["regime_sampling: got 'strata', expected one of uniform, stratified, one-per-class-first"]),
    (pb.StreamTaskBatchesRequest(task=TASK, split="train", batch_size=4, regime_sampling="stratified",
                                 images=IMAGES),
     ["regime_sampling: got 'stratified' with regime 0"]),
])
def test_regime_batch_bad_requests_are_one_line_invalid_arguments(served, request_, words):
    _, stub = served
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamTaskBatches(request_))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "\n" not in caught.value.details() and all(w in caught.value.details() for w in words)


def test_python_client_get_regime_passes_target_and_loss(running, served):
    from clients.core import SamplerClient

    _, stub = served
    wire = stub.GetRegime(pb.RegimeRequest(task=DSPRITES, n=20, seed=6, split="train", target="label_x_position",
                                           loss="l1"))
    with SamplerClient(running[1]) as client:
        got = client.get_regime(DSPRITES, 20, 6, "train", target="label_x_position", loss="l1")
        plain = client.get_regime(DSPRITES, 20, 6, "train")
    assert got.regression == wire.regression and got.regression.loss == "l1"
    assert not plain.HasField("regression")
