"""Calibrated risk and the Calibrated Cumulative Improvement (CCI) of issue 12.

Per task, with R_max the ``max`` run's risk and R_blind the blind guess's:

- ``cR_f = (R_f - R_max) / (R_blind - R_max)`` for a run f at a regime, and
  ``cR_scratch`` likewise for the ``scratch`` run at the same regime. 0 is the
  maximal-supervision level, 1 the blind guess; a run better than ``max`` has a
  negative cR, reported as is (``notes`` says so).
- CCI of a run: the points (x_i, y_i) = (cR_scratch(n_i), cR_f(n_i)) over the regimes
  both runs have, sorted by x (then y), give
  CCI = trapezoid integral of (x - y) dx over [x_min, x_max] / trapezoid integral of x dx
  over the same interval: 1 = at the max level everywhere, 0 = no better than scratch,
  negative = worse. With fewer than two distinct x (or a zero denominator) the area is
  undefined and CCI is ``None`` (JSON null).

R_blind == R_max, or a task without a ``max`` or ``scratch`` run (or without a blind
risk), is a one-line ``InvalidArgument`` naming the task and the missing or degenerate
value. A regime of a run that the scratch run lacks is listed with ``cR_scratch`` null
and left out of the CCI.

The JSON of a calibration (``calibrate``, the ``calibrate`` command and the calibrated
report) is ``{"tasks": {TASK: {"blind_risk", "max_risk", "runs": {RUN: {"cci",
"regimes": [{"n", "risk", "cR", "cR_scratch"}]}}}}}``, tasks and runs sorted by name,
regimes by n. Pure functions: no input order changes a result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted

ROLES = ("model", "scratch", "max", "blind")
"""Roles of a calibration input entry: the runs' three and the per-task blind-guess risk."""
TASK_KEYS = ("blind_risk", "max_risk", "runs")
RUN_KEYS = ("cci", "regimes")
REGIME_KEYS = ("n", "risk", "cR", "cR_scratch")
_ENTRY_KEYS = {
    "model": ("task", "n", "role", "run", "risk"),
    "scratch": ("task", "n", "role", "run", "risk"),
    "max": ("task", "role", "run", "risk"),
    "blind": ("task", "role", "risk"),
}


def _check_risk(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"{what}: got {quoted(value)}, expected a finite number")
    return float(value)


def calibrated_risk(risk: float, *, blind_risk: float, max_risk: float, task: str = "") -> float:
    """cR = (risk - R_max) / (R_blind - R_max); R_blind == R_max is an error naming the task."""
    where = f"task {task}" if task else "calibration"
    if blind_risk == max_risk:
        raise InvalidArgument(f"{where}: the blind-guess risk equals the max run's risk ({blind_risk}); "
                              f"cR is undefined")
    return (risk - max_risk) / (blind_risk - max_risk)


def _trapezoid(xs: Sequence[float], ys: Sequence[float]) -> float:
    return math.fsum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))


def cci(points: Iterable[tuple[float, float]]) -> float | None:
    """The CCI of points (cR_scratch, cR_f); ``None`` when the area is undefined (see the module)."""
    ordered = sorted((float(x), float(y)) for x, y in points)
    xs = [x for x, _ in ordered]
    if len(set(xs)) < 2:
        return None
    denominator = _trapezoid(xs, xs)
    if denominator == 0:
        return None
    return _trapezoid(xs, [x - y for x, y in ordered]) / denominator


def calibrate_run(risks: Mapping[int, float], scratch: Mapping[int, float], *, blind_risk: float,
                  max_risk: float, task: str = "") -> dict[str, Any]:
    """``{"cci", "regimes": [{"n", "risk", "cR", "cR_scratch"}]}`` of one run on one task.

    Args:
        risks: the run's risk per regime n; scratch: the scratch run's risk per regime n.
    """
    regimes, points = [], []
    for n in sorted(risks):
        cr = calibrated_risk(risks[n], blind_risk=blind_risk, max_risk=max_risk, task=task)
        cr_scratch = None
        if n in scratch:
            cr_scratch = calibrated_risk(scratch[n], blind_risk=blind_risk, max_risk=max_risk, task=task)
            points.append((cr_scratch, cr))
        regimes.append({"n": int(n), "risk": float(risks[n]), "cR": cr, "cR_scratch": cr_scratch})
    return {"cci": cci(points), "regimes": regimes}


def calibrate_task(task: str, *, blind_risk: float | None, max_risk: float | None,
                   scratch: Mapping[int, float] | None, runs: Mapping[str, Mapping[int, float]]) -> dict[str, Any]:
    """``{"blind_risk", "max_risk", "runs": {RUN: calibrate_run(...)}}`` of one task.

    Raises:
        InvalidArgument: no blind risk, no max run, no scratch run, or R_blind == R_max (the
            message names the task).
    """
    if blind_risk is None:
        raise InvalidArgument(f"task {task}: no blind-guess risk (an entry with role 'blind')")
    if max_risk is None:
        raise InvalidArgument(f"task {task}: no max run (an entry with role 'max')")
    if not scratch:
        raise InvalidArgument(f"task {task}: no scratch run (entries with role 'scratch')")
    if blind_risk == max_risk:
        raise InvalidArgument(f"task {task}: the blind-guess risk equals the max run's risk ({blind_risk}); "
                              f"cR is undefined")
    return {
        "blind_risk": float(blind_risk), "max_risk": float(max_risk),
        "runs": {run: calibrate_run(runs[run], scratch, blind_risk=blind_risk, max_risk=max_risk, task=task)
                 for run in sorted(runs)},
    }


