"""ImageNet-CoG reports through a real server on 127.0.0.1: stored once, refused with one
line, read back as the "cog" table with a baseline, and owned by the token that created
the run (a baseline of another team reads as an unknown run)."""

from __future__ import annotations

import json

import grpc
import pytest

from sampler_server.service.server import RunningServer, ServerConfig
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

TOKENS = {"lab-read": ("read", "tok-read"), "team-a": ("report", "tok-a"), "team-b": ("report", "tok-b"),
          "root": ("admin", "tok-root")}


def _cog(run, level, shots, seed, accuracy, **extras) -> pb.MetricReport:
    return pb.MetricReport(run_id=run, protocol="cog", cog_level=level, shots=shots, seed=seed, examples=50_000,
                           metrics={"accuracy": accuracy, **extras})


def _code(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


@pytest.fixture(scope="module")
def stub(served):
    with grpc.insecure_channel(served.address) as channel:
        yield pb_grpc.SamplerStub(channel)


def test_reports_are_stored_once_and_read_back_as_the_cog_table(stub):
    base = [_cog("cog-base", "L2", 0, seed, accuracy) for seed, accuracy in enumerate([0.5, 0.52, 0.48], start=1)]
    model = [_cog("cog-model", "L2", 0, seed, accuracy, learning_rate=0.1, weight_decay=1e-5)
             for seed, accuracy in enumerate([0.56, 0.58, 0.54], start=1)]
    reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=base + model, run_config_json='{"head": "logreg"}'))
    assert (reply.stored, reply.duplicates) == (6, 0)
    again = stub.ReportMetrics(pb.ReportMetricsRequest(reports=model + [_cog("cog-model", "IN-1K", 1, 1, 0.4)]))
    assert (again.stored, again.duplicates) == (1, 3)
    code, message = _code(lambda: stub.ReportMetrics(pb.ReportMetricsRequest(
        reports=[_cog("cog-model", "L2", 0, 2, 0.9, learning_rate=0.1, weight_decay=1e-5)])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert message.startswith("run 'cog-model' already has a different result for CoG level L2 N=all seed 2")
    text = stub.GetReport(pb.GetReportRequest(run_ids=["cog-model"], table="cog", baseline_run="cog-base",
                                              format="markdown")).text
    assert "| cog-model | L2 | 56.00 ± 1.63 (3) Δ +6.00 | - |" in text  # std: sqrt(8e-4 / 3)
    assert "| cog-base (baseline) | L2 | 50.00 ± 1.63 (3) | - |" in text
    data = json.loads(stub.GetReport(pb.GetReportRequest(run_ids=["cog-model"], table="cog", format="json")).text)
    assert data["scores"]["cog-model"]["cells"]["IN-1K"]["1"]["accuracies"] == [0.4]
    assert data["configs"]["cog-model"] == {"head": "logreg"}


@pytest.mark.parametrize(("report", "words"), [
    (_cog("cog-bad", "L7", 0, 1, 0.5), ["reports.cog_level: got 'L7'", "IN-1K, L1"]),
    (_cog("cog-bad", "L1", 5, 1, 0.5), ["reports.shots: got 5", "1, 2, 4, 8, 16, 32, 64, 128"]),
    (_cog("cog-bad", "L1", 0, 0, 0.5), ["reports.seed: got 0", "from 1"]),
    (_cog("cog-bad", "L1", 0, 1, 1.01), ['reports.metrics["accuracy"]: got 1.01', "0 to 1"]),
    (pb.MetricReport(run_id="cog-bad", protocol="cog", cog_level="L1", seed=1, metrics={"accuracy": 0.5}),
     ["reports.examples: got 0", "number of test images"]),
    (pb.MetricReport(run_id="cog-bad", protocol="cogs", cog_level="L1", seed=1, metrics={"accuracy": 0.5}),
     ["reports.protocol: got 'cogs'", "'md-episode', 'vtab-task', 'cog'"]),
])
def test_a_bad_report_is_one_invalid_argument_line_and_stores_nothing(stub, report, words):
    good = _cog("cog-bad", "L1", 0, 1, 0.5)
    code, message = _code(lambda: stub.ReportMetrics(pb.ReportMetricsRequest(reports=[good, report])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "\n" not in message
    for word in words:
        assert word in message
    code, _ = _code(lambda: stub.GetReport(pb.GetReportRequest(run_ids=["cog-bad"], table="cog")))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("request_", "code", "words"), [
    (pb.GetReportRequest(run_ids=["cog-table-run"], table="vtab", baseline_run="cog-table-run"),
     grpc.StatusCode.INVALID_ARGUMENT, ["baseline_run: only with table 'cog'", "'vtab'"]),
    (pb.GetReportRequest(run_ids=["cog-table-run"], baseline_run="cog-table-run"),
     grpc.StatusCode.INVALID_ARGUMENT, ["baseline_run: only with table 'cog'", "'md'"]),
    (pb.GetReportRequest(run_ids=["cog-table-run"], table="cog", vtab_split="test"),
     grpc.StatusCode.INVALID_ARGUMENT, ["vtab_split: only with table vtab"]),
    (pb.GetReportRequest(run_ids=["cog-table-run"], table="cog", baseline_run="no-such-run"),
     grpc.StatusCode.NOT_FOUND, ["run 'no-such-run' has no reports"]),
    (pb.GetReportRequest(run_ids=["cog-table-run"], table="cogs"),
     grpc.StatusCode.INVALID_ARGUMENT, ["table: got 'cogs'", "vtab-md, cog"]),
])
def test_bad_table_requests(stub, request_, code, words):
    stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_cog("cog-table-run", "L1", 0, 1, 0.5)]))  # a run to name
    got, message = _code(lambda: stub.GetReport(request_))
    assert got == code and "\n" not in message
    for word in words:
        assert word in message


