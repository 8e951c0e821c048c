"""Serving throughput against the hardware limit, measured in one run.

For a JPEG source of ~300 px images (DTD-like) and an Omniglot-like source of
105 px 1-bit PNGs, at 84 and 126 px, on the same records and cores, it prints, for
the exact default resize (``bilinear``: full IFAST decode + TF1 align-corners
bilinear, the MD reference's pixels) and for the fast path (``fast_bilinear``:
reduced-scale decode + half-pixel bilinear):
- limit: bare decode + resize of the stored records over all cores (bytes in RAM),
- in-process episode assembly (sampler + assembler, no gRPC),
- served images/s with 1 client, and its ratio to the MD reference pipeline's
  images/s on this machine kind (shared/reference/performance.md),
- the fast path's pixel error against the exact path on every record (mean, p99
  and max absolute difference in levels);
and, for the default only:
- served images/s with 4 concurrent clients (each client a process),
- the same for a store packed with ``--raw-size`` at that size,
- for the raw store at 126 px, the transport rate server -> one client (MB/s),
- the time from starting ``sampler-server serve`` to the first episode received.
Each rate is also given as a ratio to the limit. Episodes are MD variable-way,
variable-shot (the reference's defaults) from the test split. Served rates use the
client's default transport: same-host (shared memory) here, since client and server
share this machine.

Its last line compares the two transports on a store packed with ``--raw-size 126``
(no decoding: what is measured is moving pixels from server to client), one client,
each transport in turn ``--transport-rounds`` times on the same server (medians):
``transport: same-host X MB/s, grpc Y MB/s, ratio Z``. ``bench/transport_ceiling.py``
gives what gRPC alone moves over loopback.

Run: ``.venv/bin/python bench/serve_bench.py [--episodes N] [--sizes 84 126]``
(``--transport-only`` prints only the transport line).
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

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from sampler_server.assembly.assembler import Assembler  # noqa: E402
from sampler_server.assembly.decode import record_pixels  # noqa: E402
from sampler_server.core.md.config import EpisodeConfig  # noqa: E402
from sampler_server.core.md.sampler import EpisodeSampler  # noqa: E402
from sampler_server.core.spec import DatasetSpec  # noqa: E402
from sampler_server.fixtures.base import class_image, rng_for  # noqa: E402
from sampler_server.imaging import ResizeMethod  # noqa: E402
from sampler_server.pack import sources  # noqa: E402
from sampler_server.pack.pipeline import PackOptions, run_pack  # noqa: E402
from sampler_server.pack.plan import ConverterOptions  # noqa: E402
from sampler_server.store.reader import StoreReader  # noqa: E402

# The MD reference pipeline's images/s (variable-way variable-shot, TEST split, 2 cores):
# shared/reference/performance.md, DTD-like ~300 px JPEG and Omniglot-like 105 px PNG.
REFERENCE_RATE = {("jpeg", 84): 2250.0, ("jpeg", 126): 1361.0, ("png", 84): 5792.0, ("png", 126): 2702.0}
METHODS = (ResizeMethod.BILINEAR, ResizeMethod.FAST_BILINEAR)


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


def _decode_range(args: tuple[int, int, int, str]) -> int:
    start, stop, size, method = args
    out = np.empty((size, size, 3), np.uint8)
    for value in _VALUES[start:stop]:
        record_pixels(value, size, ResizeMethod(method), out)
    return stop - start


def limit_rate(reader: StoreReader, size: int, workers: int, method: ResizeMethod, repeat: int = 2) -> float:
    values = reader.read_values(list(range(reader.num_records)))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_init, initargs=(values,)) as pool:
        step = max(1, len(values) // (workers * 8))
        tasks = [(i, min(i + step, len(values)), size, method.value) for i in range(0, len(values), step)]
        pool.map(_decode_range, tasks[:workers])  # warm
        started = time.perf_counter()
        done = sum(sum(pool.map(_decode_range, tasks)) for _ in range(repeat))
        return done / (time.perf_counter() - started)


def fast_path_error(reader: StoreReader, size: int) -> tuple[float, float, float]:
    """(mean, p99, max) |fast_bilinear - bilinear| in levels over every record's pixels."""
    differences = []
    for value in reader.read_values(list(range(reader.num_records))):
        exact = record_pixels(value, size, ResizeMethod.BILINEAR).astype(np.int16)
        fast = record_pixels(value, size, ResizeMethod.FAST_BILINEAR).astype(np.int16)
        differences.append(np.abs(fast - exact).ravel())
    flat = np.concatenate(differences)
    return float(flat.mean()), float(np.percentile(flat, 99)), float(flat.max())


