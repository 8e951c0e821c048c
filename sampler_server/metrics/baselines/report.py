"""The calibrated report of the control baselines: calibrated risk per task and regime, and CCI.

What the Simple Control Baselines paper reports (Sec. 3 and 4), over the VTAB task
results the server stored with their role and data regime:
- R, the risk of a run on a task at regime n and regime seed: its test error, 1 - top-1
  on the task's "test" split;
- R_blind, the blind guess's risk on the task: the most frequent label of the task's
  whole training pool (its "train" split) scored on its test split, computed from the
  server's labels (one value per task, as ``sampler-server calibrate`` takes it);
- R_max, the ``max`` run's risk (random init, all training data: its regime-0 result);
- cR_f = (R_f - R_max) / (R_blind - R_max) for each ``model`` run, cR_scratch(n) the
  ``scratch`` run's cR at n averaged over its seeds: 0 is the maximal-supervision level,
  1 the blind guess; a negative cR (better than ``max``) is reported as is, with a note;
- CCI per (task, run), as ``core.baselines.calibration`` defines it: by default
  (``cci_seeds`` "points") as the reference notebook computes it, every (n, seed) of the
  run its own point against cR_scratch(n), in (n, seed) order; with "mean" the run's
  risk averaged over its seeds at each n first. 1: at the maximal-supervision level
  everywhere, 0: no better than scratch, negative: worse; null (shown "undefined")
  where the notes say why.

The numbers come from one place: the stored results become the entries of
``sampler-server calibrate --input`` (``{"task", "n", "role", "run", "risk"}``, and a
``blind`` entry per task) and ``core.baselines.calibration.calibrate`` turns them into the
JSON below, so the report's JSON equals that command's output on the same entries:
``{"tasks": {TASK: {"blind_risk", "max_risk", "runs": {RUN: {"cci", "regimes": [{"n",
"seed", "risk", "cR", "cR_scratch"}]}}}}, "cci_seeds"}``, regimes sorted by (n, seed)
(no "seed" with "mean"; ``cR_scratch`` null where the scratch run lacks that n). Text and
markdown show risks in percent, cR and CCI as fractions with three and four decimals,
and name the ``cci_seeds`` in a note.

A model run's regime-0 results (the task's usual training split) and results on other
splits are not calibrated; a task only the scratch or max run has is not shown.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sampler_server.core.baselines.calibration import DEFAULT_CCI_SEEDS, RiskEntry, calibrate, cci_seeds_label
from sampler_server.core.baselines.calibration import check_cci_seeds, scratch_reference
from sampler_server.core.baselines.calibration import notes as calibration_notes
from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.tables import check_format, check_runs, render_grid

QUERY_SPLIT = "test"


def blind_risk(task: str, listing: Callable[[str], Any]) -> float:
    """R_blind of ``task`` from its split listings (``listing(split).labels``): the most
    frequent label of its training pool scored on its test split (``core.baselines.blind_guess``).
    The server and the report command both compute it here, over their own listings."""
    from sampler_server.core.baselines import POOL_SPLIT, TEST_SPLIT, blind_guess

    return blind_guess(listing(POOL_SPLIT).labels, listing(TEST_SPLIT).labels, task=task).risk


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


def _check_controls(run_ids: Sequence[str], scratch_run: str, max_run: str) -> None:
    """Both controls given, different, and neither among the model runs (``tables.check_runs`` first)."""
    check_runs(run_ids)
    for name, value in (("scratch", scratch_run), ("max", max_run)):
        if not value:
            raise InvalidArgument(f"{name}: no {name} run given; a calibrated report needs one")
    if scratch_run == max_run:
        raise InvalidArgument(f"max: {max_run!r} is also the scratch run; expected two different runs")
    for run in run_ids:
        if run in (scratch_run, max_run):
            raise InvalidArgument(f"run: {run!r} is also the {'scratch' if run == scratch_run else 'max'} run; "
                                  "expected model runs only")


def _risks(store: MetricsStore, run: str, role: str, what: str) -> dict[tuple[str, int, int], float]:
    """(task, n, regime seed) -> test risk of a run of ``role``."""
    stored_role = store.run_role(run)  # NotFound names an unknown run
    if stored_role != role:
        found = f"a {stored_role} run" if stored_role else "a run without VTAB task results"
        raise FailedPrecondition(f"{what}: {run!r} is {found}, expected a {role} run")
    return {(result.task, result.regime, result.regime_seed): 1.0 - float(result.accuracy)
            for result in store.task_results(run, split=QUERY_SPLIT, regime=None)}


def _seed_counts(risks: dict[tuple[str, int, int], float]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for task, n, _seed in risks:
        counts[(task, n)] += 1
    return dict(counts)


def build_calibrated_report(
    store: MetricsStore, run_ids: Sequence[str], scratch_run: str, max_run: str,
    blind_risk: Callable[[str], float], cci_seeds: str = DEFAULT_CCI_SEEDS,
) -> CalibratedReport:
    """The calibrated report of ``run_ids`` (role model) against ``scratch_run`` and ``max_run``.

    ``blind_risk(task)`` is the blind guess's test risk on a task (see the module); it is
    asked only for the tasks the model runs have regimes of. ``cci_seeds``: "points" (the
    reference's CCI) or "mean" (``core.baselines.calibration``).

    Raises:
        InvalidArgument: no runs, a run given twice, a run also named as a control, or an
            unknown ``cci_seeds``.
        NotFound: a run the store does not have.
        FailedPrecondition: a run of another role, a task without a scratch or max
            result, or R_blind == R_max.
    """
    _check_controls(run_ids, scratch_run, max_run)
    check_cci_seeds(cci_seeds)
    max_risks = _risks(store, max_run, "max", "max")
    scratch_risks = _risks(store, scratch_run, "scratch", "scratch")
    scratch_seeds = _seed_counts(scratch_risks)
    report = CalibratedReport(list(run_ids), scratch_run, max_run, {}, {})
    entries: list[RiskEntry] = []
    tasks: set[str] = set()
    for run in run_ids:
        risks = _risks(store, run, "model", "run")
        seeds = _seed_counts(risks)
        unregimed = sorted({task for task, n, _ in risks if n == 0})
        if unregimed:  # one note per run: a model run of every VTAB task would otherwise add 19
            report.ignored.append(f"{run}: {', '.join(unregimed)} without a regime (the usual training split) "
                                  f"{'is' if len(unregimed) == 1 else 'are'} not calibrated")
        for (task, n, seed), risk in sorted(risks.items()):
            if n == 0:
                continue
            entries.append(RiskEntry(task=task, role="model", risk=risk, run=run, n=n, seed=seed))
            report.seeds[(task, run, n)] = seeds[(task, n)]
            tasks.add(task)
        if not risks:
            report.ignored.append(f"{run} has no {QUERY_SPLIT} results")
    for task in sorted(tasks):
        if (task, 0, 0) not in max_risks:
            raise FailedPrecondition(f"task {task}: max run {max_run!r} has no {QUERY_SPLIT} result for it; a "
                                     "calibration needs the max run's risk on every task")
        scratch = sorted((n, seed, risk) for (t, n, seed), risk in scratch_risks.items() if t == task and n > 0)
        if not scratch:
            raise FailedPrecondition(f"task {task}: scratch run {scratch_run!r} has no {QUERY_SPLIT} result at any "
                                     "regime; a calibration needs the scratch run's risks on every task")
        blind = float(blind_risk(task))
        entries.append(RiskEntry(task=task, role="blind", risk=blind))
        entries.append(RiskEntry(task=task, role="max", risk=max_risks[(task, 0, 0)], run=max_run))
        entries += [RiskEntry(task=task, role="scratch", risk=risk, run=scratch_run, n=n, seed=seed)
                    for n, seed, risk in scratch]
        for n, _, _ in scratch:
            report.seeds[(task, scratch_run, n)] = scratch_seeds[(task, n)]
    report.calibration = calibrate(entries, cci_seeds=cci_seeds)
    for task, value in report.calibration["tasks"].items():
        by_seed = {(e.n, e.seed): e.risk for e in entries if e.task == task and e.role == "scratch"}
        reference = scratch_reference(by_seed, blind_risk=value["blind_risk"], max_risk=value["max_risk"], task=task)
        report.scratch_curves[task] = [
            (n, sum(r for (m, _), r in by_seed.items() if m == n) / report.seeds[(task, scratch_run, n)], cr)
            for n, cr in reference.items()
        ]
    return report


def _number(value: float | None, places: int) -> str:
    return "-" if value is None else f"{value:+.{places}f}"


def render_calibrated_report(report: CalibratedReport, fmt: str = "table") -> str:
    """The calibrated table as ``fmt`` (one of ``tables.FORMATS``); JSON is ``calibrate``'s."""
    if check_format(fmt) == "json":
        return json.dumps(report.calibration, indent=1)
    rows: list[list[str]] = []
    averaged = sorted({key for key, count in report.seeds.items() if count > 1})
    for task, value in report.calibration["tasks"].items():
        rows.append([task, "blind guess", "-", "-", f"{100 * value['blind_risk']:.2f}", "+1.000", "-"])
        rows.append([task, f"{report.max_run} (max)", "all", "-", f"{100 * value['max_risk']:.2f}", "+0.000", "-"])
        for n, risk, cr in report.scratch_curves[task]:
            rows.append([task, f"{report.scratch_run} (scratch)", str(n), "mean", f"{100 * risk:.2f}",
                         _number(cr, 3), "-"])
        for run, calibrated in value["runs"].items():
            for regime in calibrated["regimes"]:
                rows.append([task, run, str(regime["n"]), str(regime.get("seed", "mean")),
                             f"{100 * regime['risk']:.2f}", _number(regime["cR"], 3),
                             _number(regime["cR_scratch"], 3)])
            cci = "undefined" if calibrated["cci"] is None else _number(calibrated["cci"], 4)
            rows.append([task, run, "CCI", "", "", cci, ""])
    notes = [
        "R: test error (%) = 100 - top-1; cR = (R - R_max) / (R_blind - R_max): 0 = the max run, 1 = the blind guess "
        "(most frequent training label); cR scratch: the scratch run's cR at the same n, averaged over its seeds",
        "CCI: area between the run's cR-vs-cR_scratch curve and the diagonal over the area under the diagonal "
        "(trapezoids; 1 = at the max level everywhere, 0 = no better than scratch, negative = worse)",
    ]
    notes.append(cci_seeds_label(report.calibration["cci_seeds"]))
    notes += calibration_notes(report.calibration)
    if averaged:
        what = "mean risk over regime seeds" if report.calibration["cci_seeds"] == "mean" else \
            "regime seeds (the scratch run's averaged at each n, each model seed its own point)"
        notes.append(f"{what}: " + ", ".join(
            f"{run} on {task} at n={n} ({report.seeds[(task, run, n)]} seeds)" for task, run, n in averaged))
    notes += [f"  {note}" for note in report.ignored]
    if not report.calibration["tasks"]:
        notes.append("  no task has a model run's result at a regime")
    return render_grid(["task", "run", "n", "seed", "R (%)", "cR", "cR scratch"], rows, notes, fmt)
