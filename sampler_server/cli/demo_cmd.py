"""``sampler-server demo``: the service's main job, end to end, on embedded data.

The terminal shows one progress line per leg as it ends, and the leg's table under it (at
most ``demo_console.TERMINAL_BUDGET`` lines in all); ``<workdir>/demo.log`` holds those and
everything else: every pack's summary, the stores' inspection, each trainer's command line and all
it printed (``demo_console``). The legs:

1. data: generate every source's fixture in its original layout and pack it (the same
   code path as ``pack``; official-format split files where a fixture writes one), and
   the VTAB and CoG legs' data (below; VTAB's in a process of its own beside), then
   start ``sampler-server serve`` on the packed stores (a separate process, as a shared
   service runs);
2. md: the PyTorch and the TensorFlow trainer against it (each its own process, as users
   run them): ProtoNet on train-split episodes of several sources, then evaluation on
   test episodes of each evaluation source, reported to the server;
3. vtab (``--no-vtab`` skips it; needs the vtab extra): test-built prepared TFDS data of
   one natural task (svhn) and one structured task with a derived label (kitti_distance),
   packed with the ``pack vtab`` code path into the same data directory before the server
   starts, served at the VTAB reference's pixels (the legacy grid of
   ``tf.compat.v1.image.resize``), then the VTAB paper's protocol per framework (``python -m
   clients.<framework> transfer --protocol vtab``: fine-tuning, the 2 x 2 sweep chosen per
   task on ``val``, the median of 3 final runs) at tiny CPU sizes;
4. baselines (with vtab, torch): the linear probe from the torch ProtoNet checkpoint (role
   model) and a fine-tuned conv4 from random init (role scratch) at two data regimes, and
   one from random init on all the training data (role max);
5. cog (``--no-cog`` skips it): a test-built IN-21K layout (one tar of generated JPEGs per
   synset, 189 real wnids chosen so that every eligibility rule removes some and 30 stay
   eligible), packed as two shards served as one source; the levels computed at a
   scaled-down size (``cog levels --level-size 4 --min-images 60``); then the linear
   evaluation per framework (``python -m clients.<framework> cog``: features of IN-1K and
   L1..L5 from a small random backbone, a logistic regression per level, N and seed) at
   tiny CPU sizes. IN-1K is the MD leg's ILSVRC store, packed with ``--validation``: it
   trains on every train image and tests on the validation images;
6. evaluate (torch): a checkpoint in, its card out: ``python -m clients.torch evaluate`` of
   the torch trainer's checkpoint on every protocol of the demo (frozen features: MD test
   episodes with prototypes and logistic regression, a VTAB linear probe, the CoG
   evaluation), reported as ``demo-eval``.

Each leg's table is printed when the leg ends: Meta-Dataset (both runs, with the robustness
plots), VTAB, the calibrated table of the control baselines (with its plots), CoG (the
torch run as the baseline, with its plots and the levels in one line). Then the server
stops (SIGTERM: it drains and exits) and the tables that read several legs follow: the
framework parity table (every leg's torch and tf rows side by side with their 95% CIs:
both frameworks start each leg from the same framework-neutral weights, ``--init-seed 0``,
and run deterministically on CPU), and ``report --card`` of ``demo-eval`` beside the
control-baseline model run (written whole to ``card.md`` and ``card.html``; on the
terminal without the lines naming runs a table leaves out, and its calibrated table,
printed above already, named by one line).

The trainer processes of legs 2-6 run ``--parallel`` at a time (2 by default, on two
cores or more), each with ``cores // parallel`` framework threads (``demo_jobs``); which
processes run together changes no result.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sampler_server import fixtures
from sampler_server.cli import demo_tables
from sampler_server.cli.demo_console import DemoConsole, logging_to
from sampler_server.cli.demo_jobs import Job, JobTimes, run_jobs
from sampler_server.cli.inspect_cmd import run as inspect_run
from sampler_server.cli.pack_cmd import format_summary
from sampler_server.errors import FailedPrecondition
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, run_pack
from sampler_server.pack.plan import ConverterOptions

if TYPE_CHECKING:
    from sampler_server.core.cog import CogLevels

TRAIN_SOURCES = ("aircraft", "cu_birds", "dtd", "fungi", "quickdraw", "vgg_flower")
EVAL_SOURCES = ("aircraft", "cu_birds", "dtd", "traffic_sign", "mscoco")
FRAMEWORKS = ("torch", "tf")
VTAB_TASKS = ("svhn", "kitti_distance")  # keys of fixtures.tfds.DEMO_BUILDERS
OWN_LEG_SOURCES = ("imagenet21k",)  # not MD sources: their leg builds its own data (CoG: its wnids and counts)
VTAB_INSTALL = "VTAB leg skipped: tensorflow-datasets is missing; install the extra: pip install -e '.[vtab]'"
# The VTAB paper's protocol (the trainers' default, --protocol vtab) small enough for two CPU
# cores: 32 px, conv4, batch 64, its {2500, 10000} steps scaled by 0.001 to 2 and 10 (decay
# points with them); the sweep, the per-task choice on val and the 3 final runs are the paper's.
VTAB_RUN = ("--protocol", "vtab", "--backbone", "conv4", "--image-size", "32", "--batch-size", "64",
            "--eval-batch-size", "200", "--steps-scale", "0.001", "--log-every", "1000")
# The control baselines' runs: VTAB+MD's protocol (one setting for all tasks by val200) with a
# linear probe small enough for two CPU cores (lrs high enough that a head on frozen random
# features learns in 40 steps).
VTAB_PROBE = ("--protocol", "vtab-md", "--mode", "linear", "--backbone", "conv4", "--image-size", "32",
              "--batch-size", "64", "--eval-batch-size", "200", "--lrs", "1.0", "0.1", "--steps", "20", "40",
              "--log-every", "1000")
# Control baselines: two data regimes of each VTAB task (n examples of its train split, seed 0)
CONTROL_REGIMES = ("--regime", "20", "--regime", "80", "--regime-seed", "0")
CONTROL_RUNS = {  # role -> what that run adds to VTAB_PROBE (the last --mode/--lrs/--steps win)
    "model": ("--mode", "linear", *CONTROL_REGIMES),
    # a demo setting, not the protocol: the demo's coloured images are so easy that a longer fit
    # reaches the max run at every regime, leaving nothing to calibrate (CCI undefined); a real
    # study gives the scratch run the same sweep as the model run
    "scratch": ("--mode", "finetune", "--lrs", "0.01", "--steps", "10", *CONTROL_REGIMES),
    "max": ("--mode", "finetune", "--lrs", "0.1", "--steps", "20"),
}
# ImageNet-CoG at demo scale: 4 concepts per level, 60 images at least (the paper: 1000
# and 782); IN-1K is the MD leg's ILSVRC store (its classes' train images, and their
# validation images as the test set: 3 per class here, 50 in ILSVRC-2012).
COG_LEVEL_CONFIG = ("--level-size", "4", "--min-images", "60")
COG_EVAL = ("--backbone", "tiny", "--levels", "IN-1K", "L1", "L2", "L3", "L4", "L5", "--image-size", "32",
            "--shots", "all", "1", "4", "--seeds", "1", "2", "--epochs", "5", "--grid", "3x2", *COG_LEVEL_CONFIG)
COG_SHARDS = 2
# Framework parity: both trainers of each leg start from the same framework-neutral
# weights (clients.init_weights), so their rows compare (demo_parity)
INIT_SEED = ("--init-seed", "0")
# evaluate of the torch trainer's checkpoint, small enough for two CPU cores: every MD
# evaluation source, VTAB+MD's linear probe, CoG's levels at one N and seed
EVALUATE_RUN = "demo-eval"
EVALUATE = ("--backbone", "conv4", "--image-size", "32", "--presets", "md-v1", "--md-sources", *EVAL_SOURCES,
            "--episodes", "10", "--tasks", *VTAB_TASKS, "--vtab-protocol", "vtab-md", "--mode", "linear",
            "--lrs", "1.0", "0.1", "--steps", "20", "40", "--vtab-batch-size", "64", "--eval-batch-size", "200",
            "--levels", "IN-1K", "L1", "L2", "L3", "L4", "L5", "--shots", "all", "--seeds", "1", "--epochs", "5",
            "--grid", "3x2", *COG_LEVEL_CONFIG)


# MD's learners (Table 1 of the MD paper, its seven) trained briefly by the torch trainer on the
# MD leg's sources and tested on its test sources, ranked by MD's rule in one table; the flags
# beside each are demo settings (each learner's own defaults otherwise; --preset md/<learner>/...
# holds the paper's), small enough for two CPU cores
LEARNERS = ("knn", "finetune", "matchingnet", "protonet", "maml", "relationnet", "protomaml")
LEARNER_SOURCES = EVAL_SOURCES[:3]
LEARNER_RUN = ("--image-size", "32", "--eval-episodes", "6", "--log-every", "25")
LEARNER_TRAINING = {
    "episodes": ("--train-episodes", "10", "--ways", "5", "--shots", "5", "--query", "5"),
    "batches": ("--train-steps", "10", "--batch-size", "32"),
}
LEARNER_FLAGS = {  # what each adds: MD's fo-MAML step size, a short Finetune, RelationNet's batch norm
    "knn": ("--model", "knn"),
    "finetune": ("--model", "finetune", "--finetune-steps", "10", "--finetune-lr", "0.01", "--finetune-optimizer",
                 "adam"),
    "matchingnet": ("--model", "matchingnet"),
    "protonet": ("--model", "protonet"),
    "maml": ("--model", "maml", "--maml-steps", "2", "--maml-alpha", "0.1"),
    "relationnet": ("--model", "relationnet", "--batch-norm", "transductive"),
    "protomaml": ("--model", "protomaml", "--maml-steps", "2"),
}
BATCH_LEARNERS = ("knn", "finetune")


def learner_run(name: str) -> str:
    """The run of a learner: one prefix, so the table heads each column with the learner alone."""
    return f"demo-learners/{name}"


LOG_NAME = "demo.log"
# The order trainer processes start in (a job starts once those it reads have ended): the
# longest first, measured on two cores, so two at a time end together; the torch trainer
# first, since the control model run and evaluate read its checkpoint. A leg to come (the MD
# learners) adds its jobs in trainer_jobs (their names here, or they start last), its line in
# leg_line and its table in leg_table.
START_ORDER = ("md-torch", "md-tf", "vtab-tf", "evaluate", "vtab-torch", "control-max", "control-scratch", "cog-tf",
               "control-model", "cog-torch", *(f"learner-{name}" for name in LEARNERS))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="the main job end to end: data, server, PyTorch and TensorFlow trainers, report",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workdir", type=Path, default=Path("demo-data"),
                        help=f"where the data, stores, checkpoints, plots and {LOG_NAME} go (emptied first)")
    parser.add_argument("--classes", type=int, default=24, help="classes per source")
    parser.add_argument("--images-per-class", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--train-episodes", type=int, default=60)
    parser.add_argument("--eval-episodes", type=int, default=20, help="test episodes per evaluation source")
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--data-only", action="store_true", help="only generate, pack and inspect the data")
    parser.add_argument("--no-vtab", dest="vtab", action="store_false",
                        help="skip the VTAB leg (TFDS data, pack vtab, linear probes, VTAB table)")
    parser.add_argument("--no-cog", dest="cog", action="store_false",
                        help="skip the ImageNet-CoG leg (IN-21K layout data, sharded pack, levels, evaluations)")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help="trainer processes at a time (default: 2 where there are two cores or more, else 1), "
                             "each with cores // N framework threads; 1 runs them one after another")
    parser.add_argument("--quiet", action="store_true",
                        help="accepted for older scripts: packing draws no progress bars (its summaries go to "
                             f"{LOG_NAME})")
    parser.set_defaults(func=run)


def md_fixtures() -> list[str]:
    """The sources ``build_data`` generates and packs: every fixture with a converter, but
    those a leg builds its own data for."""
    return [name for name in fixtures.available() if name in sources.CONVERTERS and name not in OWN_LEG_SOURCES]


def build_data(workdir: Path, classes: int, images_per_class: int, workers: int, quiet: bool) -> Path:
    original, store = workdir / "original", workdir / "store"
    for name in md_fixtures():
        fixture = fixtures.get_generator(name).generate(
            original / name, seed=0, num_classes=classes, images_per_class=images_per_class
        )
        converter_options = ConverterOptions(**{"class_splits": fixture.split_file, **dict(fixture.pack_args)})
        plan = sources.get_converter(name).plan(fixture.input_dir, converter_options)
        summary = run_pack(plan, store, PackOptions(workers=workers, progress=not quiet))
        print(format_summary(summary), flush=True)
    return store


def build_vtab_data(workdir: Path, store: Path, workers: int, quiet: bool) -> bool:
    """Prepare and pack the demo's VTAB datasets into ``store``; False (one line said) without TFDS."""
    try:
        import tensorflow_datasets  # noqa: F401  (the vtab extra)
    except ModuleNotFoundError:
        print(VTAB_INSTALL, flush=True)
        return False
    from sampler_server.fixtures import tfds as tfds_fixtures
    from sampler_server.core.vtab.tasks import get_task

    tfds_dir = workdir / "tfds"
    for task in VTAB_TASKS:
        tfds_fixtures.prepare(tfds_fixtures.DEMO_BUILDERS[task], tfds_dir, shards=1)
        tfds_name = get_task(task).tfds_name
        plan = sources.get_converter("vtab").plan(tfds_dir, ConverterOptions(tfds_name=tfds_name))
        summary = run_pack(plan, store, PackOptions(workers=workers, progress=not quiet))
        print(format_summary(summary), flush=True)
    return True