def in_process_rate(store: Path, size: int, workers: int, episodes: int, method: ResizeMethod) -> float:
    reader = StoreReader(store)
    spec = DatasetSpec.from_manifest(reader.manifest)
    sampler = EpisodeSampler(spec, "test", EpisodeConfig())
    assembler = Assembler({"s": reader}, workers)
    assembler.warm_up()
    try:
        def submit(index: int):
            episode = sampler.sample(0, index)
            ids = [r for ids in episode.support for r in ids] + [r for ids in episode.query for r in ids]
            return assembler.submit("s", ids, size, method)

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


def _client_run(address: str, store: str, size: int, resize: str, start: int, count: int, ready, go, queue,
                same_host: bool | None = None) -> None:
    spec = EpisodeSpec(sources=(store,), split="test", seed=0, image_size=size, resize=resize)
    with SamplerClient(address, prefetch=2, same_host=same_host) as client:
        if same_host and client.transport != "same-host":
            raise RuntimeError(f"the same-host transport was asked for but the server offered {client.transport}")
        stream = iter(client.episodes(spec, start=start, count=count + 1))
        next(stream)  # connected and warm
        ready.release()
        go.wait()
        arrivals = []
        for episode in stream:
            images = len(episode.support_images) + len(episode.query_images)
            arrivals.append((time.time(), images, episode.support_images.nbytes + episode.query_images.nbytes))
        queue.put(arrivals)


