"""``sampler-server demo``: the service's main job, end to end, on embedded data.

1. generate every source's fixture in its original layout and pack it (the same
   code path as ``pack``; official-format split files where a fixture writes one);
2. start ``sampler-server serve`` on the packed stores (a separate process, as a
   shared service runs);
3. run the PyTorch and the TensorFlow trainer against it (each its own process,
   as users run them): ProtoNet on train-split episodes of several sources, then
   evaluation on test episodes of each evaluation source, reported to the server;
4. print the Meta-Dataset table for both runs and write the robustness plots;
5. stop the server (SIGTERM: it drains and exits).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from sampler_server import fixtures
from sampler_server.cli.inspect_cmd import run as inspect_run
from sampler_server.cli.pack_cmd import format_summary
from sampler_server.errors import FailedPrecondition
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, run_pack
from sampler_server.pack.plan import ConverterOptions

TRAIN_SOURCES = ("aircraft", "cu_birds", "dtd", "fungi", "quickdraw", "vgg_flower")
EVAL_SOURCES = ("aircraft", "cu_birds", "dtd", "traffic_sign", "mscoco")
FRAMEWORKS = ("torch", "tf")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="the main job end to end: data, server, PyTorch and TensorFlow trainers, report",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workdir", type=Path, default=Path("demo-data"))
    parser.add_argument("--classes", type=int, default=24, help="classes per source")
    parser.add_argument("--images-per-class", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--train-episodes", type=int, default=150)
    parser.add_argument("--eval-episodes", type=int, default=60, help="test episodes per evaluation source")
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--data-only", action="store_true", help="only generate, pack and inspect the data")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bars while packing")
    parser.set_defaults(func=run)


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def build_data(workdir: Path, classes: int, images_per_class: int, workers: int, quiet: bool) -> Path:
    original, store = workdir / "original", workdir / "store"
    for name in fixtures.available():
        if name not in sources.CONVERTERS:
            continue
        fixture = fixtures.get_generator(name).generate(
            original / name, seed=0, num_classes=classes, images_per_class=images_per_class
        )
        converter_options = ConverterOptions(**{"class_splits": fixture.split_file, **dict(fixture.pack_args)})
        plan = sources.get_converter(name).plan(fixture.input_dir, converter_options)
        summary = run_pack(plan, store, PackOptions(workers=workers, progress=not quiet))
        print(format_summary(summary), flush=True)
    return store


def _environment() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": repo + (os.pathsep + path if path else "")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    return env


def start_server(store: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(store), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_environment(),
    )
    line = process.stdout.readline() if process.stdout else ""
    if "listening on" not in line:
        process.kill()
        raise FailedPrecondition(f"the demo server did not start ({line.strip() or 'no output'})")
    print(line.strip(), flush=True)
    return process, line.split()[2]


def run_trainer(framework: str, address: str, args: argparse.Namespace) -> None:
    command = [
        sys.executable, "-m", f"clients.{framework}",
        "--server", address, "--run", f"demo-{framework}",
        "--sources", *TRAIN_SOURCES, "--eval-sources", *EVAL_SOURCES,
        "--image-size", str(args.image_size), "--train-episodes", str(args.train_episodes),
        "--eval-episodes", str(args.eval_episodes), "--checkpoint-dir", str(args.workdir / f"checkpoints-{framework}"),
        "--checkpoint-every", str(max(1, args.train_episodes)), "--log-every", "25", "--device", "cpu",
    ]
    print("$ " + " ".join(command[1:]), flush=True)
    started = time.perf_counter()
    result = subprocess.run(command, env=_environment())
    if result.returncode != 0:
        raise FailedPrecondition(f"the {framework} trainer exited with status {result.returncode}")
    print(f"{framework} trainer finished in {time.perf_counter() - started:.0f} s", flush=True)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    _step("1/5 generating the demo data in each source's original layout, and packing it")
    store = build_data(args.workdir, args.classes, args.images_per_class, args.workers, args.quiet)
    inspect_run(argparse.Namespace(data=store, json=False, classes=False))
    if args.data_only:
        print(f"\ndemo data ready in {time.perf_counter() - started:.1f} s; stores under {store}")
        return 0
    _step("2/5 starting the sampler server")
    server, address = start_server(store)
    try:
        for position, framework in enumerate(args.frameworks, start=3):
            _step(f"{position}/5 {framework} trainer: ProtoNet on {', '.join(TRAIN_SOURCES)}; "
                  f"evaluation on {', '.join(EVAL_SOURCES)}")
            run_trainer(framework, address, args)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    _step("5/5 the Meta-Dataset table for both runs")
    from sampler_server.metrics.plots import write_plots
    from sampler_server.metrics.report import build_report, render_report
    from sampler_server.metrics.store import MetricsStore
    from sampler_server.service.registry import StoreRegistry
    from sampler_server.service.replay import EpisodeReplayer

    report = build_report(
        MetricsStore(store / "metrics.sqlite"),
        [f"demo-{framework}" for framework in args.frameworks],
        EpisodeReplayer(StoreRegistry.from_data_dir(store)),
    )
    print(render_report(report, "table"))
    plots = write_plots(report, args.workdir / "plots")
    print(f"\nplots: {len(plots)} PNG files in {args.workdir / 'plots'}")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")
    return 0
