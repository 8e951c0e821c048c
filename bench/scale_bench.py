"""What each step costs as a store grows: ILSVRC-2012 and ImageNet-21K sized stores.

Builds synthetic inputs in the real layouts over the real class structure, packs them with
``sampler-server pack`` and measures every step a deployment pays, at each size:

- ILSVRC-2012 (``ILSVRC2012_img_train/<wnid>/<wnid>_<n>.JPEG``, the 1,000 real IN-1K wnids,
  so the store carries the WordNet class split of both presets), per-class counts drawn like
  the release's (732 to 1,300 before scaling to the size), at ``--sizes`` records (default
  10 k, 100 k and 1,281,167);
- ImageNet-21K (``<wnid>.tar`` per synset, packed in shards with ``--shard I/N``), the
  21,841 real WordNet wnids of ``fixtures.cog_counts.synthetic_in21k_counts`` (the IN-1K
  concepts and others; no Fall 2011 list ships with us) with its per-concept counts scaled
  to the size, at ``--in21k-sizes`` records (default 100 k and 1 M; ``--full`` adds
  14.2 M, the release's size: a bigger machine's job, see bench/README.md). CoG's
  ``--min-images`` is scaled with the size (782 at 14.2 M) so the levels have the
  release's shape at every size.

Images are small JPEGs (32 x 32, about 1 KB: disk stays reasonable; a few variants per
class, so pack's decode check runs on real JPEGs). What is measured, one table row per size:

- pack: records/s, peak RSS of the pack process tree, bytes of ``data.mdb`` per record;
- serve (ILSVRC): time to the "listening" line, then to the first MD episode of each preset
  (md-v1 test, md-v2 train), the RSS of the server and of its decode workers after
  ``--episodes`` episodes (anonymous memory apart from mapped store pages);
- load: episodes/s and p50/p99 latency of unary ``GetEpisode`` calls from ``--clients``
  clients, page cache warm; then the same on a server restarted after the store's pages
  were dropped from the cache (``posix_fadvise(DONTNEED)`` on the data file, what a store
  on NFS larger than RAM sees), with the reads and bytes the block device did per episode;
- verify: MB/s of ``sampler-server verify`` (SHA-256 of the data file and every record's
  checksum);
- batches: plain ``--preset md-v2`` batches of 256 over the epoch boundary, batches/s;
- CoG (IN-21K): ``cog levels`` and the first ``cog split`` of each level (time, peak RSS),
  and on a server: time to listen, ``ListCogLevels``, the first batch of L1 train.

Last lines: for each step, the exponent k of its growth (``cost ~ n^k``) from the smallest
to the largest size, and the steps whose k is above 0.2 among those that should not grow
with the store (start-up, per-episode and per-request costs, server memory).

Stores and the pack figures are kept in ``--keep DIR`` and reused by the next run (inputs
are deleted after packing unless ``--keep-input``). Run from the repository root:
``.venv/bin/python bench/scale_bench.py --keep /data/scale`` (about an hour here, most of
it building and packing the 1.28 M and 1 M stores).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from sampler_server.core.cog import LEVEL_NAMES, MIN_IMAGES  # noqa: E402
from sampler_server.core.cog.in1k import in1k_wnids  # noqa: E402
from sampler_server.core.hashing import FieldHasher  # noqa: E402
from sampler_server.fixtures.base import class_image, rng_for  # noqa: E402

from bench.tree_rss import TreeRss  # noqa: E402

ILSVRC_SIZES = (10_000, 100_000, 1_281_167)
IN21K_SIZES = (100_000, 1_000_000)
IN21K_FULL = 14_197_122  # images of the Fall 2011 release
IN21K_RECORDS_PER_SHARD = 250_000
IMAGE_SIDE = 32
LARGE_SIDES = (500, 375)  # width, height of the --large store's images
VARIANTS = 4  # distinct JPEGs per class
EPISODE_SIZE = 84
FIXED_SHAPE = (20, 1, 1)  # ways, shots, queries: two images per class, which every size has
GROWTH_LIMIT = 0.2


# ---------------------------------------------------------------------------------------
# Inputs: counts, images, layouts


def scaled_counts(raw: Mapping[str, int], total: int, minimum: int = 1) -> dict[str, int]:
    """``raw``'s proportions at ``total`` records, every key at least ``minimum`` (largest remainders)."""
    if total < minimum * len(raw):
        raise SystemExit(f"size {total}: at least {minimum * len(raw)} records ({minimum} per class) are needed")
    spare = total - minimum * len(raw)
    weight = sum(raw.values())
    exact = {key: spare * value / weight for key, value in raw.items()}
    counts = {key: minimum + int(value) for key, value in exact.items()}
    left = total - sum(counts.values())
    for key in sorted(exact, key=lambda k: (int(exact[k]) - exact[k], k))[:left]:
        counts[key] += 1
    return counts


