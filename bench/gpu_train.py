"""Episodic training on one GPU: what the model allows against what the trainer gets.

For ProtoNet conv4 at 84 px and ResNet-18 at 126 px (MD variable-way variable-shot
training episodes; bf16 autocast on CUDA; the trainer's ``--batch-norm``, by default md:
the support set's moments normalise the episode, Meta-Dataset's step; ``--models`` also
takes md-conv4 and md-resnet18), in the configurations ``--configs``
(``BUCKETS:COMPILE`` pairs of the trainer's ``--shape-buckets`` and ``--compile``; by
default on:on, on:off and off:off, the last being the loop a user writes), it prints per
configuration:
- model-only episodes/s: the trainer's step over a fixed set of episodes already on
  the device, first pass (shapes new to the process) and second pass (shapes seen); with
  ``--locate``, passes that locate what the end to end loses: beside the trainer's own feed receiving and
  staging the same episodes, one taken per step (``fed_pass``: what the feed costs the
  step), on the feed's freshly staged episodes themselves, and the trainer's own loop
  (``Run.train``) on the warm model (``loop_pass``: what the loop adds);
- end-to-end episodes/s: ``python -m clients.torch`` training on the same episodes
  through a real ``sampler-server serve`` (overall, and over the last window of
  ``--window`` episodes);
- model-only over the last window's episodes alone (warm): episodes range from a few
  dozen images to a thousand, so a window's rate is set by its own mix; the ratios below
  compare the end to end's window with the model on the same episodes;
- the ratio end-to-end (last window) / model-only over that window (target: at least 0.8);
- "vs eager": end-to-end (last window) / the off:off model-only rate over that window, the
  plain eager step on unpadded episodes (targets on one H100: at least 1.3 for conv4 at 84 px,
  at least 1.0 for ResNet-18 at 126 px, with compilation on);
- with compilation, its cost: the first step's seconds (tracing, compiling, running;
  counted in the end-to-end figures) and the graphs compiled; the end-to-end run's compile
  cache (shapes cached at its start, loaded, compiled, steps run eager, seconds loading);
  ``--warm-compile-cache P`` first compiles every size of MD's ladder into the cache with P
  processes, so that the compiled configurations run warm;
- the data-wait share of step time after the first episode (target: under 5%), the
  first episode's wait (target: under 1 s) and the distinct input shapes met;
- per model, the training accuracy over the last window of each configuration against
  off:off's, each with its 95% CI (target: within off:off's interval).

Each MD learner (``--learners``, names of ``clients.md_learners.MODELS``, the trainer's
``--model``, or ``all``): per model of ``--models`` and configuration (``--configs``, default
on:off: the MAML family's inner loop calls the backbone with each step's weights, so the trainer
refuses ``--compile on`` for it), the learner's training model-only (its items received and staged
as the trainer's run does, then two timed passes) against ``python -m clients.torch --model
LEARNER`` end to end, and the ratio end to end (last window) / model-only over that window's
items (target: at least 0.9). Episodic learners train ``--episodes`` episodes; baseline, knn and finetune
train ``--steps`` plain batches (default as many; the trainer's ``--train-steps`` and
``--batch-size``), their rates in batches/s. Each model-only child then counts the host syncs
of one warm step (``SyncCounter``: value reads such as ``.item()`` or Python branching on a
tensor, boolean masks, copies to the CPU, synchronize calls, and on CUDA what
``torch.cuda.set_sync_debug_mode`` reports), for the MAML family per inner step (the step with
one inner step against ``--maml-steps``; target: 0).
``--repeats K`` measures model-only and end to end K times in turn and reports each rate's
median (a host-bound step runs at the CPU's pace, which drifts between measurements).
``--bucket-ratio R [R ...]`` passes the trainer's ``--bucket-ratio`` (its shape buckets' grid);
with several, each bucketed configuration is measured at each ratio, its rows labelled
CONFIG@R, against the one unbucketed row. A finer grid meets more sizes, each costing its
first step: a window is only steady once all were met (600 MD episodes at 1.0625 met their
last new size at episode 443).

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
Every learner: ``.venv/bin/python bench/gpu_train.py --learners all --episodes 200``.
CPU smoke runs: ``.venv/bin/python bench/gpu_train.py --device cpu --episodes 4 --classes 20
--per-class 10 --models conv4:32``, the same with ``--gpus 1 2`` (gloo ranks) and with
``--learners all --window 2``.
Dependencies: torch, numpy, grpcio, lmdb, Pillow and this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from proc_tree import tree_cpu_seconds  # noqa: E402

from clients.buckets import DEFAULT_RATIO  # noqa: E402  (framework-free)
from clients.md_learners import ADAPTING, MODELS, episodic  # noqa: E402  (framework-free)

STORE = "bench_raw{size}"
_RATE = re.compile(r"(?:episode|batch) (\d+)/\d+: .*?; ([0-9.]+) (?:episodes|batches)/s")
LEARNER_CONFIGS = ["on:off"]  # --learners' default: buckets on, compile off (the MAML family refuses compile)


def stop_server(process: subprocess.Popen, data: Path) -> None:
    """Stop a bench's server; its traceback, if it logged one, to stderr."""
    process.terminate()
    process.wait()
    log = (data / "server.log").read_text()
    if "Traceback" in log:
        print(log[log.index("Traceback"):][:3000], file=sys.stderr)


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


