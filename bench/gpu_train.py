"""Episodic training on one GPU: what the model allows against what the trainer gets.

For ProtoNet conv4 at 84 px and ResNet-18 at 126 px (MD variable-way variable-shot
training episodes; bf16 autocast on CUDA; the trainer's ``--batch-norm``, by default md:
the support set's moments normalise the episode, Meta-Dataset's step; ``--models`` also
takes md-conv4 and md-resnet18), in the configurations ``--configs``
(``BUCKETS:COMPILE`` pairs of the trainer's ``--shape-buckets`` and ``--compile``; by
default on:on, on:off and off:off, the last being the loop a user writes), it prints per
configuration:
- model-only episodes/s: the trainer's step over a fixed set of episodes already on
  the device, first pass (shapes new to the process) and second pass (shapes seen);
- end-to-end episodes/s: ``python -m clients.torch`` training on the same episodes
  through a real ``sampler-server serve`` (overall, and over the last window of
  ``--window`` episodes);
- the ratio end-to-end (last window) / model-only second pass (target: at least 0.8);
- "vs eager": end-to-end (last window) / the off:off model-only second pass, the plain
  eager step on unpadded episodes (targets on one H100: at least 1.3 for conv4 at 84 px,
  at least 1.0 for ResNet-18 at 126 px, with compilation on);
- with compilation, its cost: the first step's seconds (tracing, compiling, running;
  counted in the end-to-end figures) and the graphs compiled;
- the data-wait share of step time after the first episode (target: under 5%), the
  first episode's wait (target: under 1 s) and the distinct input shapes met;
- per model, the training accuracy over the last window of each configuration against
  off:off's, each with its 95% CI (target: within off:off's interval).

Several GPUs (``--gpus 1 2 4``): per N, one ``sampler-server serve --replicas N``
(``--workers`` in all) and ``torchrun --nproc_per_node N`` of the trainer in the first
configuration, each rank on its own GPU and, through the client's rank affinity, its
own replica (same-host transport); it prints the episodes/s summed over the ranks, the
scaling against N times the one-GPU rate (target: at least 0.9 at N = 4), the server's
CPU use (cores, its process tree) and each rank's data wait, and checks that every rank
trained exactly the episodes of its indices.
The stores are generated and packed here: ``--classes`` x ``--per-class`` JPEGs packed
raw at each model's side (``--raw-size``: decoded pixels, the server only copies
them; the same source images, so the same episodes at 84 and 126 px). Each
measurement runs in a fresh process, so no run profits from another's cuDNN plans.

Run on a GPU: ``.venv/bin/python bench/gpu_train.py`` (defaults as issue 13: 600
episodes, 200 classes x 40 images, raw 126 px); several:
``.venv/bin/python bench/gpu_train.py --gpus 1 2 4 --models resnet18:126 --episodes 800``.
CPU smoke runs: ``.venv/bin/python bench/gpu_train.py --device cpu --episodes 4 --classes 20
--per-class 10 --models conv4:32`` and the same with ``--gpus 1 2`` (gloo ranks).
Dependencies: torch, numpy, grpcio, lmdb, Pillow and this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from proc_tree import tree_cpu_seconds  # noqa: E402

STORE = "bench_raw{size}"
_RATE = re.compile(r"episode (\d+)/\d+: .*?; ([0-9.]+) episodes/s")


def make_stores(work: Path, classes: int, per_class: int, sizes: set[int]) -> Path:
    """JPEGs in the image_folder layout (150-190 px, class-coloured), packed raw at each size."""
    from sampler_server.fixtures.base import class_image, rng_for
    from sampler_server.pack import sources
    from sampler_server.pack.pipeline import PackOptions, run_pack
    from sampler_server.pack.plan import ConverterOptions

    original = work / "original"
    for c in range(classes):
        directory = original / f"class_{c:03d}"
        directory.mkdir(parents=True)
        rng = rng_for("gpu-train-bench", 0, c)
        for i in range(per_class):
            size = (int(rng.randint(150, 190)), int(rng.randint(150, 190)))
            class_image(c, rng, size).save(directory / f"{i:04d}.jpg", quality=90)
    data = work / "data"
    plan = sources.get_converter("image_folder").plan(original, ConverterOptions())
    for size in sorted(sizes):
        run_pack(plan, data, PackOptions(name=STORE.format(size=size), raw_size=size, progress=False))
    shutil.rmtree(original)
    return data


def _env() -> dict[str, str]:
    """This repository first on the path, whatever the caller's PYTHONPATH already holds (carried wheels)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def start_server(data: Path, workers: int, lookahead_mb: int, replicas: int = 1) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0",
         "--workers", str(workers), "--lookahead-mb", str(lookahead_mb), "--replicas", str(replicas)],
        stdout=subprocess.PIPE, stderr=open(data / "server.log", "a"), text=True,
        env=_env(),
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        log = (data / "server.log").read_text()[-2000:]
        raise RuntimeError(f"server did not start: {line!r}; its log ends: {log}")
    return process, line.split()[2]


