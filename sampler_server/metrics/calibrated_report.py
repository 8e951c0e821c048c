"""The calibrated report of the control baselines: calibrated risk per task and regime, and CCI.

What the Simple Control Baselines paper reports (Sec. 3 and 4), over the VTAB task
results the server stored with their role and data regime:
- R, the risk of a run on a task at regime n: its test error, 1 - top-1 on the task's
  "test" split (the mean over regime seeds when a run reports several seeds of one n);
- R_blind, the blind guess's risk on the task: the most frequent label of the task's
  whole training pool (its "train" split) scored on its test split, computed from the
  server's labels (one value per task, as ``sampler-server calibrate`` takes it);
- R_max, the ``max`` run's risk (random init, all training data: its regime-0 result);
- cR_f = (R_f - R_max) / (R_blind - R_max) for each ``model`` run, cR_scratch likewise
  for the ``scratch`` run at the same n: 0 is the maximal-supervision level, 1 the
  blind guess; a negative cR (better than ``max``) is reported as is, with a note;
- CCI per (task, run): with the points (cR_scratch(n), cR_f(n)) over the regimes both
  runs have, sorted by cR_scratch, the trapezoid integral of (x - y) dx over their x
  range divided by that of x dx (1: at the maximal-supervision level everywhere, 0: no
  better than scratch, negative: worse); null with fewer than two such points or a
  zero denominator.

The numbers come from one place: the stored results become the entries of
``sampler-server calibrate --input`` (``{"task", "n", "role", "run", "risk"}``, and a
``blind`` entry per task) and ``core.regimes.calibration.calibrate`` turns them into the
JSON below, so the report's JSON equals that command's output on the same entries:
``{"tasks": {TASK: {"blind_risk", "max_risk", "runs": {RUN: {"cci", "regimes": [{"n",
"risk", "cR", "cR_scratch"}]}}}}}``, regimes sorted by n (``cR_scratch`` null where the
scratch run lacks that n). Text and markdown show risks in percent, cR and CCI as
fractions with three and four decimals.

A model run's regime-0 results (the task's usual training split) and results on other
splits are not calibrated; a task only the scratch or max run has is not shown.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sampler_server.core.regimes.calibration import RiskEntry, calibrate, calibrated_risk
from sampler_server.core.regimes.calibration import notes as calibration_notes
from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.metrics.report import FORMATS
from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.tables import render_grid

QUERY_SPLIT = "test"


# ---- the report over stored results ---------------------------------------------------------


@dataclass
class CalibratedReport:
    runs: list[str]  # model runs, as asked
    scratch_run: str
    max_run: str
    calibration: dict[str, Any]  # the JSON of ``calibrate``
    scratch_curves: dict[str, list[tuple[int, float, float]]]  # task -> (n, risk, cR) of the scratch run
    seeds: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (task, run, n) -> seeds averaged
    ignored: list[str] = field(default_factory=list)  # notes on results not calibrated

    @property
    def tasks(self) -> list[str]:
        return list(self.calibration["tasks"])


def _check_runs(run_ids: Sequence[str], scratch_run: str, max_run: str) -> None:
    if not run_ids:
        raise InvalidArgument("run: none given; expected at least one run id")
    for name, value in (("scratch", scratch_run), ("max", max_run)):
        if not value:
            raise InvalidArgument(f"{name}: no {name} run given; a calibrated report needs one")
    repeated = sorted({r for r in run_ids if list(run_ids).count(r) > 1})
    if repeated:
        raise InvalidArgument(f"run: {repeated[0]!r} given twice")
    if scratch_run == max_run:
        raise InvalidArgument(f"max: {max_run!r} is also the scratch run; expected two different runs")
    for run in run_ids:
        if run in (scratch_run, max_run):
            raise InvalidArgument(f"run: {run!r} is also the {'scratch' if run == scratch_run else 'max'} run; "
                                  "expected model runs only")


def _risks(store: MetricsStore, run: str, role: str, what: str) -> tuple[dict[tuple[str, int], float],
                                                                           dict[tuple[str, int], int]]:
    """(task, n) -> mean test risk over regime seeds, and how many seeds, of a run of ``role``."""
    stored_role = store.run_role(run)  # NotFound names an unknown run
    if stored_role != role:
        found = f"a {stored_role} run" if stored_role else "a run without VTAB task results"
        raise FailedPrecondition(f"{what}: {run!r} is {found}, expected a {role} run")
    risks: dict[tuple[str, int], list[float]] = defaultdict(list)
    for result in store.task_results(run, split=QUERY_SPLIT, regime=None):
        risks[(result.task, result.regime)].append(1.0 - float(result.accuracy))
    return {key: sum(values) / len(values) for key, values in risks.items()}, {k: len(v) for k, v in risks.items()}


def build_calibrated_report(
    store: MetricsStore, run_ids: Sequence[str], scratch_run: str, max_run: str,
    blind_risk: Callable[[str], float],
) -> CalibratedReport:
    """The calibrated report of ``run_ids`` (role model) against ``scratch_run`` and ``max_run``.

    ``blind_risk(task)`` is the blind guess's test risk on a task (see the module); it is
    asked only for the tasks the model runs have regimes of.

    Raises:
        InvalidArgument: no runs, a run given twice, or a run also named as a control.
        NotFound: a run the store does not have.
        FailedPrecondition: a run of another role, a task without a scratch or max
            result, or R_blind == R_max.
    """
    _check_runs(run_ids, scratch_run, max_run)
    max_risks, _ = _risks(store, max_run, "max", "max")
    scratch_risks, scratch_seeds = _risks(store, scratch_run, "scratch", "scratch")
    report = CalibratedReport(list(run_ids), scratch_run, max_run, {}, {})
    entries: list[RiskEntry] = []
    tasks: set[str] = set()
    for run in run_ids:
        risks, seeds = _risks(store, run, "model", "run")
        for (task, n), risk in sorted(risks.items()):
            if n == 0:
                report.ignored.append(f"{run}: {task} without a regime (the usual training split) is not calibrated")
                continue
            entries.append(RiskEntry(task=task, role="model", risk=risk, run=run, n=n))
            report.seeds[(task, run, n)] = seeds[(task, n)]
            tasks.add(task)
        if not risks:
            report.ignored.append(f"{run} has no {QUERY_SPLIT} results")
    for task in sorted(tasks):
        if (task, 0) not in max_risks:
            raise FailedPrecondition(f"task {task}: max run {max_run!r} has no {QUERY_SPLIT} result for it; a "
                                     "calibration needs the max run's risk on every task")
        scratch = sorted((n, risk) for (t, n), risk in scratch_risks.items() if t == task and n > 0)
        if not scratch:
            raise FailedPrecondition(f"task {task}: scratch run {scratch_run!r} has no {QUERY_SPLIT} result at any "
                                     "regime; a calibration needs the scratch run's risks on every task")
        blind = float(blind_risk(task))
        entries.append(RiskEntry(task=task, role="blind", risk=blind))
        entries.append(RiskEntry(task=task, role="max", risk=max_risks[(task, 0)], run=max_run))
        entries += [RiskEntry(task=task, role="scratch", risk=risk, run=scratch_run, n=n) for n, risk in scratch]
        for n, _ in scratch:
            report.seeds[(task, scratch_run, n)] = scratch_seeds[(task, n)]
    report.calibration = calibrate(entries)
    for task, value in report.calibration["tasks"].items():
        report.scratch_curves[task] = [
            (entry.n, entry.risk, calibrated_risk(entry.risk, blind_risk=value["blind_risk"],
                                                  max_risk=value["max_risk"], task=task))
            for entry in entries if entry.task == task and entry.role == "scratch"
        ]
    return report


def _number(value: float | None, places: int) -> str:
    return "-" if value is None else f"{value:+.{places}f}"


def render_calibrated_report(report: CalibratedReport, fmt: str = "table") -> str:
    """The calibrated table as ``fmt`` (one of ``FORMATS``); JSON is ``calibrate``'s."""
    if fmt not in FORMATS:
        raise InvalidArgument(f"format: got {fmt!r}, expected one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(report.calibration, indent=1)
    rows: list[list[str]] = []
    averaged = sorted({key for key, count in report.seeds.items() if count > 1})
    for task, value in report.calibration["tasks"].items():
        rows.append([task, "blind guess", "-", f"{100 * value['blind_risk']:.2f}", "+1.000", "-"])
        rows.append([task, f"{report.max_run} (max)", "all", f"{100 * value['max_risk']:.2f}", "+0.000", "-"])
        for n, risk, cr in report.scratch_curves[task]:
            rows.append([task, f"{report.scratch_run} (scratch)", str(n), f"{100 * risk:.2f}", _number(cr, 3), "-"])
        for run, calibrated in value["runs"].items():
            for regime in calibrated["regimes"]:
                rows.append([task, run, str(regime["n"]), f"{100 * regime['risk']:.2f}", _number(regime["cR"], 3),
                             _number(regime["cR_scratch"], 3)])
            rows.append([task, run, "CCI", "", _number(calibrated["cci"], 4), ""])
    notes = [
        "R: test error (%) = 100 - top-1; cR = (R - R_max) / (R_blind - R_max): 0 = the max run, 1 = the blind guess "
        "(most frequent training label); cR scratch: the scratch run's cR at the same n",
        "CCI: area between the run's cR-vs-cR_scratch curve and the diagonal over the area under the diagonal "
        "(trapezoids over the regimes both runs have; 1 = at the max level everywhere, 0 = no better than scratch, "
        "negative = worse; - where undefined)",
    ]
    notes += calibration_notes(report.calibration)
    if averaged:
        notes.append("mean risk over regime seeds: " + ", ".join(
            f"{run} on {task} at n={n} ({report.seeds[(task, run, n)]} seeds)" for task, run, n in averaged))
    notes += [f"  {note}" for note in report.ignored]
    if not report.calibration["tasks"]:
        notes.append("  no task has a model run's result at a regime")
    return render_grid(["task", "run", "n", "R (%)", "cR", "cR scratch"], rows, notes, fmt)