@dataclass(frozen=True)
class RiskEntry:
    """One entry of a calibration input: a run's risk on a task (at regime n), or the blind risk."""

    task: str
    role: str
    risk: float
    run: str = ""
    n: int = 0


def parse_entries(data: Any, *, where: str = "input") -> list[RiskEntry]:
    """Validate a calibration input: a JSON list of ``{"task", "n", "role", "run", "risk"}``
    (``max`` has no ``n``) and ``{"task", "role": "blind", "risk"}`` objects.

    Raises:
        InvalidArgument: one line naming the entry (by position) and what is allowed.
    """
    if not isinstance(data, list):
        raise InvalidArgument(f"{where}: expected a JSON list of result objects, got {type(data).__name__}")
    entries = []
    for position, item in enumerate(data):
        at = f"{where} entry {position}"
        if not isinstance(item, dict):
            raise InvalidArgument(f"{at}: expected an object, got {type(item).__name__}")
        role = item.get("role")
        if role not in _ENTRY_KEYS:
            raise InvalidArgument(f"{at}: role got {quoted(role)}, expected one of {', '.join(ROLES)}")
        allowed = _ENTRY_KEYS[role]
        extra = sorted(set(item) - set(allowed))
        missing = [key for key in allowed if key not in item]
        if extra or missing:
            what = f"unknown keys {', '.join(map(quoted, extra))}" if extra else f"missing {', '.join(missing)}"
            raise InvalidArgument(f"{at} (role {role}): {what}; a {role} entry has exactly {', '.join(allowed)}")
        task = item["task"]
        if not isinstance(task, str) or not task:
            raise InvalidArgument(f"{at}: task got {quoted(task)}, expected a non-empty name")
        run = item.get("run", "")
        if role != "blind" and (not isinstance(run, str) or not run):
            raise InvalidArgument(f"{at}: run got {quoted(run)}, expected a non-empty name")
        n = item.get("n", 0)
        if role in ("model", "scratch") and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InvalidArgument(f"{at}: n got {quoted(n)}, expected a positive integer (the regime's size)")
        risk = _check_risk(item["risk"], f"{at}: risk")
        entries.append(RiskEntry(task=task, role=role, risk=risk, run=run, n=n))
    return entries


def calibrate(entries: Iterable[RiskEntry]) -> dict[str, Any]:
    """The calibration JSON (see the module docstring) of parsed entries.

    Raises:
        InvalidArgument: per task, a missing or repeated blind/max/scratch value, two scratch
            or max runs, a repeated (run, n), or R_blind == R_max; the message names the task.
    """
    by_task: dict[str, list[RiskEntry]] = {}
    for entry in entries:
        by_task.setdefault(entry.task, []).append(entry)
    tasks = {}
    for task in sorted(by_task):
        blind = [e for e in by_task[task] if e.role == "blind"]
        maxes = [e for e in by_task[task] if e.role == "max"]
        scratches = sorted({e.run for e in by_task[task] if e.role == "scratch"})
        if len(blind) > 1:
            raise InvalidArgument(f"task {task}: {len(blind)} blind-guess risks; give one")
        if len(maxes) > 1:
            raise InvalidArgument(f"task {task}: {len(maxes)} max entries ({', '.join(e.run for e in maxes)}); "
                                  f"give one")
        if len(scratches) > 1:
            raise InvalidArgument(f"task {task}: {len(scratches)} scratch runs ({', '.join(scratches)}); give one")
        runs: dict[str, dict[int, float]] = {}
        scratch: dict[int, float] = {}
        for entry in by_task[task]:
            if entry.role not in ("model", "scratch"):
                continue
            table = scratch if entry.role == "scratch" else runs.setdefault(entry.run, {})
            if entry.n in table:
                raise InvalidArgument(f"task {task}: run {entry.run} has two risks at regime n={entry.n}")
            table[entry.n] = entry.risk
        if scratches and scratches[0] in runs:
            raise InvalidArgument(f"task {task}: run {scratches[0]} is both a scratch and a model run")
        tasks[task] = calibrate_task(task, blind_risk=blind[0].risk if blind else None,
                                     max_risk=maxes[0].risk if maxes else None, scratch=scratch, runs=runs)
    return {"tasks": tasks}


def notes(calibration: Mapping[str, Any]) -> list[str]:
    """One line per negative cR (a run or scratch better than ``max``, reported as is) and per
    undefined CCI, in task, run, regime order."""
    lines = []
    for task, result in calibration["tasks"].items():
        for run, entry in result["runs"].items():
            for regime in entry["regimes"]:
                for key, who in (("cR", f"run {run}"), ("cR_scratch", "the scratch run")):
                    value = regime[key]
                    if value is not None and value < 0:
                        lines.append(f"task {task} n={regime['n']}: {key} {value:.4f} < 0: {who} beats the max "
                                     f"run (reported as is)")
            if entry["cci"] is None:
                lines.append(f"task {task} run {run}: CCI undefined (fewer than two regimes shared with "
                             f"the scratch run, or a zero area)")
    return lines