def trainer_argv(address: str, backbone: str, size: int, config: str, episodes: int, device: str, log_every: int,
                 batch_norm: str, learner: str = "protonet", bucket_ratio: float = DEFAULT_RATIO) -> list[str]:
    """The trainer's arguments: ``episodes`` training episodes, or as many batches (``--train-steps``)
    for a learner trained on plain batches (baseline, knn, finetune)."""
    buckets, compiled = config.split(":")
    length = ["--train-episodes" if episodic(learner) else "--train-steps", str(episodes)]
    # --run-id, not --run: under torchrun, its own parser would take --run for an abbreviation of --run-path
    return ["--server", address, "--run-id",
            f"gpu-bench-{learner}-{backbone}-{size}-{buckets}-{compiled}-{time.time_ns()}",
            "--model", learner, "--sources", STORE.format(size=size),
            "--image-size", str(size), "--backbone", backbone, *length,
            "--eval-episodes", "0", "--shape-buckets", buckets, "--compile", compiled, "--device", device,
            "--log-every", str(log_every), "--batch-norm", batch_norm, "--bucket-ratio", repr(bucket_ratio)]


# ---- children: one measurement each, in a fresh process -----------------------------------


def child_model(args: argparse.Namespace) -> dict:
    """The trainer's step on items 0..N-1 (episodes, or a batch learner's batches) held on the
    device, received and staged as the trainer's own run does it: two timed passes, then the
    host syncs of a step (``step_syncs``; the MAML family's per inner step)."""
    import torch

    from clients.md_train import Run
    from clients.torch.md_train import TorchFramework
    from clients.trainer_args import parse_args

    framework = TorchFramework(parse_args("torch", trainer_argv(args.address, args.backbone, args.size, args.config,
                                                                args.episodes, args.device, args.episodes,
                                                                args.batch_norm, args.learner, args.ratio)))
    run = Run(framework, lambda line: None)
    run.check_names()  # a batch learner's classes: its head's size
    feed = run.feed(0)
    assert feed is not None
    try:
        received = [next(feed) for _ in range(args.episodes)]
    finally:
        feed.close()
    staged = [item for _, item, _ in received]
    cuda = framework.torch_device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    framework.build(sum(run.class_counts))
    sync()
    rates, losses = [], []
    for _ in range(2):
        started = time.perf_counter()
        for item in staged:
            losses.append(framework.train_step(item)[0])
        sync()
        rates.append(len(staged) / (time.perf_counter() - started))
    framework.to_floats(losses)
    window = window_pass(framework, staged[-args.window:], sync)
    located = {}
    if args.locate:
        located = {"model_fed": fed_pass(run, framework, staged, sync),
                   "model_used": fed_pass(run, framework, staged, sync, use_fed=True),
                   "model_loop": loop_pass(run, sync)}
    images = sum(count for _, _, count in received) / len(received)
    padded = sum(item.images.shape[0] for item in staged) / len(staged)
    return {"model_first": rates[0], "model_second": rates[1], "model_window": window, **located,
            "shapes": len(framework.shapes), "model_graphs": framework.compiled_graphs,
            "mean_images": images, "mean_rows": padded, **step_syncs(framework, staged[0]),
            "device": torch.cuda.get_device_name() if cuda else "cpu"}


def window_pass(framework: Any, items: list, sync: Callable[[], None]) -> float:
    """Items/s of the warm step over the end to end's last window's items alone: episodes
    range from a few dozen images to a thousand, so a window's rate is set by its own mix and
    is compared with the model's rate on the same items, not with the whole pass's."""
    losses = []
    sync()
    started = time.perf_counter()
    for item in items:
        losses.append(framework.train_step(item)[0])
    sync()
    seconds = time.perf_counter() - started
    framework.to_floats(losses)
    return len(items) / seconds