def trainer_argv(address: str, backbone: str, size: int, config: str, episodes: int, device: str,
                 log_every: int, batch_norm: str) -> list[str]:
    buckets, compiled = config.split(":")
    # --run-id, not --run: under torchrun, its own parser would take --run for an abbreviation of --run-path
    return ["--server", address, "--run-id", f"gpu-bench-{backbone}-{size}-{buckets}-{compiled}-{time.time_ns()}",
            "--sources", STORE.format(size=size),
            "--image-size", str(size), "--backbone", backbone, "--train-episodes", str(episodes),
            "--eval-episodes", "0", "--shape-buckets", buckets, "--compile", compiled, "--device", device,
            "--log-every", str(log_every), "--batch-norm", batch_norm]


# ---- children: one measurement each, in a fresh process -----------------------------------


def child_model(args: argparse.Namespace) -> dict:
    """The trainer's step on episodes 0..N-1 held on the device: two timed passes."""
    import torch

    from clients.core import EpisodeSpec, SamplerClient
    from clients.torch.md_train import TorchFramework
    from clients.trainer_args import parse_args

    framework = TorchFramework(parse_args("torch", trainer_argv(args.address, args.backbone, args.size, args.config,
                                                                args.episodes, args.device, args.episodes,
                                                                args.batch_norm)))
    spec = EpisodeSpec(sources=(STORE.format(size=args.size),), split="train", seed=0, image_size=args.size)
    with SamplerClient(args.address, prefetch=4) as client:
        staged = [framework.stage(episode) for episode in client.episodes(spec, 0, args.episodes)]
    cuda = framework.torch_device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    framework.build(0)
    sync()
    rates, losses = [], []
    for _ in range(2):
        started = time.perf_counter()
        for item in staged:
            losses.append(framework.train_step(item)[0])
        sync()
        rates.append(len(staged) / (time.perf_counter() - started))
    framework.to_floats(losses)
    images = sum(item.rows for item in staged) / len(staged)
    padded = sum(item.images.shape[0] for item in staged) / len(staged)
    return {"model_first": rates[0], "model_second": rates[1], "shapes": len(framework.shapes),
            "model_graphs": framework.compiled_graphs,
            "mean_images": images, "mean_rows": padded,
            "device": torch.cuda.get_device_name() if cuda else "cpu"}


