"""VTAB at 224 px: task_adaptation's input pipeline against ours, side by side, in one run.

Builds a prepared TFDS ``dtd`` dataset of ~300 px JPEGs with TFDS's own writer (the
test builders' way: ``tests/tfds_builders.TestDtd`` with JPEG images), packs it twice
with ``pack vtab`` (the stored JPEGs, and ``--raw-size 224``: the default resize's pixels
stored pre-resized), starts one ``sampler-server serve`` per store and measures, on the
same records and cores, the training form of task ``dtd``'s ``train800val200`` at the
reference's pixels (224 px, ``legacy_bilinear``: the grid of ``tf.compat.v1.image.resize``):

- reference: task_adaptation's own input pipeline, built here with TensorFlow and TFDS
  the way its ``ImageTfdsData.get_tf_data`` builds it for training under
  ``scripts/run_all_tasks.sh`` (``data/base.py``, ``data/dtd.py``, ``data_loader.py``):
  read the split with image decoding skipped, ``cache``, ``repeat``, ``shuffle(10000)``,
  decode with the TFDS feature's decoder and apply ``data_loader.preprocess_fn``
  (``tf.compat.v1.image.resize`` to 224, ``/ 255``), each a ``map`` with dtd's 400
  parallel calls, ``batch(drop_remainder=True)``, ``prefetch(1000)``;
- ours, each through its own connection: the client's arrays
  (``SamplerClient.task_batches``), the PyTorch adapter (``TaskBatchDataset``) and the
  tf adapter (``task_batch_dataset``), uint8 (their default; the model converts on its
  device), plus the PyTorch adapter with ``dtype="float32"`` (the conversion on the
  receiving thread the default avoids);
- the same three of ours over the raw store.

For batch 64 and 512, each rate is images/s over a run's batches after its first two
(pipeline start, shuffle buffer, connection), the median of ``--rounds`` runs with the
pipelines interleaved (round 1 of every pipeline, then round 2, ...; the runs' range
beside it). It is printed as a ratio to the reference and to the client arrays of the
same store, with the cores used meanwhile by the client process (an adapter's own
cost; the reference decodes there), by the servers (low: a server kept waiting) and
by processes outside the bench (on a shared machine, what the rates lost), and the
targets of each row (issue 26): adapters >= 0.95x the client arrays; raw store >= 3x
the reference. The reference hands over float32 (its ``/ 255`` runs on its own
threads); ours hand over uint8. Before the table: whether the raw store serves exactly
the encoded store's pixels and, in full runs only, the bare decode + resize limit of
every stored record over all cores (``serve_bench.limit_rate``), the same with
``tf2_bilinear`` and how far its pixels are from the default's.

Run: ``.venv/bin/python bench/vtab_bench.py [--rounds 3] [--images 2048]``;
``--quick``: a smaller dataset, one round, no limits (a smoke run).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

import tensorflow as tf  # noqa: E402
import tfds_builders as tb  # noqa: E402
from serve_bench import limit_rate, start_server  # noqa: E402

from clients.core import SamplerClient  # noqa: E402
from clients.tf.dataset import task_batch_dataset  # noqa: E402
from clients.torch.dataset import TaskBatchDataset  # noqa: E402
from sampler_server.assembly.decode import record_pixels  # noqa: E402
from sampler_server.cli.main import main as cli  # noqa: E402
from sampler_server.fixtures.base import class_image, rng_for  # noqa: E402
from sampler_server.imaging import ResizeMethod  # noqa: E402
from sampler_server.store.reader import StoreReader  # noqa: E402

SIZE = 224
TASK = "dtd"
SPLIT = "train800val200"
# TFDS's split of train800val200 in task_adaptation's data/dtd.py, and what that file
# and adapt_and_eval.py's flags give the training pipeline.
REFERENCE_SPLIT = "train[:800]+validation[:200]"
REFERENCE_SHUFFLE_BUFFER = 10000
REFERENCE_PARALLEL_CALLS = 400
REFERENCE_PREFETCH = 1000
SKIPPED = 2  # batches left out at a run's start
ADAPTER_TARGET = 0.95  # x the client arrays of the same store
RAW_TARGET = 3.0  # x the reference


class JpegDtd(tb.TestDtd, skip_registration=True):
    """DTD with ~300 px JPEG textures (quality 90) in place of the tests' 4 px PNGs."""

    name, pkg_dir_path = "dtd", tb.TestDtd.pkg_dir_path
    SIZES = {"train": 1500, "validation": 300, "test": 300}

    def _example(self, split, number, seed):
        example = super()._example(split, number, seed)
        rng = rng_for("vtab-bench", seed, example["label"])
        size = (int(rng.randint(280, 330)), int(rng.randint(280, 330)))
        buffer = io.BytesIO()
        class_image(example["label"], rng, size).save(buffer, format="JPEG", quality=90)
        return {**example, "image": buffer.getvalue()}


