"""The PyTorch trainer's framework part (``python -m clients.torch``): Prototypical
Networks or MD's inference-only baseline in PyTorch, its training step, its
evaluation forward pass and its checkpoint file. The run itself (sources, resume,
training loop, evaluation, reports, summary, exit codes) is ``clients.md_train``.

Determinism: ``--deterministic`` is applied (``clients.torch.determinism``) before the
model is built and before CUDA starts; a named backbone's weights start from
``backbone_seed(--seed, MD_BACKBONE_SEED_NAME, name)``, the baseline's head from
``derive_seed(--seed, HEAD_SEED_NAME)`` (names of ``clients.seeds``, as tf's), and every
training step's own draws (a user backbone's dropout) from ``derive_seed(--seed, "step",
index)``, so a resumed run draws what an unbroken one does; evaluation runs in
``model.eval()`` under ``torch.inference_mode()``, so for a given checkpoint every evaluation episode's accuracy, loss and predictions are
fixed. Batch norms follow ``--batch-norm`` (``clients.batch_norm``): under ``md``, the default,
each episode's support moments normalise its support and query in training and evaluation
alike, and running statistics are never read. The run configuration records the settings, versions, device and threads. On CUDA the backbone
runs under bf16 autocast with channels_last; CPU runs stay float32.

Speed on CUDA (issue 13): episodes are padded to shape buckets (``--shape-buckets``,
on by default on CUDA, off on CPU; exact: ``clients.buckets``), so after warm-up the
step meets no new shape; they are received on two streams and staged by the run's
background feed (``clients.feed``: started before the model is built, no worker
processes to spawn) into pinned memory and onto the GPU on a side stream
(``clients.torch.staging``), uint8 on the bus; the step never waits on the host: its
loss stays on the device until a progress line reads it, and at most two steps are
in flight (the host waits on the older one's event, which keeps timing honest
without idling the GPU). The embedding step (uint8 images to embeddings, forward and
backward) can be compiled (``--compile on``; ``clients.torch.compiled``, which says why
it is off by default): one graph with a dynamic row count serves every bucket, its
first step pays the compilation (``compile_seconds`` in the summary).

Distributed (``torchrun --nproc_per_node N python -m clients.torch ...``; the
``clients.md_train`` says what a step, a checkpoint, the reports and the evaluation are):
the process group is set up from torchrun's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``), NCCL on CUDA with rank r on
``cuda:LOCAL_RANK``, gloo on CPU. The backbone and head are wrapped in
``DistributedDataParallel`` as one module, so each step's gradients are averaged over
the ranks' items while the backward pass runs. Batch norms keep per-episode statistics
(each rank normalises its own episode, as a single process would; shape buckets pad
and mask per rank, so the ranks' input shapes may differ while the parameters are the
same); their running statistics are averaged over the ranks after each backward pass
(before the optimizer step), so every rank holds the same buffers and they have seen
every rank's episodes. Weights start identical on every rank (the same seed, and DDP
broadcasts rank 0's at the start).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import inspect
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from clients.buckets import Ladder, resolve_buckets_for
from clients.determinism import weights_sha256
from clients.init_weights import neutral_head, neutral_relation
from clients.md_learners import (Finetuning, InnerLoop, adapted_query_logits, classifier_of, eval_head,
                                 finetune_inputs, finetuned_query_logits, finetuning, inner_loop, md_learner,
                                 relation_map)
from clients.md_train import Batch, Framework, run_main
from clients.recipe import MOMENTUM, decayed, learning_rate
from clients.seeds import (FINETUNE_HEAD_SEED_NAME, HEAD_SEED_NAME, MD_BACKBONE_SEED_NAME, RELATION_SEED_NAME,
                           derive_seed)
from clients.protocols.md import EpisodeArrays
from clients.backbone_contract import NAMED_BACKBONES, LoadedBackbone
from clients.torch.backbones import CHECKPOINT_FORMAT, autocast, load_backbone, set_mode, to_model_input
from clients.torch.determinism import apply_determinism, classify_determinism, load_checked, torch_record
from clients.compile_cache import CompileCache, default_compile_cache, describe_cache
from clients.torch.compile_ahead import AheadSpec, CompileAhead, compile_key, numerics
from clients.torch.compiled import CompiledEmbedding, cache_counts, resolve_compile, use_compile_cache
from clients.torch.adaptation import TorchAdaptation
from clients.torch.models import (EPISODE_HEADS, LinearHead, ProtoNet, RelationModule, adopt_batch_norms,
                                  episode_loss, episode_norm, parameter_count)
from clients.torch.staging import StagedEpisode, Stager
from clients.errors import UsageError
from clients.trainer_args import MD_IMAGE_SIZE


CHECKPOINT = "checkpoint.pt"
BEST = "best.pt"  # the backbone of the best validation (``clients.validation``)
IN_FLIGHT = 2  # training steps queued on the GPU before the host waits for the oldest


def select_device(choice: str, local_rank: int | None = None) -> torch.device:
    """The training device; under torchrun a CUDA device is ``cuda:LOCAL_RANK``."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("argument --device: got cuda, but torch finds no CUDA device")
    cuda = choice == "cuda" or (choice == "auto" and torch.cuda.is_available())
    if not cuda:
        return torch.device("cpu")
    if local_rank is None:
        return torch.device("cuda")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise UsageError(f"environment LOCAL_RANK: got {local_rank}, but torch sees {count} CUDA device(s); start at "
                         f"most {count} processes per node (torchrun --nproc_per_node) or use --device cpu")
    return torch.device("cuda", local_rank)