def child_e2e(args: argparse.Namespace) -> dict:
    """``python -m clients.torch`` as a user runs it; its summary and its last window's rate."""
    with tempfile.TemporaryDirectory() as scratch:
        summary_path = Path(scratch) / "summary.json"
        argv = [sys.executable, "-m", "clients.torch",
                *trainer_argv(args.address, args.backbone, args.size, args.config, args.episodes, args.device,
                              args.window, args.batch_norm), "--json-summary", str(summary_path)]
        done = subprocess.run(argv, capture_output=True, text=True, env=_env(),
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"trainer exited {done.returncode}: {done.stderr[-2000:]}")
        train = json.loads(summary_path.read_text())["train"]
    windows = [(int(m.group(1)), float(m.group(2))) for m in _RATE.finditer(done.stderr)]
    after_first = max(train["seconds"] - train["first_wait_seconds"], 1e-9)
    return {"e2e": train["steps_per_s"], "e2e_last": windows[-1][1] if windows else train["steps_per_s"],
            "wait_after_first": (train["data_wait_seconds"] - train["first_wait_seconds"]) / after_first,
            "first_wait": train["first_wait_seconds"], "e2e_shapes": train["distinct_shapes"],
            "accuracy": train["final_accuracy"], "accuracy_ci95": train["final_accuracy_ci95"] or 0.0,
            "compile_seconds": train.get("compile_seconds"), "graphs": train.get("compiled_graphs"),
            "first_line": next((line for line in done.stderr.splitlines() if ": run " in line), "")}


# ---- the parent: store, server, children, table ---------------------------------------------


def run_child(kind: str, args: argparse.Namespace, address: str, backbone: str, size: int, config: str) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--address", address, "--backbone",
            backbone, "--size", str(size), "--config", config, "--episodes", str(args.episodes), "--device",
            args.device, "--window", str(args.window), "--batch-norm", args.batch_norm]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(),
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {backbone} {size}px {config} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- several GPUs: one torchrun per rank count, one server replica per rank ------------------


def rank_indices(rank: dict) -> list[int]:
    return [first + step * k for first, step, count in rank["indices"] for k in range(count)]


def run_ranks(args: argparse.Namespace, data: Path, backbone: str, size: int, gpus: int) -> dict:
    """``torchrun --nproc_per_node gpus`` of the trainer against ``serve --replicas gpus``."""
    process, address = start_server(data, args.workers, args.lookahead_mb, replicas=gpus)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            summary_path = Path(scratch) / "summary.json"
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus),
                    "-m", "clients.torch", *trainer_argv(address, backbone, size, args.configs[0], args.episodes,
                                                         args.device, args.window, args.batch_norm),
                    "--json-summary", str(summary_path)]
            cpu_before, started = tree_cpu_seconds(process.pid), time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, env=_env(), check=False)
            wall, cpu = time.perf_counter() - started, tree_cpu_seconds(process.pid) - cpu_before
            if done.returncode != 0:
                raise RuntimeError(f"torchrun of {gpus} exited {done.returncode}: {done.stderr[-3000:]}")
            summary = json.loads(summary_path.read_text())
    finally:
        process.terminate()
        process.wait()
    train = summary["train"]
    windows = [float(m.group(2)) for m in _RATE.finditer(done.stderr)]
    wrong = [r["rank"] for r in summary["ranks"] if rank_indices(r) != list(range(r["rank"], args.episodes, gpus))]
    return {"gpus": gpus, "e2e": train["steps_per_s"], "e2e_last": windows[-1] if windows else train["steps_per_s"],
            "server_cores": cpu / wall, "waits": [r["data_wait_seconds"] / max(train["seconds"], 1e-9)
                                                  for r in summary["ranks"]],
            "devices": [r["device"] for r in summary["ranks"]], "wrong_indices": wrong,
            "compile_seconds": train.get("compile_seconds"),
            "first_line": next((line for line in done.stderr.splitlines() if ": run " in line), "")}


