"""Are two runs the same computation? Their configurations and stored results, compared.

A run is recorded as its configuration (the JSON its trainer sent with its first report)
and its stored results of every protocol: Meta-Dataset episode reports (fingerprint,
request, metrics, predictions), VTAB task results and ImageNet-CoG results, each keyed as
the metrics store keys it. Two runs are the **same computation** when their configurations
are equal, apart from the keys that name the run itself (``RUN_KEYS``), and their results
are identical, byte for byte (values compared as canonical JSON, so a NaN equals a NaN).

Where they are not, the comparison says in what. Configuration keys (nested objects by
dotted path, ``preprocessing.mean``) fall in three groups: what defines the results (the
arguments, the framework), what they were computed with (library versions, the device,
threads and determinism: ``clients/determinism.py`` records them) and the result
fingerprint (``result_sha256``, the sha256 of the final weights). The fingerprint is read
as a result: two runs with equal configurations but another fingerprint or other stored
results are the same configuration with **different results**. Results held by one run
only count as differing.

Pure: no store, no I/O (``registry.render`` reads the runs and calls this).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sampler_server.metrics.cog.results import CogResult
from sampler_server.metrics.store import StoredReport
from sampler_server.metrics.run_config import FINGERPRINT_KEYS, RUN_KEYS, is_environment
from sampler_server.metrics.vtab.results import TaskResult

FIRST_FEW = 3
"""How many differing result keys a comparison names."""
SHOWN_CHARACTERS = 40
"""The longest value a text line shows (a sha256 is shortened to its first 12 hex digits)."""


class Group(enum.Enum):
    """What a configuration key says about a run."""

    DEFINITION = "what defines the results"  # the arguments, the framework
    ENVIRONMENT = "what it was computed with"  # versions, device, threads, determinism
    FINGERPRINT = "the result fingerprint"  # the final weights' sha256


class Verdict(enum.Enum):
    SAME = "same computation"
    DIFFERENT_RESULTS = "same configuration, different results"
    DIFFERENT_CONFIGURATION = "different configuration"


def group_of(key: str) -> Group:
    """The group of a top-level configuration key."""
    if key in FINGERPRINT_KEYS:
        return Group.FINGERPRINT
    if is_environment(key):
        return Group.ENVIRONMENT
    return Group.DEFINITION


@dataclass(frozen=True)
class RunRecord:
    """One run as compared: its configuration and its results (result key in words ->
    the stored value as canonical JSON)."""

    run_id: str
    config: Mapping[str, Any]
    results: Mapping[str, str]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def run_record(run_id: str, config: Mapping[str, Any], reports: Iterable[StoredReport] = (),
               task_results: Iterable[TaskResult] = (), cog_results: Iterable[CogResult] = ()) -> RunRecord:
    """A run's configuration and its stored results of every protocol, keyed as the store keys them."""
    results: dict[str, str] = {}
    for report in reports:
        key = f"{report.protocol} {report.source}/{report.split} seed {report.seed} episode {report.index}"
        results[key] = _canonical({"fingerprint": report.fingerprint, "request": report.request,
                                   "metrics": report.metrics, "predicted": list(report.predicted)})
    for task in task_results:
        results[task.where()] = _canonical({"role": task.role, "accuracy": task.accuracy,
                                            "examples": task.examples})
    for cog in cog_results:
        results[f"CoG {cog.where()}"] = _canonical({"accuracy": cog.accuracy, "examples": cog.examples,
                                                    "extras": dict(cog.extras)})
    return RunRecord(run_id, dict(config), results)