@pytest.fixture(scope="module")
def secured(served, tmp_path_factory):
    root = tmp_path_factory.mktemp("cog-tokens")
    tokens = root / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"name": n, "token": t, "role": r}) + "\n" for n, (r, t) in TOKENS.items()))
    server = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, threads=8, grace_seconds=0.5,
                                        metrics_path=root / "metrics.sqlite", tokens=tokens)).start()
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.SamplerStub(channel)

        def call(method: str, request, who: str):
            return getattr(stub, method)(request, metadata=(("authorization", f"Bearer {TOKENS[who][1]}"),))

        yield call
    server.stop(grace=0.2)


def test_a_cog_run_belongs_to_the_token_that_created_it(secured):
    def report(who, run, seed, accuracy=0.5):
        return secured("ReportMetrics", pb.ReportMetricsRequest(reports=[_cog(run, "L4", 0, seed, accuracy)]), who)

    assert report("team-a", "a-run", 1).stored == 1
    assert report("team-a", "a-run", 2).stored == 1
    code, message = _code(lambda: report("team-b", "a-run", 3))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "a-run" in message and "team-a" not in message
    code, _ = _code(lambda: report("lab-read", "read-run", 1))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert report("team-b", "b-run", 1, 0.45).stored == 1
    table = pb.GetReportRequest(run_ids=["b-run"], table="cog", baseline_run="a-run", format="json")
    code, message = _code(lambda: secured("GetReport", table, "team-b"))  # another team's baseline: unknown
    assert code == grpc.StatusCode.NOT_FOUND and message == "run 'a-run' has no reports"
    for reader in ("lab-read", "root"):
        data = json.loads(secured("GetReport", table, reader).text)
        assert data["scores"]["b-run"]["cells"]["L4"]["all"]["relative"]["delta"] == pytest.approx(-0.05)
    assert report("root", "a-run", 3).stored == 1  # admin writes to any run
    assert "a-run" in secured("GetReport", pb.GetReportRequest(run_ids=["a-run"], table="cog"), "team-a").text
