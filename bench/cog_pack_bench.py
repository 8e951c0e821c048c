"""ImageNet-21K pack throughput and memory (ImageNet-CoG's store).

Builds a 50,000-image input in the Fall 2011 layout with the fixture builder
(``fixtures.imagenet21k``: one ``<wnid>.tar`` per synset, members shuffled, JPEGs of
varied sizes and aspect ratios) over 80 real wnids of uneven sizes (300..950 images),
then runs ``sampler-server pack imagenet21k`` on it in a fresh process and prints, one
line each, the pack's images/s (wall clock of the whole command) and its peak resident
memory: the process tree (pack + its workers) sampled every 20 ms, beside the pack
process's own peak and its largest worker's. The tars are read streaming and one class
is held in memory while it is written (the converter's docstring), so the peak follows
the largest synset's size, not the input's.

The generated images are smaller than the release's (shorter side ``--sides``, default
64..256 px, ~10 KB; the release averages ~400 x 350 px, ~110 KB): packing decodes every
image once to check it, so images/s on the release is lower by about the pixel ratio.
The mean input bytes per image is printed with the figures.

Run: ``.venv/bin/python bench/cog_pack_bench.py [--images 50000] [--workers N] [--workdir DIR]``
(with ``--workdir`` the generated input is kept and reused by the next run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sampler_server.fixtures.imagenet21k import known_wnids, write_imagenet21k  # noqa: E402

from bench.tree_rss import TreeRss  # noqa: E402

SYNSETS = 80


def synset_counts(total: int, synsets: int = SYNSETS) -> dict[str, int]:
    """``synsets`` real wnids with uneven counts (300..950 before scaling) summing to ``total``."""
    wnids = sorted(known_wnids()[:synsets])
    raw = [300 + (index * 7919) % 651 for index in range(len(wnids))]
    scaled = [max(1, raw_count * total // sum(raw)) for raw_count in raw]
    scaled[scaled.index(max(scaled))] += total - sum(scaled)
    return dict(zip(wnids, scaled))


def build_input(root: Path, total: int, sides: tuple[int, int], workers: int) -> Path:
    stamp = root / "stamp.json"
    wanted = {"images": total, "sides": list(sides), "synsets": SYNSETS}
    source = root / "fall11"
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        print(f"reusing the input in {source}", file=sys.stderr)
        return source
    shutil.rmtree(source, ignore_errors=True)
    started = time.perf_counter()
    write_imagenet21k(source, synset_counts(total), seed=0, sides=sides, workers=workers)
    stamp.write_text(json.dumps(wanted))
    print(f"generated {total} images in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return source


def pack(source: Path, output: Path, workers: int) -> tuple[dict, float, int]:
    command = [sys.executable, "-m", "sampler_server", "pack", "imagenet21k", "--input", str(source),
               "--output", str(output), "--workers", str(workers), "--json"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    sampler = TreeRss(process.pid, every=0.02)
    out, err = process.communicate()
    wall = time.perf_counter() - started
    peak = sampler.stop()
    if process.returncode != 0:
        raise SystemExit(f"pack failed ({process.returncode}): {err.strip()}")
    return json.loads(out), wall, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--sides", type=int, nargs=2, default=(64, 256), metavar=("MIN", "MAX"),
                        help="range of the shorter image side in pixels")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pack (and generation) workers")
    parser.add_argument("--workdir", type=Path, help="keep the generated input here (reused when it matches)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="cog-pack-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        source = build_input(workdir, args.images, tuple(args.sides), args.workers)
        input_bytes = sum(p.stat().st_size for p in source.iterdir())
        output = workdir / "data"
        shutil.rmtree(output, ignore_errors=True)
        summary, wall, tree_peak = pack(source, output, args.workers)
        shutil.rmtree(output, ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    images = summary["images"]
    largest = max(synset_counts(args.images).values())
    print(f"cog pack bench: {images} images in {summary['classes']} tars ({input_bytes / images / 1e3:.1f} KB per "
          f"image, largest synset {largest}), {args.workers} workers, {os.cpu_count()} cores")
    print(f"pack imagenet21k: {images / wall:.0f} images/s ({wall:.1f} s wall for {images} images)")
    print(f"pack imagenet21k peak RSS: {tree_peak / 2**20:.0f} MB for the pack and its workers together "
          f"(pack process {summary['peak_rss_mb']:.0f} MB, largest worker {summary['workers_peak_rss_mb']:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
