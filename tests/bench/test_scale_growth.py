"""The CI-sized scale bench: start-up, per-request costs and server memory do not grow with the store.

``bench/scale_bench.py`` measures ILSVRC-2012 shaped stores up to 1.28 M records (bench/README.md
gives its figures); this runs its own functions at 2,000 and 10,000 records (the smallest
ILSVRC-shaped store holds 2 images in each of the 1,000 classes, what an MD episode needs), and
asserts the growth exponent k (cost ~ n^k) of each flat cost between the two stays under 0.3:
a ratio measured in one run, not a wall-clock limit. Costs: time to listen, to the first md-v1
and md-v2 episode (medians of fresh servers), p50 and p99 latency of fixed-shape episodes from
4 clients, and the anonymous memory of the server and its workers after them.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timing  # ratios of wall-clock costs: measured alone, not beside another test
SIZES = (2_000, 10_000)
LIMIT = 0.3
FLAT_COSTS = ("listen_s", "first_md-v1_s", "first_md-v2_s", "fixed_p50_ms", "fixed_p99_ms", "server_anon_mb",
              "workers_anon_mb")


def load_bench():
    spec = importlib.util.spec_from_file_location("scale_bench", REPO / "bench" / "scale_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load_bench()


def test_growth_exponent_is_the_slope_on_log_axes(bench):
    assert bench.growth_exponent((1000, 2.0), (10_000, 20.0)) == pytest.approx(1.0)
    assert bench.growth_exponent((1000, 3.0), (100_000, 3.0)) == 0.0
    assert bench.growth_exponent((1000, 1.0), (10_000, 10 ** 0.25)) == pytest.approx(0.25)
    assert bench.growth_exponent((1000, 0.0), (10_000, 1.0)) is None


def test_scaled_counts_keep_the_total_the_minimum_and_the_proportions(bench):
    counts = bench.ilsvrc_counts(10_000)
    assert len(counts) == 1000 and sum(counts.values()) == 10_000 and min(counts.values()) >= 2
    large = bench.ilsvrc_counts(1_281_167)
    assert sum(large.values()) == 1_281_167 and 732 * 0.95 <= min(large.values()) and max(large.values()) <= 1300 * 1.05
    assert bench.scaled_min_images(bench.IN21K_FULL) == 782


def test_report_flags_a_cost_that_grows_and_only_the_flat_kinds(bench):
    rows = [{"size": 1000, "listen_s": 0.3, "fixed_p99_ms": 10.0, "warm_episodes_per_s": 50.0},
            {"size": 100_000, "listen_s": 3.0, "fixed_p99_ms": 10.5, "warm_episodes_per_s": 5.0}]
    lines = bench.report("ilsvrc_2012", bench.ILSVRC_TABLES, rows)
    assert lines[-1] == "ilsvrc_2012: grows with the store (k > 0.2): listen_s (startup) +0.50"


@pytest.mark.slow
def test_start_up_and_per_request_costs_do_not_grow_from_2k_to_10k_records(bench, tmp_path):
    rows = []
    for size in SIZES:
        built = bench.build("ilsvrc_2012", size, tmp_path, workers=2, keep_input=False, log=lambda _: None)
        assert built.pack["records"] == size and (built.data / "ilsvrc_2012" / "manifest.json").is_file()
        rows.append(bench.measure_flat_costs(built, tmp_path, episodes=200, clients=4, starts=3))
    small, large = rows
    exponents = {cost: bench.growth_exponent((small["size"], small[cost]), (large["size"], large[cost]))
                 for cost in FLAT_COSTS}
    shown = ", ".join(f"{cost} {small[cost]:.3g} -> {large[cost]:.3g} (k {k:+.2f})" for cost, k in exponents.items())
    assert all(k is not None and math.isfinite(k) for k in exponents.values()), shown
    assert all(k < LIMIT for k in exponents.values()), shown
