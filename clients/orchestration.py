"""One run of a trainer, framework-free: the part the PyTorch and TensorFlow trainers share.

``run_main(framework, argv)`` parses the trainer command line (``clients.trainer_args``),
checks the named sources with the server, builds the framework's model, resumes
from its checkpoint, trains, evaluates test episodes one source at a time,
reports every evaluated episode (``clients.reporting.Reporter``), logs progress on
stderr, prints the summary and writes it as JSON (``RunSummary``, one schema for
both frameworks). A framework supplies only a ``Framework``: model, training step,
evaluation forward pass and checkpoint files.

Guarantees:

- Resume is exact. Training item i is the server's pure function of (request, seed,
  i): episode i, or for the baseline batch t // S of source t % S (S sources). A
  checkpoint holds the model, the optimizer and the next index, and records the
  arguments that fix the model and that sequence (``RESUME_KEYS``); resuming with
  other values is refused (exit 2) rather than silently mixed. On any fault the
  progress made since the last checkpoint is saved before the run ends.
- Names are the server's: source names (store names or kinds) and the preset go to
  the server unchanged and are checked there before anything runs.
- Reports are repeatable: evaluating the same checkpoint again reports identical
  results, which the server acknowledges as duplicates. The run configuration
  (``trainer_args.run_config``: what defines the results, not how the run was
  operated) is sent with the reports; the server keeps the first one of a run.
- Faults end cleanly, as one line on stderr: exit 2 for bad local input, 3 for a
  server fault (unreachable after retries, an unknown source, a refused request).
- The first episode waits for nothing it need not: training items are received
  and staged by a background ``clients.feed.Feed`` started before the model is
  built (its start index read from the checkpoint first), in the trainer's process.
- No step waits on the host for another: a framework's step may return its loss
  and accuracy as device values; they are read (``Framework.to_floats``) only when a
  progress line or the summary needs them.
"""

from __future__ import annotations

import abc
import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clients.core import EpisodeArrays, EpisodeSpec, Reporter, RetryPolicy, SamplerClient, SamplerClientError
from clients.feed import Feed
from clients.trainer_args import client_security, eval_sources, parse_args, run_config
from sampler_server.metrics.intervals import mean_ci95
from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb

EXIT_BAD_INPUT = 2
EXIT_SERVER = 3
# The arguments that fix the model and the training sequence: a checkpoint resumes only under the same values.
RESUME_KEYS = ("framework", "model", "backbone", "image_size", "sources", "preset", "seed", "ways", "shots", "query",
               "batch_size")
EVAL_KEYS = ("framework", "model", "backbone", "image_size")  # what --eval-only must match
_PLURAL = {"episode": "episodes", "batch": "batches"}


class UsageError(Exception):
    """Bad local input found after parsing (a checkpoint, a device): one line, exit 2."""


# ---- the summary: one schema for both frameworks ------------------------------------------


@dataclass
class TrainSummary:
    unit: str                    # "episode" (protonet) or "batch" (baseline)
    start_index: int             # the index training (re)started at
    next_index: int              # the index a resumed run would start at
    steps: int = 0               # items trained on in this run
    seconds: float = 0.0         # whole steps: waiting for data + compute
    steps_per_s: float = 0.0
    images: int = 0
    images_per_s: float = 0.0
    data_wait_seconds: float = 0.0
    first_wait_seconds: float = 0.0  # the first item's wait holds the stream's start-up
    data_wait_fraction: float = 0.0
    final_loss: float | None = None  # mean training loss over the last --log-every steps
    distinct_shapes: int = 0     # input shapes the training step met (shape buckets keep it small)
    curve: list[list[float]] = field(default_factory=list)  # [steps done, mean loss, mean accuracy] per log window


@dataclass
class EvalSummary:
    source: str                  # the source kind the episodes came from
    split: str
    episodes: int
    mean_accuracy: float
    ci95: float | None           # ``intervals.mean_ci95``: None for one episode
    mean_loss: float
    mean_chance: float           # mean of 1 / ways
    stored: int                  # reports the server stored new
    duplicates: int              # reports it already held (a repeated evaluation)
    seconds: float
    episodes_per_s: float