def build_cog_data(workdir: Path, store: Path, workers: int, quiet: bool) -> CogLevels:
    """The IN-21K layout of the CoG fixture's wnids, packed as COG_SHARDS shards (one
    source to the server), then the levels printed as ``cog levels`` prints them; the levels."""
    from sampler_server.cli.cog_levels_cmd import counts_from_data, summary_lines
    from sampler_server.core.cog import compute_levels
    from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES, cog_counts
    from sampler_server.fixtures.imagenet21k import write_imagenet21k

    fixture = write_imagenet21k(workdir / "imagenet21k", cog_counts(), workers=max(1, workers))
    for index in range(COG_SHARDS):
        plan = sources.get_converter("imagenet21k").plan(
            fixture.input_dir, ConverterOptions(shard=(index, COG_SHARDS)))
        summary = run_pack(plan, store, PackOptions(workers=workers, progress=not quiet))
        print(format_summary(summary), flush=True)
    print("$ sampler-server cog levels --data " + str(store) + " " + " ".join(COG_LEVEL_CONFIG), flush=True)
    levels = compute_levels(counts_from_data(store), level_size=LEVEL_SIZE, min_images=MIN_IMAGES)
    print("\n".join(summary_lines(levels)), flush=True)
    return levels


@dataclass(frozen=True)
class DemoStores:
    """What ``build_demo_stores`` left: the data directory, whether the VTAB leg's stores are
    in it (TFDS installed), how long the VTAB and CoG data took, and the CoG levels in one line."""

    store: Path
    vtab: bool
    vtab_seconds: float
    cog_seconds: float
    cog_levels: str = ""


