"""RSS and speed of plain batches over a 50,000,000-record virtual source.

Builds a Quick Draw-sized spec in memory (``DatasetSpec.from_counts``: 345 classes,
50,000,000 records, all train), then samples 100 batches (``--batches``) whose indices are spread
evenly over epochs 0, 1 and 2 and prints the process's resident set size
(``VmRSS`` from /proc/self/status) before and after, and batches/s.

``--impl keyed`` (default) is the shipped ``BatchSampler`` (the keyed bijection of
``core.shuffle``). ``--impl permutation`` re-implements, in this file, what v1 of
the batch sampler did (``derive_rng(...).permutation(size)`` per epoch, the last 8
kept in an LRU cache), for a like-for-like memory comparison; it is not used by
the server. Run each in its own process:
``.venv/bin/python bench/batch_bench.py [--impl keyed|permutation] [--batch-size 256]``.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampler_server.core.md.batches import BatchSampler  # noqa: E402
from sampler_server.core.seeding import Protocol, derive_rng  # noqa: E402
from sampler_server.core.spec import DatasetSpec  # noqa: E402
from sampler_server.core.split import Split  # noqa: E402

RECORDS = 50_000_000
CLASSES = 345
BATCHES = 100  # default of --batches
EPOCHS = 3


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def virtual_spec() -> DatasetSpec:
    counts = [RECORDS // CLASSES + (1 if i < RECORDS % CLASSES else 0) for i in range(CLASSES)]
    return DatasetSpec.from_counts("quickdraw", counts, [Split.TRAIN] * CLASSES, fingerprint="virtual")


class PermutationSampler:
    """v1's algorithm (a materialised permutation per epoch, 8 cached), for the comparison only."""

    def __init__(self, spec: DatasetSpec, batch_size: int) -> None:
        self.spec, self.batch_size = spec, batch_size
        self.classes = spec.classes_in(Split.TRAIN)
        self.offsets = [0]
        for info in self.classes:
            self.offsets.append(self.offsets[-1] + info.count)
        self.size = self.offsets[-1]

    @functools.lru_cache(maxsize=8)  # noqa: B019 - the bench's one instance lives for the run
    def order(self, seed: int, epoch: int) -> np.ndarray:
        return derive_rng(seed, Protocol.META_DATASET_BATCHES, self.spec.source, Split.TRAIN, epoch).permutation(self.size)

    def sample(self, seed: int, index: int) -> list[int]:
        out = []
        for position in range(index * self.batch_size, (index + 1) * self.batch_size):
            epoch, offset = divmod(position, self.size)
            shuffled = int(self.order(seed, epoch)[offset])
            label = bisect.bisect_right(self.offsets, shuffled) - 1
            out.append(self.classes[label].start + shuffled - self.offsets[label])
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("keyed", "permutation"), default="keyed")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=BATCHES, help=f"batches to sample (default {BATCHES})")
    args = parser.parse_args()

    rss_start = rss_mib()
    started = time.perf_counter()
    spec = virtual_spec()
    spec_seconds = time.perf_counter() - started
    sampler = BatchSampler(spec, Split.TRAIN, args.batch_size) if args.impl == "keyed" else PermutationSampler(spec, args.batch_size)
    per_epoch = spec.num_records / args.batch_size
    last = int(EPOCHS * per_epoch) - 1
    indices = [round(i * last / max(1, args.batches - 1)) for i in range(args.batches)]
    epochs = sorted({index * args.batch_size // spec.num_records for index in indices})
    rss_before = rss_mib()
    started = time.perf_counter()
    for index in indices:
        sampler.sample(args.seed, index)
    seconds = time.perf_counter() - started
    rss_after = rss_mib()
    print(f"impl {args.impl}: {spec.num_records:,} records in {len(spec.classes)} classes "
          f"(spec built in {spec_seconds * 1000:.1f} ms); batch size {args.batch_size}; "
          f"{args.batches} batches over epochs {epochs}")
    print(f"RSS at start {rss_start:.1f} MiB; before batches {rss_before:.1f} MiB; after {rss_after:.1f} MiB "
          f"(+{rss_after - rss_before:.1f} MiB); {args.batches / seconds:.1f} batches/s "
          f"({args.batches * args.batch_size / seconds:,.0f} records/s)")


if __name__ == "__main__":
    main()