@dataclass
class RunSummary:
    run: str
    framework: str
    model: str
    backbone: str
    device: str
    precision: str
    parameter_count: int
    resumed_from: str | None     # the checkpoint this run started from
    start_index: int
    next_index: int
    train: TrainSummary
    eval: dict[str, EvalSummary] = field(default_factory=dict)  # by the name given in --eval-sources
    config: dict[str, Any] = field(default_factory=dict)  # the run configuration stored with its reports

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


# ---- what a framework supplies --------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One baseline training step: images uint8 [B, S, S, 3], labels int64 [B] over the
    union of the training sources' train classes."""

    images: np.ndarray
    labels: np.ndarray


class Framework(abc.ABC):
    """The framework part of a trainer. ``build`` seeds and builds the model (with a linear
    head over ``num_classes`` classes for the baseline); ``train_step`` takes what
    ``stage`` made of an ``EpisodeArrays`` (protonet) or a ``Batch`` (baseline) and returns
    (loss, accuracy), as floats or as device scalars ``to_floats`` reads later;
    ``evaluate`` returns an episode's query predictions and loss in inference mode."""

    name = ""
    device = ""
    precision = "float32"
    receive_streams = 1  # training streams received in parallel (merged in index order)

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shapes: set[tuple[int, ...]] = set()  # input shapes the training step met

    @abc.abstractmethod
    def build(self, num_classes: int) -> None:
        ...

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Run-configuration entries: versions, device, parameter counts."""
        ...

    @abc.abstractmethod
    def parameter_count(self) -> int:
        ...

    @abc.abstractmethod
    def checkpoint(self) -> tuple[str, dict[str, Any], int] | None:
        """(path, resume config stored with it, its next index) of the latest checkpoint,
        read before the model exists."""
        ...

    @abc.abstractmethod
    def restore(self, path: str) -> int:
        """Load the checkpoint at ``path`` (only the embedding under --eval-only); the next index."""
        ...

    @abc.abstractmethod
    def save(self, next_index: int, resume: dict[str, Any]) -> None:
        ...

    @abc.abstractmethod
    def train_step(self, item: Any) -> tuple[float, float]:
        ...

    @abc.abstractmethod
    def evaluate(self, episode: EpisodeArrays) -> tuple[Any, float]:
        ...

    def stage(self, item: Any) -> Any:
        """A training item made ready for ``train_step`` (padded, on the device), called
        on the feed's thread ahead of the step; by default the item itself."""
        return item

    def to_floats(self, values: list[Any]) -> list[float]:
        """Losses / accuracies as ``train_step`` returned them, as floats."""
        return [float(value) for value in values]

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        """(exit status, one line) for a framework error a run can end with, else None."""
        return None


# ---- the run -----------------------------------------------------------------------------------


@dataclass
class _Timer:
    summary: TrainSummary
    window: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    resolved: int = 0  # losses[:resolved] and accuracies[:resolved] are floats

    def add(self, wait: float, images: int, loss: Any, accuracy: Any) -> None:
        s = self.summary
        if s.steps == 0:
            s.first_wait_seconds = wait
        s.steps += 1
        s.images += images
        s.data_wait_seconds += wait
        self.losses.append(loss)
        self.accuracies.append(accuracy)

    def took(self, seconds: float) -> None:
        """The whole step's time (waiting for data + compute)."""
        self.summary.seconds += seconds
        self.window.append(seconds)

    def resolve(self, to_floats: Callable[[list[Any]], list[float]]) -> None:
        """Read the losses and accuracies still held as device values, in one call."""
        first, last = self.resolved, len(self.losses)
        if first == last:
            return
        values = to_floats(self.losses[first:] + self.accuracies[first:])
        self.losses[first:], self.accuracies[first:] = values[:last - first], values[last - first:]
        self.resolved = last

    def log_point(self, done: int, log_every: int) -> tuple[float, float]:
        """Mean loss and accuracy of the last window, also kept as a point of the curve."""
        loss, accuracy = float(np.mean(self.losses[-log_every:])), float(np.mean(self.accuracies[-log_every:]))
        self.summary.curve.append([done, loss, accuracy])
        return loss, accuracy

    def finish(self, log_every: int) -> TrainSummary:
        s = self.summary
        if s.seconds > 0:
            s.steps_per_s = s.steps / s.seconds
            s.images_per_s = s.images / s.seconds
            s.data_wait_fraction = s.data_wait_seconds / s.seconds
        s.seconds, s.data_wait_seconds, s.first_wait_seconds = (round(s.seconds, 3), round(s.data_wait_seconds, 3),
                                                                round(s.first_wait_seconds, 3))
        s.final_loss = float(np.mean(self.losses[-log_every:])) if self.losses else None
        return s