def ilsvrc_counts(total: int) -> dict[str, int]:
    """The 1,000 IN-1K wnids, counts drawn like the release's (732..1,300), scaled; at
    least 2 per class (an MD episode takes a support and a query image of each class)."""
    hasher = FieldHasher("bench/scale-ilsvrc")
    draws = {wnid: int.from_bytes(hasher.text(wnid).digest()[:4], "big") for wnid in in1k_wnids()}
    # the release: 1,300 images in most classes, 732..1,299 in about one in fifteen (mean 1,281)
    raw = {wnid: 1300 if draw % 15 else 732 + (draw // 15) % 568 for wnid, draw in draws.items()}
    return scaled_counts(raw, total, minimum=2)


def in21k_counts(total: int) -> dict[str, int]:
    """The 21,841 concepts of the synthetic IN-21K stand-in, its counts scaled to ``total``."""
    from sampler_server.core.hierarchy.wordnet import load_wordnet_graph
    from sampler_server.fixtures.cog_counts import synthetic_in21k_counts

    raw = synthetic_in21k_counts(load_wordnet_graph())
    return scaled_counts({wnid: count + 1 for wnid, count in raw.items()}, total)


def scaled_min_images(total: int) -> int:
    """CoG's eligibility threshold at this size: 782 images at the release's 14.2 M."""
    return max(2, round(MIN_IMAGES * total / IN21K_FULL))


def class_jpegs(index: int, label: str, large: bool = False) -> list[bytes]:
    """``VARIANTS`` JPEGs of one class: 32 x 32 (about 1.4 KB), or with ``large`` 500 x 375 with
    sensor-like noise (about 110 KB, the release's average), which LMDB keeps in overflow pages."""
    import numpy as np
    from PIL import Image

    rng = rng_for("bench-scale", 0, label)
    out = []
    for _ in range(VARIANTS):
        image = class_image(index, rng, LARGE_SIDES if large else (IMAGE_SIDE, IMAGE_SIDE))
        if large:
            noisy = np.asarray(image).astype(np.int16) + rng.randint(-40, 40, size=(*LARGE_SIDES[::-1], 3))
            image = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def _write_ilsvrc_class(args: tuple[Path, int, str, int, bool]) -> None:
    root, index, wnid, count, large = args
    directory = root / wnid
    directory.mkdir(parents=True, exist_ok=True)
    jpegs = class_jpegs(index, wnid, large)
    for number in range(count):
        (directory / f"{wnid}_{number + 1}.JPEG").write_bytes(jpegs[number % VARIANTS])


def _write_in21k_tar(args: tuple[Path, int, str, int, bool]) -> None:
    root, index, wnid, count, large = args
    jpegs = class_jpegs(index % 1000, wnid, large)
    with tarfile.open(root / f"{wnid}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for number in range(count):
            data = jpegs[number % VARIANTS]
            member = tarfile.TarInfo(f"{wnid}_{number + 1}.JPEG")
            member.size, member.mtime, member.mode = len(data), 0, 0o644
            tar.addfile(member, io.BytesIO(data))


def write_input(kind: str, root: Path, counts: Mapping[str, int], workers: int, large: bool = False) -> None:
    """The input layout of ``kind`` under ``root`` (written in parallel, one task per class)."""
    root.mkdir(parents=True, exist_ok=True)
    write = _write_ilsvrc_class if kind == "ilsvrc_2012" else _write_in21k_tar
    tasks = [(root, index, wnid, count, large) for index, (wnid, count) in enumerate(sorted(counts.items()))]
    with futures.ProcessPoolExecutor(max(1, workers)) as pool:
        for _ in pool.map(write, tasks, chunksize=16):
            pass


# ---------------------------------------------------------------------------------------
# Processes: peak memory, disk reads


def timed_command(command: Sequence[str]) -> tuple[float, int, str]:
    """(wall seconds, peak tree RSS bytes, stdout) of a command that must succeed."""
    started = time.perf_counter()
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    sampler = TreeRss(process.pid)
    out, err = process.communicate()
    wall = time.perf_counter() - started
    peak = sampler.stop()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:5])} failed ({process.returncode}): {err.strip()[-2000:]}")
    return wall, peak, out


