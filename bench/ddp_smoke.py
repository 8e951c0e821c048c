"""The PyTorch trainer under torchrun, end to end: shards, identical ranks, resume.

It generates a small image_folder dataset, packs it, starts ``sampler-server serve``
on 127.0.0.1, and runs ``torchrun --standalone --nproc_per_node N -m clients.torch``
twice against it: episodes 0..E-1 (checkpoint at the end), then a resumed run to 2E
from that checkpoint. After each it prints, per rank, the indices it trained (as the
server sent them) and the sha256 of its model's parameters and buffers, and checks:
the ranks' indices together are the run's window, each index once, rank r taking the
indices of residue r; every rank's digest is the same; the resumed run started at the
checkpoint's index; the ranks talk over NCCL with rank r on cuda:r (gloo on CPU). The
sharded evaluation's reports are counted too (each test episode once). Exit status 0
when every check holds, 1 otherwise.

On two GPUs (NCCL, rank r on cuda:r):
    .venv/bin/python bench/ddp_smoke.py --device cuda --nproc 2
On CPU (gloo): ``.venv/bin/python bench/ddp_smoke.py --device cpu --nproc 2 --image-size 16``.
Dependencies: torch, numpy, grpcio, lmdb, Pillow and this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STORE = "ddp_smoke"


def _env() -> dict[str, str]:
    """This repository first on the path, whatever the caller's PYTHONPATH already holds (carried wheels)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def make_store(work: Path, classes: int, per_class: int, raw_size: int) -> Path:
    """An image_folder dataset (class-coloured images) packed raw at the training side."""
    from sampler_server import fixtures
    from sampler_server.pack import sources
    from sampler_server.pack.pipeline import PackOptions, run_pack
    from sampler_server.pack.plan import ConverterOptions

    fixture = fixtures.get_generator("image_folder").generate(work / "original", num_classes=classes,
                                                               images_per_class=per_class)
    options = dict(fixture.pack_args)
    if fixture.split_file is not None:
        options["class_splits"] = fixture.split_file
    plan = sources.get_converter(fixture.source).plan(fixture.input_dir, ConverterOptions(**options))
    data = work / "data"
    run_pack(plan, data, PackOptions(name=STORE, raw_size=raw_size, progress=False))
    return data


def start_server(data: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0"],
        stdout=subprocess.PIPE, stderr=open(data / "server.log", "a"), text=True,
        env=_env(),
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(f"server did not start: {line!r}")
    return process, line.split()[2]


def torchrun(args: argparse.Namespace, address: str, work: Path, episodes: int, tag: str) -> tuple[dict, str]:
    """One torchrun of the trainer: its summary (rank 0 writes it) and its stderr."""
    summary = work / f"summary-{tag}.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.nproc),
               "-m", "clients.torch", "--server", address, "--run-id", f"ddp-smoke-{args.device}-{tag}",
               "--sources", STORE, "--image-size", str(args.image_size), "--backbone", args.backbone,
               "--device", args.device, "--shape-buckets", args.shape_buckets, "--train-episodes", str(episodes),
               "--eval-episodes", str(args.eval_episodes), "--checkpoint-dir", str(work / "checkpoints"),
               "--checkpoint-every", str(args.episodes), "--log-every", str(args.nproc * 5),
               "--json-summary", str(summary)]
    print("$ " + " ".join(command[1:]), flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, env=_env(), capture_output=True, text=True,
                          check=False)
    lines = [line for line in done.stderr.splitlines() if "clients.torch" in line]
    print("\n".join(f"  {line}" for line in lines), flush=True)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"torchrun exited {done.returncode}")
    print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    return json.loads(summary.read_text()), done.stderr


