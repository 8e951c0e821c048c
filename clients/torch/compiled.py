"""The trainer's embedding step compiled once for every bucket (``--compile``).

Why: shape buckets leave a few batch sizes (21 in 600 MD episodes), and a training
step of conv4 or ResNet-18 is bound by memory traffic (batch norm, ReLU, pooling over
large activations), which ``torch.compile`` fuses. Compiled one shape at a time, each
bucket would cost its own compilation (about 30 s each on an H100); here the row
dimension is dynamic (``torch._dynamo.maybe_mark_dynamic``) and the count of valid rows is a
0-d tensors the batch norms read (``models.episode_norm``), so ONE graph, forward and
backward, serves every bucket and every episode in it.

What is compiled: uint8 NHWC images -> the model's input (``to_model_input``) -> the
backbone, in training mode. The head (prototypes, distances, cross-entropy) stays
eager: its sizes change with every episode's ways and shots and it is a small part of
the step. Evaluation runs eager (batch norm in eval mode needs no count).

``resolve_compile`` resolves ``--compile`` (off by default). Measured on one H100
(torch 2.11, ``bench/compile_probe.py``), one step at a 608-row bucket: conv4 at 84 px
13.78 ms compiled with the dynamic row dimension against 13.22 ms eager, ResNet-18 at
126 px 24.83 against 18.70; compiled per static shape, 10.14 and 18.32 ms, but 10-30 s
of compilation for each of the ~21 bucket shapes. Inductor's kernels for a dynamic
batch lose what the fused batch norm gains.

So the trainer compiles per static bucket (``dynamic=False``), with what it compiles kept in a
directory that outlives the run (``--compile-cache``, ``clients.compile_cache``): PyTorch's
inductor and AOTAutograd caches. Measured on one H200 (torch 2.11, ``bench/compile_probe.py``,
md batch norm, 608 rows): conv4 at 84 px 7.75 ms compiled against 11.46 eager, ResNet-18 at
126 px 14.52 against 16.31; a shape costs 11-15 s (conv4) and 28-36 s (ResNet-18) to compile
and 0.5-3 s to load from a warm cache. While a background process (``CompileAhead``) compiles
the shapes the run meets, those shapes run eager; each is switched to its compiled graph (loaded
from the cache) once it is there. The shapes the cache holds at the start are loaded at the
first step (``preload``). With a warm cache, end to end on one H200 (ProtoNet, last 100 of 400
episodes): conv4 125.3 episodes/s against 82.9 bucketed eager, ResNet-18 64.8 against 50.8.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from clients.backbone_contract import NAMED_BACKBONES, Preprocessing
from clients.compile_cache import CompileCache, CompileKey
from clients.errors import UsageError
from clients.torch.backbones import input_constants, to_model_input
from clients.torch.models import RowBatchNorm2d, episode_norm
from clients.trainer_args import COMPILE_SETTINGS


def resolve_compile(setting: str, backbone: str, model: Any, device: torch.device | None = None,
                    inner_loop: bool = False) -> bool:
    """Whether the trainer compiles its step: ``setting`` is one of ``COMPILE_SETTINGS``.
    ``auto`` compiles where the bench shows the compiled step winning: on CUDA, one of our
    named backbones (conv4 1.48 and ResNet-18 1.12 times the eager step at 608 rows on an H200),
    a learner without an inner loop (that one calls the backbone with each step's weights)."""
    if setting not in COMPILE_SETTINGS:
        raise UsageError(f"argument --compile: got {setting!r}, expected one of {', '.join(COMPILE_SETTINGS)}")
    if setting == "on" and not isinstance(model, nn.Module):
        raise UsageError(f"argument --compile: got on, but --backbone {backbone} made a {type(model).__name__}, "
                         "not an nn.Module torch.compile can trace; use off")
    if setting == "auto":
        return (device is not None and device.type == "cuda" and isinstance(model, nn.Module)
                and backbone in NAMED_BACKBONES and not inner_loop)
    return setting == "on"


def use_compile_cache(cache: CompileCache) -> None:
    """PyTorch's compile caches (inductor's FX graphs, AOTAutograd's) in ``cache``'s directory,
    on for this process (before its first compilation)."""
    cache.prepare()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache.inductor_dir)
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True


def cache_counts() -> dict[str, int]:
    """This process's compile-cache hits and misses so far (inductor's FX graphs)."""
    from torch._dynamo.utils import counters
    return {"hits": int(counters["inductor"]["fxgraph_cache_hit"]),
            "misses": int(counters["inductor"]["fxgraph_cache_miss"])}