def _environment_int(name: str, default: int, minimum: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise UsageError(f"environment {name}: got {text!r}, expected an integer >= {minimum} (torchrun sets it)")
    return value


def torchrun_ranks() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) from torchrun's environment; None for one process."""
    world = _environment_int("WORLD_SIZE", 1, 1)
    if world == 1:
        return None
    rank = _environment_int("RANK", -1, 0)
    if not 0 <= rank < world:
        raise UsageError(f"environment RANK: got {os.environ.get('RANK')!r}, expected 0 to {world - 1} "
                         f"(WORLD_SIZE is {world}; torchrun sets both)")
    return rank, world, _environment_int("LOCAL_RANK", 0, 0)


class _Trainee(nn.Module):
    """The backbone and (baseline) head as one module: what DDP wraps, so one reducer
    averages every gradient of a step. ``forward`` takes uint8 images and returns
    (logits, their labels); ``embed(images, support, query)`` is the eager or compiled
    embedding (a baseline batch: all rows support)."""

    def __init__(self, protonet: ProtoNet, head: LinearHead | None,
                 embed: Callable[[torch.Tensor, int, int], torch.Tensor]) -> None:
        super().__init__()
        self.protonet = protonet
        self.head = head
        self.embed = embed

    def forward(self, images: torch.Tensor, labels: torch.Tensor, support: int = 0, query: int = 0,
                ways: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if self.head is not None:
            return self.head(self.embed(images, images.shape[0], 0)).float(), labels
        embedded = self.embed(images, support, query)
        return self.protonet.packed_logits(embedded, labels, support, query, ways)


class TorchFramework(Framework):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        ranks = torchrun_ranks() if not (dist.is_available() and dist.is_initialized()) else (
            dist.get_rank(), dist.get_world_size(), _environment_int("LOCAL_RANK", 0, 0))
        self._owns_group = False
        if ranks is not None:
            self.rank, self.world_size, local_rank = ranks
        self.torch_device = select_device(args.device, local_rank if ranks is not None else None)
        self.device = str(self.torch_device)
        self.determinism = apply_determinism(args, self.torch_device)  # before CUDA starts and any model exists
        if ranks is not None and not dist.is_initialized():
            cuda = self.torch_device.type == "cuda"
            if cuda:
                torch.cuda.set_device(self.torch_device)
            dist.init_process_group("nccl" if cuda else "gloo", device_id=self.torch_device if cuda else None)
            self._owns_group = True
        if ranks is not None:
            self.collectives = str(dist.get_backend())
        cuda = self.torch_device.type == "cuda"
        self.precision = "bf16-autocast" if cuda else "float32"
        self.loaded: LoadedBackbone | None = None
        self.batch_norms = 0  # the backbone's batch norms that take the episode's moments (``build``)
        if args.backbone not in NAMED_BACKBONES:  # its side is known, and a wrong output refused, before any request
            self.loaded = self._load_backbone()
        self.buckets = resolve_buckets_for(args.backbone, args.shape_buckets, cuda)
        self.compiled: CompiledEmbedding | None = None  # ``build`` compiles where --compile resolves on
        self._preload: frozenset[int] | None = None  # the compiled shapes to load at the first step
        self._preload_seconds = 0.0
        # two streams on CUDA: one gRPC stream delivers about as many bytes per second as a
        # ResNet-18 at 126 px consumes; on CPU the cores train
        self.receive_streams = 2 if cuda else 1
        self.path = Path(args.checkpoint_dir) / CHECKPOINT if args.checkpoint_dir else None
        self._state: dict[str, Any] | None = None
        self._best: dict[str, Any] | None = None  # ``keep_best``
        self._feed_stager = Stager(self.torch_device, self.buckets, args.bucket_ratio)    # the feed's thread only
        self._inline_stager = Stager(self.torch_device, self.buckets, args.bucket_ratio)  # the training thread only
        # the inner loop's support passes: their own buckets, capped by the staged episode's rows
        self._support_ladder = Ladder(ratio=args.bucket_ratio)
        self._in_flight: collections.deque = collections.deque()
        self._draw_index = self.rank  # the training index of this rank's next step: its draws' seed

    # ---- model ----------------------------------------------------------------------------

    def _load_backbone(self) -> LoadedBackbone:
        loaded = load_checked(
            lambda: load_backbone(self.args, self.torch_device, MD_IMAGE_SIZE, MD_BACKBONE_SEED_NAME),
            self.determinism, self.torch_device)
        if not isinstance(loaded.model, nn.Module):
            raise UsageError(f"argument --backbone: {loaded.spec.target} made a {type(loaded.model).__name__}, "
                             "expected an nn.Module (the trainer trains its parameters)")
        return loaded

    def build(self, num_classes: int) -> None:
        args, device = self.args, self.torch_device
        if self.loaded is None:
            self.loaded = self._load_backbone()
        self.backbone = self.loaded.model
        self.preprocessing = self.loaded.preprocessing
        try:
            self.batch_norms = adopt_batch_norms(self.backbone, args.batch_norm) if isinstance(
                self.backbone, nn.Module) else 0
        except ValueError as error:
            raise UsageError(f"argument --batch-norm: {str(error).removeprefix('batch_norm: ')}") from None
        head = md_learner(args.model).head
        self.relation = None
        if head == "relationnet":  # MD's init in both frameworks (``init_weights.neutral_relation``)
            channels, side = relation_map(args.backbone, self.loaded.out_dim)
            self.relation = RelationModule(channels, side).to(device)
            seed = args.init_seed if args.init_seed is not None else derive_seed(args.seed, RELATION_SEED_NAME)
            self.relation.load_state_dict({name: torch.from_numpy(value)
                                           for name, value in neutral_relation(channels, side, seed).items()})
        self.head_name = head
        self.protonet = ProtoNet(self.backbone, args.batch_norm,
                                 head if head in EPISODE_HEADS or head == "relationnet" else "protonet", self.relation)
        self.train_loop = inner_loop(args, head)  # the MAML family's inner loop (``_adapted``), else None
        self.eval_head = eval_head(args.model, args.eval_learner)
        self.eval_loop = inner_loop(args, self.eval_head)
        self.eval_finetuning = finetuning(args, self.eval_head)
        if (self.train_loop or self.eval_loop) and args.compile == "on":
            raise UsageError(f"argument --compile: got {args.compile}, but the inner loop of {args.model} / "
                             f"{self.eval_head} calls the backbone with each step's own weights; use --compile off")
        self.head = None
        if num_classes:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed(args.seed, HEAD_SEED_NAME))
                self.head = LinearHead(self.loaded.out_dim, num_classes, classifier_of(args)).to(device)
            if args.init_seed is not None:  # the same head as tf's (``init_weights.neutral_head``)
                neutral = neutral_head(self.loaded.out_dim, num_classes, args.init_seed)
                self.head.load_state_dict({name: torch.from_numpy(value) for name, value in neutral.items()
                                           if name in self.head.state_dict()}, strict=False)
        if resolve_compile(args.compile, args.backbone, self.backbone, device,
                           bool(self.train_loop or self.eval_loop)):
            self.compiled = self._compiled_embedding()
        self.trainee = _Trainee(self.protonet, self.head, self.compiled or self._eager_embedding)
        self._step_module: nn.Module = self.trainee
        if self.world_size > 1 and self.train_loop is None:  # the inner loop averages its own (``_average_gradients``)
            # buffers: averaged after each backward pass (``_average_buffers``), never synced in forward;
            # PyTorch before 2.13 spells that option broadcast_buffers
            parameters = inspect.signature(DistributedDataParallel.__init__).parameters
            no_sync = "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"
            self._step_module = DistributedDataParallel(
                self.trainee, device_ids=[device] if device.type == "cuda" else None, **{no_sync: False})
        self.optimizer = (torch.optim.Adam(self.parameters(), lr=args.lr, fused=device.type == "cuda")
                          if args.optimizer == "adam" else
                          torch.optim.SGD(self.parameters(), lr=args.lr,
                                          momentum=MOMENTUM if args.optimizer == "momentum" else 0.0))
        self._decayed = ([p for p in self.backbone.parameters() if decayed(tuple(p.shape))]  # --weight-decay's kernels
                         + (self.head.decayed_kernels() if self.head is not None else [])
                         + [p for p in self._relation_parameters() if decayed(tuple(p.shape))])
        if args.init_from is not None:  # the backbone only; a checkpoint in --checkpoint-dir still wins (restore)
            self.backbone.load_state_dict(self._init_state(args.init_from))

    def _init_state(self, given: str) -> dict[str, Any]:
        """The backbone state of the trainer checkpoint ``given`` (its file, or the directory
        holding it), or one line saying what it is instead."""
        path = Path(given) / CHECKPOINT if Path(given).is_dir() else Path(given)
        if not path.is_file():
            raise UsageError(f"argument --init-from: {given} is neither a torch trainer checkpoint nor a directory "
                             f"holding {CHECKPOINT}")
        try:
            state = torch.load(path, map_location=self.torch_device)
        except Exception as error:  # not a torch file
            raise UsageError(f"argument --init-from: {path} is not a torch trainer checkpoint "
                             f"({type(error).__name__})") from None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "backbone" not in state:
            raise UsageError(f"argument --init-from: {path} is not a torch trainer checkpoint (format "
                             f"{state.get('format') if isinstance(state, dict) else None!r}, expected "
                             f"{CHECKPOINT_FORMAT})")
        own = self.backbone.state_dict()
        if set(state["backbone"]) != set(own) or any(state["backbone"][k].shape != v.shape for k, v in own.items()):
            raise UsageError(f"argument --init-from: {path} holds another backbone than --backbone "
                             f"{self.args.backbone} at --image-size {self.args.image_size}")
        return state["backbone"]

    def _eager_embedding(self, images: torch.Tensor, support: int, query: int) -> torch.Tensor:
        with episode_norm(self.backbone, self.args.batch_norm, support, query):
            return self.backbone(self._input(images))

    def _compiled_embedding(self) -> CompiledEmbedding:
        """The compiled step: per bucket shape (one graph each, from ``--compile-cache`` where an
        earlier run compiled it, a background process compiling the shapes met for the first
        time while they run eager); without buckets every episode is a shape of its own, so one
        graph with a dynamic row dimension."""
        args, device = self.args, self.torch_device
        if not self.buckets:
            return CompiledEmbedding(self.backbone, self.preprocessing, device, batch_norm=args.batch_norm)
        cache = CompileCache(args.compile_cache or default_compile_cache())
        try:
            use_compile_cache(cache)
        except ValueError as error:
            raise UsageError(f"argument --compile-cache: {str(error).removeprefix('compile cache: ')}") from None
        key = compile_key(args, self.preprocessing, self.precision, device)
        self._compile_start = cache_counts()
        self._cached_shapes = len(cache.cached_rows(key))
        self._preload = cache.cached_rows(key)  # loaded at the first step, after the run's first line
        ahead = CompileAhead(AheadSpec(args=args, device=str(device), default_size=MD_IMAGE_SIZE,
                                       seed_name=MD_BACKBONE_SEED_NAME, deterministic=key.deterministic,
                                       warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                                       threads=torch.get_num_threads(), numerics=numerics()), cache, key)
        compiled = CompiledEmbedding(self.backbone, self.preprocessing, device, dynamic=False,
                                     batch_norm=args.batch_norm, eager=self._eager_embedding, cache=cache, key=key,
                                     ahead=ahead)
        self._note_compile_cache(compiled)
        return compiled

    def _note_compile_cache(self, compiled: CompiledEmbedding) -> None:
        """The cache's figures for the summary: its shapes at the start, this run's loads (hits)
        and compilations (misses) in this process, the steps run eager while a shape compiled."""
        if compiled.cache is None:
            return
        now = cache_counts()
        self.compile_cache = {"dir": str(compiled.cache.root), "shapes_cached_at_start": self._cached_shapes,
                              "shapes_compiled_here": len(compiled.compiled_rows),
                              "hits": now["hits"] - self._compile_start["hits"],
                              "misses": now["misses"] - self._compile_start["misses"],
                              "eager_steps": compiled.eager_steps,
                              "preload_seconds": round(self._preload_seconds, 3)}

    def _initialise_head(self, images: torch.Tensor) -> None:
        """A weight-normalised head's data-dependent init from the first training batch's
        features (training mode, as the reference's first pass); the batch norms' running
        statistics are put back, so that batch still moves them once, in its step."""
        assert self.head is not None
        running = {name: value.clone() for name, value in self.backbone.named_buffers()}
        with torch.no_grad():
            features = self.trainee.embed(images, images.shape[0], 0)
        with torch.no_grad():
            for name, value in self.backbone.named_buffers():
                value.copy_(running[name])
        self.head.initialise(features)

    def _relation_parameters(self) -> list[nn.Parameter]:
        return list(self.relation.parameters()) if self.relation is not None else []

    def parameters(self) -> list[nn.Parameter]:
        return (list(self.backbone.parameters()) + (list(self.head.parameters()) if self.head is not None else [])
                + self._relation_parameters())

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def describe(self) -> dict[str, Any]:
        return {**self.determinism.as_config(), **torch_record(self.torch_device),
                "device": self.device, "precision": self.precision,
                "shape_buckets": "on" if self.buckets else "off", "compile": "on" if self.compiled else "off",
                "parameter_count": self.parameter_count(),
                "backbone_parameter_count": parameter_count(self.backbone), "embedding_dim": self.loaded.out_dim,
                "backbone_sha256": self.loaded.fingerprint, "preprocessing": self.loaded.preprocessing.as_config(),
                "batch_norm_layers": self.batch_norms}

    def step_settings(self) -> str:
        if self.compiled is not None and self.compiled.cache is not None:
            return f"{super().step_settings()}, compile on ({describe_cache(self._cached_shapes, self.compiled.cache.root)})"
        return f"{super().step_settings()}, compile {'on' if self.compiled else 'off'}"

    def _autocast(self) -> torch.autocast:
        return autocast(self.torch_device)

    # ---- checkpoints ------------------------------------------------------------------------

    def checkpoint(self) -> tuple[str, dict[str, Any], int] | None:
        if self.path is None or not self.path.exists():
            return None
        state = torch.load(self.path, map_location="cpu")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise UsageError(f"checkpoint {self.path}: format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
        self._state = state
        return str(self.path), state["resume"], int(state["next_index"])

    def restore(self, path: str) -> int:
        state = self._state
        assert state is not None
        self.backbone.load_state_dict(state["backbone"])
        if self.relation is not None:  # RelationNet's evaluation needs its relation module too
            self.relation.load_state_dict(state["relation"])
        if not self.args.eval_only:  # evaluation needs the embedding only
            if self.head is not None:
                self.head.load_state_dict(state["head"])
            self.optimizer.load_state_dict(state["optimizer"])
        self._draw_index = int(state["next_index"]) + self.rank
        return int(state["next_index"])

    def save(self, next_index: int, resume: dict[str, Any]) -> None:
        if self.path is None or self.rank != 0:  # every rank holds the same model: rank 0 writes it
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": CHECKPOINT_FORMAT, "next_index": next_index, "resume": resume,
                 "backbone": self.backbone.state_dict(), "head": self.head.state_dict() if self.head else None,
                 "relation": self.relation.state_dict() if self.relation is not None else None,
                 "optimizer": self.optimizer.state_dict()}
        partial = self.path.with_name(CHECKPOINT + ".partial")
        torch.save(state, partial)
        os.replace(partial, self.path)  # a crash mid-save leaves the previous checkpoint

    def keep_best(self, update: int) -> None:
        kept = {"backbone": self.backbone} | ({"relation": self.relation} if self.relation is not None else {})
        state = {"format": CHECKPOINT_FORMAT, "update": update,
                 **{part: {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}
                    for part, module in kept.items()}}
        self._best = state
        if self.path is None or self.rank != 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(BEST + ".partial")
        torch.save(state, partial)
        os.replace(partial, self.path.with_name(BEST))

    def restore_best(self, update: int) -> None:
        state = self._best
        if state is None and self.path is not None and self.path.with_name(BEST).exists():
            state = torch.load(self.path.with_name(BEST), map_location="cpu")
        if state is None or state.get("update") != update:
            found = "none" if state is None else f"update {state.get('update')}'s"
            raise UsageError(f"the best validated backbone is update {update}'s, but {found} is kept "
                             f"({self.path.with_name(BEST) if self.path else 'no --checkpoint-dir'})")
        self.backbone.load_state_dict(state["backbone"])
        if self.relation is not None:
            self.relation.load_state_dict(state["relation"])

    # ---- steps ---------------------------------------------------------------------------------

    def stage(self, item: Any) -> Any:
        """On the feed's thread: an episode padded to its bucket and copied to the device
        (``StagedEpisode``); a batch learner's batch copied as one, all rows support (one size
        throughout: no buckets needed)."""
        if isinstance(item, EpisodeArrays):
            return self._feed_stager.stage(item)
        if isinstance(item, Batch):
            return self._feed_stager.stage_batch(item.images, item.labels)
        return item

    def _staged(self, item: Any) -> StagedEpisode:
        """An episode staged on the feed's thread, or staged here (evaluation, direct calls)."""
        staged = item if isinstance(item, StagedEpisode) else self._inline_stager.stage(item)
        return staged.ready()

    def _input(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 NHWC on the device -> the backbone's float input, as it declares."""
        return to_model_input(images, self.preprocessing, self.torch_device)

    def _logits(self, staged: StagedEpisode) -> tuple[torch.Tensor, torch.Tensor]:
        return self.protonet.packed(self._input(staged.images), staged.labels, staged.support, staged.query,
                                    staged.ways, self.eval_head)

    def _support_rows(self, staged: StagedEpisode) -> int | None:
        """The rows a support pass of the inner loop embeds: with shape buckets the support's
        bucket, so its passes meet the ladder's few shapes (``TorchAdaptation``)."""
        return self._support_ladder.size(staged.support) if self.buckets else None

    def _adapted(self, staged: StagedEpisode, loop: InnerLoop, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(query logits, query labels) of the MAML family's episode (``md_learners.adapted_query_logits``)."""
        assert self.loaded is not None
        adaptation = TorchAdaptation(self.backbone, self._input(staged.images), staged.labels, staged.support,
                                     staged.query, staged.ways, self.args.batch_norm, self.loaded.out_dim,
                                     self._support_rows(staged))
        logits = adapted_query_logits(adaptation, loop, training)
        return logits, staged.labels[staged.support:staged.support + staged.query]

    def train_step(self, item: Any) -> tuple[Any, Any]:
        if self._preload is not None:  # the first step: every shape the compile cache holds, loaded now
            shapes, self._preload = self._preload, None
            set_mode(self.backbone, True)
            assert self.compiled is not None
            self._preload_seconds = self.compiled.preload(shapes, self.args.image_size, self._autocast)
        # this step's draws (a user backbone's dropout) are a function of its index: a resumed run repeats them
        began = time.perf_counter()
        torch.manual_seed(derive_seed(self.args.seed, "step", self._draw_index))
        update = (self._draw_index - self.rank) // self.world_size  # this run's schedule: resumes continue it
        self._draw_index += self.world_size
        if self.args.decay_every:
            rate = learning_rate(self.args.lr, update, self.args.decay_every, self.args.decay_rate)
            for group in self.optimizer.param_groups:
                group["lr"] = rate
        set_mode(self.backbone, True)
        with self._autocast():
            if self.head is not None:  # a batch learner's batch (its head exists only for batches)
                staged = (self._inline_stager.stage_batch(item.images, item.labels) if isinstance(item, Batch)
                          else item).ready()  # else: staged by the feed
                images = staged.images
                if self.head.needs_initialising:
                    self._initialise_head(images)
                logits, labels = self._step_module(images, staged.labels)
            elif self.train_loop is not None:
                staged = self._staged(item)
                images = staged.images
                logits, labels = self._adapted(staged, self.train_loop, training=True)
            else:
                staged = self._staged(item)
                images = staged.images
                logits, labels = self._step_module(images, staged.labels, staged.support, staged.query, staged.ways)
        self.shapes.add(tuple(images.shape))
        loss = episode_loss(self.head_name, logits, labels)
        objective = loss
        if self.args.weight_decay:  # MD's L2 regulariser, added to the loss (clients.recipe)
            objective = loss + self.args.weight_decay * torch.stack([p.square().sum() for p in self._decayed]).sum()
        self.optimizer.zero_grad(set_to_none=True)
        objective.backward()  # under DDP: the gradients are averaged over the ranks here
        if self.train_loop is not None:
            self._average_gradients()  # the inner loop calls the backbone itself, not through DDP
        self._average_buffers()
        self.optimizer.step()
        accuracy = (logits.detach().argmax(1) == labels).float().mean()
        if self.compiled is not None:
            self.compiled_graphs = self.compiled.graphs
            self._note_compile_cache(self.compiled)
            if self.compile_seconds is None:  # the first step: tracing, compiling forward and backward, running
                if self.torch_device.type == "cuda":
                    torch.cuda.synchronize(self.torch_device)
                self.compile_seconds = time.perf_counter() - began
        self._bound_in_flight()
        return loss.detach(), accuracy  # device values: read when a progress line needs them

    def _bound_in_flight(self) -> None:
        """Keep at most ``IN_FLIGHT`` steps queued: the host waits on the oldest one's
        event, never on the step just launched (CUDA only)."""
        if self.torch_device.type != "cuda":
            return
        event = torch.cuda.Event()
        event.record()
        self._in_flight.append(event)
        if len(self._in_flight) > IN_FLIGHT:
            self._in_flight.popleft().synchronize()

    def _finetuned(self, staged: StagedEpisode, settings: Finetuning, index: int) -> torch.Tensor:
        """The query logits of episode ``index`` after its test-time training
        (``md_learners.finetuned_query_logits``; its head and batches drawn from its own seed)."""
        assert self.loaded is not None
        finetunable = TorchAdaptation(self.backbone, self._input(staged.images), staged.labels, staged.support,
                                      staged.query, staged.ways, self.args.batch_norm, self.loaded.out_dim,
                                      self._support_rows(staged))
        head, rows = finetune_inputs(settings, self.loaded.out_dim, staged.ways, staged.support,
                                     derive_seed(self.args.seed, FINETUNE_HEAD_SEED_NAME, index))
        device = self.torch_device
        with torch.no_grad():  # only the gradients of each step take a graph (``head_gradients``)
            return finetuned_query_logits(finetunable, settings, tuple(torch.from_numpy(t).to(device) for t in head),
                                          None if rows is None else torch.from_numpy(rows).to(device))

    def _average_gradients(self) -> None:
        """The parameters' gradients: the mean over the ranks (one collective)."""
        if self.world_size == 1:
            return
        parameters = [p for p in self.parameters() if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        offset = 0
        for parameter in parameters:
            parameter.grad.copy_(flat[offset:offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()

    def _average_buffers(self) -> None:
        """Batch norms' running statistics: the mean over the ranks (one collective),
        before the optimizer step, so a rank that fails in it has changed no weight."""
        if self.world_size == 1:
            return
        buffers = [b for b in self.trainee.buffers() if b.is_floating_point()]
        with torch.no_grad():
            flat = torch.cat([b.reshape(-1).float() for b in buffers])
            dist.all_reduce(flat)
            flat.div_(self.world_size)
            offset = 0
            for buffer in buffers:
                buffer.copy_(flat[offset:offset + buffer.numel()].view_as(buffer))
                offset += buffer.numel()

    def all_gather(self, value: Any) -> list[Any]:
        if self.world_size == 1:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def parameter_digest(self) -> str:
        digest = hashlib.sha256()
        for name, tensor in self.trainee.state_dict().items():  # registration order: the same on every rank
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def weights_sha256(self) -> str:
        return weights_sha256((name, tensor.detach().cpu().numpy()) for name, tensor in self.backbone.state_dict().items())

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        failure = classify_determinism(error, self.determinism, self.torch_device)
        if failure is not None:
            return failure
        # a collective that lost a peer: NCCL raises DistBackendError, gloo a RuntimeError naming its transport
        lost = isinstance(error, dist.DistError) or (isinstance(error, RuntimeError) and "gloo" in str(error))
        if self.world_size > 1 and lost:
            return 1, (f"rank {self.rank}: lost the other ranks ({' '.join(str(error).split())[:300]}); the last "
                       "checkpoint holds the run's progress")
        return None

    def close(self) -> None:
        if self.compiled is not None:
            self.compiled.close()
            self._note_compile_cache(self.compiled)
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False

    def to_floats(self, values: list[Any]) -> list[float]:
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if not tensors:
            return [float(v) for v in values]
        read = iter(torch.stack([t.float() for t in tensors]).tolist())  # one copy to the host
        return [next(read) if isinstance(v, torch.Tensor) else float(v) for v in values]

    def evaluate(self, episode: EpisodeArrays) -> tuple[Any, float]:
        set_mode(self.backbone, False)
        if self.eval_finetuning is not None:  # it takes gradients: no inference mode
            with self._autocast():
                staged = self._staged(episode)
                logits = self._finetuned(staged, self.eval_finetuning, episode.index).detach()
                labels = staged.labels[staged.support:staged.support + staged.query]
                return logits.argmax(1).cpu().numpy(), float(F.cross_entropy(logits.float(), labels))
        if self.eval_loop is not None:  # the inner loop takes gradients: no inference mode
            with self._autocast():
                logits, labels = self._adapted(self._staged(episode), self.eval_loop, training=False)
                logits = logits.detach()
                return logits.argmax(1).cpu().numpy(), float(F.cross_entropy(logits.float(), labels))
        with torch.inference_mode(), self._autocast():
            logits, labels = self._logits(self._staged(episode))
            return logits.argmax(1).cpu().numpy(), float(episode_loss(self.eval_head, logits.float(), labels))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns the exit status (0, 2 bad input, 3 server fault)."""
    return run_main("torch", TorchFramework, argv)
