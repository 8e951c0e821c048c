"""Step 2: query size, support size, shots per class, and the records themselves.

Formulas (Meta-Dataset, Appendix .2; n_c = images of class c, W = ways):
- query per class: q = min(max_num_query, min_c floor(n_c / 2)); with a fixed shot
  count k: q = min(max_num_query, min_c (n_c - k)); or the fixed num_query;
- support size: S = min(max_support_set_size, sum_c ceil(beta * min(cap, n_c - q)))
  with beta uniform in (0, 1] (drawn as 1 - U, U uniform in [0, 1));
- shots: w_c = n_c * exp(alpha_c), alpha_c uniform in [min_log_weight,
  max_log_weight); R_c = w_c / sum w; k_c = min(floor(R_c * (S - W)) + 1, n_c - q).
  The floor is taken in exact rational arithmetic over the float weights, so
  sum_c k_c <= S holds exactly (no rounding can push it above the cap).
- records: per class, a uniform subset of q + k_c distinct offsets in [0, n_c)
  (Floyd's algorithm: one ``random_sample`` call, O(q + k_c) work however large the
  class), then a uniform permutation splits it into query (q) and support (k_c).
  Support and query are therefore disjoint; each tuple is sorted by record id.

Determinism: the only RNG methods used are ``random_sample``, ``uniform`` and
``permutation`` of a legacy ``RandomState``; floats are IEEE doubles combined in a
fixed order; ``exp`` is Python's ``math.exp`` (NumPy's SIMD ``exp`` loops have
changed between releases).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from sampler_server.core.config import EpisodeConfig


def query_size(config: EpisodeConfig, counts: Sequence[int]) -> int:
    """Query images per class for classes with ``counts`` images."""
    if config.num_query is not None:
        return config.num_query
    if config.num_support is not None:
        return min(config.max_num_query, min(n - config.num_support for n in counts))
    return min(config.max_num_query, min(n // 2 for n in counts))


def support_size(config: EpisodeConfig, counts: Sequence[int], query: int, beta: float) -> int:
    """Total support size S for a beta in (0, 1]."""
    total = sum(math.ceil(beta * min(config.max_support_size_contrib_per_class, n - query)) for n in counts)
    return min(config.max_support_set_size, total)


def shots(counts: Sequence[int], query: int, size: int, log_weights: Sequence[float]) -> tuple[int, ...]:
    """Shots per class: at least one each, the rest of ``size`` by noisy class-size proportions."""
    weights = [Fraction(n * math.exp(float(alpha))) for n, alpha in zip(counts, log_weights, strict=True)]
    total = sum(weights, Fraction(0))
    extra = size - len(counts)
    return tuple(min(math.floor(w * extra / total) + 1, n - query) for w, n in zip(weights, counts))


def draw_beta(rng: np.random.RandomState) -> float:
    """beta uniform in (0, 1]."""
    return 1.0 - float(rng.random_sample())


def draw_log_weights(rng: np.random.RandomState, config: EpisodeConfig, ways: int) -> list[float]:
    """alpha_c uniform in [min_log_weight, max_log_weight), one per class in episode order."""
    return [float(a) for a in rng.uniform(config.min_log_weight, config.max_log_weight, size=ways)]


def sample_offsets(rng: np.random.RandomState, n: int, m: int) -> list[int]:
    """A uniform m-subset of range(n), sorted (Floyd's algorithm with pre-drawn uniforms).

    Step j (j = n - m .. n - 1) picks t = floor(u_j * (j + 1)), uniform on [0, j] up
    to the 2**-53 grid of u_j, and adds t, or j if t is already chosen. For u < 1 the
    product rounds below j + 1 (an IEEE multiply, the same in NumPy and Python).
    """
    assert 0 <= m <= n, (m, n)
    picks = (rng.random_sample(m) * np.arange(n - m + 1, n + 1, dtype=np.float64)).astype(np.int64)
    chosen: set[int] = set()
    for j, t in zip(range(n - m, n), picks.tolist()):
        chosen.add(j if t in chosen else t)
    return sorted(chosen)


def split_records(
    rng: np.random.RandomState, start: int, count: int, query: int, support: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(query record ids, support record ids) of one class: disjoint, each sorted."""
    offsets = sample_offsets(rng, count, query + support)
    order = rng.permutation(len(offsets)).tolist()
    query_ids = sorted(start + offsets[i] for i in order[:query])
    support_ids = sorted(start + offsets[i] for i in order[query:])
    return tuple(query_ids), tuple(support_ids)
