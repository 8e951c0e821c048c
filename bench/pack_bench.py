"""Pack throughput and memory: does RSS stay flat as the image count grows?

Generates an ``image_folder`` source of N JPEG files (~120 px, distinct bytes per
file) for each size asked, packs each with ``sampler-server pack`` in a fresh
process, and prints images/s and peak RSS (the pack process itself, and the
largest of its worker processes), plus the RSS ratio between the largest and the
smallest run. Run: ``.venv/bin/python bench/pack_bench.py [--sizes 10000 50000]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

IMAGES_PER_CLASS = 250


def _jpeg_variants(count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(count):
        base = rng.randint(0, 255, size=(3,))
        pixels = np.clip(base + rng.randint(-40, 40, size=(120, 120, 3)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels, "RGB").save(buffer, format="JPEG", quality=85)
        out.append(buffer.getvalue())
    return out


def generate(root: Path, num_images: int) -> None:
    variants = _jpeg_variants(64)
    for index in range(num_images):
        class_dir = root / f"class_{index // IMAGES_PER_CLASS:04d}"
        if index % IMAGES_PER_CLASS == 0:
            class_dir.mkdir(parents=True)
        # a trailing comment marker makes every file's bytes (and digest) distinct
        data = variants[index % len(variants)][:-2] + b"\xff\xfe\x00\x0a" + index.to_bytes(8, "big") + b"\xff\xd9"
        (class_dir / f"img_{index:06d}.jpg").write_bytes(data)


def pack(root: Path, output: Path, workers: int) -> dict[str, float]:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "sampler_server", "pack", "image_folder", "--input", str(root),
         "--output", str(output), "--workers", str(workers), "--json"],
        capture_output=True, text=True, check=True,
    )
    wall = time.perf_counter() - started
    summary = json.loads(result.stdout)
    return {
        "images": summary["images"],
        "wall_s": wall,
        "images_per_s": summary["images"] / wall,
        "pack_rss_mb": summary["peak_rss_mb"],
        "worker_rss_mb": summary["workers_peak_rss_mb"],
        "anon_mb": summary["anon_rss_mb_at_end"] or float("nan"),
        "store_mb": summary["bytes"] / 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pack-bench-"))
    rows = []
    try:
        for size in sorted(args.sizes):
            root = workdir / f"src-{size}"
            started = time.perf_counter()
            generate(root, size)
            print(f"generated {size} images in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            rows.append(pack(root, workdir / f"out-{size}", args.workers))
            shutil.rmtree(root)
            shutil.rmtree(workdir / f"out-{size}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"pack benchmark: image_folder source, ~120 px JPEG, {args.workers} workers, {os.cpu_count()} cores")
    print(f"{'images':>8} {'wall s':>8} {'images/s':>9} {'pack RSS MB':>12} {'worker RSS MB':>14} {'anon MB at end':>15} {'store MB':>9}")
    for row in rows:
        print(f"{row['images']:>8} {row['wall_s']:>8.1f} {row['images_per_s']:>9.0f} {row['pack_rss_mb']:>12.1f} "
              f"{row['worker_rss_mb']:>14.1f} {row['anon_mb']:>15.1f} {row['store_mb']:>9.1f}")
    if len(rows) > 1:
        ratio = rows[-1]["pack_rss_mb"] / rows[0]["pack_rss_mb"]
        print(f"pack RSS ratio {rows[-1]['images']} / {rows[0]['images']} images: {ratio:.2f} (flat = 1.0); "
              f"anonymous memory ratio {rows[-1]['anon_mb'] / rows[0]['anon_mb']:.2f} "
              "(peak RSS also counts LMDB's file-backed map pages, which the page cache reclaims)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
