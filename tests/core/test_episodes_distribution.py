"""Distribution tests: 10,000 episodes on fixed class counts against the paper's definitions.

Statistical tolerance: every goodness-of-fit test uses significance level
alpha = 0.001 (Pearson chi-square against ``scipy.stats.chi2.ppf(0.999, df)``;
Kolmogorov-Smirnov against the asymptotic alpha = 0.001 bound 1.95 / sqrt(n) (one
sample) or 1.95 * sqrt(2 / n) (two samples of n), conservative for discrete laws; means within 4.5 standard errors, about the same
level). Seeds are fixed, so each test is deterministic: it passed once for these
seeds and will keep passing unless the sampler changes. A correct sampler would
fail a given test for about 1 seed in 1000; the biases these tests exist to catch
(an off-by-one in the ways range, beta drawn from the wrong interval, a missing
cap, non-uniform record choice) move the statistics far beyond these bounds.

Tests about classes, groups, sources, query sizes and shots read each episode's
composition (``c_compositions``: the sampler's own Steps 1 and 2 on the episode's own
RNG, without the record draws), every tenth checked against the full episode; the
record tests sample full episodes.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations, pairwise

import numpy as np
import pytest
from c_compositions import compositions
from episode_checks import spec_with_split
from scipy import stats

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md import EpisodeSampler, MultiSourceSampler
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split

pytestmark = pytest.mark.slow

N = 10_000
LEVEL = 0.001
KS_BOUND = 1.95 / math.sqrt(N)


def _chi_square_ok(observed: Counter, expected: dict) -> tuple[float, float]:
    """(statistic, critical value) of Pearson's test; every expected count is >= 5 here."""
    assert set(observed) <= set(expected), set(observed) - set(expected)
    statistic = sum((observed.get(k, 0) - e) ** 2 / e for k, e in expected.items())
    critical = float(stats.chi2.ppf(1 - LEVEL, len(expected) - 1))
    return statistic, critical


def _uniform(values: range, total: int) -> dict[int, float]:
    return {v: total / len(values) for v in values}


