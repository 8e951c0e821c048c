"""ImageNet-CoG's registration: the "cog" report parser and the "cog" table.

A cog report is keyed by (run_id, cog_level, shots, seed); ``metrics["accuracy"]`` is
the test top-1 in [0, 1] and ``examples`` the number of test images it is over;
``metrics`` may also carry "val_accuracy", "learning_rate" and "weight_decay" (what
the hyper-parameter search chose), nothing else. source, split, index, fingerprint,
request, task and task_split are unused. Every refusal is one INVALID_ARGUMENT line
naming the field as the wire spells it (``reports.cog_level`` ...) and what it allows.
"""

from __future__ import annotations

from pathlib import Path

from sampler_server.errors import InvalidArgument
from sampler_server.metrics import registry
from sampler_server.metrics.cog.report import CogReport, build_cog_report, render_cog_report
from sampler_server.metrics.cog.results import COG_EXTRAS, CogResult
from sampler_server.metrics.store import MetricsStore
from sampler_common import protocols
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

COG_ONLY = "{name}: only with table 'cog' (got table {table!r})"
COG_ONLY_COMMAND = "{flag}: only with --table cog (got --table {table})"


def parse_cog_report(report: pb.MetricReport, context: registry.ReportContext) -> CogResult:
    """The checked result a cog report carries; ``InvalidArgument`` otherwise."""
    if "accuracy" not in report.metrics:
        raise InvalidArgument("reports.metrics: a cog report needs \"accuracy\" (test top-1 in [0, 1]); optional: "
                              f"{', '.join(COG_EXTRAS)}")
    extras = {name: value for name, value in report.metrics.items() if name != "accuracy"}
    return CogResult(run_id=report.run_id, level=report.cog_level, shots=report.shots, seed=report.seed,
                     accuracy=report.metrics["accuracy"], examples=report.examples, extras=extras).validate("reports.")


def _build(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> CogReport:
    return build_cog_report(store, list(query.run_ids), query.baseline_run or None)


def _plot(report: CogReport, directory: Path, query: registry.ReportQuery) -> list[Path]:
    from sampler_server.metrics.cog.plots import write_cog_plots

    return write_cog_plots(report, directory, per_shots=query.plots_per_n)


PROTOCOLS = (registry.ReportProtocol(protocols.COG, parse_cog_report),)
TABLES = (
    registry.ReportTable(
        name="cog",
        help="ImageNet-CoG levels and N",
        build=_build,
        render=render_cog_report,
        options=(
            registry.ReportOption("baseline_run", "--baseline", COG_ONLY, COG_ONLY_COMMAND, metavar="RUN",
                                  help="--table cog: show each cell also relative to this run's same cell (points)",
                                  names_run=True),
            registry.ReportOption("plots_per_n", "--plots-per-n", COG_ONLY, COG_ONLY_COMMAND, switch=True, on_wire=False,
                                  with_plots=True,
                                  help="--table cog with --plots: also an accuracy-vs-level plot for each few-shot N"),
        ),
        plot=_plot,
    ),
)