def memory_kinds(pid: int) -> dict[str, int]:
    """RssAnon / RssFile / RssShmem of one process, bytes (Linux)."""
    out = {"anon": 0, "file": 0, "shmem": 0}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                for key, name in (("RssAnon:", "anon"), ("RssFile:", "file"), ("RssShmem:", "shmem")):
                    if line.startswith(key):
                        out[name] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def block_device_reads(path: Path) -> tuple[int, int] | None:
    """(reads completed, bytes read) so far by the block device holding ``path``; None where
    /proc/diskstats does not list it."""
    device = os.stat(path).st_dev
    major, minor = os.major(device), os.minor(device)
    try:
        with open("/proc/diskstats") as stats:
            for line in stats:
                fields = line.split()
                if int(fields[0]) == major and int(fields[1]) == minor:
                    return int(fields[3]), int(fields[5]) * 512
    except OSError:
        return None
    return None


def drop_from_page_cache(files: Sequence[Path]) -> None:
    """What a cold start sees: the files' pages no longer cached (unmapped pages only)."""
    for path in files:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(descriptor)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def data_files(data: Path) -> list[Path]:
    return sorted(data.glob("*/data.mdb"))


# ---------------------------------------------------------------------------------------
# Build: input + pack, figures kept with the store


@dataclass
class Built:
    kind: str
    size: int
    data: Path
    pack: dict[str, Any] = field(default_factory=dict)


def build_input(kind: str, size: int, home: Path, workers: int, log: Callable[[str], None],
                large: bool = False) -> tuple[Path, float]:
    """The generated input of ``kind`` at ``size`` records (written once: ``input.json`` marks it
    complete), and the seconds its writing took."""
    layout = home / "input" / ("ILSVRC2012_img_train" if kind == "ilsvrc_2012" else "fall11")
    stamp = home / "input.json"
    if stamp.is_file():
        return layout, json.loads(stamp.read_text())["seconds"]
    shutil.rmtree(home / "input", ignore_errors=True)
    counts = ilsvrc_counts(size) if kind == "ilsvrc_2012" else in21k_counts(size)
    began = time.perf_counter()
    write_input(kind, layout, counts, workers, large)
    written = time.perf_counter() - began
    stamp.write_text(json.dumps({"seconds": round(written, 1), "classes": len(counts)}))
    log(f"{kind} {size}: input written in {written:.0f} s")
    return layout, written


def store_home(keep: Path, kind: str, size: int, large: bool = False) -> Path:
    return keep / f"{kind}-{'large-' if large else ''}{size}"


def build(kind: str, size: int, keep: Path, workers: int, keep_input: bool, log: Callable[[str], None],
          large: bool = False) -> Built:
    """The packed store of ``kind`` at ``size`` records in ``keep`` (built once; its pack figures kept)."""
    home = store_home(keep, kind, size, large)
    data = home / "data"
    stamp = home / "pack.json"
    if stamp.is_file():
        return Built(kind, size, data, json.loads(stamp.read_text()))
    layout, written = build_input(kind, size, home, workers, log, large)
    shutil.rmtree(data, ignore_errors=True)
    shards = max(1, math.ceil(size / IN21K_RECORDS_PER_SHARD)) if kind == "imagenet21k" else 1
    wall = peak = 0.0
    for shard in range(shards):
        command = [sys.executable, "-m", "sampler_server", "pack", kind, "--input", str(layout), "--output", str(data),
                   "--workers", str(workers), "--quiet", "--json"]
        if kind == "imagenet21k":
            command += ["--shard", f"{shard}/{shards}"]
        seconds, rss, _ = timed_command(command)
        wall += seconds
        peak = max(peak, rss)
    disk = sum(path.stat().st_size for path in data_files(data))
    figures = {"records": size, "shards": shards, "input_seconds": round(written, 1),
               "pack_seconds": round(wall, 1), "records_per_s": round(size / wall, 1), "peak_rss_mb": round(peak / 2**20, 1),
               "bytes_per_record": round(disk / size, 1), "data_bytes": disk}
    if not keep_input:
        shutil.rmtree(home / "input", ignore_errors=True)
        (home / "input.json").unlink()
    stamp.write_text(json.dumps(figures, indent=1))
    log(f"{kind} {size}: packed in {wall:.0f} s ({figures['records_per_s']:.0f} records/s, peak RSS "
        f"{figures['peak_rss_mb']:.0f} MB)")
    return Built(kind, size, data, figures)


# ---------------------------------------------------------------------------------------
# Serving