def reference_pipeline(version_dir: Path, batch_size: int) -> tf.data.Dataset:
    """task_adaptation's training input pipeline for dtd (see the module docstring)."""
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(os.fspath(version_dir))
    decode_image = builder.info.features["image"].decode_example

    def decoded(example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:  # its image decoder, then image + label
        return {"image": decode_image(example["image"]), "label": example["label"]}

    def preprocessed(example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:  # preprocess_fn, input range [0, 1]
        image = tf.compat.v1.image.resize(example["image"], [SIZE, SIZE])
        return {"image": tf.cast(image, tf.float32) / 255.0, "label": example["label"]}

    data = builder.as_dataset(split=REFERENCE_SPLIT, shuffle_files=False,
                              decoders={"image": tfds.decode.SkipDecoding()})
    data = data.cache().repeat().shuffle(REFERENCE_SHUFFLE_BUFFER)
    data = data.map(decoded, REFERENCE_PARALLEL_CALLS).map(preprocessed, REFERENCE_PARALLEL_CALLS)
    return data.batch(batch_size, drop_remainder=True).prefetch(REFERENCE_PREFETCH)


def images_per_second(batches: Iterable[Any], rows: Callable[[Any], int], count: int) -> float:
    """Images/s over ``count`` batches after the first ``SKIPPED``. Each batch is dropped once
    counted, as by a consumer that has moved it to its device: the client's arrays are views
    of the reply (same-host: of the server's segment), held as long as the batch is."""
    images, started = 0, None
    for position, batch in enumerate(batches):
        size = rows(batch)
        del batch
        if position == SKIPPED - 1:
            started = time.perf_counter()
        elif position >= SKIPPED:
            images += size
        if position + 1 == SKIPPED + count:
            break
    return images / (time.perf_counter() - started)


def same_pixels(encoded: str, raw: str, batch_size: int) -> bool:
    """Whether the raw store serves the encoded store's pixels (the first eval batch of test)."""
    with SamplerClient(encoded) as from_encoded, SamplerClient(raw) as from_raw:
        first = next(iter(from_encoded.eval_batches(TASK, "test", batch_size, image_size=SIZE)))
        stored = next(iter(from_raw.eval_batches(TASK, "test", batch_size, image_size=SIZE)))
        return bool(np.array_equal(first.images, stored.images)) and first.resize == stored.resize


def pipelines(version_dir: Path, encoded: str, raw: str, quick: bool) -> dict[str, Callable[[int, int, int], float]]:
    """Each row's run: (batch size, batches, seed) -> images/s."""

    def reference(batch_size: int, count: int, seed: int) -> float:
        return images_per_second(reference_pipeline(version_dir, batch_size), lambda b: int(b["label"].shape[0]), count)

    def arrays(address: str) -> Callable[[int, int, int], float]:
        def run(batch_size: int, count: int, seed: int) -> float:
            with SamplerClient(address) as client:
                batches = client.task_batches(TASK, SPLIT, batch_size, seed=seed, count=SKIPPED + count,
                                              image_size=SIZE)
                return images_per_second(batches, lambda b: len(b.labels), count)
        return run

    def torch_adapter(address: str, dtype: str = "uint8") -> Callable[[int, int, int], float]:
        def run(batch_size: int, count: int, seed: int) -> float:
            dataset = TaskBatchDataset(address, TASK, SPLIT, batch_size, shuffle=True, seed=seed,
                                       count=SKIPPED + count, image_size=SIZE, dtype=dtype)
            return images_per_second(dataset, lambda b: len(b["labels"]), count)
        return run

    def tf_adapter(address: str) -> Callable[[int, int, int], float]:
        def run(batch_size: int, count: int, seed: int) -> float:
            dataset = task_batch_dataset(address, TASK, SPLIT, batch_size, shuffle=True, seed=seed,
                                         count=SKIPPED + count, image_size=SIZE)
            return images_per_second(dataset, lambda b: int(b["labels"].shape[0]), count)
        return run

    rows = {"reference (task_adaptation, float32)": reference,
            "client arrays (uint8)": arrays(encoded),
            "torch TaskBatchDataset (uint8)": torch_adapter(encoded),
            "tf task_batch_dataset (uint8)": tf_adapter(encoded)}
    if not quick:
        rows["torch TaskBatchDataset dtype=float32"] = torch_adapter(encoded, "float32")
    rows |= {"raw 224: client arrays (uint8)": arrays(raw),
             "raw 224: torch TaskBatchDataset": torch_adapter(raw),
             "raw 224: tf task_batch_dataset": tf_adapter(raw)}
    return rows


def tree_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of a process and everything it started (the bench, its servers and their workers)."""
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            pass
    return total


def machine_busy_seconds() -> float:
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq


def measured(run: Callable[[int, int, int], float], batch_size: int, count: int, seed: int) -> tuple[float, ...]:
    """(images/s, then the cores used during the run by this process, by its servers and by
    processes outside this bench): an adapter's own cost shows in the first, a server
    kept waiting in the second, what other jobs took from the machine in the third."""
    me = psutil.Process()
    client, tree, busy, started = time.process_time(), tree_cpu_seconds(me), machine_busy_seconds(), time.perf_counter()
    rate = run(batch_size, count, seed)
    wall = time.perf_counter() - started
    client = time.process_time() - client
    ours = tree_cpu_seconds(me) - tree
    others = max(0.0, machine_busy_seconds() - busy - ours)
    return rate, client / wall, max(0.0, ours - client) / wall, others / wall


def target(row: str, of_reference: float, of_arrays: float) -> str:
    """The issue's target for a row, and whether this run met it."""
    checks = []
    if row.startswith("raw"):
        checks.append((f">= {RAW_TARGET:.0f}x reference", of_reference >= RAW_TARGET))
    if ("torch" in row or "tf " in row) and "float32" not in row:
        checks.append((f">= {ADAPTER_TARGET}x arrays", of_arrays >= ADAPTER_TARGET))
    return "; ".join(f"{name}: {'met' if met else 'NOT met'}" for name, met in checks)


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


def print_limits(reader: StoreReader, workers: int) -> None:
    limit = limit_rate(reader, SIZE, workers, ResizeMethod.LEGACY_BILINEAR)
    tf2_limit = limit_rate(reader, SIZE, workers, ResizeMethod.TF2_BILINEAR)
    mean_levels, max_levels = grid_distance(reader, SIZE)
    print(f"limit (decode + legacy_bilinear resize, {workers} workers): {limit:.0f} images/s", flush=True)
    print(f"tf2_bilinear limit: {tf2_limit:.0f} images/s = {tf2_limit / limit:.2f}x; its pixels are "
          f"{mean_levels:.1f} levels off the default on average (max {max_levels:.0f})", flush=True)


def pack(tfds_dir: Path, data: Path, *extra: str) -> None:
    if cli(["pack", "vtab", "--tfds-name", TASK, "--tfds-data-dir", str(tfds_dir), "--output", str(data), "--quiet",
            *extra]) != 0:
        raise RuntimeError(f"pack vtab {' '.join(extra)} failed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--images", type=int, default=2048, help="images measured per run (at least 3 batches)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs of each pipeline (median)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="serve --workers")
    parser.add_argument("--quick", action="store_true", help="smoke run: small dataset, one round, no limits")
    args = parser.parse_args()
    rounds, images = (1, 512) if args.quick else (args.rounds, args.images)
    sizes = {"train": 810, "validation": 210, "test": 30} if args.quick else JpegDtd.SIZES
    work = Path(tempfile.mkdtemp(prefix="vtab-bench-"))
    servers = []
    try:
        version_dir = tb.prepare(JpegDtd, work / "tfds", SIZES=sizes)
        encoded_data, raw_data = work / "data", work / "data_raw"
        pack(work / "tfds", encoded_data)
        pack(work / "tfds", raw_data, "--raw-size", str(SIZE))
        reader = StoreReader(encoded_data / "tfds_dtd")
        raw_reader = StoreReader(raw_data / "tfds_dtd")
        raw_options = raw_reader.manifest.pack_options
        mean_kb = sum(len(v) for v in reader.read_values(list(range(reader.num_records)))) / reader.num_records / 1e3
        print(f"TFDS dtd: {reader.num_records} JPEGs ~300 px, mean {mean_kb:.1f} KB; raw store "
              f"{raw_options.get('raw_size')} px {raw_options.get('raw_resize')}; task {TASK} {SPLIT} at {SIZE} px; "
              f"serve --workers {args.workers} on {os.cpu_count()} cores; medians of {rounds} interleaved runs of "
              f"~{images} images", flush=True)
        if not args.quick:
            print_limits(reader, args.workers)
        for data in (encoded_data, raw_data):
            process, address, _ = start_server(data, args.workers)
            servers.append((process, address))
        rows = pipelines(version_dir, servers[0][1], servers[1][1], args.quick)
        with SamplerClient(servers[0][1]) as client:
            transport = client.transport
        print(f"transport: {transport}; raw store's pixels equal the encoded store's served pixels: "
              f"{same_pixels(servers[0][1], servers[1][1], 64)}", flush=True)
        print("cores used during the runs (medians): client = this process (the reference decodes there), "
              "server = the serve processes, others = processes outside this bench")
        print(f"{'batch':>5}  {'pipeline':<38} {'images/s':>9} {'runs':>11} {'x reference':>11} {'x arrays':>9} "
              f"{'client':>6} {'server':>6} {'others':>6}  target")
        for batch_size in args.batch_sizes:
            count = max(3, images // batch_size)
            runs: dict[str, list[tuple[float, ...]]] = {row: [] for row in rows}
            for seed in range(rounds):
                for row, run in rows.items():
                    runs[row].append(measured(run, batch_size, count, seed))
            median = {row: [statistics.median(column) for column in zip(*values)] for row, values in runs.items()}
            reference = median["reference (task_adaptation, float32)"][0]
            for row, (rate, client, server, others) in median.items():
                arrays_row = "raw 224: client arrays (uint8)" if row.startswith("raw") else "client arrays (uint8)"
                arrays = median[arrays_row][0]
                of_reference, of_arrays = rate / reference, rate / arrays
                spread = f"{min(r[0] for r in runs[row]):.0f}-{max(r[0] for r in runs[row]):.0f}"
                print(f"{batch_size:>5}  {row:<38} {rate:>9.0f} {spread:>11} {of_reference:>10.2f}x "
                      f"{of_arrays:>8.2f}x {client:>6.2f} {server:>6.2f} {others:>6.2f}  "
                      f"{target(row, of_reference, of_arrays)}",
                      flush=True)
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
