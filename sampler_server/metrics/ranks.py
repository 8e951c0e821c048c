"""Meta-Dataset's average rank with statistical ties (paper, Appendix .5).

Per source, models are ordered by decreasing mean accuracy. Two models tie when a
95% confidence test on the difference of their means cannot reject "the difference
is 0": |m_a - m_b| <= 1.96 * sqrt(se_a^2 + se_b^2), with se = population standard
deviation / sqrt(episodes) (``intervals.standard_error``; a one-episode estimate has
none and enters the test with 0, so it ties only with an equal mean). Ties are resolved in a single pass down the ordering:
a group starts at the best model not yet ranked and takes every following model
that ties with that group's first model; each member gets the average of the
positions the group spans (two models sharing first place both get 1.5). A model's
score is its rank averaged over the sources every compared model reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sampler_common.intervals import Z_95, mean_ci95, standard_error


@dataclass(frozen=True)
class Estimate:
    mean: float
    std_error: float | None  # None for one episode (``intervals``)
    episodes: int

    @property
    def ci95(self) -> float | None:
        """Half-width of the 95% interval (``intervals.mean_ci95``); None for one episode."""
        return None if self.std_error is None else Z_95 * self.std_error


def estimate(values: Sequence[float]) -> Estimate:
    mean, _ = mean_ci95(values)
    return Estimate(mean, standard_error(values), len(values))


def tied(a: Estimate, b: Estimate) -> bool:
    spread = (a.std_error or 0.0) ** 2 + (b.std_error or 0.0) ** 2
    return abs(a.mean - b.mean) <= Z_95 * math.sqrt(spread)


def ranks_for_source(results: Mapping[str, Estimate]) -> dict[str, float]:
    """Model -> rank (1 = best) on one source."""
    order = sorted(results, key=lambda name: (-results[name].mean, name))
    ranks: dict[str, float] = {}
    position = 0
    while position < len(order):
        leader = results[order[position]]
        end = position + 1
        while end < len(order) and tied(leader, results[order[end]]):
            end += 1
        average = (position + 1 + end) / 2  # mean of positions position+1 .. end
        for name in order[position:end]:
            ranks[name] = average
        position = end
    return ranks


def average_ranks(per_source: Mapping[str, Mapping[str, Estimate]]) -> tuple[dict[str, float], list[str]]:
    """(model -> mean rank over the sources every model reports, those sources)."""
    models = sorted({model for results in per_source.values() for model in results})
    common = sorted(s for s, results in per_source.items() if set(results) == set(models))
    totals = {model: 0.0 for model in models}
    for source in common:
        for model, rank in ranks_for_source(per_source[source]).items():
            totals[model] += rank
    return ({model: totals[model] / len(common) for model in models} if common else {}), common
