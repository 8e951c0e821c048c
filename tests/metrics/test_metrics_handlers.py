"""The metrics RPCs' handlers (``service.metrics``) on a real metrics store, over the served
stores' real replayer: reports checked against their recomputed episodes, stored in one
transaction, refused with one line, read back as the tables the report command prints."""

from __future__ import annotations

import pytest

from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.replay import EpisodeReplayer
from sampler_server.catalog.tasks import TaskCatalog
from sampler_server.cli.main import main
from sampler_server.errors import InvalidArgument, NotFound, ResourceExhausted
from sampler_server.metrics.store import MetricsStore
from sampler_server.service.metrics import MetricsHandlers, ServedContext
from sampler_common import protocols
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

REQUEST = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, seed=7, images=pb.ImageOptions(image_size=40))


@pytest.fixture(scope="module")
def context(served):
    registry = StoreRegistry.from_data_dir(served.data)
    return ServedContext(EpisodeReplayer(registry), TaskCatalog(registry))


@pytest.fixture
def handlers(context, tmp_path):
    return MetricsHandlers(MetricsStore(tmp_path / "metrics.sqlite"), 5, context)


def _episode_report(context, run, index, accuracy=0.5, fingerprint=""):
    episode = context.episode(REQUEST, REQUEST.seed, index)
    return pb.MetricReport(run_id=run, protocol=protocols.MD, source=episode.source, split=REQUEST.split,
                           seed=REQUEST.seed, index=index, fingerprint=fingerprint or episode.fingerprint,
                           metrics={"accuracy": accuracy}, request=REQUEST)


def _cog_report(run, accuracy=0.5, seed=1):
    return pb.MetricReport(run_id=run, protocol=protocols.COG, cog_level="L1", shots=0, seed=seed, examples=100,
                           metrics={"accuracy": accuracy})


def test_reports_are_checked_stored_once_and_read_back_as_the_command_prints_them(handlers, context, served,
                                                                                  tmp_path, capsys):
    reports = [_episode_report(context, "run-a", index, accuracy) for index, accuracy in enumerate([0.5, 0.75, 0.25])]
    first = handlers.report_metrics(pb.ReportMetricsRequest(reports=reports + [_cog_report("run-a")],
                                                            run_config_json='{"lr": 0.1}'))
    assert (first.stored, first.duplicates) == (4, 0)
    again = handlers.report_metrics(pb.ReportMetricsRequest(reports=reports))
    assert (again.stored, again.duplicates) == (0, 3)
    text = handlers.get_report(pb.GetReportRequest(run_ids=["run-a"])).text
    assert "folder/train" in text and "50.00 ± " in text
    assert "fingerprints: every reported episode matches its recomputed composition" in text
    # the report command reads the same registry: the same table from the same store and stores
    assert main(["report", "--metrics", str(tmp_path / "metrics.sqlite"), "--data", str(served.data),
                 "--run", "run-a"]) == 0
    assert capsys.readouterr().out == text + "\n"
    cog = handlers.get_report(pb.GetReportRequest(run_ids=["run-a"], table="cog", format="markdown")).text
    assert "| run-a | L1 | 50.00 (1) |" in cog
    ignored = pb.GetReportRequest(run_ids=["run-a"], table="vtab-md", vtab_benchmark="vtab-v1")
    assert "vtab-v2" in handlers.get_report(ignored).text  # GetReport has always ignored it with vtab-md


@pytest.mark.parametrize(("report", "words"), [
    (lambda c: _episode_report(c, "run-b", 0, fingerprint="f" * 64), "reports.fingerprint: ffffffffffffffff... "
     "does not match episode 0"),
    (lambda c: pb.MetricReport(run_id="run-b", protocol="nope"), "reports.protocol: got 'nope', expected one of "
     "'md-episode', 'vtab-task', 'cog'"),
    (lambda c: _cog_report("run-b", accuracy=1.5), 'reports.metrics["accuracy"]: got 1.5'),
    (lambda c: pb.MetricReport(run_id="run-b", protocol=protocols.VTAB, task="clevr_count", task_split="test",
                               examples=10, metrics={"accuracy": 0.5}, regime_seed=3),
     "reports.regime_seed: got 3 for task clevr_count with regime 0, expected 0"),
])
def test_a_bad_report_is_one_line_and_nothing_of_its_request_is_stored(handlers, context, report, words):
    good = _episode_report(context, "run-b", 1)
    with pytest.raises(InvalidArgument) as caught:
        handlers.report_metrics(pb.ReportMetricsRequest(reports=[good, report(context)]))
    assert str(caught.value).startswith(words) and "\n" not in str(caught.value)
    with pytest.raises(NotFound, match="run 'run-b' has no reports"):
        handlers.get_report(pb.GetReportRequest(run_ids=["run-b"]))


def test_limits_and_configuration_are_checked_before_any_report(handlers, context):
    with pytest.raises(ResourceExhausted, match="^reports: got 6, the server accepts at most 5 per request$"):
        handlers.report_metrics(pb.ReportMetricsRequest(reports=[_cog_report("run-c", seed=s) for s in range(1, 7)]))
    with pytest.raises(InvalidArgument, match="^run_config_json: not valid JSON"):
        handlers.report_metrics(pb.ReportMetricsRequest(reports=[_cog_report("run-c")], run_config_json="{"))


@pytest.mark.parametrize(("request_", "words"), [
    (pb.GetReportRequest(run_ids=["x"], table="cogs"), "table: got 'cogs', expected one of md, vtab, vtab-md, cog, "
     "calibrated, held"),
    (pb.GetReportRequest(run_ids=["x"], baseline_run="y"), "baseline_run: only with table 'cog' (got table 'md')"),
    (pb.GetReportRequest(run_ids=["x"], table="cog", vtab_split="test"),
     "vtab_split: only with table vtab (table cog has no VTAB benchmark or split)"),
    (pb.GetReportRequest(run_ids=["x"], table="vtab", cci_seeds="mean"),
     "cci_seeds: only with table 'calibrated' (got table 'vtab')"),
    (pb.GetReportRequest(run_ids=["x"], table="calibrated", scratch_run="s", max_run="m", vtab_split="test"),
     "vtab_split: not with table 'calibrated' (it reads VTAB test results at every regime against scratch_run and "
     "max_run)"),
    (pb.GetReportRequest(run_ids=["x"], table="calibrated", scratch_run="s"),
     "max_run: empty; table 'calibrated' needs the max run"),
    (pb.GetReportRequest(run_ids=["x"], table="vtab", vtab_split="testing"), "vtab_split: got 'testing', expected "
     "one of train800"),
])
def test_table_requests_are_refused_with_one_line(handlers, request_, words):
    with pytest.raises(InvalidArgument) as caught:
        handlers.get_report(request_)
    assert str(caught.value).startswith(words)
