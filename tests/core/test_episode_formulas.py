"""Step 2 formulas in isolation: the paper's examples, exact caps, the portable exp, Floyd subsets."""

from __future__ import annotations

import math

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.examples import floyd_subset, portable_exp, query_size, shots, support_size


def test_portable_exp_is_accurate_and_pinned() -> None:
    assert portable_exp(0.0) == 1.0
    assert portable_exp(math.log(0.5)) == 0.5 and portable_exp(math.log(2.0)) == 2.0
    # Bits pinned: any change of the algorithm or of float semantics fails here.
    pinned = {0.3: "0x1.599058c8c1a96p+0", -0.5: "0x1.368b2fc6f960ap-1", 10.0: "0x1.5829dcf950560p+14"}
    assert {x: portable_exp(x).hex() for x in pinned} == pinned


@settings(max_examples=examples(2000), deadline=None)
@given(st.floats(-64.0, 64.0))
def test_portable_exp_within_two_ulp(x: float) -> None:
    expected = math.exp(x)
    assert abs(portable_exp(x) - expected) <= 2 * math.ulp(expected)


def test_query_size_formulas() -> None:
    counts = [6, 40, 700]
    assert query_size(EpisodeConfig(), counts) == 3  # min(10, floor(6 / 2))
    assert query_size(EpisodeConfig(), [40, 700]) == 10  # capped at 10
    assert query_size(EpisodeConfig(num_support=4), counts) == 2  # min(10, min(n - k))
    assert query_size(EpisodeConfig(num_query=15), counts) == 15


def test_support_size_formula() -> None:
    config = EpisodeConfig()
    counts, q = [6, 40, 700], 3
    # ceil(beta * min(100, n - q)) per class: 3, 37, 100 at beta = 1.
    assert support_size(config, counts, q, 1.0) == 140
    assert support_size(config, counts, q, 0.5) == 2 + 19 + 50
    assert support_size(config, counts, q, 1e-9) == 3  # each class keeps one image
    assert support_size(config, [700] * 8, 10, 1.0) == 500  # capped


def test_shots_formula_example() -> None:
    # Equal weights: R_c = 1/2; S - W = 8 -> floor(4) + 1 = 5 each.
    assert shots([100, 100], 10, 10, [0.0, 0.0]) == (5, 5)
    # Class 0 has twice the weight of class 1: R = (2/3, 1/3); S - W = 9 -> (7, 4).
    assert shots([100, 100], 10, 11, [math.log(2.0), 0.0]) == (7, 4)
    # Proportional to the class size when the noise is equal: 48 * 12 / 1012 < 1 -> 1.
    assert shots([12, 1000], 10, 50, [0.0, 0.0]) == (1, 48)
    # Capped by the images left after the query (12 - 10 = 2), even when the weight asks for 48.
    assert shots([12, 1000], 10, 50, [10.0, 0.0]) == (2, 1)


@settings(max_examples=examples(500), deadline=None)
@given(
    counts=st.lists(st.integers(2, 100_000), min_size=1, max_size=60),
    beta=st.floats(1e-12, 1.0),
    data=st.data(),
)
def test_shots_respect_every_cap_exactly(counts: list[int], beta: float, data: st.DataObject) -> None:
    # one alpha per class, drawn after the counts: 60 drawn for every example and the rest
    # thrown away made drawing most of the test's time
    alphas = data.draw(st.lists(st.floats(-64.0, 64.0), min_size=len(counts), max_size=len(counts)))
    config = EpisodeConfig()
    q = query_size(config, counts)
    size = support_size(config, counts, q, beta)
    result = shots(counts, q, size, alphas)
    assert len(counts) <= size <= 500
    assert all(1 <= k <= n - q for k, n in zip(result, counts))
    assert sum(result) <= size


@settings(max_examples=examples(300), deadline=None)
@given(n=st.integers(1, 10_000), data=st.data())
def test_floyd_subset(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, min(n, 200)))
    uniforms = data.draw(st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=m, max_size=m))
    chosen = floyd_subset(uniforms, n)
    assert chosen == sorted(set(chosen)) and len(chosen) == m
    assert all(0 <= c < n for c in chosen)
    if n <= 200:
        assert floyd_subset([0.999999999] * n, n) == list(range(n))
