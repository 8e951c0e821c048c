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
  (Floyd's algorithm, O(q + k_c) work however large the class), then a uniform
  q-subset of it (Floyd again) is the query and the rest the support. Support and
  query are therefore disjoint; each tuple is sorted by record id.

Determinism: the only RNG methods used are ``random_sample`` and ``uniform`` of a
legacy ``RandomState``; floats are IEEE doubles combined in a fixed order. ``exp``
is ``portable_exp``, built from +, -, *, / and ``ldexp`` only, so it gives the same
bits on every platform and NumPy release (libm's and NumPy's SIMD ``exp`` may differ
in the last bit between platforms and releases, and a floor could then flip).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sampler_server.core.md.config import EpisodeConfig


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
    ratios = [(n * portable_exp(float(alpha))).as_integer_ratio() for n, alpha in zip(counts, log_weights, strict=True)]
    # Float weights are dyadic rationals: scale them to integers over one power of two,
    # then floor(w_c * extra / sum w) is an exact integer division.
    denominator = max(d for _, d in ratios)
    weights = [numerator * (denominator // d) for numerator, d in ratios]
    total, extra = sum(weights), size - len(counts)
    return tuple(min(w * extra // total + 1, n - query) for w, n in zip(weights, counts))


_LN2 = 0.6931471805599453
# ln 2 split as in fdlibm (Cody-Waite): k * _LN2_HI is exact for the k used here.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_TERMS = 18


def portable_exp(x: float) -> float:
    """exp(x) for |x| <= 64 (the config's bound) to within a few ulp, bit-identical everywhere.

    x = k ln 2 + r with |r| <= ln 2 / 2 (k = round(x / ln 2), ln 2 in two parts);
    exp(r) by its Taylor series to degree 18 (truncation error below 1e-20) in Horner
    form; then an exact scaling by 2**k.
    """
    k = round(x / _LN2)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    total = 1.0
    for degree in range(_EXP_TERMS, 0, -1):
        total = 1.0 + total * r / degree
    return math.ldexp(total, k)


def draw_beta(rng: np.random.RandomState) -> float:
    """beta uniform in (0, 1]."""
    return 1.0 - float(rng.random_sample())


def draw_log_weights(rng: np.random.RandomState, config: EpisodeConfig, ways: int) -> list[float]:
    """alpha_c uniform in [min_log_weight, max_log_weight), one per class in episode order."""
    return [float(a) for a in rng.uniform(config.min_log_weight, config.max_log_weight, size=ways)]


def floyd_subset(uniforms: Sequence[float], n: int) -> list[int]:
    """A uniform ``len(uniforms)``-subset of range(n), sorted (Floyd's algorithm).

    With m = len(uniforms), step j (j = n - m .. n - 1) takes t = floor(u * (j + 1)),
    uniform on [0, j] up to the 2**-53 grid of u, and adds t, or j if t is already
    chosen. For u < 1 the IEEE product rounds below j + 1, so t <= j.
    """
    m = len(uniforms)
    assert 0 <= m <= n, (m, n)
    chosen: set[int] = set()
    for j, u in zip(range(n - m, n), uniforms):
        t = int(u * (j + 1))
        chosen.add(j if t in chosen else t)
    return sorted(chosen)


def draw_records(
    rng: np.random.RandomState, ranges: Sequence[tuple[int, int]], query: int, shots: Sequence[int]
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Per class (start, count): (query record ids, support record ids), disjoint and sorted.

    Two ``random_sample`` calls per episode: the subset uniforms of every class (in
    class order), then the uniforms choosing which q of each class's subset are query.
    """
    sizes = [query + k for k in shots]
    subset_uniforms = rng.random_sample(sum(sizes)).tolist()
    query_uniforms = rng.random_sample(query * len(sizes)).tolist()
    queries: list[tuple[int, ...]] = []
    supports: list[tuple[int, ...]] = []
    offset = 0
    for number, ((start, count), size) in enumerate(zip(ranges, sizes)):
        chosen = floyd_subset(subset_uniforms[offset : offset + size], count)
        offset += size
        positions = set(floyd_subset(query_uniforms[number * query : (number + 1) * query], size))
        queries.append(tuple(start + chosen[p] for p in sorted(positions)))
        supports.append(tuple(start + value for p, value in enumerate(chosen) if p not in positions))
    return queries, supports