def main_gpus(args: argparse.Namespace, data: Path) -> None:
    for model in args.models:
        backbone, _, size = model.partition(":")
        rows = []
        for gpus in args.gpus:
            result = run_ranks(args, data, backbone, int(size), gpus)
            rows.append(result)
            print(f"{backbone} {size}px {args.configs[0]} on {gpus} rank(s) ({', '.join(result['devices'])}): "
                  f"{result['e2e']:.1f} episodes/s overall, {result['e2e_last']:.1f} last window, summed over the "
                  f"ranks; server {result['server_cores']:.1f} cores; data wait per rank "
                  f"{' '.join(f'{w:.1%}' for w in result['waits'])}; "
                  + ("every rank trained exactly its indices" if not result["wrong_indices"] else
                     f"ranks {result['wrong_indices']} trained other indices") + f"\n  {result['first_line']}",
                  flush=True)
        one = next((r for r in rows if r["gpus"] == 1), None)
        print(f"\n{'backbone':9} {'px':>4} {'gpus':>4} {'e2e':>7} {'e2e last':>8} {'scaling':>7} {'server':>7} "
              f"{'max wait':>8}")
        for r in rows:
            scaling = r["e2e_last"] / (r["gpus"] * one["e2e_last"]) if one else float("nan")
            print(f"{backbone:9} {size:>4} {r['gpus']:>4} {r['e2e']:7.1f} {r['e2e_last']:8.1f} {scaling:7.2f} "
                  f"{r['server_cores']:6.1f}c {max(r['waits']):8.1%}")
        print("scaling: the last window's episodes/s over N times the one-GPU run's (target at N = 4: 0.9)")


