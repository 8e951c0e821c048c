"""Wall time of the ImageNet-CoG levels computation on 21,841 concepts (one core).

No IN-21K Fall 2011 list ships with the project, so by default the input is a
deterministic SYNTHETIC stand-in (``fixtures.cog_counts.synthetic_in21k_counts``):
21,841 real WordNet 3.0 noun wnids, the 999 IN-1K concepts other than teddy bear plus
others picked by a keyed hash, with hash-derived image counts (0..1999). Its levels mean
nothing; its size and shape (a fragment of ~29,000 WordNet concepts, thousands of
eligible ones) are what is timed. ``--counts FILE`` times a real list instead (JSON
``{wnid: count}``, as ``sampler-server cog levels --counts`` reads it).

What is timed: ``compute_levels`` from counts to levels (eligibility, fragment, IC,
similarity to IN-1K, ranking, JSON text), with the WordNet graph already loaded (its
load is printed apart: a server or a CLI run pays it once). Best of ``--repeat`` runs.

Run: ``.venv/bin/python bench/cog_levels_bench.py [--counts FILE] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampler_server.cli.cog_levels_cmd import read_counts_file  # noqa: E402
from sampler_server.core.cog import LEVEL_SIZE, MIN_IMAGES, compute_levels  # noqa: E402
from sampler_server.core.hierarchy.wordnet import load_wordnet_graph  # noqa: E402
from sampler_server.fixtures.cog_counts import synthetic_in21k_counts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=Path, help="a real counts file (default: the synthetic 21,841 concepts)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is printed (default 3)")
    parser.add_argument("--level-size", type=int, default=LEVEL_SIZE)
    parser.add_argument("--min-images", type=int, default=MIN_IMAGES)
    args = parser.parse_args()
    started = time.perf_counter()
    graph = load_wordnet_graph()
    graph_s = time.perf_counter() - started
    if args.counts is not None:
        counts, what = read_counts_file(args.counts), str(args.counts)
    else:
        counts, what = synthetic_in21k_counts(graph), "synthetic stand-in, hash-derived counts"
    times = []
    for _ in range(max(1, args.repeat)):
        started = time.perf_counter()
        levels = compute_levels(counts, level_size=args.level_size, min_images=args.min_images, graph=graph)
        levels.to_json_text()
        times.append(time.perf_counter() - started)
    print(f"cog levels: {len(counts):,} concepts ({what}), fragment {levels.fragment_size:,}, "
          f"{len(levels.eligible):,} eligible, level size {args.level_size}: {min(times):.2f} s "
          f"(best of {len(times)}; WordNet graph load {graph_s:.2f} s apart)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