def build_demo_stores(workdir: Path, classes: int, images_per_class: int, workers: int, quiet: bool, *,
                      vtab: bool = True, cog: bool = True) -> DemoStores:
    """Every store the demo serves, under ``workdir / "store"``: the Meta-Dataset sources, then
    CoG's, while VTAB's are built beside them by another process (TensorFlow's import and the
    TFDS preparation take one core for as long as the other packs take the other). The
    README's quickstart and the docs' examples run against these (``tests/docs``), so what
    they name is what ``make demo`` leaves behind."""
    store = workdir / "store"
    started = time.perf_counter()
    vtab_data = start_vtab_data(workdir, store, workers, quiet) if vtab else None
    try:
        build_data(workdir, classes, images_per_class, workers, quiet)
        levels = ""
        cog_seconds = 0.0
        if cog:
            cog_started = time.perf_counter()
            print(f"\nImageNet-CoG: a test-built IN-21K layout (tars of JPEGs), packed as {COG_SHARDS} shards",
                  flush=True)
            levels = demo_tables.levels_line(build_cog_data(workdir, store, workers, quiet))
            cog_seconds = time.perf_counter() - cog_started
    except BaseException:
        if vtab_data is not None:
            vtab_data[0].kill()
            vtab_data[0].wait()
        raise
    if vtab_data is not None:
        vtab = finish_vtab_data(*vtab_data)
    return DemoStores(store, vtab, time.perf_counter() - started if vtab else 0.0, cog_seconds, levels)