def fed_pass(run: Any, framework: Any, staged: list, sync: Callable[[], None], use_fed: bool = False) -> float:
    """Items/s of a pass of the step beside the trainer's own feed receiving and staging the
    same items again, one taken per step as the end to end takes them; the waits for them are
    left out. The step runs over the items held on the device (the taken one dropped), or with
    ``use_fed`` over the taken items themselves. Against the second pass: what receiving and
    staging in the trainer's process cost the step; the two against each other: what stepping
    on freshly staged items costs (the stream waits on their copies, the allocator's reuse);
    against the end to end: what the rest of the trainer's loop costs."""
    feed = run.feed(0)
    assert feed is not None
    try:
        taken = next(feed)[1]  # the stream's start is not the step's cost
        waited, losses = 0.0, []
        sync()
        started = time.perf_counter()
        for position, item in enumerate(staged):
            step_on = taken if use_fed else item
            if position + 1 < len(staged):
                began = time.perf_counter()
                taken = next(feed)[1]
                waited += time.perf_counter() - began
            losses.append(framework.train_step(step_on)[0])
        sync()
        seconds = time.perf_counter() - started - waited
    finally:
        feed.close()
    framework.to_floats(losses)
    return len(staged) / seconds


def loop_pass(run: Any, sync: Callable[[], None]) -> float:
    """Items/s of the trainer's own loop (``Run.train`` over its feed) on the warmed model, the
    first item's wait left out. Against the pass on the feed's items: what the loop adds; against
    the end to end: what a fresh process still warming costs."""
    sync()
    summary = run.train(run.feed(0))
    return summary.steps / max(summary.seconds - summary.first_wait_seconds, 1e-9)


def child_warm(args: argparse.Namespace) -> dict:
    """Compile the trainer's step for every ``--warm-shard``-th size of MD's ladder (the sizes
    episodes of at most 1000 images pad to) into the trainer's default compile cache, as the
    trainer's background compiler does (``compile_ahead.compile_shapes``, in this process)."""
    import queue

    import torch

    from clients.buckets import Ladder
    from clients.compile_cache import CompileCache, default_compile_cache
    from clients.torch.backbones import load_backbone
    from clients.torch.compile_ahead import AheadSpec, compile_key, compile_shapes, numerics
    from clients.torch.determinism import apply_determinism
    from clients.torch.md_train import MD_BACKBONE_SEED_NAME
    from clients.trainer_args import MD_IMAGE_SIZE, parse_args

    trainer = parse_args("torch", trainer_argv(args.address, args.backbone, args.size, args.config, 1, args.device,
                                               1, args.batch_norm, args.learner, args.ratio))
    device = torch.device(args.device)
    apply_determinism(trainer, device)
    loaded = load_backbone(trainer, device, MD_IMAGE_SIZE, MD_BACKBONE_SEED_NAME)
    key = compile_key(trainer, loaded.preprocessing, "bf16-autocast" if device.type == "cuda" else "float32", device)
    del loaded
    index, count = map(int, args.warm_shard.split("/"))
    shapes: queue.Queue = queue.Queue()
    mine = Ladder(ratio=args.ratio, cap=1000).sizes()[index::count]
    for rows in mine:
        shapes.put(rows)
    shapes.put(None)
    cache = default_compile_cache()
    compile_shapes(AheadSpec(args=trainer, device=str(device), default_size=MD_IMAGE_SIZE,
                             seed_name=MD_BACKBONE_SEED_NAME, deterministic=key.deterministic,
                             warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                             threads=torch.get_num_threads(), numerics=numerics()), str(cache), key, shapes)
    return {"shapes": len(mine), "cached": len(CompileCache(cache).cached_rows(key))}


def warm_compile_cache(args: argparse.Namespace, address: str, backbone: str, size: int, config: str,
                       ratio: float) -> None:
    """``--warm-compile-cache P``: every ladder size compiled into the compile cache by P
    processes at once before the measurements, so a compiled configuration runs warm."""
    started = time.perf_counter()
    processes = args.warm_compile_cache
    children = [subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", "warm", "--address", address, "--backbone",
         backbone, "--size", str(size), "--config", config, "--device", args.device, "--batch-norm",
         args.batch_norm, "--ratio", repr(ratio), "--warm-shard", f"{k}/{processes}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()) for k in range(processes)]
    results = []
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"warming the compile cache for {backbone} {size}px failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{backbone} {size}px: compile cache warmed, {max(r['cached'] for r in results)} ladder sizes cached, in "
          f"{time.perf_counter() - started:.1f} s with {processes} processes", flush=True)


