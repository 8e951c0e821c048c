"""The control baselines' "calibrated" table of ``GetReport``.

``run_ids`` are the model runs, ``scratch_run`` and ``max_run`` the controls (each run's
stored role must match); the blind guess of each task is computed from the labels of
the served store holding it (the most frequent label of the task's "train" split scored
on its "test" split, ``core.baselines.blind_guess``; a ``source:<store>`` task's held-out splits), as ``sampler-server report
--calibrate --data`` computes it from the packed stores. ``cci_seeds`` picks the CCI: "points" (the
default, the reference notebook's) or "mean" (``core.baselines.calibration``). Every refusal
is one line naming the field as the wire spells it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sampler_server.errors import InvalidArgument
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

if TYPE_CHECKING:
    from sampler_server.service.vtab import VtabHandlers

CALIBRATED_TABLE = "calibrated"


def served_blind_risk(vtab: "VtabHandlers", name: str) -> float:
    """R_blind of a task over the served store holding it (its split listings are cached)."""
    from sampler_server.core.baselines import POOL_SPLIT, TEST_SPLIT, blind_guess

    task = vtab.handle(name)
    train, test = task.listing(POOL_SPLIT), task.listing(TEST_SPLIT)
    return blind_guess(train.labels, test.labels, task=name).risk


def render_calibrated_table(metrics: Any, request: pb.GetReportRequest, vtab: "VtabHandlers") -> str:
    """The calibrated table of ``request.run_ids`` against ``scratch_run`` and ``max_run``."""
    from sampler_server.metrics.calibrated_report import build_calibrated_report, render_calibrated_report

    for name in ("vtab_benchmark", "vtab_split", "baseline_run"):
        if getattr(request, name):
            raise InvalidArgument(f"{name}: not with table {CALIBRATED_TABLE!r} (it reads VTAB test results at "
                                  "every regime against scratch_run and max_run)")
    for name in ("scratch_run", "max_run"):
        if not getattr(request, name):
            raise InvalidArgument(f"{name}: empty; table {CALIBRATED_TABLE!r} needs the {name.split('_')[0]} run")
    from sampler_server.core.baselines.calibration import DEFAULT_CCI_SEEDS, check_cci_seeds

    cci_seeds = check_cci_seeds(request.cci_seeds or DEFAULT_CCI_SEEDS)
    report = build_calibrated_report(metrics, list(request.run_ids), request.scratch_run, request.max_run,
                                     lambda task: served_blind_risk(vtab, task), cci_seeds)
    return render_calibrated_report(report, request.format or "table")