VTAB_DATA_CODE = ("import sys; from pathlib import Path; from sampler_server.cli.demo_cmd import build_vtab_data; "
                  "sys.exit(0 if build_vtab_data(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), "
                  "sys.argv[4] == 'quiet') else 10)")
NO_TFDS_STATUS = 10


def start_vtab_data(workdir: Path, store: Path, workers: int, quiet: bool) -> tuple[subprocess.Popen, Path]:
    """``build_vtab_data`` in a process of its own, its output to a file; the process and the file."""
    log = workdir / "logs" / "vtab-data.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", VTAB_DATA_CODE, str(workdir), str(store), str(workers), "quiet" if quiet else "-"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_environment())
    return process, log


def finish_vtab_data(process: subprocess.Popen, log: Path) -> bool:
    """Wait for ``start_vtab_data``'s process and print what it printed: True when the VTAB
    stores are built, False when tensorflow-datasets is missing (its one line said)."""
    status = process.wait()
    print("\nVTAB: test-built prepared TFDS data of " + ", ".join(VTAB_TASKS) + ", packed with pack vtab", flush=True)
    print(log.read_text(encoding="utf-8", errors="replace").rstrip("\n"), flush=True)
    if status not in (0, NO_TFDS_STATUS):
        raise FailedPrecondition(f"the demo's VTAB data could not be built (exit status {status}; all it said is "
                                 f"in {log})")
    return status == 0


