"""The figures of deploy/README.md's sizing table, measured in one run.

A replica's size is counted in cores, so this measures CPU time, not wall time: on a
machine shared with other work (CI, other users) a wall-clock rate says more about the
neighbours than about the sampler, while the CPU seconds the sampler spends on an image
barely move. For serve_bench's JPEG source (~300 px, DTD-like) and raw stores packed from
it (``--raw-size``), at 84, 126 and 224 px, with the exact default resize (``bilinear``)
and MD variable-way, variable-shot episodes (the reference's defaults), it prints:
- decode: images per CPU-second of ``record_pixels`` alone (read from memory, decode,
  resize) in one process, the best of ``--repeat`` passes over every record;
- served: images per CPU-second of the whole server (the serve process, its decode
  workers and everything else it started: decode, assembly, gRPC), with C clients,
  each a process, streaming over gRPC (the cross-host transport; the same-host one is
  turned off), ``serve --workers W``; the best of ``--repeat`` runs, each printed;
- cores one GPU needs: a GPU's images/s times the server's CPU-seconds per image at
  that size (default rates: issue 13's measured H200 ProtoNet rates).

Run: ``.venv/bin/python deploy/sizing_bench.py [--sizes 84 126 224] [--episodes 40]``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from serve_bench import make_jpeg_source, pack, start_server  # noqa: E402

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from sampler_server.assembly.decode import record_pixels  # noqa: E402
from sampler_server.imaging import ResizeMethod  # noqa: E402
from sampler_server.store.reader import StoreReader  # noqa: E402

# Model-only training rates on one H200 (issue 13: ProtoNet, bf16, MD variable episodes):
# (name, image size, images/s)
GPU_RATES = (
    ("ResNet-18, shapes seen before", 126, 33_740.0),
    ("ResNet-18, every shape new", 126, 12_060.0),
    ("conv4, shapes seen before", 84, 49_500.0),
    ("conv4, every shape new", 84, 26_220.0),
)
TICKS = os.sysconf("SC_CLK_TCK")


def parse_gpu_rate(text: str) -> tuple[str, int, float]:
    """NAME:PX:IMAGES_PER_S."""
    try:
        name, size, rate = text.rsplit(":", 2)
        return name, int(size), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpu-rate: got {text!r}, expected NAME:PX:IMAGES_PER_S") from None


def tree(pid: int) -> set[int]:
    """A process and all its live descendants."""
    found, pending = set(), [pid]
    while pending:
        current = pending.pop()
        if current in found:
            continue
        found.add(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU time of ``pids`` so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def pss_mb(pids: set[int]) -> float:
    """Proportional set size of ``pids`` (pages they share counted once)."""
    total = 0.0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:")) / 1024
    return total


def decode_rate(store: Path, size: int, repeat: int) -> float:
    """Images per CPU-second of decode + resize alone, one process."""
    reader = StoreReader(store)
    values = reader.read_values(list(range(reader.num_records)))
    out = np.empty((size, size, 3), np.uint8)
    best = 0.0
    for _ in range(repeat):
        started = time.process_time()
        for value in values:
            record_pixels(value, size, ResizeMethod.BILINEAR, out)
        best = max(best, len(values) / (time.process_time() - started))
    return best


def _client(address: str, store: str, size: int, start: int, count: int, queue) -> None:
    try:
        spec = EpisodeSpec(sources=(store,), split="test", seed=0, image_size=size)
        images = 0
        with SamplerClient(address, prefetch=2, same_host=False) as client:
            for episode in client.episodes(spec, start=start, count=count):
                images += len(episode.support_images) + len(episode.query_images)
        queue.put(images)
    except Exception as error:  # the parent reports it instead of waiting for ever
        queue.put(f"{type(error).__name__}: {error}")


def served(server_pid: int, address: str, store: str, size: int, clients: int, episodes: int) -> float:
    """Images per server CPU-second while ``clients`` stream ``episodes`` in all."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    pids = tree(server_pid)
    cpu_before = cpu_seconds(pids)
    processes = [ctx.Process(target=_client, args=(address, store, size, 1000 * k, max(2, episodes // clients), queue))
                 for k in range(clients)]
    for process in processes:
        process.start()
    results = [queue.get() for _ in processes]
    for process in processes:
        process.join()
    cpu = cpu_seconds(pids | tree(server_pid)) - cpu_before
    failures = [r for r in results if isinstance(r, str)]
    if failures:
        raise RuntimeError(f"a client failed: {failures[0]}")
    return sum(results) / cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 126, 224])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="decode workers (default: cores)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients")
    parser.add_argument("--episodes", type=int, default=40, help="episodes per served measurement (all clients)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each measurement; the best is kept")
    parser.add_argument("--classes", type=int, default=47, help="classes of the JPEG source (at least 47: the "
                        "test split must hold an MD episode's ways)")
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--gpu-rate", type=parse_gpu_rate, action="append", metavar="NAME:PX:IMAGES_PER_S",
                        help="a GPU's training rate to size for (repeatable; default: issue 13's H200 rates)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sizing-bench-"))
    rows: dict[tuple[str, int], tuple[float, float]] = {}
    try:
        make_jpeg_source(work / "jpeg", args.classes, args.per_class)
        print(f"JPEG source: {args.classes * args.per_class} images of ~300 px; serve --workers {args.workers}, "
              f"{args.clients} clients, {args.episodes} episodes each measurement, on {os.cpu_count()} cores; "
              f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
        for size in args.sizes:
            data = work / f"data-{size}"
            stores = {"jpeg": pack(work / "jpeg", data, "jpeg"), "raw": pack(work / "jpeg", data, "raw", raw_size=size)}
            process, address, _ = start_server(data, args.workers)
            try:
                for kind, store in stores.items():
                    decode = decode_rate(store, size, args.repeat)
                    runs = [served(process.pid, address, kind, size, args.clients, args.episodes)
                            for _ in range(args.repeat)]
                    memory = pss_mb(tree(process.pid))
                    rows[kind, size] = (decode, max(runs))
                    print(f"{kind} {size}px: decode {decode:.0f} images/CPU-s; served {max(runs):.0f} images per "
                          f"server CPU-s (runs: {', '.join(f'{r:.0f}' for r in runs)}); server PSS after it "
                          f"{memory:.0f} MB", flush=True)
            finally:
                process.terminate()
                process.wait()
            shutil.rmtree(data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("images per CPU-second (one core busy for one second)")
    print(f"{'store':5} {'px':>4} {'decode':>8} {'served':>8}")
    for (kind, size), (decode, per_cpu) in rows.items():
        print(f"{kind:5} {size:>4} {decode:8.0f} {per_cpu:8.0f}")
    print()
    print("server cores one GPU needs (GPU images/s over served images per server CPU-second at that size)")
    for name, size, rate in args.gpu_rate or GPU_RATES:
        needs = [f"{kind} {math.ceil(rate / rows[kind, size][1])}" for kind in ("jpeg", "raw") if (kind, size) in rows]
        print(f"{name} at {size} px, {rate:.0f} images/s: " + (", ".join(needs) or f"{size} px not measured"))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