class Server:
    """A fresh ``sampler-server serve`` over ``data``; the time to its listening line."""

    def __init__(self, data: Path, log_path: Path, workers: int = 0) -> None:
        command = [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0"]
        if workers:
            command += ["--workers", str(workers)]
        started = time.perf_counter()
        with open(log_path, "a") as errors:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                                            env={**os.environ, "PYTHONPATH": str(REPO)})
        line = self.process.stdout.readline()
        self.listen = time.perf_counter() - started
        if "listening on" not in line:
            self.stop()
            raise SystemExit(f"serve did not start (see {log_path}): {line!r}")
        self.address = line.split()[2]

    def memory(self) -> dict[str, float]:
        """MB: the server process's anonymous and file-mapped RSS; its workers' summed."""
        own = memory_kinds(self.process.pid)
        workers = [memory_kinds(child.pid) for child in psutil.Process(self.process.pid).children(recursive=True)]
        return {"server_anon_mb": own["anon"] / 2**20, "server_file_mb": own["file"] / 2**20,
                "workers": len(workers), "workers_anon_mb": sum(w["anon"] for w in workers) / 2**20,
                "workers_file_mb": max([w["file"] for w in workers], default=0) / 2**20}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def md_spec(preset: str, seed: int = 0, fixed: bool = False) -> EpisodeSpec:
    """ILSVRC episodes of ``preset`` (md-v1: test classes, md-v2: train): Meta-Dataset's variable
    ways and shots, or ``FIXED_SHAPE`` (the same work at every size: per-request costs compare)."""
    split = "test" if preset == "md-v1" else "train"
    ways, shots, query = FIXED_SHAPE if fixed else (None, None, None)
    return EpisodeSpec(sources=("ilsvrc_2012",), preset=preset, split=split, seed=seed, image_size=EPISODE_SIZE,
                       ways=ways, shots=shots, query=query)


def first_episodes(server: Server) -> dict[str, float]:
    """Seconds from the listening line to the first episode of each preset (md-v1 test, then
    md-v2 train, each on its own fresh connection)."""
    out = {}
    for preset in ("md-v1", "md-v2"):
        began = time.perf_counter()
        with SamplerClient(server.address) as client:
            client.episode(md_spec(preset), 0)
            out[f"first_{preset}_s"] = time.perf_counter() - began  # closing the client is not part of it
    return out


def episode_load(address: str, episodes: int, clients: int, first_index: int, fixed: bool = False
                 ) -> dict[str, float]:
    """Unary md-v1 test episodes first_index.. from ``clients`` clients, each its own share:
    episodes/s, images/s, p50 and p99 latency (ms), images per episode."""
    latencies: list[float] = []
    images: list[int] = []
    lock = threading.Lock()

    def client_share(offset: int) -> None:
        spec = md_spec("md-v1", seed=1, fixed=fixed)
        mine, sizes = [], []
        with SamplerClient(address) as client:
            for index in range(first_index + offset, first_index + episodes, clients):
                began = time.perf_counter()
                episode = client.episode(spec, index)
                mine.append(time.perf_counter() - began)
                sizes.append(len(episode.support_labels) + len(episode.query_labels))
        with lock:
            latencies.extend(mine)
            images.extend(sizes)

    began = time.perf_counter()
    with futures.ThreadPoolExecutor(clients) as pool:
        for done in [pool.submit(client_share, offset) for offset in range(clients)]:
            done.result()
    wall = time.perf_counter() - began
    ordered = sorted(latencies)
    return {"episodes_per_s": len(ordered) / wall, "images_per_s": sum(images) / wall, "p50_ms": 1e3 * statistics.median(ordered),
            "p99_ms": 1e3 * ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)],
            "images_per_episode": statistics.fmean(images)}


