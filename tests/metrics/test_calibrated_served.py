"""The calibrated table through a real server on 127.0.0.1: vtab-task reports with role and
regime stored once, refused with one line, and read back as table "calibrated" equal to
`sampler-server report --calibrate` on the same data (the blind guess from the served labels)."""

from __future__ import annotations

import json

import grpc
import pytest
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main
from sampler_server.core.baselines import blind_guess
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

TASK = "clevr_count"


@pytest.fixture(scope="module")
def served(tfds_dir, tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    data = tmp_path_factory.mktemp("calibrated") / "data"
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(tfds_dir), "--output", str(data),
                 "--quiet", "--workers", "1"]) == 0
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    yield data, pb_grpc.SamplerStub(channel)
    channel.close()
    server.stop(grace=0.5)


def _task(run, accuracy, role="", regime=0, seed=0) -> pb.MetricReport:
    return pb.MetricReport(run_id=run, protocol="vtab-task", task=TASK, task_split="test", examples=10,
                           metrics={"accuracy": accuracy}, role=role, regime=regime, regime_seed=seed)


def _code(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def _labels(data, split, capsys) -> list[int]:
    capsys.readouterr()
    assert main(["vtab", "split", "--data", str(data), "--task", TASK, "--split", split, "--json"]) == 0
    return [record["label"] for record in json.loads(capsys.readouterr().out)["records"]]


def test_roles_and_regimes_are_stored_and_read_back_as_the_calibrated_table(served, capsys, tmp_path):
    data, stub = served
    reports = [_task("cal-max", 0.9, "max"), _task("cal-scratch", 0.2, "scratch", 16, 1),
               _task("cal-scratch", 0.5, "scratch", 32, 1), _task("cal-model", 0.6, "", 16, 1),
               _task("cal-model", 0.8, "model", 32, 1), _task("cal-model", 0.7, "model")]
    reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=reports))
    assert (reply.stored, reply.duplicates) == (6, 0)
    again = stub.ReportMetrics(pb.ReportMetricsRequest(reports=reports[3:4] + [_task("cal-model", 0.75, "", 16, 2)]))
    assert (again.stored, again.duplicates) == (1, 1)
    code, message = _code(lambda: stub.ReportMetrics(pb.ReportMetricsRequest(
        reports=[_task("cal-model", 0.8, "scratch", 64, 1)])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert message.startswith("role: run 'cal-model' is a model run, got 'scratch'")

    request = pb.GetReportRequest(run_ids=["cal-model"], table="calibrated", scratch_run="cal-scratch",
                                  max_run="cal-max", format="json")
    served_json = json.loads(stub.GetReport(request).text)
    blind = blind_guess(_labels(data, "train", capsys), _labels(data, "test", capsys)).risk
    task = served_json["tasks"][TASK]
    assert task["blind_risk"] == blind and task["max_risk"] == pytest.approx(0.1)
    regimes = task["runs"]["cal-model"]["regimes"]
    assert served_json["cci_seeds"] == "points"
    assert [(r["n"], r["seed"]) for r in regimes] == [(16, 1), (16, 2), (32, 1)]  # each seed its own point
    assert [r["risk"] for r in regimes[:2]] == pytest.approx([1 - 0.6, 1 - 0.75])
    assert regimes[2]["cR"] == pytest.approx((0.2 - 0.1) / (blind - 0.1))
    assert regimes[2]["cR_scratch"] == pytest.approx((0.5 - 0.1) / (blind - 0.1))
    mean = json.loads(stub.GetReport(pb.GetReportRequest(
        run_ids=["cal-model"], table="calibrated", scratch_run="cal-scratch", max_run="cal-max", format="json",
        cci_seeds="mean")).text)
    assert mean["cci_seeds"] == "mean" and [r["n"] for r in mean["tasks"][TASK]["runs"]["cal-model"]["regimes"]] == [16, 32]
    assert mean["tasks"][TASK]["runs"]["cal-model"]["regimes"][0]["risk"] == pytest.approx(1 - 0.675)
    capsys.readouterr()
    assert main(["report", "--calibrate", "--data", str(data), "--run", "cal-model", "--scratch", "cal-scratch",
                 "--max", "cal-max", "--format", "json", "--plots", str(tmp_path / "plots")]) == 0
    assert json.loads(capsys.readouterr().out) == served_json
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [f"calibrated_n_{TASK}.png",
                                                                      f"calibrated_scratch_{TASK}.png"]
    text = stub.GetReport(pb.GetReportRequest(run_ids=["cal-model"], table="calibrated", scratch_run="cal-scratch",
                                              max_run="cal-max", format="markdown")).text
    assert f"| {TASK} | cal-model | CCI |" in text and f"| {TASK} | cal-max (max) | all | - | 10.00 | +0.000 | - |" in text


@pytest.mark.parametrize(("report", "words"), [
    (_task("cal-bad", 0.5, "teacher"), "reports.role: got 'teacher' for task clevr_count, expected one of model"),
    (_task("cal-bad", 0.5, "max", 16, 1), "reports.regime: got 16 for task clevr_count of a max run, expected 0"),
    (_task("cal-bad", 0.5, "model", 0, 3), "reports.regime_seed: got 3 for task clevr_count with regime 0"),
])
def test_a_bad_role_or_regime_is_one_invalid_argument_line(served, report, words):
    _, stub = served
    code, message = _code(lambda: stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith(words) and "\n" not in message


@pytest.mark.parametrize(("request_", "code", "words"), [
    (pb.GetReportRequest(run_ids=["x"], table="calibrated", max_run="m"), grpc.StatusCode.INVALID_ARGUMENT,
     "scratch_run: empty; table 'calibrated' needs the scratch run"),
    (pb.GetReportRequest(run_ids=["x"], table="vtab", scratch_run="s"), grpc.StatusCode.INVALID_ARGUMENT,
     "scratch_run: only with table 'calibrated'"),
    (pb.GetReportRequest(run_ids=["x"], table="calibrated", scratch_run="s", max_run="m", baseline_run="b"),
     grpc.StatusCode.INVALID_ARGUMENT, "baseline_run: not with table 'calibrated'"),
    (pb.GetReportRequest(run_ids=["cal-none"], table="calibrated", scratch_run="s", max_run="cal-none-max"),
     grpc.StatusCode.NOT_FOUND, "run 'cal-none-max' has no reports"),
    (pb.GetReportRequest(run_ids=["x"], table="calibrated", scratch_run="s", max_run="m", cci_seeds="median"),
     grpc.StatusCode.INVALID_ARGUMENT, "cci_seeds: got 'median', expected one of points, mean"),
    (pb.GetReportRequest(run_ids=["x"], table="vtab", cci_seeds="mean"), grpc.StatusCode.INVALID_ARGUMENT,
     "cci_seeds: only with table 'calibrated'"),
])
def test_bad_calibrated_requests_are_one_line(served, request_, code, words):
    _, stub = served
    got, message = _code(lambda: stub.GetReport(request_))
    assert got == code and message.startswith(words)


def test_the_cli_needs_its_controls_and_data(served, capsys):
    data, _ = served
    assert main(["report", "--calibrate", "--data", str(data), "--run", "cal-model", "--max", "cal-max"]) == 2
    assert "--scratch: required with --calibrate" in capsys.readouterr().err
    assert main(["report", "--run", "cal-model", "--data", str(data), "--scratch", "cal-scratch"]) == 2
    assert "--scratch: only with --calibrate" in capsys.readouterr().err
    assert main(["report", "--run", "cal-model", "--data", str(data), "--cci-seeds", "mean"]) == 2
    assert "--cci-seeds: only with --calibrate" in capsys.readouterr().err
