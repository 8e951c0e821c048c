"""Adding a report protocol and a report table is one registration each: a toy protocol and a
toy table registered here are taken by ReportMetrics' handler, listed and built by
GetReport's handler and by `sampler-server report --table toy`, refused with the options
other tables own, and gone again once unregistered."""

from __future__ import annotations

import json

import pytest

from sampler_server.cli.main import main
from sampler_server.errors import InvalidArgument
from sampler_server.metrics import registry
from sampler_server.metrics.store import MetricsStore, StoredReport
from sampler_server.metrics.tables import check_format, check_runs, render_grid
from sampler_server.service.metrics import MetricsHandlers
from sampler_common import protocols
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

TOY = "toy-score"


def parse_toy(report: pb.MetricReport, context: registry.ReportContext) -> StoredReport:
    if "score" not in report.metrics:
        raise InvalidArgument('reports.metrics: a toy-score report needs "score"')
    return StoredReport(run_id=report.run_id, protocol=TOY, source=report.source, split="test", index=report.index,
                        seed=0, fingerprint="-", metrics={"score": report.metrics["score"]})


def build_toy(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> dict:
    check_runs(query.run_ids)
    return {run: [r.metrics["score"] for r in store.reports(run) if r.protocol == TOY] for run in query.run_ids}


def render_toy(report: dict, fmt: str) -> str:
    if check_format(fmt) == "json":
        return json.dumps(report)
    rows = [[run, f"{sum(scores) / len(scores):.2f}", str(len(scores))] for run, scores in report.items()]
    return render_grid(["run", "mean score", "reports"], rows, ["score: the toy's"], fmt)


@pytest.fixture
def toy():
    """The toy protocol and table, registered for one test."""
    registry.register_protocol(registry.ReportProtocol(TOY, parse_toy))
    registry.register_table(registry.ReportTable(name="toy", help="a toy table", build=build_toy, render=render_toy))
    yield
    registry.unregister_table("toy")
    registry.unregister_protocol(TOY)


def _toy(run: str, index: int, score: float) -> pb.MetricReport:
    return pb.MetricReport(run_id=run, protocol=TOY, source="toys", index=index, metrics={"score": score})


def test_a_registered_protocol_and_table_are_served_and_printed(toy, tmp_path, capsys):
    assert registry.table("toy").help == "a toy table"
    assert [p.id for p in registry.protocols()] == [*protocols.REPORT_PROTOCOLS, TOY]
    store = MetricsStore(tmp_path / "metrics.sqlite")
    handlers = MetricsHandlers(store, 100, context=None)  # neither the toy nor its table asks the server anything
    reply = handlers.report_metrics(pb.ReportMetricsRequest(reports=[_toy("r", 0, 0.5), _toy("r", 1, 1.0)]))
    assert (reply.stored, reply.duplicates) == (2, 0)
    text = handlers.get_report(pb.GetReportRequest(run_ids=["r"], table="toy")).text
    assert text.splitlines()[2].split() == ["r", "0.75", "2"]
    assert main(["report", "--metrics", str(tmp_path / "metrics.sqlite"), "--table", "toy", "--run", "r"]) == 0
    assert capsys.readouterr().out == text + "\n"
    with pytest.raises(InvalidArgument, match=r"^reports.metrics: a toy-score report needs \"score\"$"):
        handlers.report_metrics(pb.ReportMetricsRequest(reports=[pb.MetricReport(run_id="r", protocol=TOY)]))
    # the options of other tables are refused with their own lines, on the wire and in the command
    with pytest.raises(InvalidArgument, match=r"^baseline_run: only with table 'cog' \(got table 'toy'\)$"):
        handlers.get_report(pb.GetReportRequest(run_ids=["r"], table="toy", baseline_run="r"))
    assert main(["report", "--metrics", str(tmp_path / "metrics.sqlite"), "--table", "toy", "--run", "r",
                 "--scratch", "s"]) == 2
    assert capsys.readouterr().err == "sampler-server report: error: --scratch: only with --calibrate\n"


def test_an_unregistered_table_and_protocol_are_refused_naming_what_is_registered(toy):
    registry.unregister_table("toy")
    registry.unregister_protocol(TOY)
    try:
        with pytest.raises(InvalidArgument, match="^table: got 'toy', expected one of md, vtab, vtab-md, cog, "
                                                  "calibrated, held$"):
            registry.table("toy")
        with pytest.raises(InvalidArgument, match="^reports.protocol: got 'toy-score', expected one of 'md-episode', "
                                                  "'vtab-task', 'cog'$"):
            registry.parse_reports([_toy("r", 0, 0.5)], context=None)
    finally:  # the fixture unregisters them again
        registry.register_protocol(registry.ReportProtocol(TOY, parse_toy))
        registry.register_table(registry.ReportTable(name="toy", help="", build=build_toy, render=render_toy))


def test_a_table_cannot_take_another_tables_name_or_option(toy):
    with pytest.raises(ValueError, match="'toy' is registered already"):
        registry.register_table(registry.ReportTable(name="toy", help="", build=build_toy, render=render_toy))
    cog_option = registry.table("cog").options[0]
    with pytest.raises(ValueError, match="option 'baseline_run' is another table's"):
        registry.register_table(registry.ReportTable(name="toy2", help="", build=build_toy, render=render_toy,
                                                     options=(cog_option,)))
    with pytest.raises(ValueError, match="'md-episode' is registered already"):
        registry.register_protocol(registry.ReportProtocol(protocols.MD, parse_toy))