class Run:
    """One trainer run over one ``Framework``; ``execute`` returns the summary."""

    def __init__(self, framework: Framework, log: Callable[[str], None]) -> None:
        self.framework = framework
        self.args = args = framework.args
        self.log = log
        self.options = {"retry": RetryPolicy(max_attempts=args.retries), "connect_timeout": args.connect_timeout,
                        **client_security(args)}
        self.protonet = args.model == "protonet"
        self.unit = "episode" if self.protonet else "batch"
        self.class_counts: list[int] = []
        self.train_names: tuple[str, ...] = tuple(args.sources or ())
        self.eval_names: tuple[str, ...] = eval_sources(args)
        self.next_index = 0

    def client(self, prefetch: int = 2) -> SamplerClient:
        return SamplerClient(self.args.server, prefetch=prefetch, **self.options)

    # ---- set-up: names checked by the server before anything runs -------------------------

    def check_names(self) -> None:
        args = self.args
        with self.client() as client:
            if args.preset:
                client.list_sources(args.preset)  # INVALID_ARGUMENT for an unknown preset
                # what the preset means comes from the server: its sources for each split
                if not self.train_names and not self.protonet:
                    self.train_names = client.preset_sources(args.preset, "train")
                if not self.eval_names and args.eval_episodes:
                    self.eval_names = client.preset_sources(args.preset, args.eval_split)
            train = list(self.train_names) if not args.eval_only else []
            for name in train:
                described = client.describe_source(name, args.preset or "")
                if not self.protonet:
                    count = sum(1 for c in described.classes if c.split == pb.SPLIT_TRAIN)
                    if count == 0:
                        raise SamplerClientError(f"source {name!r} has no train classes to train the baseline on")
                    self.class_counts.append(count)
            for name in self.eval_names if args.eval_episodes else ():
                if name not in train:
                    client.describe_source(name, args.preset or "")

    def resume_config(self) -> dict[str, Any]:
        return {key: (self.framework.name if key == "framework" else getattr(self.args, key)) for key in RESUME_KEYS}

    def find_checkpoint(self) -> tuple[str, int] | None:
        """(path, next index) of the checkpoint to resume from, checked against these
        arguments before the model is built (so the feed can start at its index)."""
        args = self.args
        found = self.framework.checkpoint()
        if found is None:
            if args.eval_only:
                raise UsageError(f"argument --eval-only: no checkpoint in {args.checkpoint_dir}")
            return None
        path, stored, next_index = found
        wanted = json.loads(json.dumps(self.resume_config()))
        keys = EVAL_KEYS if args.eval_only else RESUME_KEYS
        differences = [f"--{key.replace('_', '-')} {stored.get(key)!r} there, {wanted[key]!r} here"
                       for key in keys if stored.get(key) != wanted[key]]
        if differences:
            raise UsageError(f"checkpoint {path} was made with other settings ({'; '.join(differences)}); "
                             "use another --checkpoint-dir")
        return path, next_index

    def config(self) -> dict[str, Any]:
        return run_config(self.args, {**self.framework.describe(), "framework": self.framework.name,
                                      "train_sources": list(self.train_names), "eval_sources": list(self.eval_names),
                                      "baseline_classes": self.class_counts, "trained_to_index": self.next_index})

    # ---- training ---------------------------------------------------------------------------

    def _episodes(self, start: int, total: int) -> Iterator[tuple[int, Any, int]]:
        """Episodes start..total-1 in order, over ``receive_streams`` streams (stream j
        takes the indices start + j, start + j + k, ...; k streams)."""
        args = self.args
        spec = EpisodeSpec(sources=tuple(args.sources or ()), preset=args.preset or "", split="train",
                           seed=args.seed, image_size=args.image_size, ways=args.ways, shots=args.shots,
                           query=args.query)
        period = max(1, min(self.framework.receive_streams, total - start))
        clients = [self.client(prefetch=4) for _ in range(period)]
        streams = [client.episodes(spec, start + j, steps_before(total - start, j, period), period)
                   for j, client in enumerate(clients)]
        try:
            for position in range(start, total):
                episode = next(streams[(position - start) % period])
                yield episode.index, episode, len(episode.support_images) + len(episode.query_images)
        finally:
            for stream in streams:
                stream.close()  # type: ignore[attr-defined]
            for client in clients:
                client.close()

    def _batches(self, start: int, total: int) -> Iterator[tuple[int, Any, int]]:
        """Step t takes batch t // S of source t % S (S sources), its labels offset by the
        classes of the sources before it, so one head spans the union of the train classes."""
        args, names, classes = self.args, list(self.train_names), self.class_counts
        period = len(names)
        offsets = np.cumsum([0, *classes[:-1]])
        clients = [self.client() for _ in names]
        streams: list[Iterator[Any] | None] = []
        for residue, (client, name) in enumerate(zip(clients, names, strict=True)):
            first = steps_before(start, residue, period)
            count = steps_before(total, residue, period) - first
            streams.append(client.batches(name, "train", args.batch_size, seed=args.seed, start=first, count=count,
                                          image_size=args.image_size, preset=args.preset or "")
                           if count > 0 else None)
        try:
            for position in range(start, total):
                residue = position % period
                stream = streams[residue]
                assert stream is not None
                batch = next(stream)
                if batch.index != position // period or batch.num_classes != classes[residue]:
                    raise SamplerClientError(f"{names[residue]}: batch {batch.index} of {batch.num_classes} classes, "
                                             f"expected batch {position // period} of {classes[residue]}")
                yield position, Batch(batch.images, batch.labels + offsets[residue]), len(batch.images)
        finally:
            for stream in streams:
                if stream is not None:
                    stream.close()  # type: ignore[attr-defined]
            for client in clients:
                client.close()

    def total(self) -> int:
        return self.args.train_episodes if self.protonet else self.args.train_steps

    def feed(self, start: int) -> Feed | None:
        """The training items from ``start`` on, received and staged from now on (None:
        nothing to train)."""
        total = self.total()
        if self.args.eval_only or start >= total:
            return None
        items = self._episodes(start, total) if self.protonet else self._batches(start, total)
        return Feed(items, self.framework.stage)

    def train(self, feed: Feed | None) -> TrainSummary:
        args, framework = self.args, self.framework
        total = self.total()
        start = self.next_index
        timer = _Timer(TrainSummary(self.unit, start, start))
        if feed is None:
            self.log(f"nothing to train: the checkpoint is at {self.unit} {start}, the run ends at {total}")
            return timer.finish(args.log_every)
        self.log(f"training {args.model} {args.backbone} on {framework.device}, {_PLURAL[self.unit]} "
                 f"{start}..{total - 1}")
        saved = start
        try:
            for position in range(start, total):
                began = time.perf_counter()
                index, item, images = next(feed)
                fetched = time.perf_counter()
                if index != position:
                    raise SamplerClientError(f"training stream sent {self.unit} {index}, expected {position}")
                loss, accuracy = framework.train_step(item)
                timer.add(fetched - began, images, loss, accuracy)
                self.next_index = timer.summary.next_index = done = position + 1
                logged = done % args.log_every == 0 or done == total
                if logged:  # the one wait for the device: the window's losses are read
                    timer.resolve(framework.to_floats)
                timer.took(time.perf_counter() - began)
                if done % args.checkpoint_every == 0 or done == total:
                    framework.save(done, self.resume_config())
                    saved = done
                if logged:
                    recent = timer.window[-args.log_every:]
                    mean_loss, mean_accuracy = timer.log_point(done, args.log_every)
                    self.log(f"{self.unit} {done}/{total}: loss {mean_loss:.4f}, accuracy {mean_accuracy:.3f}; "
                             f"{len(recent) / sum(recent):.2f} {_PLURAL[self.unit]}/s, data wait "
                             f"{timer.summary.data_wait_seconds / timer.summary.seconds:.1%}")
        finally:
            if self.next_index != saved:  # a fault mid-run keeps the progress made
                framework.save(self.next_index, self.resume_config())
            feed.close()
        timer.resolve(framework.to_floats)
        timer.summary.distinct_shapes = len(framework.shapes)
        return timer.finish(args.log_every)

    # ---- evaluation and reports ---------------------------------------------------------------

    def evaluate(self) -> dict[str, EvalSummary]:
        """Every eval source, one at a time: --eval-episodes episodes each, all reported."""
        args = self.args
        config = self.config()
        results: dict[str, EvalSummary] = {}
        with self.client(prefetch=4) as client, self.client() as report_client:
            for name in self.eval_names:
                spec = EpisodeSpec(sources=(name,), preset=args.preset or "", split=args.eval_split,
                                   seed=args.eval_seed, image_size=args.image_size)
                accuracies: list[float] = []
                losses: list[float] = []
                chances: list[float] = []
                kind = name
                began = time.perf_counter()
                with Reporter(report_client, args.run, run_config=config, batch=args.report_batch) as reporter:
                    for episode in client.episodes(spec, 0, args.eval_episodes):
                        predictions, loss = self.framework.evaluate(episode)
                        accuracies.append(reporter.add(episode, predictions, {"loss": loss}))
                        losses.append(loss)
                        chances.append(1.0 / episode.ways)
                        kind = episode.source
                if len(accuracies) != args.eval_episodes:
                    raise SamplerClientError(f"evaluation stream of {name!r} ended after {len(accuracies)} episodes")
                seconds = time.perf_counter() - began
                mean, ci95 = mean_ci95(accuracies)
                results[name] = EvalSummary(
                    source=kind, split=args.eval_split, episodes=len(accuracies), mean_accuracy=mean, ci95=ci95,
                    mean_loss=float(np.mean(losses)), mean_chance=float(np.mean(chances)), stored=reporter.stored,
                    duplicates=reporter.duplicates, seconds=round(seconds, 3),
                    episodes_per_s=len(accuracies) / seconds if seconds > 0 else 0.0)
                self.log(f"eval {name} ({kind}) {args.eval_split}: accuracy {mean:.4f} ± {_ci(ci95)} over "
                         f"{len(accuracies)} episodes (chance {results[name].mean_chance:.3f}); reported "
                         f"{reporter.stored} new, {reporter.duplicates} again as run {args.run!r}")
        return results

    # ---- all of it ------------------------------------------------------------------------------

    def execute(self) -> RunSummary:
        args, framework = self.args, self.framework
        self.check_names()
        found = self.find_checkpoint()
        resumed_from, start = found if found is not None else (None, 0)
        feed = self.feed(start)  # receiving starts now, while the model is built
        try:
            framework.build(sum(self.class_counts))
            if resumed_from is not None:
                restored = framework.restore(resumed_from)
                if restored != start:
                    raise UsageError(f"checkpoint {resumed_from}: next index {restored}, but {start} when first read")
            self.next_index = start
            self.log(f"run {args.run}: {args.model} on {args.backbone} ({framework.parameter_count()} parameters), "
                     f"{framework.device}, server {args.server}"
                     + (f", {'evaluating' if args.eval_only else 'resumed from'} {resumed_from} (index {start})"
                        if resumed_from else ""))
            train = TrainSummary(self.unit, start, start) if args.eval_only else self.train(feed)
        finally:
            if feed is not None:
                feed.close()
        results = self.evaluate() if args.eval_episodes else {}
        return RunSummary(
            run=args.run, framework=framework.name, model=args.model, backbone=args.backbone, device=framework.device,
            precision=framework.precision, parameter_count=framework.parameter_count(), resumed_from=resumed_from,
            start_index=start, next_index=self.next_index, train=train, eval=results, config=self.config())