def served_rate(address: str, store: str, size: int, clients: int, episodes: int,
                method: ResizeMethod = ResizeMethod.BILINEAR, same_host: bool | None = None) -> tuple[float, float]:
    """Steady-state images/s and MB/s over all clients.

    Clients warm up, then start together. Episodes already decoded or buffered at
    the start would inflate a rate taken from the start, so the rate counts only
    arrivals inside a window from 30% of the way to the moment the first client is
    done, until that moment: every client is busy throughout the window.
    """
    ctx = multiprocessing.get_context("spawn")
    queue, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    per_client = max(4, episodes // clients)
    processes = [ctx.Process(target=_client_run,
                             args=(address, store, size, method.value, 1000 * k, per_client, ready, go, queue, same_host))
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


TRANSPORT_SIZE = 126


def transport_rates(work: Path, kind: str, workers: int, episodes: int, rounds: int) -> tuple[float, float]:
    """(same-host MB/s, gRPC MB/s) from one client on a raw store at 126 px: both
    transports in turn on one server, ``rounds`` times each, medians."""
    data = work / "data-transport"
    pack(work / kind, data, f"{kind}_raw", raw_size=TRANSPORT_SIZE)
    process, address, _ = start_server(data, workers)
    rates: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for same_host in (True, False):
                _, mb = served_rate(address, f"{kind}_raw", TRANSPORT_SIZE, 1, episodes, same_host=same_host)
                rates[same_host].append(mb)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(data, ignore_errors=True)
    return float(np.median(rates[True])), float(np.median(rates[False]))


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
    parser.add_argument("--kinds", nargs="+", default=["jpeg", "png"], choices=["jpeg", "png"])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--jpeg-classes", type=int, default=47)
    parser.add_argument("--jpeg-per-class", type=int, default=40)
    parser.add_argument("--png-classes", type=int, default=200)
    parser.add_argument("--png-per-class", type=int, default=20)
    parser.add_argument("--transport-episodes", type=int, default=200,
                        help="episodes per transport measurement (raw store, 126 px, one client)")
    parser.add_argument("--transport-rounds", type=int, default=3, help="measurements of each transport (median)")
    parser.add_argument("--transport-only", action="store_true", help="measure only the two transports")
    args = parser.parse_args()
    if args.transport_only:
        args.kinds = args.kinds[:1]
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    rows, errors = [], []
    try:
        if args.transport_only:
            make = make_jpeg_source if args.kinds[0] == "jpeg" else make_png_source
            make(work / args.kinds[0], *((args.jpeg_classes, args.jpeg_per_class) if args.kinds[0] == "jpeg"
                                         else (args.png_classes, args.png_per_class)))
            same_host, grpc_rate = transport_rates(work, args.kinds[0], args.workers, args.transport_episodes,
                                                   args.transport_rounds)
            print(f"transport: same-host {same_host:.0f} MB/s, grpc {grpc_rate:.0f} MB/s, "
                  f"ratio {same_host / grpc_rate:.2f}")
            return 0
        make_jpeg_source(work / "jpeg", args.jpeg_classes, args.jpeg_per_class)
        make_png_source(work / "png", args.png_classes, args.png_per_class)
        jpeg_bytes = sum(p.stat().st_size for p in (work / "jpeg").rglob("*.jpg"))
        print(f"JPEG source: {args.jpeg_classes * args.jpeg_per_class} images, mean {jpeg_bytes / (args.jpeg_classes * args.jpeg_per_class) / 1e3:.1f} KB; "
              f"PNG source: {args.png_classes * args.png_per_class} images 105x105 1-bit; {args.workers} workers on {os.cpu_count()} cores",
              flush=True)
        for kind in args.kinds:
            for size in args.sizes:
                data = work / f"data-{kind}-{size}"
                encoded = pack(work / kind, data, kind)
                pack(work / kind, data, f"{kind}_raw", raw_size=size)
                reader = StoreReader(encoded)
                errors.append((kind, size, *fast_path_error(reader, size)))
                process, address, _ = start_server(data, args.workers)
                try:
                    for method in METHODS:
                        limit = limit_rate(reader, size, args.workers, method)
                        assembly = in_process_rate(encoded, size, args.workers, args.episodes, method)
                        served1, _ = served_rate(address, kind, size, 1, args.episodes, method)
                        rows.append((kind, size, method.value, limit, assembly, served1))
                        print(f"{kind} {size}px {method.value}: limit {limit:.0f}/s, in-process {assembly:.0f}/s, "
                              f"served 1 client {served1:.0f}/s = {served1 / REFERENCE_RATE[kind, size]:.2f}x the reference",
                              flush=True)
                    served4, _ = served_rate(address, kind, size, 4, args.episodes)
                    raw1, raw_mb1 = served_rate(address, f"{kind}_raw", size, 1, args.episodes)
                    raw4, _ = served_rate(address, f"{kind}_raw", size, 4, args.episodes)
                finally:
                    process.terminate()
                    process.wait()
                first = first_episode_seconds(data, kind, size, args.workers)
                print(f"{kind} {size}px bilinear: served 4 clients {served4:.0f}/s, raw 1 client {raw1:.0f}/s ({raw_mb1:.0f} MB/s), "
                      f"raw 4 clients {raw4:.0f}/s, first episode {first:.2f} s; "
                      f"fast path error vs exact: mean {errors[-1][2]:.2f}, p99 {errors[-1][3]:.0f}, max {errors[-1][4]:.0f} levels",
                      flush=True)
                log = (data / "server.log").read_text()
                if "Traceback" in log:
                    print(log[log.index("Traceback"):][:3000], file=sys.stderr)
                shutil.rmtree(data)
        transport = transport_rates(work, args.kinds[0], args.workers, args.transport_episodes, args.transport_rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("images/s by resize path (limit = bare decode+resize on all cores; ratio to the MD reference's images/s)")
    print(f"{'source':6} {'px':>4} {'path':13} {'limit':>7} {'in-process':>10} {'served x1':>9} {'reference':>9} {'x ref':>6}")
    for kind, size, method, limit, assembly, served1 in rows:
        reference = REFERENCE_RATE[kind, size]
        print(f"{kind:6} {size:>4} {method:13} {limit:7.0f} {assembly:10.0f} {served1:9.0f} {reference:9.0f} {served1 / reference:6.2f}")
    print()
    print("fast_bilinear pixel error against the exact default (levels, all records, all channels)")
    print(f"{'source':6} {'px':>4} {'mean':>6} {'p99':>5} {'max':>5}")
    for kind, size, mean, p99, worst in errors:
        print(f"{kind:6} {size:>4} {mean:6.2f} {p99:5.0f} {worst:5.0f}")
    print()
    print(f"transport of a raw {TRANSPORT_SIZE} px {args.kinds[0]} store, one client "
          f"(median of {args.transport_rounds} runs of {args.transport_episodes} episodes each):")
    print(f"transport: same-host {transport[0]:.0f} MB/s, grpc {transport[1]:.0f} MB/s, "
          f"ratio {transport[0] / transport[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