# ---- the parent: store, server, children, table ---------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=600, help="training episodes per measurement")
    parser.add_argument("--window", type=int, default=100, help="episodes in the end-to-end rate's last window")
    parser.add_argument("--models", nargs="+", default=["conv4:84", "resnet18:126"], metavar="BACKBONE:PX")
    parser.add_argument("--configs", nargs="+", default=["on:on", "on:off", "off:off"], metavar="BUCKETS:COMPILE",
                        help="trainer --shape-buckets and --compile per measurement (on or off each); vs eager "
                             "needs off:off; --gpus runs the first")
    parser.add_argument("--gpus", nargs="+", type=int, metavar="N",
                        help="several GPUs of this host: one torchrun per N (include 1: the scaling's base)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--batch-norm", default="md", choices=["md", "transductive", "running"],
                        help="the trainer's --batch-norm (md: the support set's moments, Meta-Dataset's)")
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="serve --workers (in all)")
    parser.add_argument("--lookahead-mb", type=int, default=128, metavar="MB",
                        help="serve --lookahead-mb: room for episodes prepared ahead (126-px MD episodes are "
                             "14-27 MB; the serve default, 16, holds one); per replica with --gpus")
    parser.add_argument("--child", choices=["model", "e2e"], help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--backbone", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.window < 1:
        parser.error(f"--episodes/--window: got {args.episodes}/{args.window}, expected at least 1")
    for model in args.models:
        backbone, _, size = model.partition(":")
        if backbone not in ("conv4", "resnet18", "md-conv4", "md-resnet18") or not size.isdigit():
            parser.error(f"--models: got {model!r}, expected conv4:PX, resnet18:PX, md-conv4:PX or md-resnet18:PX")
    for config in args.configs:
        if config.count(":") != 1 or not set(config.split(":")) <= {"on", "off"}:
            parser.error(f"--configs: got {config!r}, expected BUCKETS:COMPILE, each on or off (e.g. on:on)")
    if args.gpus and min(args.gpus) < 1:
        parser.error(f"--gpus: got {args.gpus}, expected rank counts of at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        result = child_model(args) if args.child == "model" else child_e2e(args)
        print(json.dumps(result))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu_train: --device cuda, but torch finds no CUDA device (use --device cpu)", file=sys.stderr)
            return 2
        if args.gpus and max(args.gpus) > torch.cuda.device_count():
            print(f"gpu_train: --gpus {max(args.gpus)}, but this host has {torch.cuda.device_count()}",
                  file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-train-bench-"))
    rows = []
    try:
        started = time.perf_counter()
        sizes = {int(model.partition(":")[2]) for model in args.models}
        data = make_stores(work, args.classes, args.per_class, sizes)
        print(f"stores: {args.classes} classes x {args.per_class} images, raw at "
              f"{', '.join(map(str, sorted(sizes)))} px, packed in "
              f"{time.perf_counter() - started:.1f} s; serve --workers {args.workers} --lookahead-mb "
              f"{args.lookahead_mb} on {os.cpu_count()} cores; "
              f"{args.episodes} MD variable training episodes per measurement, --batch-norm {args.batch_norm}",
              flush=True)
        if args.gpus:
            main_gpus(args, data)
            return 0
        process, address = start_server(data, args.workers, args.lookahead_mb)
        try:
            for model in args.models:
                backbone, _, size = model.partition(":")
                for config in args.configs:
                    result = {**run_child("model", args, address, backbone, int(size), config),
                              **run_child("e2e", args, address, backbone, int(size), config)}
                    rows.append((backbone, int(size), config, result))
                    compiled = (f"; compiled: first step {result['compile_seconds']:.1f} s, "
                                f"{result['graphs']} graph(s)") if result["compile_seconds"] is not None else ""
                    print(f"{backbone} {size}px buckets:compile {config} on {result['device']}: model-only "
                          f"{result['model_first']:.1f} / {result['model_second']:.1f} episodes/s "
                          "(first / second pass), "
                          f"end to end {result['e2e']:.1f} overall, {result['e2e_last']:.1f} last window; ratio "
                          f"{result['e2e_last'] / result['model_second']:.2f}; data wait after the first episode "
                          f"{result['wait_after_first']:.1%}; first episode waited {result['first_wait']:.2f} s; "
                          f"{result['shapes']} distinct shapes ({result['mean_images']:.0f} images per episode, "
                          f"{result['mean_rows']:.0f} rows fed){compiled}\n  {result['first_line']}", flush=True)
        finally:
            process.terminate()
            process.wait()
            log = (data / "server.log").read_text()
            if "Traceback" in log:
                print(log[log.index("Traceback"):][:3000], file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows, args.window)
    return 0


def print_table(rows: list[tuple[str, int, str, dict]], window: int) -> None:
    eager = {(backbone, size): r["model_second"] for backbone, size, config, r in rows if config == "off:off"}
    print()
    print(f"{'backbone':9} {'px':>4} {'config':7} {'model 1st':>9} {'model 2nd':>9} {'e2e':>7} {'e2e last':>8} "
          f"{'ratio':>6} {'vs eager':>8} {'wait':>6} {'1st wait':>8} {'shapes':>6} {'compile':>8} {'graphs':>6}")
    for backbone, size, config, r in rows:
        base = eager.get((backbone, size))
        versus = f"{r['e2e_last'] / base:8.2f}" if base else f"{'-':>8}"
        compile_time = f"{r['compile_seconds']:7.1f}s" if r["compile_seconds"] is not None else f"{'-':>8}"
        print(f"{backbone:9} {size:>4} {config:7} {r['model_first']:9.1f} {r['model_second']:9.1f} {r['e2e']:7.1f} "
              f"{r['e2e_last']:8.1f} {r['e2e_last'] / r['model_second']:6.2f} {versus} {r['wait_after_first']:6.1%} "
              f"{r['first_wait']:7.2f}s {r['shapes']:6d} {compile_time} {r['graphs'] if r['graphs'] else '-':>6}")
    print("config: trainer --shape-buckets:--compile; vs eager: e2e last / the off:off model-only second pass")
    results = {(backbone, size, config): r for backbone, size, config, r in rows}
    for (backbone, size, config), r in results.items():
        off = results.get((backbone, size, "off:off"))
        if config == "off:off" or off is None:
            continue
        within = abs(r["accuracy"] - off["accuracy"]) <= off["accuracy_ci95"]
        print(f"curve {backbone} {size}px: training accuracy over the last {window} episodes, {config} "
              f"{r['accuracy']:.4f} ± {r['accuracy_ci95']:.4f}, off:off {off['accuracy']:.4f} ± "
              f"{off['accuracy_ci95']:.4f}: {'within' if within else 'OUTSIDE'} the off:off run's 95% CI")


if __name__ == "__main__":
    raise SystemExit(main())