# ---- host syncs of a training step -------------------------------------------------------------

SYNC_OPS = frozenset({"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
                      "aten._unique2.default", "aten.unique_consecutive.default", "aten.unique_dim.default",
                      "aten.repeat_interleave.Tensor", "aten.equal.default", "aten.is_nonzero.default",
                      "aten.allclose.default"})
"""ATen ops whose result the host must wait for (a value read, or an output sized by the data)."""
SYNC_METHODS = frozenset({"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"})
"""Tensor methods that read a value on the host (Python branching on a tensor is ``__bool__``)."""


class SyncCounter:
    """Within: every host read of a tensor value, by name: the tensor methods of ``SYNC_METHODS``
    and copies to the CPU (a torch function mode), the ATen ops of ``SYNC_OPS`` and boolean
    indexing (a dispatch mode, so the backward pass's ops are seen too), calls of
    ``torch.cuda.synchronize`` and of a CUDA stream's or event's ``synchronize``, and on CUDA
    what ``torch.cuda.set_sync_debug_mode("warn")`` reports. On CPU it finds the same code
    patterns (a value read is a value read on any device); CUDA's own count is the last."""

    def __init__(self) -> None:
        self.found: list[str] = []  # "what at file:line", the line the read comes from

    @staticmethod
    def where() -> str:
        """The innermost caller outside this file and torch's mode machinery: the line to change."""
        import traceback

        here = str(Path(__file__).resolve()).replace(os.sep, "/")
        for frame in reversed(traceback.extract_stack()[:-2]):
            path = frame.filename.replace(os.sep, "/")
            if path == here or "torch/_dynamo/" in path or path.endswith(
                    ("torch/overrides.py", "torch/utils/_python_dispatch.py", "torch/_tensor.py", "torch/_compile.py",
                     "contextlib.py")):
                continue
            short = path.split("site-packages/")[-1].removeprefix(str(REPO).replace(os.sep, "/") + "/")
            return f"{short}:{frame.lineno}"
        return "?"

    def __enter__(self) -> "SyncCounter":
        import contextlib
        import warnings

        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        found = self.found

        class Methods(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                name = getattr(func, "__name__", "")
                if name in SYNC_METHODS:
                    found.append(f"Tensor.{name} at {SyncCounter.where()}")
                elif (name == "to" and args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu"
                      and isinstance(result, torch.Tensor) and result.device.type == "cpu"):
                    found.append(f"Tensor.to(cpu) at {SyncCounter.where()}")
                return result

        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(func)
                if name in SYNC_OPS:
                    found.append(f"{name} at {SyncCounter.where()}")
                elif name.startswith("aten.index.") and any(
                        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]):
                    found.append(f"{name} (boolean mask) at {SyncCounter.where()}")
                elif name == "aten._to_copy.default":
                    target = (kwargs or {}).get("device")
                    if args[0].device.type != "cpu" and target is not None and torch.device(target).type == "cpu":
                        found.append(f"{name} (to the CPU) at {SyncCounter.where()}")
                elif name == "aten.copy_.default" and args[0].device.type == "cpu" and args[1].device.type != "cpu":
                    found.append(f"{name} (to the CPU) at {SyncCounter.where()}")
                return func(*args, **(kwargs or {}))

        self._stack = contextlib.ExitStack()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            self._warnings = self._stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
            previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
            self._stack.callback(torch.cuda.set_sync_debug_mode, previous)
        for owner, attribute, label in ((torch.cuda, "synchronize", "torch.cuda.synchronize"),
                                        (torch.cuda.Event, "synchronize", "Event.synchronize"),
                                        (torch.cuda.Stream, "synchronize", "Stream.synchronize")):
            original = getattr(owner, attribute)

            def counted(*a, _original=original, _label=label, **k):
                found.append(f"{_label} at {SyncCounter.where()}")
                return _original(*a, **k)

            setattr(owner, attribute, counted)
            self._stack.callback(setattr, owner, attribute, original)
        self._stack.enter_context(Methods())
        self._stack.enter_context(Ops())
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
        for warning in getattr(self, "_warnings", []):
            if "called a synchronizing CUDA operation" in str(warning.message):  # not the prototype notice
                self.found.append("cuda sync debug: " + str(warning.message).split("\n")[0][:80])


