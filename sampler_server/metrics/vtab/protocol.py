"""VTAB-1k's registration: the "vtab-task" report parser and the "vtab" and "vtab-md" tables.

A vtab-task report carries a task's top-1 (``metrics["accuracy"]``) over ``examples``
examples of ``task_split``; the control baselines add ``role``, ``regime`` and
``regime_seed``. Its rules are ``TaskResult.validate``'s, named as the wire spells them.
"""

from __future__ import annotations

from pathlib import Path

from sampler_server.core.vtab.presets import VtabBenchmark
from sampler_server.core.vtab.splits import SPLITS
from sampler_server.core.vtab.tasks import TASKS
from sampler_server.errors import InvalidArgument
from sampler_server.metrics import registry
from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.vtab.report import (
    VtabMdReport, VtabReport, build_vtab_md_report, build_vtab_report, render_vtab_md_report, render_vtab_report,
)
from sampler_server.metrics.vtab.results import TaskResult
from sampler_server.quoting import quoted
from sampler_common import protocols
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

VTAB_ONLY = "{name}: only with table vtab (table {table} has no VTAB benchmark or split)"
VTAB_ONLY_COMMAND = "{flag}: only with --table vtab (--table {table} uses its own fixed plan)"


def parse_task_report(report: pb.MetricReport, context: registry.ReportContext) -> TaskResult:
    """The task result a vtab-task report carries (an empty role is "model")."""
    if "accuracy" not in report.metrics:
        raise InvalidArgument("reports.metrics: a vtab-task report needs \"accuracy\" (top-1 in [0, 1])")
    if not report.task:
        raise InvalidArgument(f"reports.task: empty; expected one of {', '.join(TASKS)}")
    return TaskResult(run_id=report.run_id, task=report.task, split=report.task_split,
                      accuracy=float(report.metrics["accuracy"]), examples=int(report.examples),
                      regime=int(report.regime), regime_seed=int(report.regime_seed),
                      role=report.role or "model").validate("reports.")


def _build_vtab(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> VtabReport:
    split = query.vtab_split or "test"
    if split not in SPLITS:
        raise InvalidArgument(f"vtab_split: got {quoted(split)}, expected one of {', '.join(SPLITS)}")
    return build_vtab_report(store, list(query.run_ids), query.vtab_benchmark or VtabBenchmark.VTAB_V1.value, split)


def _build_vtab_md(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> VtabMdReport:
    return build_vtab_md_report(store, list(query.run_ids))


def _plot_vtab(report: VtabReport, directory: Path, query: registry.ReportQuery) -> list[Path]:
    from sampler_server.metrics.vtab.plots import write_vtab_plots

    return write_vtab_plots(report.scores, directory)


def _plot_vtab_md(report: VtabMdReport, directory: Path, query: registry.ReportQuery) -> list[Path]:
    from sampler_server.metrics.vtab.plots import write_vtab_plots

    return write_vtab_plots({score.run: score for score in report.vtab.values()}, directory)  # one per VTAB run


PROTOCOLS = (registry.ReportProtocol(protocols.VTAB, parse_task_report),)
TABLES = (
    registry.ReportTable(
        name="vtab",
        help="VTAB-1k tasks",
        build=_build_vtab,
        render=render_vtab_report,
        options=(
            registry.ReportOption("vtab_benchmark", "--vtab-benchmark", VTAB_ONLY, VTAB_ONLY_COMMAND,
                                  help="task set of --table vtab (default vtab-v1; vtab-md always uses vtab-v2)",
                                  choices=tuple(b.value for b in VtabBenchmark)),
            registry.ReportOption("vtab_split", "--vtab-split", VTAB_ONLY, VTAB_ONLY_COMMAND,
                                  help="VTAB split whose results --table vtab shows (default test)", choices=SPLITS),
        ),
        plot=_plot_vtab,
    ),
    registry.ReportTable(
        name="vtab-md",
        help="the VTAB+MD aggregate",
        build=_build_vtab_md,
        render=render_vtab_md_report,
        wire_ignores=("vtab_benchmark", "vtab_split"),
        plot=_plot_vtab_md,
    ),
)
