"""The PyTorch trainer's framework part (``python -m clients.torch``): Prototypical
Networks or MD's inference-only baseline in PyTorch, its training step, its
evaluation forward pass and its checkpoint file. The run itself (sources, resume,
training loop, evaluation, reports, summary, exit codes) is ``clients.orchestration``.

Determinism: weights start from ``torch.manual_seed(--seed)``; evaluation runs in
``model.eval()`` under ``torch.inference_mode()``, so for a given checkpoint every
evaluation episode's accuracy, loss and predictions are fixed. On CUDA the backbone
runs under bf16 autocast with channels_last; CPU runs stay float32.

Speed on CUDA (issue 13): episodes are padded to shape buckets (``--shape-buckets``,
on by default on CUDA, off on CPU; exact: ``clients.buckets``), so after warm-up the
step meets no new shape; they are received on two streams and staged by the run's
background feed (``clients.feed``: started before the model is built, no worker
processes to spawn) into pinned memory and onto the GPU on a side stream
(``clients.torch.staging``), uint8 on the bus; the step never waits on the host: its
loss stays on the device until a progress line reads it, and at most two steps are
in flight (the host waits on the older one's event, which keeps timing honest
without idling the GPU).
"""

from __future__ import annotations

import argparse
import collections
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.buckets import resolve_buckets
from clients.core import EpisodeArrays
from clients.orchestration import Batch, Framework, UsageError, run_main
from clients.torch.models import LinearHead, ProtoNet, build_backbone, parameter_count, to_input
from clients.torch.staging import StagedEpisode, Stager, stage_arrays

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = 2
IN_FLIGHT = 2  # training steps queued on the GPU before the host waits for the oldest


def _device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("argument --device: got cuda, but torch finds no CUDA device")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


class TorchFramework(Framework):
    name = "torch"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.torch_device = _device(args.device)
        self.device = str(self.torch_device)
        cuda = self.torch_device.type == "cuda"
        self.precision = "bf16-autocast" if cuda else "float32"
        self.buckets = resolve_buckets(args.shape_buckets, cuda)
        # two streams on CUDA: one gRPC stream delivers about as many bytes per second as a
        # ResNet-18 at 126 px consumes; on CPU the cores train
        self.receive_streams = 2 if cuda else 1
        self.path = Path(args.checkpoint_dir) / CHECKPOINT if args.checkpoint_dir else None
        self._state: dict[str, Any] | None = None
        self._feed_stager = Stager(self.torch_device, self.buckets)    # the feed's thread only
        self._inline_stager = Stager(self.torch_device, self.buckets)  # the training thread only
        self._in_flight: collections.deque = collections.deque()

    # ---- model ----------------------------------------------------------------------------

    def build(self, num_classes: int) -> None:
        args, device = self.args, self.torch_device
        torch.manual_seed(args.seed)
        self.backbone = build_backbone(args.backbone, args.image_size)
        self.protonet = ProtoNet(self.backbone)
        self.head = LinearHead(self.backbone.out_dim, num_classes) if num_classes else None
        self.backbone.to(device)
        if self.head is not None:
            self.head.to(device)
        if device.type == "cuda":
            self.backbone.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.Adam(self.parameters(), lr=args.lr, fused=device.type == "cuda")

    def parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.parameters()) + (list(self.head.parameters()) if self.head is not None else [])

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def describe(self) -> dict[str, Any]:
        return {"torch_version": str(torch.__version__), "device": self.device, "precision": self.precision,
                "shape_buckets": "on" if self.buckets else "off",
                "parameter_count": self.parameter_count(),
                "backbone_parameter_count": parameter_count(self.backbone), "embedding_dim": self.backbone.out_dim}

    def _autocast(self) -> torch.autocast:
        cuda = self.torch_device.type == "cuda"
        return torch.autocast(device_type=self.torch_device.type, dtype=torch.bfloat16, enabled=cuda)

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
        if not self.args.eval_only:  # evaluation needs the embedding only
            if self.head is not None:
                self.head.load_state_dict(state["head"])
            self.optimizer.load_state_dict(state["optimizer"])
        return int(state["next_index"])

    def save(self, next_index: int, resume: dict[str, Any]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": CHECKPOINT_FORMAT, "next_index": next_index, "resume": resume,
                 "backbone": self.backbone.state_dict(), "head": self.head.state_dict() if self.head else None,
                 "optimizer": self.optimizer.state_dict()}
        partial = self.path.with_name(CHECKPOINT + ".partial")
        torch.save(state, partial)
        os.replace(partial, self.path)  # a crash mid-save leaves the previous checkpoint

    # ---- steps ---------------------------------------------------------------------------------

    def stage(self, item: Any) -> Any:
        """On the feed's thread: an episode padded to its bucket and copied to the device
        (``StagedEpisode``); a baseline batch's images copied to the device."""
        if isinstance(item, EpisodeArrays):
            return self._feed_stager.stage(item)
        if isinstance(item, Batch):  # one size throughout: no buckets needed
            return Batch(stage_arrays(item.images, self.torch_device),  # type: ignore[arg-type]
                         torch.from_numpy(np.array(item.labels, dtype=np.int64)).to(self.torch_device))
        return item

    def _staged(self, item: Any) -> StagedEpisode:
        """An episode staged on the feed's thread, or staged here (evaluation, direct calls)."""
        staged = item if isinstance(item, StagedEpisode) else self._inline_stager.stage(item)
        return staged.ready()

    def _logits(self, staged: StagedEpisode) -> tuple[torch.Tensor, torch.Tensor]:
        return self.protonet.packed(to_input(staged.images, self.torch_device), staged.labels, staged.support,
                                    staged.query, staged.ways)

    def train_step(self, item: Any) -> tuple[Any, Any]:
        self.backbone.train()
        with self._autocast():
            if isinstance(item, Batch):
                assert self.head is not None
                if not isinstance(item.images, torch.Tensor):  # not staged by the feed
                    item = self.stage(item)
                images, labels = item.images, item.labels
                logits = self.head(self.backbone(to_input(images, self.torch_device))).float()
            else:
                staged = self._staged(item)
                images = staged.images
                logits, labels = self._logits(staged)
        self.shapes.add(tuple(images.shape))
        loss = F.cross_entropy(logits, labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        accuracy = (logits.detach().argmax(1) == labels).float().mean()
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

    def to_floats(self, values: list[Any]) -> list[float]:
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if not tensors:
            return [float(v) for v in values]
        read = iter(torch.stack([t.float() for t in tensors]).tolist())  # one copy to the host
        return [next(read) if isinstance(v, torch.Tensor) else float(v) for v in values]

    def evaluate(self, episode: EpisodeArrays) -> tuple[Any, float]:
        self.backbone.eval()
        with torch.inference_mode(), self._autocast():
            logits, labels = self._logits(self._staged(episode))
            return logits.argmax(1).cpu().numpy(), float(F.cross_entropy(logits.float(), labels))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns the exit status (0, 2 bad input, 3 server fault)."""
    return run_main("torch", TorchFramework, argv)