def counted_step_syncs(framework: Any, item: Any) -> list[str]:
    """The host syncs of one ``train_step(item)`` (``SyncCounter``), the device drained first."""
    import torch

    if framework.torch_device.type == "cuda":
        torch.cuda.synchronize()
    with SyncCounter() as counter:
        framework.train_step(item)
    return counter.found


def step_syncs(framework: Any, item: Any) -> dict:
    """Host syncs of a warm training step; for the MAML family (``framework.train_loop``) also per
    inner step: the step counted with one inner step and with ``max(2, --maml-steps)``, the
    difference over the steps between (so what a step does once, the in-flight bound's one wait
    on CUDA included, cancels)."""
    import dataclasses

    loop = framework.train_loop
    if loop is None:
        found = counted_step_syncs(framework, item)
        return {"syncs_per_step": len(found), "syncs_per_inner_step": None, "sync_names": sorted(set(found))}
    many = max(2, loop.steps)
    try:
        framework.train_loop = dataclasses.replace(loop, steps=1)
        once = counted_step_syncs(framework, item)
        framework.train_loop = dataclasses.replace(loop, steps=many)
        counted = counted_step_syncs(framework, item)
    finally:
        framework.train_loop = loop
    per_inner = (len(counted) - len(once)) / (many - 1)
    extra = list(counted)
    for name in once:  # what the longer loop did beyond the shorter one's
        if name in extra:
            extra.remove(name)
    return {"syncs_per_step": len(counted), "syncs_per_inner_step": per_inner,
            "sync_names": sorted(set(counted)), "inner_sync_names": sorted(set(extra))}


def child_e2e(args: argparse.Namespace) -> dict:
    """``python -m clients.torch`` as a user runs it; its summary and its last window's rate."""
    with tempfile.TemporaryDirectory() as scratch:
        summary_path = Path(scratch) / "summary.json"
        argv = [sys.executable, "-m", "clients.torch",
                *trainer_argv(args.address, args.backbone, args.size, args.config, args.episodes, args.device,
                              args.window, args.batch_norm, args.learner, args.ratio), "--json-summary",
                str(summary_path)]
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
            "compile_cache": train.get("compile_cache"),
            "first_line": next((line for line in done.stderr.splitlines() if ": run " in line), "")}


# ---- the parent: store, server, children, table ---------------------------------------------


def measurements(args: argparse.Namespace) -> list[tuple[str, str, float]]:
    """(row label, BUCKETS:COMPILE, bucket ratio) of each configuration: a bucketed one once per
    ``--bucket-ratio`` (labelled CONFIG@R when there are several), an unbucketed one once."""
    rows = []
    for config in args.configs:
        ratios = args.bucket_ratio if config.startswith("on:") else args.bucket_ratio[:1]
        rows.extend((config if len(ratios) == 1 else f"{config}@{ratio:g}", config, ratio) for ratio in ratios)
    return rows


def length(args: argparse.Namespace, learner: str) -> int:
    """Training items per measurement: ``--episodes``, or ``--steps`` batches for a batch learner."""
    return args.episodes if episodic(learner) or args.steps is None else args.steps


