"""Served VTAB task batches at 224 px against the decode+resize limit, measured in one run.

Builds a prepared TFDS ``dtd`` dataset of ~300 px JPEGs with TFDS's own writer (the
test builders' way: ``tests/tfds_builders.TestDtd`` with JPEG images), packs it with
``pack vtab``, starts ``sampler-server serve`` and prints, on the same records and
cores, with the VTAB default resize (``legacy_bilinear``: the reference's
``tf.compat.v1.image.resize`` grid):
- limit: bare decode + resize of every stored record over all cores (bytes in RAM;
  ``serve_bench.limit_rate``), and the same limit with ``tf2_bilinear`` (TF2's
  half-pixel grid: OpenCV's ``resize`` in place of the remap the legacy grid needs),
- served images/s, 1 client, StreamTaskBatches in eval form (test split, in order),
- served images/s, 1 client, shuffled StreamTaskBatches (train800val200),
each served rate also as a ratio to the limit, and how far ``tf2_bilinear``'s pixels
are from the default's (mean and max levels over every record). The first two batches
of a stream are left out (connection and warm-up).

Run: ``.venv/bin/python bench/vtab_bench.py [--batch-size 64] [--batches 40]``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

import tfds_builders as tb  # noqa: E402
from serve_bench import limit_rate, start_server  # noqa: E402

from clients.core import SamplerClient  # noqa: E402
from sampler_server.cli.main import main as cli  # noqa: E402
from sampler_server.assembly.decode import record_pixels  # noqa: E402
from sampler_server.fixtures.base import class_image, rng_for  # noqa: E402
from sampler_server.imaging import ResizeMethod  # noqa: E402
from sampler_server.store.reader import StoreReader  # noqa: E402

SIZE = 224
TASK = "dtd"


class JpegDtd(tb.TestDtd, skip_registration=True):
    """DTD with ~300 px JPEG textures (quality 90) in place of the tests' 4 px PNGs."""

    name, pkg_dir_path = "dtd", tb.TestDtd.pkg_dir_path
    SIZES = {"train": 1500, "validation": 300, "test": 1500}

    def _example(self, split, number, seed):
        example = super()._example(split, number, seed)
        rng = rng_for("vtab-bench", seed, example["label"])
        size = (int(rng.randint(280, 330)), int(rng.randint(280, 330)))
        buffer = io.BytesIO()
        class_image(example["label"], rng, size).save(buffer, format="JPEG", quality=90)
        return {**example, "image": buffer.getvalue()}


def grid_distance(reader: StoreReader, size: int) -> tuple[float, float]:
    """(mean, max) |tf2_bilinear - legacy_bilinear| in levels over every record's pixels."""
    total, count, largest = 0.0, 0, 0
    for value in reader.read_values(list(range(reader.num_records))):
        legacy = record_pixels(value, size, ResizeMethod.LEGACY_BILINEAR).astype(np.int16)
        tf2 = record_pixels(value, size, ResizeMethod.TF2_BILINEAR).astype(np.int16)
        difference = np.abs(tf2 - legacy)
        total, count = total + float(difference.sum()), count + difference.size
        largest = max(largest, int(difference.max()))
    return total / count, float(largest)


def stream_rate(batches) -> float:
    """Images/s over a stream's batches after its first two."""
    images, started = 0, None
    for position, batch in enumerate(batches):
        if position == 1:
            started = time.perf_counter()
        elif position > 1:
            images += len(batch.labels)
    return images / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=40, help="shuffled batches to receive")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vtab-bench-"))
    try:
        tb.prepare(JpegDtd, work / "tfds")
        data = work / "data"
        assert cli(["pack", "vtab", "--tfds-name", TASK, "--tfds-data-dir", str(work / "tfds"), "--output", str(data),
                    "--quiet"]) == 0
        reader = StoreReader(data / "tfds_dtd")
        mean_kb = sum(len(v) for v in reader.read_values(list(range(reader.num_records)))) / reader.num_records / 1e3
        print(f"TFDS dtd: {reader.num_records} JPEGs ~300 px, mean {mean_kb:.1f} KB; task {TASK} at {SIZE} px, "
              f"batch {args.batch_size}, {args.workers} workers on {os.cpu_count()} cores", flush=True)
        limit = limit_rate(reader, SIZE, args.workers, ResizeMethod.LEGACY_BILINEAR)
        tf2_limit = limit_rate(reader, SIZE, args.workers, ResizeMethod.TF2_BILINEAR)
        mean_levels, max_levels = grid_distance(reader, SIZE)
        process, address, _ = start_server(data, args.workers)
        try:
            with SamplerClient(address, prefetch=2) as client:
                evaluated = stream_rate(client.eval_batches(TASK, "test", args.batch_size, image_size=SIZE))
                shuffled = stream_rate(client.task_batches(TASK, "train800val200", args.batch_size, seed=1,
                                                           count=args.batches, image_size=SIZE))
        finally:
            process.terminate()
            process.wait()
        print(f"limit (decode + legacy_bilinear resize, {args.workers} workers): {limit:.0f} images/s", flush=True)
        print(f"tf2_bilinear limit: {tf2_limit:.0f} images/s = {tf2_limit / limit:.2f}x; its pixels are "
              f"{mean_levels:.1f} levels off the default on average (max {max_levels:.0f})")
        print(f"served eval (test, in order), 1 client: {evaluated:.0f} images/s = {evaluated / limit:.2f}x the limit")
        print(f"served shuffled (train800val200), 1 client: {shuffled:.0f} images/s = {shuffled / limit:.2f}x the limit")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