def flatten(config: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Nested objects as paths: {"a": {"b": 1}} -> {("a", "b"): 1}; lists stay values."""
    flat: dict[tuple[str, ...], Any] = {}
    for key, value in config.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


_ABSENT = object()


@dataclass(frozen=True)
class KeyDifference:
    """A configuration key whose value differs (``None`` ``first``/``second`` with
    ``in_first``/``in_second`` False: the run has no such key)."""

    key: str  # dotted path
    group: Group
    first: Any
    second: Any
    in_first: bool = True
    in_second: bool = True


@dataclass(frozen=True)
class ResultsDifference:
    """How the results of two runs differ: keys held by both with other values, keys held
    by one only, out of every key either holds."""

    total: int
    other_values: tuple[str, ...]
    only_first: tuple[str, ...]
    only_second: tuple[str, ...]

    @property
    def differing(self) -> tuple[str, ...]:
        return self.other_values + self.only_first + self.only_second

    @property
    def identical(self) -> bool:
        return not self.differing


@dataclass(frozen=True)
class Comparison:
    """``second`` against ``first``: the configuration keys that differ and the results that do."""

    first: str
    second: str
    config: tuple[KeyDifference, ...]
    results: ResultsDifference
    fingerprinted: bool = False  # the first run's configuration has a result fingerprint

    def in_group(self, group: Group) -> tuple[KeyDifference, ...]:
        return tuple(d for d in self.config if d.group is group)

    @property
    def verdict(self) -> Verdict:
        if any(d.group is not Group.FINGERPRINT for d in self.config):
            return Verdict.DIFFERENT_CONFIGURATION
        if self.config or not self.results.identical:
            return Verdict.DIFFERENT_RESULTS
        return Verdict.SAME

    @property
    def fingerprint_differs(self) -> bool:
        return bool(self.in_group(Group.FINGERPRINT))


def compare_configs(first: Mapping[str, Any], second: Mapping[str, Any]) -> tuple[KeyDifference, ...]:
    """Every key (dotted path) whose value differs or that one configuration lacks, but the
    run's own name; sorted by path (a stored configuration's keys are sorted too)."""
    a = flatten({k: v for k, v in first.items() if k not in RUN_KEYS})
    b = flatten({k: v for k, v in second.items() if k not in RUN_KEYS})
    differences = []
    for path in sorted(a.keys() | b.keys()):
        va, vb = a.get(path, _ABSENT), b.get(path, _ABSENT)
        if va is not _ABSENT and vb is not _ABSENT and _canonical(va) == _canonical(vb):
            continue
        differences.append(KeyDifference(
            ".".join(path), group_of(path[0]), None if va is _ABSENT else va, None if vb is _ABSENT else vb,
            in_first=va is not _ABSENT, in_second=vb is not _ABSENT))
    return tuple(differences)


def compare_results(first: Mapping[str, str], second: Mapping[str, str]) -> ResultsDifference:
    return ResultsDifference(
        total=len(first.keys() | second.keys()),
        other_values=tuple(k for k in first if k in second and first[k] != second[k]),
        only_first=tuple(k for k in first if k not in second),
        only_second=tuple(k for k in second if k not in first))


def compare(first: RunRecord, second: RunRecord) -> Comparison:
    return Comparison(first.run_id, second.run_id, compare_configs(first.config, second.config),
                      compare_results(first.results, second.results),
                      fingerprinted=bool(FINGERPRINT_KEYS & first.config.keys()))


def compare_with_first(records: Sequence[RunRecord]) -> list[Comparison]:
    """Each run after the first compared with the first."""
    return [compare(records[0], record) for record in records[1:]]


# ---- rendering -------------------------------------------------------------------------------


def _shown(value: Any, present: bool) -> str:
    if not present:
        return "absent"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS - 1] + "…"


def _counted(count: int) -> str:
    return f"{count} result" + ("" if count == 1 else "s")


def _results_words(comparison: Comparison) -> str:
    results = comparison.results
    if results.identical:
        return f"results: all {results.total} identical" if results.total else "results: none stored"
    parts = []
    if results.other_values:
        parts.append(f"{len(results.other_values)} with other values")
    if results.only_first:
        parts.append(f"{len(results.only_first)} only in {comparison.first}")
    if results.only_second:
        parts.append(f"{len(results.only_second)} only in {comparison.second}")
    first = ", ".join(results.differing[:FIRST_FEW]) + (", ..." if len(results.differing) > FIRST_FEW else "")
    return f"results: {len(results.differing)} of {results.total} differ ({', '.join(parts)}; first: {first})"


def describe(comparison: Comparison) -> str:
    """One line: "same computation", or the verdict and what differs, grouped."""
    verdict = comparison.verdict
    if verdict is Verdict.SAME:
        equal = "configuration and result_sha256 equal" if comparison.fingerprinted else "configuration equal"
        return f"{verdict.value} ({equal}, {_counted(comparison.results.total)} identical)"
    groups = []
    for group in Group:
        differences = comparison.in_group(group)
        if differences:
            groups.append(f"{group.value} (" + ", ".join(
                f"{d.key} {_shown(d.first, d.in_first)} vs {_shown(d.second, d.in_second)}" for d in differences)
                + ")")
    if verdict is Verdict.DIFFERENT_RESULTS:
        return f"{verdict.value}: " + "; ".join([*groups, _results_words(comparison)])
    return "differ in " + ", ".join(groups) + "; " + _results_words(comparison)


def render_comparisons(comparisons: Sequence[Comparison], fmt: str) -> str:
    """The comparison section of a report with several runs (``table`` or ``markdown``)."""
    if not comparisons:
        return ""
    title = f"runs compared with {comparisons[0].first} (configuration and stored results of every protocol):"
    if fmt == "markdown":
        return "\n".join([title, ""] + [f"- {c.second}: {describe(c)}" for c in comparisons])
    return "\n".join([title] + [f"  {c.second}: {describe(c)}" for c in comparisons])


def comparisons_json(comparisons: Sequence[Comparison]) -> dict[str, Any]:
    """The comparison as JSON: against which run, and per other run its verdict, the
    differing configuration keys (a run lacking a key has no "first"/"second") and results."""
    runs = {}
    for c in comparisons:
        keys = []
        for d in c.config:
            entry: dict[str, Any] = {"key": d.key, "group": d.group.name.lower()}
            entry.update({"first": d.first} if d.in_first else {})
            entry.update({"second": d.second} if d.in_second else {})
            keys.append(entry)
        runs[c.second] = {
            "verdict": c.verdict.value, "same_computation": c.verdict is Verdict.SAME, "configuration": keys,
            "result_sha256_differs": c.fingerprint_differs,
            "results": {"total": c.results.total, "differing": len(c.results.differing),
                        "other_values": len(c.results.other_values), "only_first": len(c.results.only_first),
                        "only_second": len(c.results.only_second),
                        "first_differing": list(c.results.differing[:FIRST_FEW])},
        }
    return {"against": comparisons[0].first if comparisons else None, "runs": runs}
