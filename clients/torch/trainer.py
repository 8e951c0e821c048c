"""The PyTorch trainer: Prototypical Networks or MD's inference-only baseline, episodic
evaluation, checkpoints, and metric reports (``python -m clients.torch``).

Determinism and resume: training episode i is the server's pure function of (request,
seed, i), and baseline step t takes batch t // S of source t % S (S sources), so a
checkpoint holding (weights, optimizer, next index) resumes the exact sequence an
unbroken run would have seen. Weights start from ``torch.manual_seed(--seed)``.
Evaluation runs in ``model.eval()`` under ``torch.inference_mode()``: for a given
checkpoint, every evaluation episode's accuracy, loss and predictions are fixed.

Exit codes: 0 done; 2 bad input (arguments, a checkpoint made with other arguments, no
CUDA for --device cuda); 3 a server fault (unreachable after retries, unknown source,
a refused request or report), always as one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from clients.core import EpisodeSpec, RetryPolicy, SamplerClient, SamplerClientError
from clients.torch.dataset import BatchDataset, EpisodeDataset
from clients.torch.models import LinearHead, ProtoNet, build_backbone, parameter_count, to_input
from clients.trainer_args import UnknownSource, eval_sources, parse_args, resolve_store, run_config, train_sources
from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb

PROG = "python -m clients.torch"
CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = 1
PROTOCOL = "md-episode"
_PLURAL = {"episode": "episodes", "batch": "batches"}
_SPLITS = {"train": pb.SPLIT_TRAIN, "valid": pb.SPLIT_VALID, "test": pb.SPLIT_TEST}
# Arguments that fix the architecture or the training sequence: a checkpoint made with
# other values cannot be resumed by this run.
_RESUME_KEYS = ("model", "backbone", "image_size", "sources", "preset", "seed", "ways", "shots", "query")


class UsageError(Exception):
    """Bad input found after parsing (exit 2)."""


def log(message: str) -> None:
    print(f"[torch] {message}", file=sys.stderr, flush=True)


@dataclass
class StepTimer:
    """Per training step: seconds waiting for data, and seconds of the whole step."""

    steps: int = 0
    images: int = 0
    first_wait: float = 0.0  # the first step's wait holds the stream's (and workers') start-up
    wait: float = 0.0
    total: float = 0.0
    window: list[float] = field(default_factory=list)  # step seconds since the last log line

    def add(self, wait: float, total: float, images: int) -> None:
        if self.steps == 0:
            self.first_wait = wait
        self.steps += 1
        self.images += images
        self.wait += wait
        self.total += total
        self.window.append(total)

    def recent_rate(self) -> float:
        rate = len(self.window) / sum(self.window) if self.window and sum(self.window) > 0 else 0.0
        self.window.clear()
        return rate

    def summary(self, unit: str) -> dict[str, Any]:
        per_s = self.steps / self.total if self.total > 0 else 0.0
        return {"unit": unit, "steps": self.steps, "seconds": round(self.total, 3),
                "steps_per_s": per_s, "episodes_per_s": per_s if unit == "episode" else None,
                "images": self.images, "images_per_s": self.images / self.total if self.total > 0 else 0.0,
                "data_wait_s": round(self.wait, 3), "first_wait_s": round(self.first_wait, 3),
                "data_wait_fraction": self.wait / self.total if self.total > 0 else 0.0}


class Trainer:
    """One run: resolve sources, build or restore the model, train, evaluate, report."""

    def __init__(self, args: argparse.Namespace, loader_workers: int | None = None) -> None:
        self.args = args
        self.device = _device(args.device)
        # DataLoader worker processes: on CUDA two (gRPC receive and array copies leave the
        # training process; the index order is kept), on CPU none (the cores train)
        self.loader_workers = (2 if self.device.type == "cuda" else 0) if loader_workers is None else loader_workers
        # bf16 autocast on CUDA (tensor cores); CPU runs stay float32
        self.precision = "bf16-autocast" if self.device.type == "cuda" else "float32"
        self.client_options = {"retry": RetryPolicy(max_attempts=args.retries),
                               "connect_timeout": args.connect_timeout}
        self.client = SamplerClient(args.server, **self.client_options)
        torch.manual_seed(args.seed)
        self.backbone = build_backbone(args.backbone, args.image_size)
        self.protonet = ProtoNet(self.backbone)
        self.head: LinearHead | None = None
        self.train_stores: tuple[str, ...] = ()
        self.class_counts: tuple[int, ...] = ()
        self.eval_stores: tuple[str, ...] = ()
        self.next_index = 0
        self.start_index = 0
        self.timer = StepTimer()
        self.checkpoint = Path(args.checkpoint_dir) / CHECKPOINT if args.checkpoint_dir else None

    # ---- setup ------------------------------------------------------------------------

    def resolve_sources(self) -> None:
        """Map source names (store names or kinds) to served stores; fails fast on unknown ones."""
        summaries = self.client.list_sources()
        try:
            if self.args.model == "baseline" or self.args.sources is not None:
                self.train_stores = tuple(resolve_store(n, summaries, self.args.image_size)
                                          for n in train_sources(self.args))
            self.eval_stores = tuple(resolve_store(n, summaries, self.args.image_size)
                                     for n in eval_sources(self.args))
        except UnknownSource as error:
            raise SamplerClientError(str(error)) from None
        if self.args.model == "baseline":
            self.class_counts = tuple(
                sum(1 for c in self.client.describe_source(store).classes if c.split == pb.SPLIT_TRAIN)
                for store in self.train_stores
            )
            if min(self.class_counts) == 0:
                empty = self.train_stores[self.class_counts.index(0)]
                raise SamplerClientError(f"source {empty!r} has no train classes to train the baseline on")
            self.head = LinearHead(self.backbone.out_dim, sum(self.class_counts))

    def parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.parameters()) + (list(self.head.parameters()) if self.head is not None else [])

    def config(self) -> dict[str, Any]:
        return run_config(self.args, {
            "framework": "torch", "torch_version": str(torch.__version__), "device": str(self.device),
            "precision": self.precision,
            "parameter_count": sum(p.numel() for p in self.parameters()),
            "backbone_parameter_count": parameter_count(self.backbone), "embedding_dim": self.backbone.out_dim,
            "train_stores": list(self.train_stores), "eval_stores": list(self.eval_stores),
            "baseline_classes": list(self.class_counts),
        })

    # ---- checkpoints ------------------------------------------------------------------

    def restore(self, optimizer: torch.optim.Optimizer) -> None:
        if self.checkpoint is None or not self.checkpoint.exists():
            if self.args.eval_only:
                raise UsageError(f"argument --eval-only: no checkpoint at {self.checkpoint}")
            return
        state = torch.load(self.checkpoint, map_location="cpu")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise UsageError(f"checkpoint {self.checkpoint}: format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
        saved = state["config"]
        for key in _RESUME_KEYS + (("batch_size",) if self.args.model == "baseline" else ()):
            ours = self.config()[key]
            if saved.get(key) != ours:
                raise UsageError(f"checkpoint {self.checkpoint} was made with {key}={saved.get(key)!r}; "
                                 f"this run has {key}={ours!r} (use another --checkpoint-dir)")
        self.backbone.load_state_dict(state["backbone"])
        if self.head is not None:
            self.head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        self.next_index = self.start_index = int(state["next_index"])
        log(f"resumed from {self.checkpoint} at training index {self.next_index}")

    def save(self, optimizer: torch.optim.Optimizer) -> None:
        if self.checkpoint is None:
            return
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": CHECKPOINT_FORMAT, "next_index": self.next_index, "config": self.config(),
                 "backbone": self.backbone.state_dict(), "head": self.head.state_dict() if self.head else None,
                 "optimizer": optimizer.state_dict()}
        partial = self.checkpoint.with_name(CHECKPOINT + ".partial")
        torch.save(state, partial)
        os.replace(partial, self.checkpoint)  # a crash mid-save leaves the previous checkpoint

    # ---- training -----------------------------------------------------------------------

    def train(self, optimizer: torch.optim.Optimizer) -> None:
        protonet = self.args.model == "protonet"
        total = self.args.train_episodes if protonet else self.args.train_steps
        if self.next_index >= total:
            log(f"nothing to train: the checkpoint is at index {self.next_index}, the run ends at {total}")
            return
        log(f"training {self.args.model} {self.args.backbone} on {self.device}, "
            f"indices {self.next_index}..{total - 1}")
        self.backbone.train()
        steps = self._episodes(total) if protonet else self._batches(total)
        unit = "episode" if protonet else "batch"
        done = self.next_index
        while done < total:
            started = time.perf_counter()
            inputs = next(steps)
            waited = time.perf_counter() - started
            loss, accuracy = self._step(optimizer, inputs)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.timer.add(waited, time.perf_counter() - started, sum(
                int(x.shape[0]) for x in inputs if isinstance(x, torch.Tensor) and x.dim() == 4))
            done = self.next_index = done + 1
            if done % self.args.log_every == 0 or done == total:
                log(f"{unit} {done}/{total} loss {loss.item():.4f} accuracy {accuracy.item():.3f} "
                    f"{self.timer.recent_rate():.2f} {_PLURAL[unit]}/s data wait {self._wait_fraction():.1%}")
            if done % self.args.checkpoint_every == 0 or done == total:
                self.save(optimizer)
        steps.close()

    def _wait_fraction(self) -> float:
        return self.timer.wait / self.timer.total if self.timer.total > 0 else 0.0

    def _step(self, optimizer: torch.optim.Optimizer, inputs: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        with self._autocast():
            if self.args.model == "protonet":
                support, support_labels, query, labels, ways = inputs
                logits = self.protonet(support, support_labels, query, ways)
            else:
                assert self.head is not None
                images, labels = inputs
                logits = self.head(self.backbone(images)).float()
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach(), (logits.detach().argmax(1) == labels).float().mean()

    def _loader(self, dataset: torch.utils.data.IterableDataset) -> Iterator[dict[str, Any]]:
        """Items of ``dataset`` in index order, from worker processes where there are any."""
        if self.loader_workers == 0:
            return iter(dataset)
        # spawn, not fork: a forked child must not inherit this process's gRPC channel
        return iter(torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=self.loader_workers, multiprocessing_context="spawn",
            pin_memory=self.device.type == "cuda", prefetch_factor=4))

    def _autocast(self) -> torch.autocast:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    def _episodes(self, total: int) -> Iterator[tuple[Any, ...]]:
        args = self.args
        spec = EpisodeSpec(sources=self.train_stores, preset=args.preset or "", split="train", seed=args.seed,
                           image_size=args.image_size, ways=args.ways, shots=args.shots, query=args.query)
        dataset = EpisodeDataset(args.server, spec, start=self.next_index, count=total - self.next_index,
                                 prefetch=4, client_options=self.client_options)
        expected = self.next_index
        for item in self._loader(dataset):
            if item["index"] != expected:
                raise SamplerClientError(f"training stream sent episode {item['index']}, expected {expected}")
            expected += 1
            yield self._episode_inputs(item)

    def _episode_inputs(self, item: dict[str, Any]) -> tuple[Any, ...]:
        device = self.device
        return (to_input(item["support_images"], device), item["support_labels"].to(device),
                to_input(item["query_images"], device), item["query_labels"].to(device), int(item["ways"]))

    def _batches(self, total: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Step t: batch t // S of source t % S, labels shifted by that source's offset."""
        args, count = self.args, len(self.train_stores)
        offsets = [sum(self.class_counts[:s]) for s in range(count)]

        def steps_before(limit: int, s: int) -> int:  # steps t < limit with t % count == s
            return max(0, (limit - s + count - 1) // count)

        streams: list[Iterator[dict[str, Any]] | None] = []
        for s, store in enumerate(self.train_stores):
            first, needed = steps_before(self.next_index, s), steps_before(total, s) - steps_before(self.next_index, s)
            streams.append(iter(self._loader(BatchDataset(
                args.server, store, "train", args.batch_size, seed=args.seed, start=first, count=needed,
                image_size=args.image_size, client_options=self.client_options))) if needed > 0 else None)
        for t in range(self.next_index, total):
            s = t % count
            stream = streams[s]
            assert stream is not None
            batch = next(stream)
            if batch["index"] != t // count or batch["num_classes"] != self.class_counts[s]:
                raise SamplerClientError(f"batch stream of {self.train_stores[s]!r} sent batch {batch['index']} of "
                                         f"{batch['num_classes']} classes, expected batch {t // count} of "
                                         f"{self.class_counts[s]}")
            yield to_input(batch["images"], self.device), (batch["labels"] + offsets[s]).to(self.device)

    # ---- evaluation and reports ---------------------------------------------------------

    def evaluate(self) -> dict[str, Any]:
        """Every eval source, one at a time: N episodes each, reported in batches."""
        args = self.args
        self.backbone.eval()
        config_json = json.dumps(self.config(), sort_keys=True)
        results: dict[str, Any] = {}
        for store in self.eval_stores:
            spec = EpisodeSpec(sources=(store,), split=args.eval_split, seed=args.eval_seed, image_size=args.image_size)
            request = spec.to_request()
            dataset = EpisodeDataset(args.server, spec, start=0, count=args.eval_episodes, prefetch=4,
                                     client_options=self.client_options)
            accuracies: list[float] = []
            losses: list[float] = []
            chances: list[float] = []
            pending: list[pb.MetricReport] = []
            kind = ""
            started = time.perf_counter()
            with torch.inference_mode(), self._autocast():
                for item in self._loader(dataset):
                    support, support_labels, query, labels, ways = self._episode_inputs(item)
                    logits = self.protonet(support, support_labels, query, ways)
                    predicted = logits.argmax(1)
                    accuracy = float((predicted == labels).float().mean())
                    loss = float(F.cross_entropy(logits, labels))
                    accuracies.append(accuracy)
                    losses.append(loss)
                    chances.append(1.0 / ways)
                    kind = item["source"]
                    pending.append(pb.MetricReport(
                        run_id=args.run, protocol=PROTOCOL, source=kind, split=_SPLITS[args.eval_split],
                        seed=args.eval_seed, index=int(item["index"]), fingerprint=item["fingerprint"],
                        metrics={"accuracy": accuracy, "loss": loss}, request=request,
                        predicted_labels=[int(p) for p in predicted.cpu()],
                    ))
                    if len(pending) >= args.report_batch:
                        self._report(pending, config_json)
                        pending = []
            if pending:
                self._report(pending, config_json)
            if len(accuracies) != args.eval_episodes:
                raise SamplerClientError(f"evaluation stream of {store!r} ended after {len(accuracies)} episodes")
            results[store] = _episode_stats(kind, accuracies, losses, chances, time.perf_counter() - started)
            log(f"eval {store} ({kind}) {args.eval_split}: accuracy {results[store]['mean_accuracy']:.4f} "
                f"± {results[store]['ci95']:.4f} over {len(accuracies)} episodes, all reported as run {args.run!r}")
        return results

    def _report(self, reports: Sequence[pb.MetricReport], config_json: str) -> None:
        reply = self.client.report(reports, run_config_json=config_json)
        if reply.stored + reply.duplicates != len(reports):
            raise SamplerClientError(f"ReportMetrics kept {reply.stored + reply.duplicates} of {len(reports)} reports")

    # ---- the run ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.resolve_sources()
        self.backbone.to(self.device)
        if self.head is not None:
            self.head.to(self.device)
        if self.device.type == "cuda":
            self.backbone.to(memory_format=torch.channels_last)
        optimizer = torch.optim.Adam(self.parameters(), lr=self.args.lr, fused=self.device.type == "cuda")
        self.restore(optimizer)
        if not self.args.eval_only:
            self.train(optimizer)
        unit = "episode" if self.args.model == "protonet" else "batch"
        summary: dict[str, Any] = {
            "run": self.args.run, "framework": "torch", "device": str(self.device), "model": self.args.model,
            "backbone": self.args.backbone, "precision": self.precision,
            "parameter_count": sum(p.numel() for p in self.parameters()),
            "start_index": self.start_index, "next_index": self.next_index, "train": self.timer.summary(unit),
            "eval": self.evaluate() if self.args.eval_episodes else {},
        }
        _print_summary(summary)
        if self.args.json_summary:
            Path(self.args.json_summary).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return summary

    def close(self) -> None:
        self.client.close()


def _episode_stats(kind: str, accuracies: list[float], losses: list[float], chances: list[float],
                   seconds: float) -> dict[str, Any]:
    n = len(accuracies)
    mean = sum(accuracies) / n if n else 0.0
    spread = math.sqrt(sum((a - mean) ** 2 for a in accuracies) / (n - 1)) if n > 1 else 0.0
    return {"source": kind, "episodes": n, "mean_accuracy": mean, "ci95": 1.96 * spread / math.sqrt(n) if n else 0.0,
            "mean_loss": sum(losses) / n if n else 0.0, "mean_chance": sum(chances) / n if n else 0.0,
            "seconds": round(seconds, 3)}


def _print_summary(summary: dict[str, Any]) -> None:
    train = summary["train"]
    header = (f"run {summary['run']}: {summary['model']} {summary['backbone']} on {summary['device']}, "
              f"{summary['parameter_count']} parameters, trained from index {summary['start_index']}, "
              f"next index {summary['next_index']}")
    lines = [header]
    if train["steps"]:
        plural = _PLURAL[train["unit"]]
        lines.append(f"  train: {train['steps']} {plural} in {train['seconds']:.1f} s = "
                     f"{train['steps_per_s']:.2f} {plural}/s ({train['images_per_s']:.0f} images/s), data wait {train['data_wait_fraction']:.1%} "
                     "of step time")
    for store, result in summary["eval"].items():
        lines.append(f"  eval {store}: accuracy {result['mean_accuracy']:.4f} ± {result['ci95']:.4f} "
                     f"(chance {result['mean_chance']:.3f}, loss {result['mean_loss']:.4f}, {result['episodes']} episodes)")
    print("\n".join(lines), flush=True)


def _device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("argument --device: got cuda, but torch finds no CUDA device")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns the exit status (0, 2 bad input, 3 server fault)."""
    try:
        args = parse_args("torch", argv)
    except SystemExit as stop:  # --help (0) or one-line argument error (2), already printed
        return int(stop.code or 0)
    trainer: Trainer | None = None
    try:
        trainer = Trainer(args)
        trainer.run()
        return 0
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr, flush=True)
        return 2
    except SamplerClientError as error:
        print(f"{PROG}: error: server {args.server}: {error}", file=sys.stderr, flush=True)
        return 3
    finally:
        if trainer is not None:
            trainer.close()