def steps_before(limit: int, residue: int, period: int) -> int:
    """How many t in [0, limit) have t % period == residue."""
    return max(0, -(-(limit - residue) // period))


def _ci(ci95: float | None) -> str:
    return f"{ci95:.4f}" if ci95 is not None else "n/a (one episode)"


def format_summary(summary: RunSummary) -> str:
    """The run summary as the few lines printed on stdout."""
    train = summary.train
    lines = [f"run {summary.run}: {summary.framework} {summary.model} {summary.backbone} on {summary.device}, "
             f"{summary.parameter_count} parameters, {train.unit}s {summary.start_index}..{summary.next_index}"]
    if train.steps:
        plural = _PLURAL[train.unit]
        lines.append(f"  train: {train.steps} {plural} in {train.seconds:.1f} s = {train.steps_per_s:.2f} {plural}/s "
                     f"({train.images_per_s:.0f} images/s), data wait {train.data_wait_fraction:.1%} of step time")
    for name, result in summary.eval.items():
        lines.append(f"  eval {name} ({result.split}): accuracy {result.mean_accuracy:.4f} ± {_ci(result.ci95)} "
                     f"(chance {result.mean_chance:.3f}, loss {result.mean_loss:.4f}, {result.episodes} episodes)")
    return "\n".join(lines)


def run_main(framework_name: str, make: Callable[[argparse.Namespace], Framework],
             argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one trainer run; the exit status (0 ok, 2 bad input, 3 server
    fault, 130 interrupted; a framework may map its own errors, e.g. out of memory, to 1)."""
    prog = f"python -m clients.{framework_name}"
    try:
        args = parse_args(framework_name, argv)
    except SystemExit as stop:  # --help (0) or a one-line argument error (2), already printed
        return int(stop.code) if isinstance(stop.code, int) else (EXIT_BAD_INPUT if stop.code else 0)

    def log(message: str) -> None:
        print(f"{prog}: {message}", file=sys.stderr, flush=True)

    def fail(message: str) -> None:
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)

    framework: Framework | None = None
    try:
        framework = make(args)
        summary = Run(framework, log).execute()
    except UsageError as error:
        fail(str(error))
        return EXIT_BAD_INPUT
    except SamplerClientError as error:
        fail(f"server {args.server}: {error}")
        return EXIT_SERVER
    except KeyboardInterrupt:
        fail("interrupted" + (f"; progress saved in {args.checkpoint_dir}" if args.checkpoint_dir else ""))
        return 130
    except Exception as error:
        mapped = framework.classify(error) if framework is not None else None
        if mapped is None:
            raise
        fail(mapped[1])
        return mapped[0]
    print(format_summary(summary), flush=True)
    if args.json_summary:
        path = Path(args.json_summary)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(summary.to_json())
    return 0


def run_command(prog: str, parse: Callable[[], argparse.Namespace], make: Callable[[argparse.Namespace], Any],
                execute: Callable[[Any, SamplerClient, Callable[[str], None]], dict[str, Any]],
                summarise: Callable[[dict[str, Any]], str]) -> int:
    """The shell of a trainer subcommand (``transfer``, ``cog``): parse, build the framework
    part, run against the server, print (and with ``--json-summary`` write) the summary.
    Exit status 0 ok, 2 bad input, 3 server fault, 130 interrupted; every failure is one
    line on stderr. ``make``'s object may map a framework's own errors with ``classify``."""
    try:
        args = parse()
    except SystemExit as stop:
        return int(stop.code) if isinstance(stop.code, int) else (EXIT_BAD_INPUT if stop.code else 0)

    def log(message: str) -> None:
        print(f"{prog}: {message}", file=sys.stderr, flush=True)

    def fail(message: str) -> None:
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)

    part: Any = None
    try:
        part = make(args)
        options = {"retry": RetryPolicy(max_attempts=args.retries), "connect_timeout": args.connect_timeout,
                   **client_security(args)}
        with SamplerClient(args.server, **options) as client:
            summary = execute(part, client, log)
    except UsageError as error:
        fail(str(error))
        return EXIT_BAD_INPUT
    except SamplerClientError as error:
        fail(f"server {args.server}: {error}")
        return EXIT_SERVER
    except KeyboardInterrupt:
        fail("interrupted")
        return 130
    except Exception as error:
        mapped = part.classify(error) if part is not None else None
        if mapped is None:
            raise
        fail(mapped[1])
        return mapped[0]
    print(summarise(summary), flush=True)
    if args.json_summary:
        path = Path(args.json_summary)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2, sort_keys=True))
    return 0
