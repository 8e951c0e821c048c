"""The background compiler of ``--compile``: a process of its own that compiles each bucket
shape the run meets into the compile cache while the run trains that shape eager.

Why a process: compiling one shape takes 10-35 s on a GPU (bench/README.md), most of it on
the CPU (tracing, inductor's code generation, autotuning). On the training thread that
would stop training for minutes over the ~21 shapes of an MD run; in a thread it would
compete for the interpreter. The child builds the same backbone from the trainer's own
arguments (``load_backbone``), compiles the same function (``CompiledEmbedding``, static
shapes) forward and backward under the same precision and determinism switch, and PyTorch
writes the result to the shared cache; the trainer then loads it in about a second
(``CompiledEmbedding.__call__`` asks ``ready``). The child's weights are random: compiled code
does not depend on parameter values.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import queue as queue_module
import sys
from dataclasses import dataclass
from typing import Any

import torch

from clients.compile_cache import CompileCache, CompileKey

CLOSE_SECONDS = 60.0  # how long ``close`` waits for the child to finish the shapes asked for


@dataclass(frozen=True)
class AheadSpec:
    """What the child needs to build and compile the trainer's step."""

    args: argparse.Namespace  # the trainer's (backbone, weights, preprocessing flags, seed, batch norm)
    device: str
    default_size: int
    seed_name: str
    deterministic: bool
    warn_only: bool
    threads: int
    numerics: dict[str, Any]  # the parent's float32 switches (``numerics``)
    backend: str = "inductor"


def compile_key(args: argparse.Namespace, preprocessing: Any, precision: str, device: torch.device) -> CompileKey:
    """The key of the trainer's compiled step (``clients.compile_cache``), in force now: the
    determinism switch and the thread count as this process has them."""
    return CompileKey(backbone=args.backbone, image_size=args.image_size, preprocessing=repr(preprocessing),
                      batch_norm=args.batch_norm, precision=precision,
                      deterministic=torch.are_deterministic_algorithms_enabled(),
                      device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                      versions=f"torch {torch.__version__}, {torch.get_num_threads()} threads")


# the process-wide float32 switches under ``torch.backends`` that enter PyTorch's compile-cache
# keys besides the graph (``cuda_matmul_settings`` among them), most general first
NUMERIC_SWITCHES = ("fp32_precision", "cuda.matmul.fp32_precision",
                    "cuda.matmul.allow_fp16_reduced_precision_reduction",
                    "cuda.matmul.allow_bf16_reduced_precision_reduction", "cudnn.fp32_precision",
                    "cudnn.conv.fp32_precision", "mkldnn.fp32_precision", "mkldnn.matmul.fp32_precision",
                    "mkldnn.conv.fp32_precision")


def _switch(path: str) -> tuple[Any, str]:
    owner, _, name = f"backends.{path}".rpartition(".")
    return functools.reduce(getattr, owner.split("."), torch), name


def numerics() -> dict[str, Any]:
    """This process's values of ``NUMERIC_SWITCHES`` (those this torch has)."""
    values = {}
    for path in NUMERIC_SWITCHES:
        owner, name = _switch(path)
        if hasattr(owner, name):
            values[path] = getattr(owner, name)
    return values


def apply_numerics(values: dict[str, Any]) -> None:
    """The parent's switches in the child, each set only where it differs: setting a legacy
    flag to its default (``allow_tf32 = False``) would still turn ``none`` into ``ieee``, and the
    key with it."""
    for path, value in values.items():
        owner, name = _switch(path)
        if getattr(owner, name, value) != value:
            setattr(owner, name, value)


class CompileAhead:
    """The child process and the shapes it was asked for and has finished."""

    def __init__(self, spec: AheadSpec, cache: CompileCache, key: CompileKey) -> None:
        self.cache, self.key = cache, key
        self.cached = set(cache.cached_rows(key))
        self.asked: set[int] = set()
        context = multiprocessing.get_context("spawn")  # a CUDA parent cannot fork a CUDA child
        self._queue: Any = context.Queue()
        # started at the first shape the cache lacks: a run whose shapes are all cached needs no child
        self.process = context.Process(target=compile_shapes, args=(spec, str(cache.root), key, self._queue),
                                       name="compile-ahead", daemon=True)

    def ready(self, rows: int) -> bool:
        """Whether the step of ``rows`` rows can be taken compiled now (loaded from the cache);
        the first time a shape is not ready, the child is asked to compile it. A child that
        died leaves every shape to be compiled in the trainer."""
        if rows in self.cached:
            return True
        if rows in self.cache.cached_rows(self.key):
            self.cached.add(rows)
            return True
        if self.process.pid is None:
            self.process.start()
        if rows not in self.asked:
            self.asked.add(rows)
            self._queue.put(rows)
        return not self.process.is_alive()

    def close(self) -> None:
        """Stop the child once it has compiled the shapes it was asked for (so that the next
        run finds them), waiting at most ``CLOSE_SECONDS``; then it is terminated (a
        half-written cache entry is PyTorch's to ignore)."""
        if self.process.pid is None:
            return
        with contextlib.suppress(OSError, ValueError):  # a broken queue: the child is terminated below
            self._queue.put(None)
        self.process.join(CLOSE_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(CLOSE_SECONDS)
            left = sorted(self.asked - self.cache.cached_rows(self.key))
            if left:  # said, so that a next run that compiles them again is no mystery
                shown = ", ".join(map(str, left))
                print(f"compile ahead: stopped after {CLOSE_SECONDS:g} s with {len(left)} bucket shape(s) "
                      f"not yet compiled (rows {shown}); the next run with this --compile-cache compiles them",
                      file=sys.stderr, flush=True)
        self._queue.close()


def compile_shapes(spec: AheadSpec, root: str, key: CompileKey, shapes: Any) -> None:
    """The child: compile each shape from ``shapes`` (a queue of row counts; None ends it) into
    the cache at ``root``, recording each when forward and backward are compiled."""
    from clients.batch_norm import EPISODE_MOMENTS
    from clients.torch.backbones import autocast, load_backbone
    from clients.torch.compiled import CompiledEmbedding, use_compile_cache
    from clients.torch.layers import adopt_batch_norms

    cache = CompileCache(root)
    use_compile_cache(cache)
    torch.set_num_threads(spec.threads)
    apply_numerics(spec.numerics)
    torch.use_deterministic_algorithms(spec.deterministic, warn_only=spec.warn_only)
    device = torch.device(spec.device)
    loaded = load_backbone(spec.args, device, spec.default_size, spec.seed_name)
    backbone = loaded.model
    if spec.args.batch_norm in EPISODE_MOMENTS:
        adopt_batch_norms(backbone, spec.args.batch_norm)
    backbone.train()
    embedding = CompiledEmbedding(backbone, loaded.preprocessing, device, backend=spec.backend, dynamic=False,
                                  batch_norm=spec.args.batch_norm)
    side = spec.args.image_size
    while True:
        try:
            rows = shapes.get()
        except (EOFError, OSError, queue_module.Empty):
            return
        if rows is None:
            return
        if rows in cache.cached_rows(key):
            continue
        images = torch.zeros((rows, side, side, 3), dtype=torch.uint8, device=device)
        support = max(1, rows // 2)
        with autocast(device):
            embedded = embedding(images, support, rows - support)
        embedded.float().sum().backward()
        backbone.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        cache.record(key, rows)
