"""One host, several ranks: episodes/s served by ``serve --replicas R`` to K rank processes.

It packs an image_folder store raw at 126 px (no decoding: what is measured is the
server assembling and writing replies, the part one interpreter does alone), then for
each R of ``--replicas`` starts ``sampler-server serve --replicas R --workers W
--lookahead-mb 128`` and K client processes that act as torchrun ranks (``WORLD_SIZE``
= K, ``LOCAL_RANK`` = r): rank r streams the MD episodes r, r + K, ... as the trainers
shard them, over the client's default transport (same-host here), and drops each
episode once received (no training: the rate is the server's). Printed per R: episodes/s
and images/s summed over ranks (after ``--warmup`` episodes per rank), the ratio to
R = 1, the CPU the serve tree used (cores: CPU seconds / wall seconds), and the replica
each rank read from (its ``clients.balancing`` line).

Run: ``.venv/bin/python bench/replicas_bench.py [--ranks 4] [--replicas 1 2 4] [--episodes 60]``
Dependencies: numpy, grpcio, lmdb, Pillow and this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ddp_smoke import STORE, make_store  # noqa: E402  (the image_folder store, packed raw)
from proc_tree import tree_cpu_seconds  # noqa: E402
RANK_CODE = """
import json, logging, os, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from clients.core import EpisodeSpec, SamplerClient
target, warmup, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
spec = EpisodeSpec(sources=(sys.argv[5],), split="train", seed=1, image_size=size)
with SamplerClient(target) as client:
    images, started = 0, None
    for n, episode in enumerate(client.episodes(spec, start=rank, step=world, count=warmup + count)):
        if n == warmup:
            started = time.perf_counter()
        if n >= warmup:
            images += len(episode.support_labels) + len(episode.query_labels)
        del episode
    print(json.dumps({"started": started, "ended": time.perf_counter(), "images": images,
                      "transport": client.transport}), flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def measure(data: Path, replicas: int, args: argparse.Namespace) -> dict:
    serve = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0", "--replicas",
         str(replicas), "--workers", str(args.workers), "--lookahead-mb", "128"],
        stdout=subprocess.PIPE, stderr=open(data / f"serve-{replicas}.log", "w"), text=True, env=_env())
    line = serve.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"serve --replicas {replicas} did not start: {line!r}")
    target = line.split()[2]
    try:
        ranks = [subprocess.Popen([sys.executable, "-c", RANK_CODE, target, str(args.warmup), str(args.episodes),
                                   str(args.size), STORE],
                                  env={**_env(), "WORLD_SIZE": str(args.ranks), "LOCAL_RANK": str(rank),
                                       "RANK": str(rank)},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for rank in range(args.ranks)]
        cpu_before, wall_before = tree_cpu_seconds(serve.pid), time.perf_counter()
        outputs = [rank.communicate(timeout=600) for rank in ranks]
        cpu = tree_cpu_seconds(serve.pid) - cpu_before
        wall = time.perf_counter() - wall_before
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
    results = []
    for rank, (out, err) in zip(ranks, outputs):
        if rank.returncode != 0:
            raise SystemExit(f"a rank failed: {err[-2000:]}")
        results.append(json.loads(out))
    preferred = [next((line.split("prefers replica ")[1].split()[0] for line in err.splitlines()
                       if "prefers replica" in line), target) for _, err in outputs]
    span = max(r["ended"] for r in results) - min(r["started"] for r in results)
    return {"replicas": replicas, "episodes_per_s": args.ranks * args.episodes / span,
            "images_per_s": sum(r["images"] for r in results) / span, "server_cores": cpu / wall,
            "transport": sorted({r["transport"] for r in results}), "preferred": preferred}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="client processes acting as torchrun ranks")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="decode workers in all")
    parser.add_argument("--episodes", type=int, default=60, help="measured episodes per rank")
    parser.add_argument("--warmup", type=int, default=5, help="episodes per rank before the clock starts")
    parser.add_argument("--size", type=int, default=126, help="image size (the store is packed raw at it)")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--per-class", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = make_store(Path(scratch), args.classes, args.per_class, args.size)
        print(f"{os.cpu_count()} cores; store: {args.classes} classes x {args.per_class} images raw at {args.size} "
              f"px; {args.ranks} ranks, {args.episodes} MD episodes each after {args.warmup}; --workers "
              f"{args.workers} --lookahead-mb 128", flush=True)
        base = None
        for replicas in args.replicas:
            row = measure(data, replicas, args)
            base = base or row["episodes_per_s"]
            print(f"replicas {replicas}: {row['episodes_per_s']:.1f} episodes/s, {row['images_per_s']:.0f} images/s "
                  f"({row['episodes_per_s'] / base:.2f}x replicas {args.replicas[0]}); serve tree "
                  f"{row['server_cores']:.1f} cores; transport {','.join(row['transport'])}; ranks read from "
                  f"{' '.join(row['preferred'])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