def summary_path(args: argparse.Namespace, leg: str, framework: str) -> Path:
    """Where a leg's run writes its JSON summary (the parity table reads them)."""
    return args.workdir / "summaries" / f"{leg}-{framework}.json"


def trainer_jobs(args: argparse.Namespace, address: str, threads: int) -> list[Job]:
    """Every trainer process of the legs asked for, in ``START_ORDER``: ``python -m
    clients.<framework> ...`` with the demo's arguments, on the CPU with ``threads`` threads."""
    frameworks, workdir = args.frameworks, args.workdir
    checkpoint = str(workdir / "checkpoints-torch" / "checkpoint.pt")
    own = ("--device", "cpu", "--threads", str(threads))
    jobs = [Job(f"md-{framework}", "md", (
        "-m", f"clients.{framework}", "--server", address, "--run", f"demo-{framework}",
        "--sources", *TRAIN_SOURCES, "--eval-sources", *EVAL_SOURCES, "--image-size", str(args.image_size),
        "--train-episodes", str(args.train_episodes), "--eval-episodes", str(args.eval_episodes),
        "--checkpoint-dir", str(workdir / f"checkpoints-{framework}"),
        "--checkpoint-every", str(max(1, args.train_episodes)), "--log-every", "25", *own, *INIT_SEED,
        "--json-summary", str(summary_path(args, "md", framework)))) for framework in frameworks]
    if args.vtab:
        jobs += [Job(f"vtab-{framework}", "vtab", (
            "-m", f"clients.{framework}", "transfer", "--server", address, "--run", f"demo-vtab-{framework}",
            "--tasks", *VTAB_TASKS, *VTAB_RUN, *own, *INIT_SEED,
            "--json-summary", str(summary_path(args, "vtab", framework)))) for framework in frameworks]
        if "torch" in frameworks:  # the control baselines: the model run probes the torch ProtoNet checkpoint
            for role, extra in CONTROL_RUNS.items():
                init = ("--weights", checkpoint) if role == "model" else ()
                jobs.append(Job(f"control-{role}", "baselines", (
                    "-m", "clients.torch", "transfer", "--server", address, "--run", f"demo-control-{role}",
                    "--tasks", *VTAB_TASKS, *VTAB_PROBE, *extra, *init, "--role", role, *own),
                    after=("md-torch",) if role == "model" else ()))
    if args.cog:
        jobs += [Job(f"cog-{framework}", "cog", (
            "-m", f"clients.{framework}", "cog", "--server", address, "--run", f"demo-cog-{framework}",
            *COG_EVAL, *INIT_SEED, "--feature-cache", str(workdir / f"cog-features-{framework}"), *own,
            "--json-summary", str(summary_path(args, "cog", framework)))) for framework in frameworks]
    if "torch" in frameworks:  # MD's learners side by side
        for name in LEARNERS:
            training = LEARNER_TRAINING["batches" if name in BATCH_LEARNERS else "episodes"]
            jobs.append(Job(f"learner-{name}", "learners", (
                "-m", "clients.torch", "--server", address, "--run", learner_run(name), "--sources", *TRAIN_SOURCES,
                "--eval-sources", *LEARNER_SOURCES, *LEARNER_RUN, *training, *LEARNER_FLAGS[name], *own, *INIT_SEED)))
    if "torch" in frameworks:  # a checkpoint in, its card out
        protocols = ",".join(["md"] + (["vtab"] if args.vtab else []) + (["cog"] if args.cog else []))
        jobs.append(Job("evaluate", "evaluate", (
            "-m", "clients.torch", "evaluate", "--server", address, "--run", EVALUATE_RUN, "--weights", checkpoint,
            *EVALUATE, "--protocols", protocols, "--feature-cache", str(workdir / "features-eval"), *own),
            after=("md-torch",)))
    return sorted(jobs, key=lambda job: START_ORDER.index(job.name) if job.name in START_ORDER else len(START_ORDER))