def batches_over_epoch_boundary(address: str, records: int, count: int = 20, batch: int = 256) -> float:
    """Plain md-v2 train batches around the end of the first epoch, batches/s."""
    per_epoch = records // batch
    start = max(0, per_epoch - count // 2)
    with SamplerClient(address) as client:
        began = time.perf_counter()
        received = sum(1 for _ in client.batches("ilsvrc_2012", "train", batch, seed=0, start=start, count=count,
                                                 image_size=EPISODE_SIZE, preset="md-v2"))
        return received / (time.perf_counter() - began)


def measure_flat_costs(built: Built, work: Path, episodes: int, clients: int, starts: int) -> dict[str, Any]:
    """What must not grow with the store: start-up (the median of ``starts`` fresh servers, page
    cache warm), fixed-shape episode latency and the server's memory after ``episodes`` of them."""
    row: dict[str, Any] = {"size": built.size}
    server_log = work / "serve.log"
    startups = []
    for _ in range(starts):
        with Server(built.data, server_log) as server:
            startups.append({"listen_s": server.listen, **first_episodes(server)})
    for key in startups[0]:
        row[key] = statistics.median(s[key] for s in startups)
    row["startup_s"] = row["listen_s"] + row["first_md-v1_s"]
    with Server(built.data, server_log) as server:
        first_episodes(server)
        row.update({f"fixed_{k}": v for k, v in episode_load(server.address, episodes, clients, 1, True).items()})
        row.update(server.memory())
    return row


def measure_ilsvrc(built: Built, work: Path, episodes: int, clients: int, cold_episodes: int,
                   starts: int, log: Callable[[str], None]) -> dict[str, Any]:
    row: dict[str, Any] = {**{f"pack_{k}": v for k, v in built.pack.items()},
                           **measure_flat_costs(built, work, episodes, clients, starts)}
    server_log = work / "serve.log"
    with Server(built.data, server_log) as server:
        first_episodes(server)
        row.update({f"warm_{k}": v for k, v in episode_load(server.address, episodes, clients, 1).items()})
        records = sum(c["count"] for c in json.loads((built.data / "ilsvrc_2012" / "manifest.json").read_text())["classes"])
        row["batches_per_s"] = batches_over_epoch_boundary(server.address, records)
    if cold_episodes:
        row.update({f"cold_{k}": v for k, v in cold_load(built, work, cold_episodes, clients, 1 + episodes,
                                                         False).items()})
    seconds, _, _ = timed_command([sys.executable, "-m", "sampler_server", "verify", str(built.data / "ilsvrc_2012"),
                                   "--json", "--no-progress"])
    row["verify_mb_per_s"] = built.pack["data_bytes"] / seconds / 1e6
    log(f"ilsvrc_2012 {built.size}: measured")
    return row


def cold_load(built: Built, work: Path, episodes: int, clients: int, first_index: int, fixed: bool
              ) -> dict[str, float]:
    """``episode_load`` on a server started after the store's pages were dropped from the page
    cache, with what the block device read meanwhile (per episode, per image, MB/s)."""
    drop_from_page_cache(data_files(built.data))
    before, began = block_device_reads(built.data), time.perf_counter()
    with Server(built.data, work / "serve.log") as server:
        row = episode_load(server.address, episodes, clients, first_index, fixed)
    after, wall = block_device_reads(built.data), time.perf_counter() - began
    if before is not None and after is not None:
        reads, read_bytes = after[0] - before[0], after[1] - before[1]
        row.update({"reads_per_episode": reads / episodes, "kb_per_episode": read_bytes / episodes / 1e3,
                    "reads_per_image": reads / episodes / row["images_per_episode"],
                    "kb_per_read": read_bytes / max(1, reads) / 1e3, "disk_mb_per_s": read_bytes / wall / 1e6,
                    "disk_reads_per_s": reads / wall})
    return row


def process_read_bytes(pid: int | str = "self") -> int:
    """Bytes this process caused to be fetched from storage (page faults and read-ahead included)."""
    with open(f"/proc/{pid}/io") as io_stats:
        for line in io_stats:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def episode_record_ids(address: str, episodes: int, first_index: int) -> list[list[int]]:
    """The record ids of fixed-shape md-v1 episodes first_index.. (as served)."""
    spec = md_spec("md-v1", seed=1, fixed=True)
    with SamplerClient(address) as client:
        return [list(e.support_record_ids) + list(e.query_record_ids)
                for e in (client.episode(spec, index) for index in range(first_index, first_index + episodes))]


def read_only(built: Built, ids: Sequence[Sequence[int]], cold: bool) -> dict[str, float]:
    """Only the reading of each episode's records, in this process, one episode after another
    (``StoreReader.read_values``, as a decode worker reads its chunk): episodes/s, and cold
    (pages dropped first) what it fetched from storage."""
    from sampler_server.store.reader import StoreReader

    reader = StoreReader(built.data / "ilsvrc_2012")
    if cold:
        drop_from_page_cache(data_files(built.data))
    fetched, began = process_read_bytes(), time.perf_counter()
    for episode in ids:
        reader.read_values(episode)
    wall = time.perf_counter() - began
    return {"episodes_per_s": len(ids) / wall, "mb_per_s": (process_read_bytes() - fetched) / wall / 1e6,
            "kb_per_episode": (process_read_bytes() - fetched) / len(ids) / 1e3}


def measure_large(built: Built, work: Path, episodes: int, clients: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Release-sized records, fixed-shape episodes: warm, then cold (pages dropped)."""
    row: dict[str, Any] = {"size": built.size, "bytes_per_record": built.pack["bytes_per_record"]}
    with Server(built.data, work / "serve.log") as server:
        row.update({f"warm_{k}": v for k, v in episode_load(server.address, episodes, clients, 1, True).items()})
        ids = episode_record_ids(server.address, episodes, 1 + 2 * episodes)
    row.update({f"cold_{k}": v for k, v in cold_load(built, work, episodes, clients, 1 + episodes, True).items()})
    row["cold_over_warm"] = row["cold_episodes_per_s"] / row["warm_episodes_per_s"]
    row.update({f"read_cold_{k}": v for k, v in read_only(built, ids, cold=True).items()})
    row.update({f"read_warm_{k}": v for k, v in read_only(built, ids, cold=False).items()})
    log(f"ilsvrc_2012 large {built.size}: measured")
    return row


def measure_in21k(built: Built, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    row: dict[str, Any] = {"size": built.size, **{f"pack_{k}": v for k, v in built.pack.items()}}
    min_images = scaled_min_images(built.size)
    row["min_images"] = min_images
    cli = [sys.executable, "-m", "sampler_server", "cog"]
    seconds, rss, out = timed_command(cli + ["levels", "--data", str(built.data), "--min-images", str(min_images),
                                             "--json"])
    row["levels_s"], row["levels_rss_mb"] = seconds, rss / 2**20
    row["eligible"] = len(json.loads(out)["eligible"])
    splits = []
    for level in LEVEL_NAMES:
        seconds, rss, _ = timed_command(cli + ["split", "--data", str(built.data), "--level", level, "--split",
                                               "train", "--min-images", str(min_images), "--json"])
        splits.append((seconds, rss))
    row["split_s"] = max(s for s, _ in splits)
    row["split_rss_mb"] = max(r for _, r in splits) / 2**20
    with Server(built.data, work / "serve.log") as server:
        row["cog_listen_s"] = server.listen
        with SamplerClient(server.address) as client:
            began = time.perf_counter()
            client.cog_levels(min_images=min_images)
            row["list_levels_s"] = time.perf_counter() - began
            began = time.perf_counter()
            # test splits: 50 images a concept at every size (train splits are empty at the smallest)
            next(iter(client.stream_cog_batches("L1", "test", batch_size=256, count=1, min_images=min_images)))
            row["first_split_batch_s"] = time.perf_counter() - began
            began = time.perf_counter()
            next(iter(client.stream_cog_batches("L5", "test", batch_size=256, count=1, min_images=min_images)))
            row["next_split_batch_s"] = time.perf_counter() - began
        memory = server.memory()
        row["cog_server_anon_mb"] = memory["server_anon_mb"]
        row["cog_workers_anon_mb"] = memory["workers_anon_mb"]
    log(f"imagenet21k {built.size}: measured")
    return row


# ---------------------------------------------------------------------------------------
# Report

# (column, heading, format, growth class): growth classes that must stay flat are flagged
ILSVRC_TABLES: dict[str, list[tuple[str, str, str, str]]] = {
    "pack": [("pack_records_per_s", "records/s", ".0f", "rate"), ("pack_peak_rss_mb", "peak RSS MB", ".0f", "memory"),
             ("pack_bytes_per_record", "bytes/record", ".0f", "size"), ("pack_pack_seconds", "pack s", ".0f", "total")],
    "serve": [("listen_s", "listen s", ".3f", "startup"), ("first_md-v1_s", "1st md-v1 s", ".3f", "startup"),
              ("first_md-v2_s", "1st md-v2 s", ".3f", "startup"), ("server_anon_mb", "server anon MB", ".0f", "memory"),
              ("server_file_mb", "server file MB", ".0f", "mapped"), ("workers", "workers", "d", "-"),
              ("workers_anon_mb", "workers anon MB", ".0f", "memory")],
    "warm, variable ways and shots": [
        ("warm_episodes_per_s", "episodes/s", ".1f", "rate"), ("warm_images_per_s", "images/s", ".0f", "rate"),
        ("warm_p50_ms", "p50 ms", ".1f", "-"), ("warm_p99_ms", "p99 ms", ".1f", "-"),
        ("warm_images_per_episode", "images/ep", ".0f", "-")],
    f"warm, {FIXED_SHAPE[0]}-way {FIXED_SHAPE[1]}-shot {FIXED_SHAPE[2]}-query": [
        ("fixed_episodes_per_s", "episodes/s", ".1f", "rate"), ("fixed_p50_ms", "p50 ms", ".1f", "request"),
        ("fixed_p99_ms", "p99 ms", ".1f", "request")],
    "cold (pages dropped), variable ways and shots": [
        ("cold_episodes_per_s", "episodes/s", ".1f", "rate"), ("cold_images_per_s", "images/s", ".0f", "rate"),
        ("cold_p50_ms", "p50 ms", ".1f", "-"), ("cold_p99_ms", "p99 ms", ".1f", "-"),
        ("cold_reads_per_episode", "reads/ep", ".0f", "-"), ("cold_reads_per_image", "reads/image", ".2f", "-"),
        ("cold_kb_per_episode", "KB/ep", ".0f", "-"), ("cold_disk_mb_per_s", "disk MB/s", ".1f", "-")],
    "verify, batches": [("verify_mb_per_s", "verify MB/s", ".1f", "rate"),
                        ("batches_per_s", "md-v2 batches/s", ".2f", "rate")],
}
IN21K_TABLES: dict[str, list[tuple[str, str, str, str]]] = {
    "pack": [("pack_records_per_s", "records/s", ".0f", "rate"), ("pack_peak_rss_mb", "peak RSS MB", ".0f", "memory"),
             ("pack_bytes_per_record", "bytes/record", ".0f", "size"), ("pack_shards", "shards", "d", "-"),
             ("pack_pack_seconds", "pack s", ".0f", "total")],
    "cog": [("min_images", "min images", "d", "-"), ("eligible", "eligible", "d", "-"),
            ("levels_s", "cog levels s", ".2f", "startup"), ("levels_rss_mb", "levels MB", ".0f", "memory"),
            ("split_s", "cog split s", ".2f", "startup"), ("split_rss_mb", "split MB", ".0f", "memory")],
    "cog serve": [("cog_listen_s", "listen s", ".3f", "startup"), ("list_levels_s", "ListCogLevels s", ".3f", "startup"),
                  ("first_split_batch_s", "1st L1 test batch s", ".3f", "startup"),
                  ("next_split_batch_s", "1st L5 test batch s", ".3f", "request"),
                  ("cog_server_anon_mb", "server anon MB", ".0f", "memory"),
                  ("cog_workers_anon_mb", "workers anon MB", ".0f", "memory")],
}
LARGE_TABLES: dict[str, list[tuple[str, str, str, str]]] = {
    f"release-sized records, {FIXED_SHAPE[0]}-way {FIXED_SHAPE[1]}-shot {FIXED_SHAPE[2]}-query": [
        ("bytes_per_record", "bytes/record", ".0f", "-"), ("warm_episodes_per_s", "warm episodes/s", ".2f", "-"),
        ("cold_episodes_per_s", "cold episodes/s", ".2f", "-"), ("cold_over_warm", "cold/warm", ".2f", "-"),
        ("cold_p50_ms", "cold p50 ms", ".0f", "-"), ("cold_p99_ms", "cold p99 ms", ".0f", "-"),
        ("cold_reads_per_image", "reads/image", ".2f", "-"), ("cold_kb_per_read", "KB/read", ".0f", "-"),
        ("cold_disk_reads_per_s", "reads/s", ".0f", "-"), ("cold_disk_mb_per_s", "disk MB/s", ".1f", "-")],
    "reading only (one process, one episode after another)": [
        ("read_warm_episodes_per_s", "warm episodes/s", ".1f", "-"),
        ("read_cold_episodes_per_s", "cold episodes/s", ".1f", "-"), ("read_cold_mb_per_s", "cold MB/s", ".1f", "-"),
        ("read_cold_kb_per_episode", "cold KB/ep", ".0f", "-")],
}
FLAT = ("startup", "request", "memory")


def table(title: str, columns: list[tuple[str, str, str, str]], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    headings = ["records"] + [heading for _, heading, _, _ in columns]
    body = []
    for row in rows:
        cells = [f"{row['size']:,}"]
        for key, _, fmt, _ in columns:
            value = row.get(key)
            cells.append("-" if value is None else format(value, fmt))
        body.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headings)]
    lines = [f"{title}:", "  " + "  ".join(h.rjust(w) for h, w in zip(headings, widths))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths)) for cells in body]
    return lines


def growth_exponent(small: tuple[int, float], large: tuple[int, float]) -> float | None:
    """k in cost ~ n^k between two sizes; None where a cost is not positive."""
    (n0, c0), (n1, c1) = small, large
    if c0 <= 0 or c1 <= 0 or n1 == n0:
        return None
    return math.log(c1 / c0) / math.log(n1 / n0)


def growth(tables: Mapping[str, list[tuple[str, str, str, str]]], rows: Sequence[Mapping[str, Any]]
           ) -> list[tuple[str, str, float]]:
    """(column, growth class, k) of each numeric column measured at the smallest and largest size."""
    if len(rows) < 2:
        return []
    small, large = rows[0], rows[-1]
    out = []
    for columns in tables.values():
        for key, _, _, kind in columns:
            if kind == "-" or small.get(key) is None or large.get(key) is None:
                continue
            k = growth_exponent((small["size"], float(small[key])), (large["size"], float(large[key])))
            if k is not None:
                out.append((key, kind, k))
    return out


def report(name: str, tables: Mapping[str, list[tuple[str, str, str, str]]], rows: Sequence[Mapping[str, Any]]
           ) -> list[str]:
    lines = [f"== {name}"]
    for title, columns in tables.items():
        lines += table(title, columns, rows)
    exponents = growth(tables, rows)
    if exponents:
        lines.append(f"growth {rows[0]['size']:,} -> {rows[-1]['size']:,} records (cost ~ n^k): "
                     + ", ".join(f"{key} {k:+.2f}" for key, _, k in exponents))
        grown = [f"{key} ({kind}) {k:+.2f}" for key, kind, k in exponents if kind in FLAT and k > GROWTH_LIMIT]
        lines.append(f"{name}: grows with the store (k > {GROWTH_LIMIT}): " + (", ".join(grown) if grown else "none"))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(ILSVRC_SIZES), help="ILSVRC-2012 store sizes")
    parser.add_argument("--in21k-sizes", type=int, nargs="*", default=list(IN21K_SIZES), help="IN-21K store sizes")
    parser.add_argument("--full", action="store_true", help=f"add the release-sized IN-21K store ({IN21K_FULL:,})")
    parser.add_argument("--keep", type=Path, help="keep the stores here and reuse them (default: a temporary directory)")
    parser.add_argument("--keep-input", action="store_true", help="keep the generated inputs too")
    parser.add_argument("--inputs-only", action="store_true",
                        help="only write the inputs into --keep (packing and measuring later, on a quiet machine)")
    parser.add_argument("--episodes", type=int, default=1000, help="episodes of the warm load (default 1000)")
    parser.add_argument("--cold-episodes", type=int, default=200, help="episodes of the cold load (0: none)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--large", type=int, default=20_000,
                        help="records of a store of release-sized JPEGs (~110 KB) measured warm and cold (0: none)")
    parser.add_argument("--starts", type=int, default=3, help="fresh servers per size for the start-up median")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="input-writing and pack workers")
    parser.add_argument("--json", type=Path, help="also write every row to this JSON file")
    args = parser.parse_args(argv)
    in21k_sizes = sorted(set(args.in21k_sizes + ([IN21K_FULL] if args.full else [])))
    work = Path(args.keep or tempfile.mkdtemp(prefix="scale-bench-"))
    work.mkdir(parents=True, exist_ok=True)

    def log(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    if args.inputs_only:
        if args.keep is None:
            parser.error("--inputs-only needs --keep")
        for kind, sizes in (("ilsvrc_2012", args.sizes), ("imagenet21k", in21k_sizes)):
            for size in sorted(sizes):
                if not (store_home(work, kind, size) / "pack.json").is_file():
                    build_input(kind, size, store_home(work, kind, size), args.workers, log)
        return 0
    try:
        ilsvrc_rows = []
        for size in sorted(args.sizes):
            built = build("ilsvrc_2012", size, work, args.workers, args.keep_input, log)
            ilsvrc_rows.append(measure_ilsvrc(built, work, args.episodes, args.clients, args.cold_episodes,
                                              args.starts, log))
        large_rows = []
        if args.large:
            built = build("ilsvrc_2012", args.large, work, args.workers, args.keep_input, log, large=True)
            large_rows.append(measure_large(built, work, min(args.episodes, 200), args.clients, log))
        in21k_rows = []
        for size in in21k_sizes:
            built = build("imagenet21k", size, work, args.workers, args.keep_input, log)
            in21k_rows.append(measure_in21k(built, work, log))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"scale bench: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
          f"{IMAGE_SIDE} px JPEGs, {args.clients} clients, {args.episodes} warm / {args.cold_episodes} cold episodes")
    lines = []
    if ilsvrc_rows:
        lines += report("ilsvrc_2012", ILSVRC_TABLES, ilsvrc_rows)
    if large_rows:
        lines += report("ilsvrc_2012, release-sized JPEGs", LARGE_TABLES, large_rows)
    if in21k_rows:
        lines += report("imagenet21k", IN21K_TABLES, in21k_rows)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"ilsvrc_2012": ilsvrc_rows, "large": large_rows, "imagenet21k": in21k_rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