class CompiledEmbedding:
    """``backbone(to_model_input(images))`` in training, compiled: one graph with a dynamic
    batch (``dynamic``), or one static graph per bucket shape, each shape run eager by
    ``eager`` until the background compiler ``ahead`` has it in ``cache`` (the trainer's form).

    ``__call__(images, support, query)``: embeddings [B, D] of uint8 images [B, S, S, 3] whose
    first ``support`` then ``query`` rows are the episode (the rest padding: zero rows into
    the head, no share in batch-norm moments; the batch norms follow ``batch_norm``,
    ``clients.batch_norm``; a backbone without batch norm, such as ``tiny``, mixes no rows). ``graphs``
    counts this embedding's compilations: 1 for every bucket of 16 rows or more with
    dynamo and AOTAutograd (a batch under 16 is another graph: the convolution's shape
    rules guard on it); inductor's C++ code for CPU guards on size ranges and adds one
    per range."""

    def __init__(self, backbone: nn.Module, preprocessing: Preprocessing, device: torch.device,
                 backend: str = "inductor", dynamic: bool = True, batch_norm: str = "md",
                 eager: Callable[[torch.Tensor, int, int], torch.Tensor] | None = None,
                 cache: CompileCache | None = None, key: CompileKey | None = None,
                 ahead: Any = None) -> None:
        self.backbone, self.preprocessing, self.device = backbone, preprocessing, device
        self.batch_norm = batch_norm
        # static shapes: the eager step for a shape the background compiler (``ahead``) has not
        # finished; the shapes compiled here, and those whose first step has not yet been recorded
        self.eager, self.cache, self.key, self.ahead = eager, cache, key, ahead
        self.compiled_rows: set[int] = set()
        self._unrecorded: list[int] = []
        self.eager_steps = 0
        # filled per step, the same tensors every step: the support and query row counts
        self.support = torch.zeros((), dtype=torch.int64, device=device)
        self.query = torch.zeros((), dtype=torch.int64, device=device)
        self.counted = any(isinstance(m, RowBatchNorm2d) for m in backbone.modules())
        self.constants = input_constants(preprocessing, device)
        self.graphs = 0
        compiler = torch._dynamo.lookup_backend(backend)

        def counting(graph: Any, example_inputs: Any) -> Any:
            self.graphs += 1
            return compiler(graph, example_inputs)

        self.dynamic = dynamic
        if not dynamic:  # a graph per bucket: room for every size of the ladder
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            torch._dynamo.config.automatic_dynamic_shapes = False
        # inductor's switch as the run's (clients.torch.determinism leaves inductor unloaded at start-up)
        torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(),
                                           warn_only=torch.is_deterministic_algorithms_warn_only_enabled())
        self._compiled = torch.compile(self._embed, backend=counting, dynamic=None if dynamic else False)

    def _embed(self, images: torch.Tensor) -> torch.Tensor:
        return self.backbone(to_model_input(images, self.preprocessing, self.device, self.constants))

    def __call__(self, images: torch.Tensor, support: int, query: int) -> torch.Tensor:
        if self.dynamic:
            torch._dynamo.maybe_mark_dynamic(images, 0)
        else:
            self.record()  # the previous step's backward has run: its new shape is in the cache
            rows = int(images.shape[0])
            if rows not in self.compiled_rows:
                if self.ahead is not None and self.eager is not None and not self.ahead.ready(rows):
                    self.eager_steps += 1
                    return self.eager(images, support, query)
                self.compiled_rows.add(rows)
                self._unrecorded.append(rows)
        if not self.counted:
            return self._compiled(images)
        self.support.fill_(support)
        self.query.fill_(query)
        with episode_norm(self.backbone, self.batch_norm, self.support, self.query):
            return self._compiled(images)

    def preload(self, shapes: Iterable[int], side: int, context: Callable[[], Any]) -> float:
        """Load each of ``shapes`` (row counts the cache holds compiled) before training, with
        one forward and backward pass of zero images under ``context`` (the step's autocast);
        the seconds it took. Why: a shape's first compiled step traces it and loads its graphs,
        0.5-3 s on the training thread, and an MD run meets its ~21 shapes over hundreds of
        episodes, each a stall; loaded up front they cost the same once, while the feed fills.
        The backbone's buffers (running statistics) and gradients are put back, so the run
        trains as it would have without this."""
        started = time.perf_counter()
        limit = torch._dynamo.config.cache_size_limit  # beyond it dynamo would run a shape eager
        rows_to_load = [rows for rows in sorted(set(shapes)) if rows not in self.compiled_rows][:limit]
        if not rows_to_load:
            return 0.0
        buffers = [(buffer, buffer.clone()) for buffer in self.backbone.buffers()]
        gradients = [(parameter, parameter.grad) for parameter in self.backbone.parameters()]
        for rows in rows_to_load:
            images = torch.zeros((rows, side, side, 3), dtype=torch.uint8, device=self.device)
            support = max(1, rows // 2)
            with context():
                embedded = self(images, support, rows - support)
            embedded.float().sum().backward()
            for parameter in self.backbone.parameters():
                parameter.grad = None
        with torch.no_grad():
            for buffer, value in buffers:
                buffer.copy_(value)
        for parameter, gradient in gradients:
            parameter.grad = gradient
        self.record()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - started

    def record(self) -> None:
        """Note in the cache the shapes whose first compiled step (forward and backward) ran."""
        if self.cache is not None and self.key is not None:
            for rows in self._unrecorded:
                self.cache.record(self.key, rows)
        self._unrecorded.clear()

    def close(self) -> None:
        self.record()
        if self.ahead is not None:
            self.ahead.close()