def leg_line(leg: str, jobs: list[Job], times: JobTimes, args: argparse.Namespace) -> str:
    """A leg's progress line: what it ran, and each of its processes' seconds."""
    frameworks = ", ".join(args.frameworks)
    what = {
        "md": f"ProtoNet ({frameworks}) on {len(TRAIN_SOURCES)} sources' train episodes ({args.train_episodes}), "
              f"tested on {len(EVAL_SOURCES)} sources ({args.eval_episodes} episodes each)",
        "vtab": f"the VTAB paper's protocol, steps x 0.001 ({frameworks}) on {', '.join(VTAB_TASKS)}",
        "baselines": "control runs (torch): model and scratch at regimes 20 and 80, max on all the data",
        "cog": f"linear evaluations ({frameworks}) on IN-1K and L1..L5",
        "evaluate": f"the torch trainer's checkpoint on every protocol, reported as {EVALUATE_RUN}",
        "learners": f"MD's {len(LEARNERS)} learners (torch), each trained briefly on the same sources and tested on "
                    f"{len(LEARNER_SOURCES)} sources ({LEARNER_RUN[3]} episodes each)",
    }.get(leg, "done")
    took = ", ".join(f"{job.name} {times.seconds[job.name]:.0f} s" for job in jobs if job.leg == leg)
    return f"{what} ({took})"


