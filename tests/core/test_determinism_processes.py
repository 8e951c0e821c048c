"""The same (seed, index) gives the same fingerprint in other processes, several at once,
in any order of requests."""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import random

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.sampler import EpisodeSampler
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split

COUNTS = [7 + (i * 13) % 40 for i in range(60)]
SPLITS = [Split.TRAIN if i % 3 else Split.TEST for i in range(60)]


def _fingerprints(keys: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    spec = DatasetSpec.from_counts("procs", COUNTS, SPLITS)
    sampler = EpisodeSampler(spec, Split.TRAIN, EpisodeConfig())
    return [(seed, index, sampler.sample(seed, index).fingerprint) for seed, index in keys]


def test_fingerprints_agree_across_concurrent_processes_and_request_orders():
    keys = [(seed, index) for seed in (0, 7, 2**63) for index in (0, 1, 5, 99, 12345, 2**40)]
    expected = {(s, i): f for s, i, f in _fingerprints(keys)}
    shuffled = keys[:]
    random.Random(4).shuffle(shuffled)
    chunks = [shuffled[k::3] for k in range(3)] + [list(reversed(keys))]
    context = multiprocessing.get_context("spawn")  # fresh interpreters, own hash seeds
    with futures.ProcessPoolExecutor(3, mp_context=context) as pool:
        results = list(pool.map(_fingerprints, chunks))
    for chunk in results:
        for seed, index, fingerprint in chunk:
            assert expected[(seed, index)] == fingerprint
    assert sum(len(c) for c in results) == 2 * len(keys)
