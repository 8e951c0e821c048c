"""Calibrated risk and the Calibrated Cumulative Improvement (CCI) of issue 12.

Per task, with R_max the ``max`` run's risk and R_blind the blind guess's:

- ``cR_f = (R_f - R_max) / (R_blind - R_max)`` for a run f at a regime (and seed), and
  ``cR_scratch(n)`` the mean over the ``scratch`` run's seeds of its cR at regime n. 0
  is the maximal-supervision level, 1 the blind guess; a run better than ``max`` has a
  negative cR, reported as is (``notes`` says so).
- CCI of a run, two ways (``CCI_SEEDS``):
  - ``points`` (the default): as the reference notebook computes it
    (EPFL-VILAB/transfer-controls ``Plotting-Example.ipynb``, ``get_calibrated_risk`` and
    ``get_cci``; in words in ../shared/reference/control_baselines/README.md). Every
    (n, seed) of the run is its own point (x, y) = (cR_scratch(n), cR_f(n, seed)); the
    points in (n, seed) order give CCI = trapz(x - y, x) / trapz(x, x), signed (as n
    grows x falls, so both integrals are negative and the ratio positive). A point whose
    n has no scratch value, a single point, or a zero denominator: undefined.
  - ``mean``: the run's risk is first averaged over its seeds at each n; the points
    (cR_scratch(n), cR_f(n)) over the regimes both runs have, sorted by x (then y), give
    the same ratio over [x_min, x_max]; a regime the scratch run lacks is left out, and
    fewer than two distinct x (or a zero denominator) is undefined.
  Undefined is ``None`` (JSON null). 1 = at the max level everywhere, 0 = no better than
  scratch, negative = worse.

R_blind == R_max, or a task without a ``max`` or ``scratch`` run (or without a blind
risk), is a one-line ``InvalidArgument`` naming the task and the missing or degenerate
value. A regime of a run that the scratch run lacks is listed with ``cR_scratch`` null.

The JSON of a calibration (``calibrate``, the ``calibrate`` command and the calibrated
report) is ``{"tasks": {TASK: {"blind_risk", "max_risk", "runs": {RUN: {"cci", "regimes":
[{"n", "seed", "risk", "cR", "cR_scratch"}]}}}}, "cci_seeds"}``, tasks and runs
sorted by name, regimes by (n, seed); with ``cci_seeds`` "mean" a regime is one n (its
risk the mean over seeds) and has no "seed". Pure functions: no input order changes a
result.
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
CCI_SEEDS = ("points", "mean")
"""How a run's seeds enter its CCI: each (n, seed) its own point (the reference's), or the mean per n."""
DEFAULT_CCI_SEEDS = "points"
TASK_KEYS = ("blind_risk", "max_risk", "runs")
RUN_KEYS = ("cci", "regimes")
REGIME_KEYS = ("n", "risk", "cR", "cR_scratch")
POINT_KEYS = ("n", "seed", "risk", "cR", "cR_scratch")
_ENTRY_KEYS = {
    "model": ("task", "n", "role", "run", "risk"),
    "scratch": ("task", "n", "role", "run", "risk"),
    "max": ("task", "role", "run", "risk"),
    "blind": ("task", "role", "risk"),
}
_OPTIONAL_KEYS = {"model": ("seed",), "scratch": ("seed",), "max": (), "blind": ()}


def check_cci_seeds(value: str, field: str = "cci_seeds") -> str:
    """``value`` when it is one of ``CCI_SEEDS``, else one line naming ``field`` and both values."""
    if value not in CCI_SEEDS:
        raise InvalidArgument(f"{field}: got {quoted(value)}, expected one of {', '.join(CCI_SEEDS)}")
    return value


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
    """The seed-mean variant's CCI of points (cR_scratch, cR_f), sorted by (x, y); ``None``
    with fewer than two distinct x or a zero denominator."""
    ordered = sorted((float(x), float(y)) for x, y in points)
    xs = [x for x, _ in ordered]
    if len(set(xs)) < 2:
        return None
    denominator = _trapezoid(xs, xs)
    if denominator == 0:
        return None
    return _trapezoid(xs, [x - y for x, y in ordered]) / denominator


def cci_in_order(points: Sequence[tuple[float | None, float]]) -> float | None:
    """The reference's CCI: trapz(x - y, x) / trapz(x, x) over ``points`` in the order given
    (the run's (n, seed) order); ``None`` when a point has no x (its n has no scratch value),
    with fewer than two points, or a zero denominator."""
    if len(points) < 2 or any(x is None for x, _ in points):
        return None
    xs = [float(x) for x, _ in points]  # type: ignore[arg-type]
    denominator = _trapezoid(xs, xs)
    if denominator == 0:
        return None
    return _trapezoid(xs, [x - float(y) for x, (_, y) in zip(xs, points)]) / denominator


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return math.fsum(values) / len(values)


def scratch_reference(scratch: Mapping[tuple[int, int], float], *, blind_risk: float, max_risk: float,
                      task: str = "") -> dict[int, float]:
    """cR_scratch(n): the mean over the scratch run's seeds of its cR at each n (``scratch`` maps
    (n, seed) to a risk)."""
    by_n: dict[int, list[float]] = {}
    for (n, _seed), risk in sorted(scratch.items()):
        by_n.setdefault(n, []).append(calibrated_risk(risk, blind_risk=blind_risk, max_risk=max_risk, task=task))
    return {n: _mean(values) for n, values in by_n.items()}


def calibrate_run(risks: Mapping[tuple[int, int], float], scratch: Mapping[tuple[int, int], float], *,
                  blind_risk: float, max_risk: float, task: str = "",
                  cci_seeds: str = DEFAULT_CCI_SEEDS) -> dict[str, Any]:
    """``{"cci", "regimes": [...]}`` of one run on one task (see the module for both ``cci_seeds``).

    Args:
        risks: the run's risk per (n, seed); scratch: the scratch run's risk per (n, seed).
    """
    check_cci_seeds(cci_seeds)
    reference = scratch_reference(scratch, blind_risk=blind_risk, max_risk=max_risk, task=task)
    regimes: list[dict[str, Any]] = []
    if cci_seeds == "points":
        for n, seed in sorted(risks):
            risk = risks[(n, seed)]
            cr = calibrated_risk(risk, blind_risk=blind_risk, max_risk=max_risk, task=task)
            regimes.append({"n": n, "seed": int(seed), "risk": float(risk), "cR": cr,
                            "cR_scratch": reference.get(n)})
        return {"cci": cci_in_order([(r["cR_scratch"], r["cR"]) for r in regimes]), "regimes": regimes}
    by_n: dict[int, list[float]] = {}
    for (n, _seed), risk in sorted(risks.items()):
        by_n.setdefault(n, []).append(risk)
    scratch_by_n: dict[int, list[float]] = {}
    for (n, _seed), risk in sorted(scratch.items()):
        scratch_by_n.setdefault(n, []).append(risk)
    points = []
    for n in sorted(by_n):
        risk = _mean(by_n[n])
        cr = calibrated_risk(risk, blind_risk=blind_risk, max_risk=max_risk, task=task)
        cr_scratch = None
        if n in scratch_by_n:
            cr_scratch = calibrated_risk(_mean(scratch_by_n[n]), blind_risk=blind_risk, max_risk=max_risk,
                                         task=task)
            points.append((cr_scratch, cr))
        regimes.append({"n": n, "risk": risk, "cR": cr, "cR_scratch": cr_scratch})
    return {"cci": cci(points), "regimes": regimes}


def calibrate_task(task: str, *, blind_risk: float | None, max_risk: float | None,
                   scratch: Mapping[tuple[int, int], float] | None,
                   runs: Mapping[str, Mapping[tuple[int, int], float]],
                   cci_seeds: str = DEFAULT_CCI_SEEDS) -> dict[str, Any]:
    """``{"blind_risk", "max_risk", "runs": {RUN: calibrate_run(...)}}`` of one task; ``scratch``
    and each run map (n, seed) to a risk.

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
        "runs": {run: calibrate_run(runs[run], scratch, blind_risk=blind_risk, max_risk=max_risk, task=task,
                                    cci_seeds=cci_seeds)
                 for run in sorted(runs)},
    }