def run_child(kind: str, args: argparse.Namespace, address: str, backbone: str, size: int, config: str,
              learner: str = "protonet", ratio: float = DEFAULT_RATIO) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--address", address, "--backbone",
            backbone, "--size", str(size), "--config", config, "--episodes", str(length(args, learner)), "--device",
            args.device, "--window", str(args.window), "--batch-norm", args.batch_norm, "--learner", learner,
            "--ratio", repr(ratio), *(["--locate"] if args.locate else [])]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(),
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {learner} {backbone} {size}px {config} failed:\n{done.stderr[-3000:]}")
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
                                                         args.device, args.window, args.batch_norm,
                                                         bucket_ratio=args.bucket_ratio[0]),
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
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="with --learners: training batches per measurement of a learner trained on plain "
                             "batches (baseline, knn, finetune; default --episodes): their steps are short")
    parser.add_argument("--window", type=int, default=100, help="episodes in the end-to-end rate's last window")
    parser.add_argument("--models", nargs="+", default=["conv4:84", "resnet18:126"], metavar="BACKBONE:PX")
    parser.add_argument("--learners", nargs="+", metavar="LEARNER",
                        help="MD learners (the trainer's --model: " + ", ".join(MODELS) + "; or all): each one's "
                             "training, model-only against end to end, per --models, in --configs (default on:off)")
    parser.add_argument("--configs", nargs="+", metavar="BUCKETS:COMPILE",
                        help="trainer --shape-buckets and --compile per measurement (on or off each; default on:on "
                             "on:off off:off, with --learners on:off); vs eager needs off:off; --gpus runs the first")
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
    parser.add_argument("--bucket-ratio", nargs="+", type=float, default=[DEFAULT_RATIO], metavar="R",
                        help="the trainer's --bucket-ratio (its shape buckets' grid); several: each bucketed "
                             "configuration measured at each, its rows labelled CONFIG@R")
    parser.add_argument("--locate", action="store_true",
                        help="also time the passes that locate what the end to end loses (beside the feed, on its "
                             "items, in the trainer's loop)")
    parser.add_argument("--repeats", type=int, default=1, metavar="K",
                        help="with --learners: K model-only and end-to-end measurements of each learner, in turn; "
                             "the table gives each rate's median (a host-bound step follows the CPU's pace, which "
                             "drifts)")
    parser.add_argument("--warm-compile-cache", type=int, default=0, metavar="P",
                        help="before a configuration with compile on: compile the step for every size of MD's ladder "
                             "into the trainer's compile cache with P processes at once (0: the cache as it is)")
    parser.add_argument("--child", choices=["model", "e2e", "warm"], help=argparse.SUPPRESS)
    parser.add_argument("--ratio", type=float, default=DEFAULT_RATIO, help=argparse.SUPPRESS)
    parser.add_argument("--warm-shard", default="0/1", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--backbone", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--learner", default="protonet", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.learners is not None:
        args.learners = list(MODELS) if args.learners == ["all"] else args.learners
        unknown = [name for name in args.learners if name not in MODELS]
        if unknown:
            parser.error(f"--learners: got {' '.join(unknown)}, expected names of {', '.join(MODELS)} (or all)")
        if args.gpus:
            parser.error("--learners: one GPU only; expected no --gpus")
    if args.warm_compile_cache < 0:
        parser.error(f"--warm-compile-cache: got {args.warm_compile_cache}, expected at least 0")
    if args.repeats < 1:
        parser.error(f"--repeats: got {args.repeats}, expected at least 1")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps: got {args.steps}, expected at least 1")
    if args.configs is None:
        args.configs = list(LEARNER_CONFIGS) if args.learners else ["on:on", "on:off", "off:off"]
    if args.episodes < 1 or args.window < 1:
        parser.error(f"--episodes/--window: got {args.episodes}/{args.window}, expected at least 1")
    for model in args.models:
        backbone, _, size = model.partition(":")
        if backbone not in ("conv4", "resnet18", "md-conv4", "md-resnet18") or not size.isdigit():
            parser.error(f"--models: got {model!r}, expected conv4:PX, resnet18:PX, md-conv4:PX or md-resnet18:PX")
    for config in args.configs:
        if config.count(":") != 1 or not set(config.split(":")) <= {"on", "off"}:
            parser.error(f"--configs: got {config!r}, expected BUCKETS:COMPILE, each on or off (e.g. on:on)")
    if not all(1.0 < ratio <= 2.0 for ratio in args.bucket_ratio):
        parser.error(f"--bucket-ratio: got {args.bucket_ratio}, expected numbers in (1, 2]")
    if args.gpus and min(args.gpus) < 1:
        parser.error(f"--gpus: got {args.gpus}, expected rank counts of at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        result = {"model": child_model, "e2e": child_e2e, "warm": child_warm}[args.child](args)
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
        if args.learners:
            return 1 if main_learners(args, data) else 0
        process, address = start_server(data, args.workers, args.lookahead_mb)
        try:
            for model in args.models:
                backbone, _, size = model.partition(":")
                for label, config, ratio in measurements(args):
                    if args.warm_compile_cache and config.endswith(":on"):
                        warm_compile_cache(args, address, backbone, int(size), config, ratio)
                    result = {**run_child("model", args, address, backbone, int(size), config, ratio=ratio),
                              **run_child("e2e", args, address, backbone, int(size), config, ratio=ratio)}
                    rows.append((backbone, int(size), label, result))
                    compiled = (f"; compiled: first step {result['compile_seconds']:.1f} s, "
                                f"{result['graphs']} graph(s)") if result["compile_seconds"] is not None else ""
                    if result.get("compile_cache"):
                        cache = result["compile_cache"]
                        compiled += (f"; end to end's compile cache: {cache['shapes_cached_at_start']} shapes at the "
                                     f"start, {cache['hits']} graphs loaded, {cache['misses']} compiled in the "
                                     f"trainer, {cache['eager_steps']} steps eager while compiling, "
                                     f"{cache.get('preload_seconds', 0):.1f} s loading them at the first step")
                    print(f"{backbone} {size}px buckets:compile {label} on {result['device']}: model-only "
                          f"{result['model_first']:.1f} / {result['model_second']:.1f} episodes/s "
                          f"(first / second pass), {result['model_window']:.1f} over the last window's episodes, "
                          f"{located_text(result)}end to end {result['e2e']:.1f} overall, {result['e2e_last']:.1f} "
                          f"last window; ratio "
                          f"{result['e2e_last'] / result['model_window']:.2f}; data wait after the first episode "
                          f"{result['wait_after_first']:.1%}; first episode waited {result['first_wait']:.2f} s; "
                          f"{result['shapes']} distinct shapes ({result['mean_images']:.0f} images per episode, "
                          f"{result['mean_rows']:.0f} rows fed){compiled}\n  {result['first_line']}", flush=True)
        finally:
            stop_server(process, data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows, args.window)
    return 0


# ---- each MD learner: model-only against end to end -----------------------------------------


def main_learners(args: argparse.Namespace, data: Path) -> list[str]:
    """Per model and learner (and configuration): the model-only child, then the trainer end to end;
    the measurements that failed (the others still run)."""
    process, address = start_server(data, args.workers, args.lookahead_mb)
    rows, failed = [], []
    try:
        for model in args.models:
            backbone, _, size = model.partition(":")
            for learner in args.learners:
                for label, config, ratio in measurements(args):
                    if learner in ADAPTING and config.endswith(":on"):
                        print(f"{learner} {backbone} {size}px {label}: skipped (the inner loop runs eager; the "
                              "trainer refuses --compile on)", flush=True)
                        continue
                    try:
                        result = alternated([{**run_child("model", args, address, backbone, int(size), config,
                                                          learner, ratio),
                                              **run_child("e2e", args, address, backbone, int(size), config, learner,
                                                          ratio)}
                                             for _ in range(args.repeats)])
                    except RuntimeError as error:  # the other learners' rows still come
                        print(f"{learner} {backbone} {size}px {label}: FAILED: {error}", flush=True)
                        failed.append(f"{learner} {backbone} {size}px {label}")
                        continue
                    rows.append((learner, backbone, int(size), label, result))
                    unit = "episodes" if episodic(learner) else "batches"
                    inner = (f", {result['syncs_per_inner_step']:g} per inner step"
                             + (f" ({', '.join(result['inner_sync_names'])})" if result["inner_sync_names"] else "")
                             if result["syncs_per_inner_step"] is not None else "")
                    print(f"{learner} {backbone} {size}px {label} on {result['device']}: model-only "
                          f"{result['model_first']:.1f} / {result['model_second']:.1f} {unit}/s (first / second "
                          f"pass), {result['model_window']:.1f} over the last window's items, "
                          f"{located_text(result)}end to end {result['e2e']:.1f} "
                          f"overall, {result['e2e_last']:.1f} last window; "
                          f"ratio {result['e2e_last'] / result['model_window']:.2f}; data wait after the first "
                          f"{result['wait_after_first']:.1%}; {result['mean_images']:.0f} images per item, "
                          f"{result['shapes']} shapes; host syncs per step {result['syncs_per_step']}"
                          f"{inner}: {', '.join(result['sync_names']) or 'none'}\n  {result['first_line']}",
                          flush=True)
    finally:
        stop_server(process, data)
    print_learners(rows)
    if failed:
        print(f"failed: {'; '.join(failed)}", file=sys.stderr)
    return failed


RATES = ("model_first", "model_second", "model_window", "e2e", "e2e_last")
LOCATING = ("model_fed", "model_used", "model_loop")  # --locate's passes


def located_text(result: dict) -> str:
    """``--locate``'s rates, as the printed line's words (empty without them)."""
    if "model_fed" not in result:
        return ""
    return (f"{result['model_fed']:.1f} beside a live feed, {result['model_used']:.1f} on its items, "
            f"{result['model_loop']:.1f} in the trainer's loop, ")


def alternated(results: list[dict]) -> dict:
    """One learner's ``--repeats`` (model-only, end to end) pairs, measured in turn: each rate
    their median, so a drift of the host's speed between measurements (a host-bound step runs
    at the CPU's pace) weighs on both sides alike; ``pairs``: each pair's model 2nd / e2e last."""
    merged = {**results[0], **{name: float(statistics.median(r[name] for r in results))
                               for name in RATES + LOCATING if name in results[0]}}
    merged["pairs"] = [(r["model_window"], r["e2e_last"]) for r in results]
    return merged


def versus_eager(rows: list[tuple[str, str, int, str, dict]]) -> list[float | None]:
    """Per row, its end to end (last window) over the same learner's and backbone's off:off
    model-only rate on the same window's items, the plain eager step once its shapes are seen
    (None without an off:off row): issue 40's measure of a bucketed step (at least 0.95 at
    conv4, 0.9 at ResNet-18)."""
    eager = {(learner, backbone, size): r["model_window"] for learner, backbone, size, config, r in rows
             if config == "off:off"}
    return [r["e2e_last"] / eager[(learner, backbone, size)] if (learner, backbone, size) in eager else None
            for learner, backbone, size, config, r in rows]


def print_learners(rows: list[tuple[str, str, int, str, dict]]) -> None:
    print()
    width = max([7, *(len(row[3]) for row in rows)])
    print(f"{'learner':11} {'unit':8} {'backbone':9} {'px':>4} {'config':{width}} {'model 1st':>9} {'model 2nd':>9} "
          f"{'model win':>9} {'e2e':>7} {'e2e last':>8} {'ratio':>6} {'vs eager':>8} {'wait':>6} {'syncs':>5} "
          f"{'/inner':>6}")
    for (learner, backbone, size, config, r), versus in zip(rows, versus_eager(rows), strict=True):
        inner = f"{r['syncs_per_inner_step']:6g}" if r["syncs_per_inner_step"] is not None else f"{'-':>6}"
        eager = f"{versus:8.2f}" if versus is not None else f"{'-':>8}"
        unit = "episodes" if episodic(learner) else "batches"
        print(f"{learner:11} {unit:8} {backbone:9} {size:>4} {config:{width}} {r['model_first']:9.1f} "
              f"{r['model_second']:9.1f} {r['model_window']:9.1f} {r['e2e']:7.1f} {r['e2e_last']:8.1f} "
              f"{r['e2e_last'] / r['model_window']:6.2f} {eager} {r['wait_after_first']:6.1%} "
              f"{r['syncs_per_step']:5d} {inner}")
    print("rates: items/s (episodes, or a batch learner's batches), each the median of --repeats alternated "
          "measurements; model win: the warm step over the end to end's last window's items; ratio: e2e last / "
          "model win (target: at least 0.9); vs eager: e2e last / the same learner's off:off model win "
          "(--configs on:off off:off; target: 0.95 at conv4, 0.9 at ResNet-18); "
          "syncs: host syncs counted in one warm step, /inner: per inner step of the MAML family (target: 0)")
    for learner, backbone, size, config, r in rows:
        if len(r["pairs"]) > 1:
            print(f"{learner} {backbone} {size}px {config}: model win / e2e last in turn: "
                  + ", ".join(f"{model:.1f} / {e2e:.1f}" for model, e2e in r["pairs"]))


def print_table(rows: list[tuple[str, int, str, dict]], window: int) -> None:
    eager = {(backbone, size): r["model_window"] for backbone, size, config, r in rows if config == "off:off"}
    print()
    width = max([7, *(len(row[2]) for row in rows)])
    print(f"{'backbone':9} {'px':>4} {'config':{width}} {'model 1st':>9} {'model 2nd':>9} {'model win':>9} {'e2e':>7} "
          f"{'e2e last':>8} "
          f"{'ratio':>6} {'vs eager':>8} {'wait':>6} {'1st wait':>8} {'shapes':>6} {'compile':>8} {'graphs':>6}")
    for backbone, size, config, r in rows:
        base = eager.get((backbone, size))
        versus = f"{r['e2e_last'] / base:8.2f}" if base else f"{'-':>8}"
        compile_time = f"{r['compile_seconds']:7.1f}s" if r["compile_seconds"] is not None else f"{'-':>8}"
        print(f"{backbone:9} {size:>4} {config:{width}} {r['model_first']:9.1f} {r['model_second']:9.1f} "
              f"{r['model_window']:9.1f} {r['e2e']:7.1f} {r['e2e_last']:8.1f} {r['e2e_last'] / r['model_window']:6.2f} "
              f"{versus} {r['wait_after_first']:6.1%} "
              f"{r['first_wait']:7.2f}s {r['shapes']:6d} {compile_time} {r['graphs'] if r['graphs'] else '-':>6}")
    print("config: trainer --shape-buckets:--compile; model win: the warm step over the end to end's last window's "
          "episodes; ratio: e2e last / model win; vs eager: e2e last / the off:off model win")
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
