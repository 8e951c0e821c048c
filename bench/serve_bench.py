"""Serving throughput against the hardware limit, measured in one run.

For a JPEG source of ~300 px images (DTD-like) and an Omniglot-like source of
105 px 1-bit PNGs, at 84 and 126 px, on the same records and cores, it prints:
- limit: bare decode + resize of the stored records over all cores (bytes in RAM),
- in-process episode assembly (sampler + assembler, no gRPC),
- served images/s with 1 and 4 concurrent clients (each client a process),
- the same for a store packed with ``--raw-size`` at that size,
- for the raw store at 126 px, the transport rate server -> one client (MB/s),
- the time from starting ``sampler-server serve`` to the first episode received.
Each rate is also given as a ratio to the limit. Episodes are MD variable-way,
variable-shot (the reference's defaults) from the test split.

Run: ``.venv/bin/python bench/serve_bench.py [--episodes N] [--sizes 84 126]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from sampler_server.assembly.assembler import Assembler  # noqa: E402
from sampler_server.assembly.decode import record_pixels  # noqa: E402
from sampler_server.core.config import EpisodeConfig  # noqa: E402
from sampler_server.core.sampling.sampler import EpisodeSampler  # noqa: E402
from sampler_server.core.spec import DatasetSpec  # noqa: E402
from sampler_server.fixtures.base import class_image, rng_for  # noqa: E402
from sampler_server.imaging import ResizeMethod  # noqa: E402
from sampler_server.pack import sources  # noqa: E402
from sampler_server.pack.pipeline import PackOptions, run_pack  # noqa: E402
from sampler_server.pack.plan import ConverterOptions  # noqa: E402
from sampler_server.store.reader import StoreReader  # noqa: E402


def make_jpeg_source(root: Path, classes: int, per_class: int) -> None:
    for c in range(classes):
        directory = root / f"texture_{c:02d}"
        directory.mkdir(parents=True)
        rng = rng_for("bench-jpeg", 0, c)
        for i in range(per_class):
            size = (int(rng.randint(280, 330)), int(rng.randint(280, 330)))
            class_image(c, rng, size).save(directory / f"{i:04d}.jpg", quality=90)


def make_png_source(root: Path, classes: int, per_class: int) -> None:
    for c in range(classes):
        directory = root / f"character_{c:03d}"
        directory.mkdir(parents=True)
        rng = rng_for("bench-png", 0, c)
        for i in range(per_class):
            image = class_image(c, rng, (105, 105), mode="L").point(lambda v: 255 if v > 90 else 0).convert("1")
            image.save(directory / f"{i:02d}.png")


def pack(kind_root: Path, data: Path, name: str, raw_size: int | None = None) -> Path:
    plan = sources.get_converter("image_folder").plan(kind_root, ConverterOptions())
    summary = run_pack(plan, data, PackOptions(name=name, raw_size=raw_size, progress=False))
    return summary.store_dir


_VALUES: list[bytes] = []


def _init(values: list[bytes]) -> None:
    _VALUES[:] = values


def _decode_range(args: tuple[int, int, int]) -> int:
    start, stop, size = args
    for value in _VALUES[start:stop]:
        record_pixels(value, size, ResizeMethod.BILINEAR)
    return stop - start


def limit_rate(reader: StoreReader, size: int, workers: int, repeat: int = 2) -> float:
    values = reader.read_values(list(range(reader.num_records)))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_init, initargs=(values,)) as pool:
        step = max(1, len(values) // (workers * 8))
        tasks = [(i, min(i + step, len(values)), size) for i in range(0, len(values), step)]
        pool.map(_decode_range, tasks[:workers])  # warm
        started = time.perf_counter()
        done = sum(sum(pool.map(_decode_range, tasks)) for _ in range(repeat))
        return done / (time.perf_counter() - started)


def in_process_rate(store: Path, size: int, workers: int, episodes: int) -> float:
    reader = StoreReader(store)
    spec = DatasetSpec.from_manifest(reader.manifest)
    sampler = EpisodeSampler(spec, "test", EpisodeConfig())
    assembler = Assembler({"s": reader}, workers)
    assembler.warm_up()
    try:
        def submit(index: int):
            episode = sampler.sample(0, index)
            ids = [r for ids in episode.support for r in ids] + [r for ids in episode.query for r in ids]
            return assembler.submit("s", ids, size)

        images = 0
        started = time.perf_counter()
        in_flight = [submit(index) for index in range(3)]  # as a server stream keeps episodes in flight
        for index in range(3, episodes + 3):
            images += len(in_flight.pop(0).result())
            if index < episodes:
                in_flight.append(submit(index))
        return images / (time.perf_counter() - started)
    finally:
        assembler.close()


def start_server(data: Path, workers: int) -> tuple[subprocess.Popen, str, float]:
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0", "--workers", str(workers)],
        stdout=subprocess.PIPE, stderr=open(data / "server.log", "a"), text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(f"server did not start: {line!r}")
    return process, line.split()[2], started


def _client_run(address: str, store: str, size: int, start: int, count: int, ready, go, queue) -> None:
    spec = EpisodeSpec(sources=(store,), split="test", seed=0, image_size=size)
    with SamplerClient(address, prefetch=2) as client:
        stream = iter(client.episodes(spec, start=start, count=count + 1))
        next(stream)  # connected and warm
        ready.release()
        go.wait()
        arrivals = []
        for episode in stream:
            images = len(episode.support_images) + len(episode.query_images)
            arrivals.append((time.time(), images, episode.support_images.nbytes + episode.query_images.nbytes))
        queue.put(arrivals)


def served_rate(address: str, store: str, size: int, clients: int, episodes: int) -> tuple[float, float]:
    """Steady-state images/s and MB/s over all clients.

    Clients warm up, then start together. Episodes already decoded or buffered at
    the start would inflate a rate taken from the start, so the rate counts only
    arrivals inside a window from 30% of the way to the moment the first client is
    done, until that moment: every client is busy throughout the window.
    """
    ctx = multiprocessing.get_context("spawn")
    queue, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    per_client = max(4, episodes // clients)
    processes = [ctx.Process(target=_client_run, args=(address, store, size, 1000 * k, per_client, ready, go, queue))
                 for k in range(clients)]
    for p in processes:
        p.start()
    for _ in processes:
        ready.acquire()
    started = time.time()
    go.set()
    results = [queue.get() for _ in processes]
    for p in processes:
        p.join()
    window_end = min(arrivals[-1][0] for arrivals in results)
    window_start = started + 0.3 * (window_end - started)
    inside = [a for arrivals in results for a in arrivals if window_start < a[0] <= window_end]
    seconds = window_end - window_start
    return sum(a[1] for a in inside) / seconds, sum(a[2] for a in inside) / seconds / 1e6


def first_episode_seconds(data: Path, store: str, size: int, workers: int) -> float:
    process, address, started = start_server(data, workers)
    try:
        with SamplerClient(address) as client:
            next(iter(client.episodes(EpisodeSpec(sources=(store,), split="test", image_size=size), count=1)))
        return time.perf_counter() - started
    finally:
        process.terminate()
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60, help="episodes per measurement (split over clients)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 126])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--jpeg-classes", type=int, default=47)
    parser.add_argument("--jpeg-per-class", type=int, default=40)
    parser.add_argument("--png-classes", type=int, default=200)
    parser.add_argument("--png-per-class", type=int, default=20)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    rows = []
    try:
        make_jpeg_source(work / "jpeg", args.jpeg_classes, args.jpeg_per_class)
        make_png_source(work / "png", args.png_classes, args.png_per_class)
        jpeg_bytes = sum(p.stat().st_size for p in (work / "jpeg").rglob("*.jpg"))
        print(f"JPEG source: {args.jpeg_classes * args.jpeg_per_class} images, mean {jpeg_bytes / (args.jpeg_classes * args.jpeg_per_class) / 1e3:.1f} KB; "
              f"PNG source: {args.png_classes * args.png_per_class} images 105x105 1-bit; {args.workers} workers on {os.cpu_count()} cores",
              flush=True)
        for kind in ("jpeg", "png"):
            for size in args.sizes:
                data = work / f"data-{kind}-{size}"
                encoded = pack(work / kind, data, kind)
                pack(work / kind, data, f"{kind}_raw", raw_size=size)
                limit = limit_rate(StoreReader(encoded), size, args.workers)
                assembly = in_process_rate(encoded, size, args.workers, args.episodes)
                process, address, _ = start_server(data, args.workers)
                try:
                    served1, _ = served_rate(address, kind, size, 1, args.episodes)
                    served4, _ = served_rate(address, kind, size, 4, args.episodes)
                    raw1, raw_mb1 = served_rate(address, f"{kind}_raw", size, 1, args.episodes)
                    raw4, _ = served_rate(address, f"{kind}_raw", size, 4, args.episodes)
                finally:
                    process.terminate()
                    process.wait()
                first = first_episode_seconds(data, kind, size, args.workers)
                rows.append((kind, size, limit, assembly, served1, served4, raw1, raw4, raw_mb1, first))
                print(f"{kind} {size}px: limit {limit:.0f}/s, in-process {assembly:.0f}/s, served 1 client {served1:.0f}/s, "
                      f"4 clients {served4:.0f}/s, raw 1 client {raw1:.0f}/s ({raw_mb1:.0f} MB/s), raw 4 clients {raw4:.0f}/s, "
                      f"first episode {first:.2f} s", flush=True)
                log = (data / "server.log").read_text()
                if "Traceback" in log:
                    print(log[log.index("Traceback"):][:3000], file=sys.stderr)
                shutil.rmtree(data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("images/s (ratio to the decode+resize limit on the same records and cores)")
    header = f"{'source':6} {'px':>4} {'limit':>7} {'in-process':>15} {'served x1':>15} {'served x4':>15} {'raw x1':>15} {'raw x4':>15} {'raw MB/s x1':>11} {'first ep s':>10}"
    print(header)
    for kind, size, limit, assembly, s1, s4, r1, r4, mb, first in rows:
        cell = lambda v: f"{v:7.0f} ({v / limit:4.2f})"  # noqa: E731
        print(f"{kind:6} {size:>4} {limit:7.0f} {cell(assembly):>15} {cell(s1):>15} {cell(s4):>15} {cell(r1):>15} "
              f"{cell(r4):>15} {mb:>11.0f} {first:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