def test_flat_ways_uniform_query_exact_and_classes_uniform() -> None:
    counts = [6 + 3 * i for i in range(40)]  # 6 .. 123 images; q = 3 whenever class 0 is in
    spec = spec_with_split("flat", counts, others=[50, 60])
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig())
    ways, first = Counter(), Counter()
    for episode in compositions(sampler, 2024, N, with_shots=False):
        ways[episode.ways] += 1
        first[episode.class_ids[0]] += 1
        assert episode.query_per_class == min(10, min(counts[c] // 2 for c in episode.class_ids))
    statistic, critical = _chi_square_ok(ways, _uniform(range(5, 41), N))
    assert statistic < critical, f"ways not uniform on [5, 40]: chi2={statistic:.1f} >= {critical:.1f}"
    statistic, critical = _chi_square_ok(first, _uniform(range(40), N))
    assert statistic < critical, f"label-0 class not uniform: chi2={statistic:.1f} >= {critical:.1f}"


def _exact_support_law(m: list[int], cap: int) -> dict[int, float]:
    """P(S = s) for S = min(cap, sum_c ceil(beta * m_c)), beta uniform on (0, 1].

    The sum is a step function of beta, constant on each interval between consecutive
    breakpoints k / m_c, so the law follows from the interval lengths exactly.
    """
    points = sorted({k / mc for mc in m for k in range(mc + 1)})
    law: dict[int, float] = {}
    for low, high in pairwise(points):
        beta = (low + high) / 2
        size = min(cap, sum(math.ceil(beta * mc) for mc in m))
        law[size] = law.get(size, 0.0) + (high - low)
    return law


def test_support_size_follows_the_formula_exactly() -> None:
    counts = [7, 15, 22, 40, 61, 90, 111, 150, 260, 500, 1000, 3000]
    spec = spec_with_split("flat", counts)
    config = EpisodeConfig.all_of_split()
    sampler = EpisodeSampler(spec, Split.TEST, config)
    q = min(10, min(n // 2 for n in counts))
    m = [min(100, n - q) for n in counts]  # sum 817 > 500: the cap is reached for large beta
    law = _exact_support_law(m, 500)
    sizes, shots = [], []
    for episode in compositions(sampler, 99, N):
        assert episode.query_per_class == q == 3
        sizes.append(episode.support_size)
        shots.append(episode.shots)
    # S has an exact law; the realised total is S minus the floors' loss (less than the ways), so
    # its CDF lies between the CDFs of S and of S - ways (up to the KS tolerance).
    shots_array = np.array(shots, dtype=np.float64)
    totals = np.sort(np.array(sizes))
    assert totals.max() <= 500 and totals.min() >= len(counts)
    support_values = sorted(law)
    cdf_exact = np.cumsum([law[s] for s in support_values])
    emp_upper = np.searchsorted(totals, support_values, side="right") / N
    emp_lower = np.searchsorted(totals + len(counts), support_values, side="right") / N
    assert np.all(emp_upper >= cdf_exact - KS_BOUND), "support total larger than S allows"
    assert np.all(emp_lower <= cdf_exact + KS_BOUND), "support total smaller than S - ways allows"
    # Shots per class: the empirical means agree with an independent Monte Carlo of the formulas.
    simulated = _simulate_shots(counts, q, 500, 100, N, seed=12345)
    # The realised support size against a Monte Carlo of the formulas: two-sample KS.
    distance = stats.ks_2samp(totals, simulated.sum(axis=1)).statistic
    assert distance <= KS_BOUND * math.sqrt(2), f"support sizes differ from the formula's: D={distance:.4f}"
    for c in range(len(counts)):
        a, b = shots_array[:, c], simulated[:, c]
        tolerance = 4.5 * math.sqrt(a.var() / N + b.var() / N) + 1e-9
        assert abs(a.mean() - b.mean()) <= tolerance, (c, a.mean(), b.mean(), tolerance)
    fraction_capped = float(np.mean(totals >= 500 - len(counts)))
    assert fraction_capped > 0.05, "the 500 cap never mattered: the test spec is too small"


def _simulate_shots(counts: list[int], q: int, cap: int, per_class: int, n: int, seed: int) -> np.ndarray:
    """The paper's formulas (Appendix .2), reimplemented here, vectorised, with a separate RNG."""
    rng = np.random.RandomState(seed)
    counts_array = np.array(counts, dtype=np.float64)
    beta = 1.0 - rng.random_sample(n)
    remaining = np.minimum(per_class, counts_array - q)
    size = np.minimum(cap, np.ceil(beta[:, None] * remaining[None, :]).sum(axis=1))
    alpha = rng.uniform(math.log(0.5), math.log(2.0), size=(n, len(counts)))
    ratio = counts_array[None, :] * np.exp(alpha)
    ratio /= ratio.sum(axis=1, keepdims=True)
    return np.minimum(np.floor(ratio * (size[:, None] - len(counts))) + 1, counts_array[None, :] - q)


def test_support_size_uniform_steps_for_equal_classes() -> None:
    # 10 classes of 30 images: q = 10 and S = 10 * ceil(20 beta), ceil(20 beta) uniform on 1..20.
    # Equal log-weights (min = max = 0) make R_c = 1/10 exactly, so every class gets S / 10 shots
    # and the realised support size is S itself.
    spec = spec_with_split("flat", [30] * 25)
    config = EpisodeConfig(num_ways=10, min_log_weight=0.0, max_log_weight=0.0)
    sampler = EpisodeSampler(spec, Split.TEST, config)
    steps = Counter()
    for episode in compositions(sampler, 5, N):
        assert episode.query_per_class == 10 and len(set(episode.shots)) == 1
        steps[episode.shots[0]] += 1
    statistic, critical = _chi_square_ok(steps, _uniform(range(1, 21), N))
    assert statistic < critical, f"ceil(20 beta) not uniform on 1..20: chi2={statistic:.1f} >= {critical:.1f}"


def test_alphabets_uniform_and_ways_uniform_within_each() -> None:
    sizes = {"a": 3, "b": 8, "c": 20, "d": 55}  # 'a' has fewer than min_ways characters: never drawn
    groups = [name for name, size in sizes.items() for _ in range(size)]
    spec = spec_with_split("omniglot_like", [4] * len(groups), groups=groups)
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig())
    alphabets: Counter = Counter()
    ways: dict[str, Counter] = {name: Counter() for name in sizes}
    for episode in compositions(sampler, 77, N, with_shots=False):
        alphabets[episode.group] += 1
        ways[episode.group][episode.ways] += 1
    statistic, critical = _chi_square_ok(alphabets, {"b": N / 3, "c": N / 3, "d": N / 3})
    assert statistic < critical, f"alphabets not uniform: {alphabets}"
    for name in ("b", "c", "d"):
        allowed = range(5, min(50, sizes[name]) + 1)
        statistic, critical = _chi_square_ok(ways[name], _uniform(allowed, alphabets[name]))
        assert statistic < critical, f"ways of alphabet {name} not uniform on {allowed}: {ways[name]}"


def test_nodes_uniform_and_hierarchy_ignored_with_its_probability() -> None:
    nodes = [(f"n{i:08d}", range(i * 3, i * 3 + 5 + i)) for i in range(6)]
    spec = spec_with_split("imagenet_like", [4] * 30, nodes=nodes)
    probability = 0.3
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig(ignore_hierarchy_probability=probability))
    chosen = Counter(episode.group for episode in compositions(sampler, 31, N, with_shots=False))
    flat = chosen.pop(None)
    sigma = math.sqrt(N * probability * (1 - probability))
    assert abs(flat - N * probability) <= 4.5 * sigma, (flat, N * probability)
    statistic, critical = _chi_square_ok(chosen, {name: (N - flat) / 6 for name, _ in nodes})
    assert statistic < critical, f"eligible nodes not uniform: {chosen}"


def test_records_uniform_within_a_class() -> None:
    # One class of 10 images, 1-way 3-shot 2-query: the query pair is uniform over the 45 pairs
    # and every image is in the support with probability 3/10.
    spec = spec_with_split("one", [10], others=[5])
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig.fixed(1, 3, 2, min_ways=1))
    pairs: Counter = Counter()
    support: Counter = Counter()
    for index in range(N):
        episode = sampler.sample(4, index)
        pairs[episode.query[0]] += 1
        support.update(episode.support[0])
    statistic, critical = _chi_square_ok(pairs, {pair: N / 45 for pair in combinations(range(10), 2)})
    assert statistic < critical, "query pairs not uniform"
    statistic, critical = _chi_square_ok(support, {r: 3 * N / 10 for r in range(10)})
    assert statistic < critical, "support membership not uniform"


def test_records_uniform_in_a_large_class() -> None:
    # Floyd's sampling over 300,000 ids: deciles of the drawn offsets are uniform.
    spec = spec_with_split("large", [300_000])
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig.fixed(1, 5, 5, min_ways=1))
    deciles: Counter = Counter()
    for index in range(N // 5):
        episode = sampler.sample(8, index)
        for record in episode.support[0] + episode.query[0]:
            deciles[record * 10 // 300_000] += 1
    total = sum(deciles.values())
    statistic, critical = _chi_square_ok(deciles, _uniform(range(10), total))
    assert statistic < critical, f"record offsets not uniform: {deciles}"


def test_multisource_uniform_over_sources() -> None:
    specs = {
        name: DatasetSpec.from_counts(name, [4] * size, [Split.TEST] * size, fingerprint=name)
        for name, size in (("a", 5), ("b", 6), ("c", 9))
    }
    sampler = MultiSourceSampler(specs, ["c", "a", "b"], Split.TEST, EpisodeConfig())
    sources = Counter(episode.source for episode in compositions(sampler, 6, N, with_shots=False))
    statistic, critical = _chi_square_ok(sources, {"a": N / 3, "b": N / 3, "c": N / 3})
    assert statistic < critical, f"sources not uniform: {sources}"