def check(summary: dict, stderr: str, start: int, end: int, args: argparse.Namespace) -> list[str]:
    """The failed checks of one run (empty: all hold)."""
    nproc = args.nproc
    failures = []
    backend = "nccl" if args.device == "cuda" else "gloo"
    if f"rank 0 of {nproc} ({backend})" not in stderr:
        failures.append(f"the run's first line does not name {nproc} ranks over {backend}")
    for rank in summary["ranks"]:
        device = f"cuda:{rank['rank']}" if args.device == "cuda" else "cpu"
        if rank["device"] != device:
            failures.append(f"rank {rank['rank']} trained on {rank['device']}, expected {device}")
    trained: list[int] = []
    for rank in summary["ranks"]:
        indices = [first + step * k for first, step, count in rank["indices"] for k in range(count)]
        expected = list(range(start + rank["rank"], end, nproc))
        print(f"  rank {rank['rank']} on {rank['device']}: {len(indices)} episodes {indices[:4]}..."
              f"{indices[-2:]}, parameters sha256 {rank['parameter_digest']}", flush=True)
        if indices != expected:
            failures.append(f"rank {rank['rank']} trained {indices}, expected {expected}")
        trained += indices
    if sorted(trained) != list(range(start, end)):
        failures.append(f"the ranks trained {sorted(trained)}, expected each of {start}..{end - 1} once")
    if len({rank["parameter_digest"] for rank in summary["ranks"]}) != 1 or len(summary["ranks"]) != nproc:
        failures.append("the ranks' parameters differ (or a rank is missing)")
    if (summary["start_index"], summary["next_index"], summary["world_size"]) != (start, end, nproc):
        failures.append(f"window {summary['start_index']}..{summary['next_index']} on {summary['world_size']} "
                        f"ranks, expected {start}..{end} on {nproc}")
    for name, result in summary["eval"].items():
        print(f"  eval {name}: accuracy {result['mean_accuracy']:.4f} over {result['episodes']} episodes, "
              f"{result['stored']} reports stored new, {result['duplicates']} again", flush=True)
        if result["stored"] + result["duplicates"] != result["episodes"]:
            failures.append(f"eval {name}: {result['stored']} + {result['duplicates']} reports for "
                            f"{result['episodes']} episodes")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--nproc", type=int, default=2, help="processes (GPUs) on this node")
    parser.add_argument("--episodes", type=int, default=40, help="training episodes of the first run (the "
                        "resumed run trains as many again); a multiple of --nproc")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=84)
    parser.add_argument("--backbone", choices=("conv4", "resnet18"), default="conv4")
    parser.add_argument("--shape-buckets", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--classes", type=int, default=30)
    parser.add_argument("--per-class", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=None, help="kept afterwards (default: a temporary one)")
    args = parser.parse_args()
    if args.nproc < 2 or args.episodes % args.nproc:
        parser.error(f"--nproc {args.nproc} / --episodes {args.episodes}: expected at least 2 processes and "
                     "episodes a multiple of them")

    with tempfile.TemporaryDirectory() as scratch:
        work = args.workdir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        data = make_store(work, args.classes, args.per_class, args.image_size)
        server, address = start_server(data)
        try:
            print(f"server {address}, store {STORE} ({args.classes} classes x {args.per_class} images, raw "
                  f"{args.image_size} px)", flush=True)
            first, stderr = torchrun(args, address, work, args.episodes, "first")
            failures = check(first, stderr, 0, args.episodes, args)
            second, stderr = torchrun(args, address, work, 2 * args.episodes, "resumed")
            failures += check(second, stderr, args.episodes, 2 * args.episodes, args)
            if not (second["resumed_from"] or "").startswith(str(work / "checkpoints")):
                failures.append(f"the second run did not resume from the checkpoint: {second['resumed_from']!r}")
        finally:
            server.terminate()
            server.wait(timeout=30)
    for failure in failures:
        print(f"FAILED: {failure}", flush=True)
    print("OK: shards cover each window once, ranks identical, resume continued the shards" if not failures
          else f"{len(failures)} check(s) failed", flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
