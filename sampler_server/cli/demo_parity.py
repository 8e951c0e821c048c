"""The demo's framework-parity table: the torch and tf runs side by side, each with its 95% CI.

Both trainers start from the same framework-neutral weights (``--init-seed``), read the
same episodes and batches and use the same update rules, so their accuracies should
agree within their confidence intervals. They are not bit-identical: the frameworks'
kernels round differently, and training amplifies it (Adam's first step moves every
weight by about the learning rate whatever its gradient's size, so a gradient of rounding
size whose sign differs moves a weight by twice the rate), so after a few dozen episodes
the two networks differ as two runs do. The table gives each row's difference with its
95% interval, the half-widths of the two runs' intervals combined in quadrature (two
independent estimates), and says whether the difference lies inside it. The rows come
from the trainers' own JSON summaries (``--json-summary``):
- Meta-Dataset: per evaluation source, the mean over episodes and its 95% CI;
- VTAB-1k: per task, the test top-1 with the normal-approximation binomial 95% CI over
  its test examples;
- ImageNet-CoG: per level, the top-1 with all training images (N = all), averaged over
  seeds, with the binomial 95% CI over every seed's test examples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054


@dataclass(frozen=True)
class ParityRow:
    protocol: str
    name: str
    torch: tuple[float, float]  # (accuracy, 95% CI half-width), in [0, 1]
    tf: tuple[float, float]

    @property
    def difference(self) -> tuple[float, float]:
        """tf minus torch, and the 95% half-width of that difference (the two intervals in quadrature)."""
        return self.tf[0] - self.torch[0], math.hypot(self.torch[1], self.tf[1])

    @property
    def agree(self) -> bool:
        """The difference lies inside its 95% interval (no difference detectable at 95%)."""
        gap, half_width = self.difference
        return abs(gap) <= half_width + 1e-12


def binomial_ci95(accuracy: float, examples: int) -> float:
    """Half-width of the normal-approximation 95% interval of a proportion over ``examples``."""
    if examples <= 0:
        return 0.0
    return Z95 * math.sqrt(max(accuracy * (1.0 - accuracy), 0.0) / examples)


def md_rows(torch_summary: Mapping[str, Any], tf_summary: Mapping[str, Any]) -> list[ParityRow]:
    rows = []
    for name, result in torch_summary.get("eval", {}).items():
        other = tf_summary.get("eval", {}).get(name)
        if other is None:
            continue
        rows.append(ParityRow("md", name, (result["mean_accuracy"], result["ci95"] or 0.0),
                              (other["mean_accuracy"], other["ci95"] or 0.0)))
    return rows


def vtab_rows(torch_summary: Mapping[str, Any], tf_summary: Mapping[str, Any]) -> list[ParityRow]:
    rows = []
    for task, result in torch_summary.get("tasks", {}).items():
        other = tf_summary.get("tasks", {}).get(task)
        if other is None:
            continue
        rows.append(ParityRow("vtab", task, _binomial(result["test_accuracy"], result["test_examples"]),
                              _binomial(other["test_accuracy"], other["test_examples"])))
    return rows


def cog_rows(torch_summary: Mapping[str, Any], tf_summary: Mapping[str, Any]) -> list[ParityRow]:
    rows = []
    for level, result in torch_summary.get("levels", {}).items():
        other = tf_summary.get("levels", {}).get(level)
        if other is None:
            continue
        mine, theirs = _all_shots(result["results"]), _all_shots(other["results"])
        if mine is not None and theirs is not None:
            rows.append(ParityRow("cog", level, mine, theirs))
    return rows


def _binomial(accuracy: float, examples: int) -> tuple[float, float]:
    return accuracy, binomial_ci95(accuracy, examples)


def _all_shots(results: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    chosen = [r for r in results if r["shots"] == 0]
    if not chosen:
        return None
    accuracy = sum(r["accuracy"] for r in chosen) / len(chosen)
    return accuracy, binomial_ci95(accuracy, sum(int(r["test_examples"]) for r in chosen))


def render(rows: Sequence[ParityRow]) -> str:
    """The rows as a fixed-width table, accuracies in %, and a last line counting agreement."""
    lines = [f"{'protocol':<9}{'source / task / level':<24}{'torch':>16}{'tf':>16}{'tf - torch':>17}  agree",
             "-" * 89]
    for row in rows:
        lines.append(f"{row.protocol:<9}{row.name:<24}{_cell(row.torch):>16}{_cell(row.tf):>16}"
                     f"{_cell(row.difference, signed=True):>17}  {'yes' if row.agree else 'NO'}")
    agreed = sum(row.agree for row in rows)
    lines.append(f"{agreed} of {len(rows)} rows agree: the difference within its 95% CI (the two CIs in quadrature)")
    return "\n".join(lines)


def _cell(value: tuple[float, float], signed: bool = False) -> str:
    return f"{100 * value[0]:{'+' if signed else ''}.2f} ± {100 * value[1]:.2f}"