@dataclass(frozen=True)
class RiskEntry:
    """One entry of a calibration input: a run's risk on a task (at regime n and seed), or the blind risk."""

    task: str
    role: str
    risk: float
    run: str = ""
    n: int | float = 0
    """The regime's size (a positive int; the reference's CSV also has fractional sizes)."""
    seed: int = 0


def parse_entries(data: Any, *, where: str = "input") -> list[RiskEntry]:
    """Validate a calibration input: a JSON list of ``{"task", "n", "role", "run", "risk"}``
    objects (``model`` and ``scratch`` may add an integer ``"seed"``, default 0; ``max`` has no
    ``n``) and ``{"task", "role": "blind", "risk"}`` objects.

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
        extra = sorted(set(item) - set(allowed) - set(_OPTIONAL_KEYS[role]))
        missing = [key for key in allowed if key not in item]
        if extra or missing:
            what = f"unknown keys {', '.join(map(quoted, extra))}" if extra else f"missing {', '.join(missing)}"
            optional = f" (and optionally {', '.join(_OPTIONAL_KEYS[role])})" if _OPTIONAL_KEYS[role] else ""
            raise InvalidArgument(f"{at} (role {role}): {what}; a {role} entry has exactly {', '.join(allowed)}"
                                  f"{optional}")
        task = item["task"]
        if not isinstance(task, str) or not task:
            raise InvalidArgument(f"{at}: task got {quoted(task)}, expected a non-empty name")
        run = item.get("run", "")
        if role != "blind" and (not isinstance(run, str) or not run):
            raise InvalidArgument(f"{at}: run got {quoted(run)}, expected a non-empty name")
        n = item.get("n", 0)
        if role in ("model", "scratch") and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InvalidArgument(f"{at}: n got {quoted(n)}, expected a positive integer (the regime's size)")
        seed = item.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidArgument(f"{at}: seed got {quoted(seed)}, expected an integer (the regime's seed)")
        risk = _check_risk(item["risk"], f"{at}: risk")
        entries.append(RiskEntry(task=task, role=role, risk=risk, run=run, n=n, seed=seed))
    return entries


def calibrate(entries: Iterable[RiskEntry], *, cci_seeds: str = DEFAULT_CCI_SEEDS,
              scratch_cci: bool = False) -> dict[str, Any]:
    """The calibration JSON (see the module docstring) of parsed entries.

    Args:
        cci_seeds: "points" (the reference's CCI) or "mean" (see the module).
        scratch_cci: also calibrate the scratch run as one of the runs (its points against its
            own seed mean), as the reference's notebook does for every method of its table.

    Raises:
        InvalidArgument: an unknown ``cci_seeds``; per task, a missing or repeated blind/max/
            scratch value, two scratch or max runs, a repeated (run, n, seed), or
            R_blind == R_max; the message names the task.
    """
    check_cci_seeds(cci_seeds)
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
        runs: dict[str, dict[tuple[int, int], float]] = {}
        scratch: dict[tuple[int, int], float] = {}
        for entry in by_task[task]:
            if entry.role not in ("model", "scratch"):
                continue
            table = scratch if entry.role == "scratch" else runs.setdefault(entry.run, {})
            if (entry.n, entry.seed) in table:
                seed = f" seed {entry.seed}" if entry.seed else ""
                raise InvalidArgument(f"task {task}: run {entry.run} has two risks at regime n={entry.n}{seed}")
            table[(entry.n, entry.seed)] = entry.risk
        if scratches and scratches[0] in runs:
            raise InvalidArgument(f"task {task}: run {scratches[0]} is both a scratch and a model run")
        if scratch_cci and scratches:
            runs[scratches[0]] = scratch
        tasks[task] = calibrate_task(task, blind_risk=blind[0].risk if blind else None,
                                     max_risk=maxes[0].risk if maxes else None, scratch=scratch, runs=runs,
                                     cci_seeds=cci_seeds)
    return {"tasks": tasks, "cci_seeds": cci_seeds}


def cci_seeds_label(cci_seeds: str) -> str:
    """One line saying how a calibration's CCI treats seeds (tables print it)."""
    if check_cci_seeds(cci_seeds) == "points":
        return ("CCI (--cci-seeds points, the reference notebook's): every (n, seed) of a run is its own point "
                "against the scratch run's cR averaged over its seeds at n, in (n, seed) order")
    return ("CCI (--cci-seeds mean): each run's risk averaged over its seeds at each n first, points sorted "
            "by cR_scratch")


def undefined_reason(entry: Mapping[str, Any]) -> str:
    """Why a run's CCI is undefined: a regime without a scratch value (points), one point, or no area."""
    regimes = entry["regimes"]
    per_seed = bool(regimes) and "seed" in regimes[0]
    if per_seed:
        lacking = sorted({r["n"] for r in regimes if r["cR_scratch"] is None})
        if lacking:
            return f"no scratch value at n={', '.join(map(str, lacking))}"
        if len(regimes) < 2:
            return "a single point"
        return "a zero area under the diagonal"
    return "fewer than two regimes shared with the scratch run, or a zero area"


def notes(calibration: Mapping[str, Any]) -> list[str]:
    """One line per negative cR (a run or scratch better than ``max``, reported as is) and per
    undefined CCI (saying why), in task, run, regime order, each line once."""
    lines: list[str] = []
    for task, result in calibration["tasks"].items():
        for run, entry in result["runs"].items():
            for regime in entry["regimes"]:
                seed = f" seed {regime['seed']}" if "seed" in regime else ""
                for key, who, at in (("cR", f"run {run}", seed), ("cR_scratch", "the scratch run", "")):
                    value = regime[key]
                    line = (f"task {task} n={regime['n']}{at}: {key} {value:.4f} < 0: {who} beats the max "
                            f"run (reported as is)") if value is not None and value < 0 else None
                    if line and line not in lines:
                        lines.append(line)
            if entry["cci"] is None:
                lines.append(f"task {task} run {run}: CCI undefined ({undefined_reason(entry)})")
    return lines
