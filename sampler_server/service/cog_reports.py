"""ImageNet-CoG reports over the wire: a ``MetricReport`` of protocol "cog" checked into a
``CogResult``, and the "cog" table of ``GetReport``.

A cog report is keyed by (run_id, cog_level, shots, seed); ``metrics["accuracy"]`` is
the test top-1 in [0, 1] and ``examples`` the number of test images it is over;
``metrics`` may also carry "val_accuracy", "learning_rate" and "weight_decay" (what
the hyper-parameter search chose), nothing else. source, split, index, fingerprint,
request, task and task_split are unused. Every refusal is one INVALID_ARGUMENT line
naming the field as the wire spells it (``reports.cog_level`` ...) and what it allows.
"""

from __future__ import annotations

from typing import Any

from sampler_server.errors import InvalidArgument
from sampler_server.metrics.cog_results import COG_EXTRAS, CogResult
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

PROTOCOL_COG = "cog"
COG_TABLE = "cog"


def cog_result(report: pb.MetricReport) -> CogResult:
    """The checked result a cog report carries; ``InvalidArgument`` otherwise."""
    if "accuracy" not in report.metrics:
        raise InvalidArgument("reports.metrics: a cog report needs \"accuracy\" (test top-1 in [0, 1]); optional: "
                              f"{', '.join(COG_EXTRAS)}")
    extras = {name: value for name, value in report.metrics.items() if name != "accuracy"}
    return CogResult(run_id=report.run_id, level=report.cog_level, shots=report.shots, seed=report.seed,
                     accuracy=report.metrics["accuracy"], examples=report.examples, extras=extras).validate("reports.")


def render_cog_table(metrics: Any, request: pb.GetReportRequest) -> str:
    """The CoG table of ``request.run_ids`` (relative to ``request.baseline_run`` when given)."""
    from sampler_server.metrics.cog_report import build_cog_report, render_cog_report

    for name in ("vtab_benchmark", "vtab_split"):
        if getattr(request, name):
            raise InvalidArgument(f"{name}: only with table vtab (table cog has no VTAB benchmark or split)")
    report = build_cog_report(metrics, list(request.run_ids), request.baseline_run or None)
    return render_cog_report(report, request.format or "table")