def _environment() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": repo + (os.pathsep + path if path else "")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    return env


def start_server(store: Path, log: Path, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """``sampler-server serve`` on ``store``, port 0, all it prints going to ``log``; it and its address."""
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sampler_server", "serve", "--data", str(store), "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_environment(),
        )
    deadline = time.monotonic() + timeout
    while True:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        for line in lines:
            if line.startswith("listening on"):
                return process, line.split()[2]
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise FailedPrecondition(f"the demo server did not start ({lines[-1].strip() if lines else 'no output'}; "
                                     f"all it said is in {log})")
        time.sleep(0.1)


def stop_server(server: subprocess.Popen, log: Path, console: DemoConsole) -> None:
    """SIGTERM (the server drains and exits); the log names the file holding its access log."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    lines = log.read_text(encoding="utf-8", errors="replace").count("\n")
    console.note(f"\nthe server stopped (exit status {server.returncode}); its {lines} lines (one per call) "
                 f"are in {log}")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    with logging_to(args.workdir / LOG_NAME, started) as console:
        console.say(f"sampler-server demo: a line and a table per leg here; everything, the trainers' output too, "
                    f"in {console.log_path}")
        return run_legs(args, console)


def run_legs(args: argparse.Namespace, console: DemoConsole) -> int:
    """The legs (the module's docstring) with ``console`` as the terminal and the log."""
    stores = build_demo_stores(args.workdir, args.classes, args.images_per_class, args.workers, True,
                               vtab=args.vtab, cog=args.cog)
    if args.vtab and not stores.vtab:
        console.say(VTAB_INSTALL)
    args.vtab = stores.vtab
    store = stores.store
    inspect_run(argparse.Namespace(data=store, json=False, classes=False))
    what = [f"{len(md_fixtures())} sources of {args.classes} classes x {args.images_per_class} images"]
    what += [f"VTAB {', '.join(VTAB_TASKS)}"] if args.vtab else []
    what += [f"CoG IN-21K in {COG_SHARDS} shards"] if args.cog else []
    data = (f"{sum(path.is_dir() for path in store.iterdir())} stores in {store} ({'; '.join(what)}) "
            f"in {console.elapsed():.0f} s")
    if args.data_only:
        console.progress("data", data)
        return 0
    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    server, address = start_server(store, logs / "server.log")
    console.progress("data", f"{data}; server on {address}")
    parallel = args.parallel if args.parallel is not None else (2 if cores() >= 2 else 1)
    threads = max(1, cores() // max(1, parallel))
    jobs = trainer_jobs(args, address, threads)
    console.note(f"\n{len(jobs)} trainer processes, {parallel} at a time, {threads} framework thread(s) each")

    def leg_ended(leg: str, so_far: JobTimes) -> None:
        console.progress(leg, leg_line(leg, jobs, so_far, args))
        leg_table(leg, console, args, stores)

    try:
        times = run_jobs(jobs, console, logs, _environment(), parallel, on_leg=leg_ended)
    finally:
        stop_server(server, logs / "server.log", console)
    console.note(f"\ntrainer processes: {', '.join(f'{name} {s:.0f} s' for name, s in times.seconds.items())}; "
                 f"{times.total:.0f} s from the first start to the last end")
    last_tables(console, args, stores)
    console.say(f"\ndemo finished in {console.elapsed():.0f} s; all it printed, the trainers' output too: "
                f"{console.log_path}")
    return 0


def leg_table(leg: str, console: DemoConsole, args: argparse.Namespace, stores: DemoStores) -> None:
    """The table of a leg that has ended (none for data and evaluate: the card, last, reads the
    control-baseline model run too), under a heading that names its runs and the demo's scale."""
    from sampler_server.metrics.store import MetricsStore

    metrics = MetricsStore(stores.store / "metrics.sqlite")
    try:
        _leg_table(leg, console, args, stores, metrics)
    finally:
        metrics.close()


def _leg_table(leg: str, console: DemoConsole, args: argparse.Namespace, stores: DemoStores, metrics: object) -> None:
    frameworks, workdir = args.frameworks, args.workdir
    if leg == "md":
        console.table(f"Meta-Dataset: ProtoNet, runs {', '.join(f'demo-{f}' for f in frameworks)} (demo scale: "
                      f"{args.classes} classes x {args.images_per_class} images per source at {args.image_size} px, "
                      f"{args.train_episodes} training episodes, {args.eval_episodes} test episodes per source)",
                      demo_tables.md_table(metrics, stores.store, [f"demo-{f}" for f in frameworks],
                                           workdir / "plots"))
    elif leg == "vtab":
        console.table("VTAB-1k: the VTAB paper's protocol (demo scale: conv4 at 32 px, its steps x 0.001, "
                      f"{len(VTAB_TASKS)} of its tasks)",
                      demo_tables.vtab_table(metrics, [f"demo-vtab-{f}" for f in frameworks]))
    elif leg == "baselines":
        console.table("control baselines: demo-control-model calibrated against demo-control-scratch and "
                      "demo-control-max (demo scale: regimes 20 and 80, a linear probe of 20 or 40 steps)",
                      demo_tables.calibrated_table(metrics, stores.store, "demo-control-model",
                                                   "demo-control-scratch", "demo-control-max",
                                                   workdir / "plots-calibrated"))
    elif leg == "learners":
        console.table(f"learners: Meta-Dataset's {len(LEARNERS)} learners side by side, ranked by its rule (demo scale: "
                      f"torch, {LEARNER_TRAINING['episodes'][1]} training episodes (5-way 5-shot) or batches at "
                      f"{LEARNER_RUN[1]} px, "
                      f"{LEARNER_RUN[3]} test episodes per source)",
                      demo_tables.md_table(metrics, stores.store, [learner_run(name) for name in LEARNERS],
                                           workdir / "plots-learners"))
    elif leg == "cog":
        runs = [f"demo-cog-{f}" for f in frameworks]
        console.table(f"ImageNet-CoG: linear evaluations, {runs[0]} the baseline (demo scale: "
                      f"{COG_LEVEL_CONFIG[1]} concepts per level, at least {COG_LEVEL_CONFIG[3]} images, "
                      "a tiny random backbone at 32 px, 5 epochs)",
                      demo_tables.cog_table(metrics, runs, workdir / "plots-cog", stores.cog_levels))


def last_tables(console: DemoConsole, args: argparse.Namespace, stores: DemoStores) -> None:
    """The tables that read several legs: framework parity, then the card of the evaluated checkpoint."""
    frameworks, workdir = args.frameworks, args.workdir
    if set(FRAMEWORKS) <= set(frameworks):
        console.table("framework parity: torch and tf from the same initial weights (--init-seed 0), the same "
                      "episodes and batches", demo_tables.parity_table(workdir / "summaries"))
    if "torch" in frameworks:
        from sampler_server.metrics.card import CALIBRATED

        runs = [EVALUATE_RUN] + (["demo-control-model"] if args.vtab else [])
        card = demo_tables.card(stores.store, workdir, runs)
        (workdir / "card.md").write_text(card.split("\n", 1)[1], encoding="utf-8")  # less its command line
        shown = {CALIBRATED.title: "the control baselines' table"} if args.vtab else {}
        console.table(f"the card of {EVALUATE_RUN}, the torch trainer's checkpoint on every protocol (in full: "
                      f"{workdir / 'card.md'}, {workdir / 'card.html'})", demo_tables.card_for_terminal(card, shown),
                      full=card)
