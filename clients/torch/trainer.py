"""The PyTorch trainer's framework part (``python -m clients.torch``): Prototypical
Networks or MD's inference-only baseline in PyTorch, its training step, its
evaluation forward pass and its checkpoint file. The run itself (sources, resume,
training loop, evaluation, reports, summary, exit codes) is ``clients.orchestration``.

Determinism: weights start from ``torch.manual_seed(--seed)``; evaluation runs in
``model.eval()`` under ``torch.inference_mode()``, so for a given checkpoint every
evaluation episode's accuracy, loss and predictions are fixed. On CUDA the backbone
runs under bf16 autocast with channels_last, and training episodes are received by
two DataLoader worker processes (their order kept); CPU runs stay float32 in-process.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.core import EpisodeArrays, EpisodeSpec
from clients.orchestration import Batch, Framework, UsageError, run_main
from clients.torch.dataset import EpisodeDataset
from clients.torch.models import LinearHead, ProtoNet, build_backbone, parameter_count, to_input

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = 2


def _device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("argument --device: got cuda, but torch finds no CUDA device")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


class TorchFramework(Framework):
    name = "torch"

    def __init__(self, args: argparse.Namespace, loader_workers: int | None = None) -> None:
        super().__init__(args)
        self.torch_device = _device(args.device)
        self.device = str(self.torch_device)
        cuda = self.torch_device.type == "cuda"
        # DataLoader worker processes: on CUDA two (gRPC receive and array copies leave the
        # training process; the index order is kept), on CPU none (the cores train)
        self.loader_workers = (2 if cuda else 0) if loader_workers is None else loader_workers
        self.precision = "bf16-autocast" if cuda else "float32"
        self.path = Path(args.checkpoint_dir) / CHECKPOINT if args.checkpoint_dir else None
        self._state: dict[str, Any] | None = None

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
                "parameter_count": self.parameter_count(),
                "backbone_parameter_count": parameter_count(self.backbone), "embedding_dim": self.backbone.out_dim}

    def _autocast(self) -> torch.autocast:
        cuda = self.torch_device.type == "cuda"
        return torch.autocast(device_type=self.torch_device.type, dtype=torch.bfloat16, enabled=cuda)

    # ---- checkpoints ------------------------------------------------------------------------

    def checkpoint(self) -> tuple[str, dict[str, Any]] | None:
        if self.path is None or not self.path.exists():
            return None
        state = torch.load(self.path, map_location="cpu")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise UsageError(f"checkpoint {self.path}: format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
        self._state = state
        return str(self.path), state["resume"]

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

    def _episode_inputs(self, item: EpisodeArrays | dict[str, Any]) -> tuple[Any, ...]:
        device = self.torch_device
        if isinstance(item, EpisodeArrays):
            item = {"support_images": torch.from_numpy(np.array(item.support_images)),
                    "support_labels": torch.from_numpy(np.array(item.support_labels)),
                    "query_images": torch.from_numpy(np.array(item.query_images)),
                    "query_labels": torch.from_numpy(np.array(item.query_labels)), "ways": item.ways}
        return (to_input(item["support_images"], device), item["support_labels"].to(device),
                to_input(item["query_images"], device), item["query_labels"].to(device), int(item["ways"]))

    def train_step(self, item: Any) -> tuple[float, float]:
        self.backbone.train()
        with self._autocast():
            if isinstance(item, Batch):
                assert self.head is not None
                images = to_input(torch.from_numpy(np.array(item.images)), self.torch_device)
                labels = torch.from_numpy(np.asarray(item.labels, dtype=np.int64)).to(self.torch_device)
                logits = self.head(self.backbone(images)).float()
            else:
                support, support_labels, query, labels, ways = self._episode_inputs(item)
                logits = self.protonet(support, support_labels, query, ways)
        loss = F.cross_entropy(logits, labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        accuracy = (logits.detach().argmax(1) == labels).float().mean()
        return float(loss.detach()), float(accuracy)  # float() waits for the step to finish

    def evaluate(self, episode: EpisodeArrays) -> tuple[Any, float]:
        self.backbone.eval()
        with torch.inference_mode(), self._autocast():
            support, support_labels, query, labels, ways = self._episode_inputs(episode)
            logits = self.protonet(support, support_labels, query, ways)
            return logits.argmax(1).cpu().numpy(), float(F.cross_entropy(logits.float(), labels))

    def episode_items(self, spec: EpisodeSpec, start: int, count: int,
                      options: dict[str, Any]) -> Iterator[tuple[int, Any, int]] | None:
        if self.loader_workers == 0:
            return None
        dataset = EpisodeDataset(self.args.server, spec, start=start, count=count, prefetch=4, client_options=options)
        # spawn, not fork: a forked child must not inherit this process's gRPC channel
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=self.loader_workers, multiprocessing_context="spawn",
            pin_memory=self.torch_device.type == "cuda", prefetch_factor=4)
        return ((int(item["index"]), item, len(item["support_images"]) + len(item["query_images"])) for item in loader)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns the exit status (0, 2 bad input, 3 server fault)."""
    return run_main("torch", TorchFramework, argv)
