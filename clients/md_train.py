"""One Meta-Dataset training run, framework-free: the part the PyTorch and TensorFlow trainers share.

``run_main(framework, argv)`` parses the trainer command line (``clients.trainer_args``),
checks the named sources with the server, builds the framework's model, resumes
from its checkpoint, trains, evaluates test episodes one source at a time,
reports every evaluated episode (``clients.reporting.Reporter``), logs progress on
stderr, prints the summary and writes it as JSON (``RunSummary``, one schema for
both frameworks). A framework supplies only a ``Framework``: model, training step,
evaluation forward pass and checkpoint files.

Guarantees:

- Resume is exact. Training item i is the server's pure function of (request, seed,
  i): episode i, or for the baseline the next batch of the source drawn for step i. A
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

Distributed (N processes train one model: ``torchrun`` ranks, or the workers of a
TensorFlow ``TF_CONFIG`` cluster; the framework says which: ``Framework.rank`` and
``world_size``):

- A step is N items, one per rank, and the model takes the mean of their gradients.
  Global step k from index s takes the N consecutive indices s + kN .. s + kN + N - 1,
  rank r the index s + kN + r (the canonical index space of ``clients.state``, sharded
  by residue). The ranks together train each index of the window exactly once, and
  after every step the trained indices are a prefix of it, so the next index
  s + (k + 1)N is the same on every rank. Each rank streams only its own indices.
  The window's length must be a multiple of N (exit 2 otherwise): a step of fewer
  items than ranks would weigh its items differently.
- Checkpoints are written by rank 0 only (every rank holds the same model), with that
  next index; every rank reads the same checkpoint to resume. The checkpoint records
  N, and a resume under another N is refused (exit 2): the model a run ends with
  depends on N, so a run that changed it would match no unbroken run. A resumed run
  takes the same shards (rank r again takes the indices of residue r). A rank that
  fails stops the run (torchrun stops the others); rank 0 saves the progress made
  since the last checkpoint only when its fault came while waiting for data, not
  inside a step, where its model may hold part of a step the others never finished.
- Evaluation is sharded: rank r evaluates the test episodes r, r + N, ... and reports
  those itself, so each episode is reported once, by one rank, as the same report a
  single process would send (the same model evaluates it, and every rank sends rank
  0's run configuration). Why each rank reports its own: the predictions (a label per
  query image) never cross between ranks, the reports' round trips are spread over
  the ranks, and no episode is reported twice since the shards are disjoint (a
  resent report would be a harmless duplicate anyway: the server's keys are
  idempotent). Only the per-episode accuracy, loss and chance are gathered to rank 0,
  for the summary's mean and interval over all the episodes.
- Progress lines, the summary and ``--json-summary`` come from rank 0; the summary's
  ``ranks`` lists what each rank trained (its indices, as the server sent them) and a
  digest of its model's parameters and buffers, gathered at the end, and each rank
  logs its own line, so a run shows that the ranks' models stayed identical. Loss and
  accuracy on progress lines are the mean over every rank's episodes of the window.
"""

from __future__ import annotations

import abc
import argparse
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from clients import md_presets
from clients.buckets import DEFAULT_RATIO
from clients.client import SamplerClient
from clients.errors import SamplerClientError
from clients.feed import Feed
from clients.md_learners import episodic
from clients.protocols.md import EpisodeArrays, EpisodeSpec
from clients.receiver import ProcessItems
from clients.reporting import Reporter
from clients.seeds import batch_sources
from clients.server_options import client_options
from clients.trainer_args import eval_sources, parse_args, run_config, train_groups, validation_sources
from clients.trainer_options import Resume, resume_keys
from clients.trainer_shell import Console, exit_for, parse_status, write_summary
from clients.errors import UsageError
from clients.validation import Validation, ValidationHistory, due
from sampler_common.intervals import mean_ci95
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

# The arguments that fix the model and the training sequence: a checkpoint resumes only under the same
# values; --eval-only needs the same model. Each option declares which it is (its ``resume``).
RESUME_KEYS = ("framework", *resume_keys(train_groups("torch"), Resume.MODEL, Resume.SEQUENCE))
EVAL_KEYS = ("framework", *resume_keys(train_groups("torch"), Resume.MODEL))
RANKS_KEY = "ranks"  # in a checkpoint's resume config: the processes that trained it (absent: 1)
_PLURAL = {"episode": "episodes", "batch": "batches"}


# ---- the summary: one schema for both frameworks ------------------------------------------


@dataclass
class TrainSummary:
    unit: str                    # "episode" (protonet, matchingnet) or "batch" (baseline, knn)
    start_index: int             # the index training (re)started at
    next_index: int              # the index a resumed run would start at
    steps: int = 0               # items trained on in this run (by all ranks)
    seconds: float = 0.0         # whole steps: waiting for data + compute (rank 0's)
    steps_per_s: float = 0.0
    images: int = 0
    images_per_s: float = 0.0
    data_wait_seconds: float = 0.0   # the longest of the ranks' (a rank that waits holds up every rank)
    first_wait_seconds: float = 0.0  # the first item's wait holds the stream's start-up (rank 0's)
    data_wait_fraction: float = 0.0
    final_loss: float | None = None  # mean training loss over the last --log-every steps
    # mean training accuracy over the last --log-every steps (every rank's items), its 95% CI
    # half-width (``intervals.mean_ci95``; None for one item): two runs' curves compare by these
    final_accuracy: float | None = None
    final_accuracy_ci95: float | None = None
    distinct_shapes: int = 0     # input shapes the training step met (shape buckets keep it small)
    compile_seconds: float | None = None  # --compile: the first step (tracing, compiling, running)
    compiled_graphs: int | None = None    # --compile: compilations (1: one graph for every bucket)
    # --compile: the cache (dir, the shapes it held at the start, this run's hits and misses, eager steps)
    compile_cache: dict[str, Any] | None = None
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
class RankSummary:
    rank: int
    device: str
    steps: int                   # items this rank trained on in this run
    images: int
    indices: list[list[int]]     # the indices it trained, as [first, step, count] runs (``index_runs``)
    data_wait_seconds: float
    parameter_digest: str        # sha256 of its model's parameters and buffers at the end


@dataclass(frozen=True)
class TrainingItems:
    """A rank's training items, (index, item, images) in index order: episodes, or a batch
    learner's batches. Plain values only, so it pickles: calling it in a child process
    receives there what it would receive here (``clients.receiver``)."""

    server: str
    options: dict[str, Any]      # ``SamplerClient`` keywords (``server_options.client_options``)
    episodic: bool
    spec: EpisodeSpec            # the training episodes (a batch learner: its seed, image size, preset)
    names: tuple[str, ...]       # a batch learner's sources, in head order
    classes: tuple[int, ...]     # their train classes
    batch_size: int
    start: int
    total: int
    rank: int
    ranks: int
    receive_streams: int = 1     # episode streams received in parallel

    def __call__(self) -> Iterator[tuple[int, Any, int]]:
        return self.episodes() if self.episodic else self.batches()

    def client(self, prefetch: int = 2) -> SamplerClient:
        return SamplerClient(self.server, prefetch=prefetch, **self.options)

    def episodes(self) -> Iterator[tuple[int, Any, int]]:
        """This rank's episodes in order, over ``receive_streams`` streams (stream j takes
        this rank's j-th, (j + k)-th, ... index; k streams)."""
        mine = range(self.start + self.rank, self.total, self.ranks)
        period = max(1, min(self.receive_streams, len(mine)))
        clients = [self.client(prefetch=4) for _ in range(period)]
        streams = [client.episodes(self.spec, mine[j], steps_before(len(mine), j, period), period * self.ranks)
                   for j, client in enumerate(clients)]
        try:
            for position in range(len(mine)):
                episode = next(streams[position % period])
                yield episode.index, episode, len(episode.support_images) + len(episode.query_images)
        finally:
            for stream in streams:
                stream.close()
            for client in clients:
                client.close()

    def batches(self) -> Iterator[tuple[int, Any, int]]:
        """Step t takes a batch of source s(t), drawn uniformly per step (``seeds.batch_sources``,
        as MD draws each batch's source), its labels offset by the classes of the sources before
        it, so one head spans the union of the train classes. Each source's batches are read in
        order: rank r of N takes batches r, r + N, r + 2N, ... of it as its steps meet that source
        (one process: the source's batches 0, 1, 2, ...)."""
        names, classes, start, total = list(self.names), self.classes, self.start, self.total
        ranks, rank, spec = self.ranks, self.rank, self.spec
        offsets = np.cumsum([0, *classes[:-1]])
        drawn = batch_sources(spec.seed, len(names), total)
        own, indices = drawn[rank::ranks], source_batch_indices(drawn, rank, ranks)  # this rank's steps
        earlier = len(range(rank, start, ranks))  # of them before this run's start
        clients = [self.client() for _ in names]
        streams: list[Iterator[Any] | None] = []
        for source, (client, name) in enumerate(zip(clients, names, strict=True)):
            ahead = indices[earlier:][own[earlier:] == source]
            streams.append(client.batches(name, "train", self.batch_size, seed=spec.seed, start=int(ahead[0]),
                                          count=len(ahead), step=ranks, image_size=spec.image_size,
                                          preset=spec.preset) if len(ahead) else None)
        try:
            for position in range(start + rank, total, ranks):
                source, expected = int(drawn[position]), int(indices[(position - rank) // ranks])
                stream = streams[source]
                assert stream is not None
                batch = next(stream)
                if batch.index != expected or batch.num_classes != classes[source]:
                    raise SamplerClientError(f"{names[source]}: batch {batch.index} of {batch.num_classes} classes, "
                                             f"expected batch {expected} of {classes[source]}")
                yield position, Batch(batch.images, batch.labels + offsets[source]), len(batch.images)
        finally:
            for stream in streams:
                if stream is not None:
                    stream.close()
            for client in clients:
                client.close()


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
    world_size: int = 1          # processes that trained together (torchrun ranks, TF workers)
    ranks: list[RankSummary] = field(default_factory=list)  # by rank
    # --validate-every: each validation and the best, whose backbone was tested (``ValidationHistory.to_dict``)
    validation: dict[str, Any] | None = None

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
    head over ``num_classes`` classes for a batch-trained model); ``train_step`` takes what
    ``stage`` made of an ``EpisodeArrays`` (an episodic model) or a ``Batch`` (baseline, knn) and returns
    (loss, accuracy), as floats or as device scalars ``to_floats`` reads later;
    ``evaluate`` returns an episode's query predictions and loss in inference mode."""

    name = ""
    device = ""
    precision = "float32"
    receive_streams = 1  # training streams received in parallel (merged in index order)
    rank = 0             # this process among those training one model (see the module docstring)
    world_size = 1
    collectives = ""     # what carries the ranks' collectives (e.g. nccl, gloo), for the log

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shapes: set[tuple[int, ...]] = set()  # input shapes the training step met
        self.compile_seconds: float | None = None  # a compiled step: its first step's wall time
        self.compiled_graphs: int | None = None    # a compiled step: its compilations so far
        self.compile_cache: dict[str, Any] | None = None  # a compiled step: its cache's figures

    @abc.abstractmethod
    def build(self, num_classes: int) -> None:
        ...

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Run-configuration entries: versions, device, parameter counts."""
        ...

    def step_settings(self) -> str:
        """What the training step runs with, for the run's first line."""
        if not getattr(self, "buckets", False):
            return f"{self.precision}, shape buckets off"
        ratio = self.args.bucket_ratio
        return f"{self.precision}, shape buckets on" + (f" (grid ratio {ratio:g})" if ratio != DEFAULT_RATIO else "")

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

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), by rank. Every rank calls it at the same
        point of the run: the run's collectives come in one order on every rank."""
        return [value]

    @abc.abstractmethod
    def parameter_digest(self) -> str:
        """sha256 (hex) of the model's parameters and buffers: equal on every rank."""
        ...

    @abc.abstractmethod
    def weights_sha256(self) -> str:
        """The run's result fingerprint: sha256 (``determinism.weights_sha256``) of the backbone's
        weights as evaluated, so ``--eval-only`` of the checkpoint records the same one."""
        ...

    @abc.abstractmethod
    def keep_best(self, update: int) -> None:
        """Keep the backbone as it is now as the best validated one (in memory, and in
        --checkpoint-dir as ``best`` where one is given, so a resumed run still has it)."""
        ...

    @abc.abstractmethod
    def restore_best(self, update: int) -> None:
        """Load the backbone kept by ``keep_best(update)``; a kept one of another update is refused."""
        ...

    def close(self) -> None:
        """Release what the framework set up for the run (a process group)."""


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

    def log_point(self, done: int, loss: float, accuracy: float) -> None:
        """A point of the curve: the window's mean loss and accuracy after ``done`` items."""
        self.summary.curve.append([done, loss, accuracy])

    def finish(self, final_loss: float | None, final_accuracies: list[float] | None = None) -> TrainSummary:
        s = self.summary
        if final_accuracies:
            s.final_accuracy, s.final_accuracy_ci95 = mean_ci95(final_accuracies)
        if s.seconds > 0:
            s.steps_per_s = s.steps / s.seconds
            s.images_per_s = s.images / s.seconds
            s.data_wait_fraction = s.data_wait_seconds / s.seconds
        s.seconds, s.data_wait_seconds, s.first_wait_seconds = (round(s.seconds, 3), round(s.data_wait_seconds, 3),
                                                                round(s.first_wait_seconds, 3))
        s.final_loss = final_loss
        return s


class Run:
    """One trainer run over one ``Framework``; ``execute`` returns the summary (complete
    on rank 0; other ranks return theirs, which no one prints)."""

    def __init__(self, framework: Framework, log: Callable[[str], None]) -> None:
        self.framework = framework
        self.args = args = framework.args
        self.rank, self.ranks = framework.rank, framework.world_size
        self.log_rank = log                                          # this rank's own lines
        self.log = log if self.rank == 0 else (lambda message: None)  # the run's lines: rank 0's
        self.options = client_options(args)
        self.episodic = episodic(args.model)
        self.unit = "episode" if self.episodic else "batch"
        self.class_counts: list[int] = []
        self.train_names: tuple[str, ...] = tuple(args.sources or ())
        self.eval_names: tuple[str, ...] = eval_sources(args)
        self.next_index = 0
        self.train_ranks = self.ranks  # the ranks the model was trained by (--eval-only: its checkpoint's)
        self.trained: list[int] = []   # the indices this rank trained on, as received
        self.server_line = ""          # transport and server settings (``check_names``)
        self.validation: ValidationHistory | None = None  # --validate-every (``execute``)

    def client(self, prefetch: int = 2) -> SamplerClient:
        return SamplerClient(self.args.server, prefetch=prefetch, **self.options)

    # ---- set-up: names checked by the server before anything runs -------------------------

    def check_names(self) -> None:
        args = self.args
        with self.client() as client:
            self.server_line = server_line(client.transport, client.server_settings())
            if args.preset:
                client.list_sources(args.preset)  # INVALID_ARGUMENT for an unknown preset
                # what the preset means comes from the server: its sources for each split
                if not self.train_names and not self.episodic:
                    self.train_names = client.preset_sources(args.preset, "train")
                if not self.eval_names and args.eval_episodes:
                    self.eval_names = client.preset_sources(args.preset, args.eval_split)
            train = list(self.train_names) if not args.eval_only else []
            for name in train:
                described = client.describe_source(name, args.preset or "")
                if not self.episodic:
                    count = sum(1 for c in described.classes if c.split == pb.SPLIT_TRAIN)
                    if count == 0:
                        raise SamplerClientError(f"source {name!r} has no train classes to train the baseline on")
                    self.class_counts.append(count)
            for name in self.eval_names if args.eval_episodes else ():
                if name not in train:
                    client.describe_source(name, args.preset or "")
                self._first_episode(client, self.eval_spec(name, args.eval_split))
            for name in validation_sources(args):
                client.describe_source(name, args.preset or "")
                self._first_episode(client, self.eval_spec(name, "valid"))

    def eval_spec(self, name: str, split: str) -> EpisodeSpec:
        """The evaluation (or validation) episodes of source ``name`` on ``split``."""
        args = self.args
        return EpisodeSpec(sources=(name,), preset=args.preset or "", split=split, seed=args.eval_seed,
                           image_size=args.image_size, ways=args.eval_ways, shots=args.eval_shots,
                           query=args.eval_query)

    @staticmethod
    def _first_episode(client: SamplerClient, spec: EpisodeSpec) -> None:
        """Ask for the first of ``spec``'s episodes, so a refusal of them (too few classes for the
        ways, say) ends the run before training, not after it."""
        for _ in client.episodes(spec, 0, 1):
            break

    def resume_config(self) -> dict[str, Any]:
        config = {key: (self.framework.name if key == "framework" else getattr(self.args, key)) for key in RESUME_KEYS}
        if self.ranks > 1:  # absent means 1: checkpoints of single-process runs stay as they were
            config[RANKS_KEY] = self.ranks
        return config

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
        trained_by = stored.get(RANKS_KEY, 1)
        if args.eval_only:
            self.train_ranks = trained_by
        elif trained_by != self.ranks:
            raise UsageError(f"checkpoint {path} was trained by {trained_by} process(es) (ranks), this run has "
                             f"{self.ranks}: resume with {trained_by} (torchrun --nproc_per_node, or TF_CONFIG "
                             "workers) or use another --checkpoint-dir")
        return path, next_index

    def config(self) -> dict[str, Any]:
        extra = {**self.framework.describe(), "framework": self.framework.name,
                 "train_sources": list(self.train_names), "eval_sources": list(self.eval_names),
                 "baseline_classes": self.class_counts, "trained_to_index": self.next_index,
                 "result_sha256": self.framework.weights_sha256()}
        if self.train_ranks > 1:  # what the model is depends on it; absent means 1
            extra["train_ranks"] = self.train_ranks
        best = self.validation.best if self.validation is not None else None
        if best is not None:  # the backbone tested is that validation's (``clients.validation``)
            extra["tested_update"] = best.update
        return run_config(self.args, extra)

    def receive_in_process(self) -> bool:
        """``--receive``: auto receives in a child process where the step runs on a GPU (a
        host-bound step there would share the interpreter with receiving), in a thread on CPU."""
        setting = getattr(self.args, "receive", "auto")
        return setting == "process" or (setting == "auto" and "cpu" not in self.framework.device.lower())

    def mine(self, start: int, end: int) -> range:
        """This rank's indices of the window [start, end): start + rank, every ``ranks``."""
        return range(start + self.rank, end, self.ranks)

    # ---- training ---------------------------------------------------------------------------

    def training_items(self, start: int, total: int) -> "TrainingItems":
        """This rank's training items of start..total-1, as a picklable source (a child process
        may receive them: ``clients.receiver``)."""
        args = self.args
        spec = EpisodeSpec(sources=tuple(args.sources or ()), preset=args.preset or "", split="train",
                           seed=args.seed, image_size=args.image_size, ways=args.ways, shots=args.shots,
                           query=args.query)
        return TrainingItems(args.server, self.options, self.episodic, spec, tuple(self.train_names),
                             tuple(self.class_counts), args.batch_size, start, total, self.rank, self.ranks,
                             self.framework.receive_streams)

    def total(self) -> int:
        return self.args.train_episodes if self.episodic else self.args.train_steps

    def check_window(self, start: int) -> None:
        """A step takes one item per rank: the window must hold whole steps."""
        total = self.total()
        if self.ranks > 1 and not self.args.eval_only and start < total and (total - start) % self.ranks:
            flag = "--train-episodes" if self.episodic else "--train-steps"
            raise UsageError(f"argument {flag}: got {total}, expected a multiple of the {self.ranks} ranks "
                             f"(each step trains one {self.unit} per rank; {_PLURAL[self.unit]} {start}..{total - 1} "
                             "are left)")

    def feed(self, start: int) -> Feed | None:
        """This rank's training items from ``start`` on, received and staged from now on
        (None: nothing to train)."""
        total = self.total()
        if self.args.eval_only or start >= total:
            return None
        source = self.training_items(start, total)
        return Feed(ProcessItems(source) if self.receive_in_process() else source(), self.framework.stage)

    def _window_means(self, timer: _Timer, size: int) -> tuple[float, float]:
        """Mean loss and accuracy of each rank's last ``size`` steps, over all ranks."""
        losses, accuracies = timer.losses[-size:], timer.accuracies[-size:]
        if self.ranks == 1:
            return float(np.mean(losses)), float(np.mean(accuracies))
        sums = np.array(self.framework.all_gather([float(np.sum(losses)), float(np.sum(accuracies)), len(losses)]))
        return float(sums[:, 0].sum() / sums[:, 2].sum()), float(sums[:, 1].sum() / sums[:, 2].sum())

    def train(self, feed: Feed | None) -> TrainSummary:
        args, framework = self.args, self.framework
        total = self.total()
        start = self.next_index
        timer = _Timer(TrainSummary(self.unit, start, start))
        window = -(-args.log_every // self.ranks)  # steps per rank in a window of --log-every items
        if feed is None:
            self.log(f"nothing to train: the checkpoint is at {self.unit} {start}, the run ends at {total}")
            return timer.finish(None)
        self.log(f"training {args.model} {args.backbone} on {framework.device}, {_PLURAL[self.unit]} "
                 f"{start}..{total - 1}" + (f", {self.ranks} ranks ({self.ranks} per step)" if self.ranks > 1 else ""))
        saved = start
        in_step = False
        if self.validation is not None and start % args.validate_every == 0 and not self.validation.done(start):
            self.validate(start)  # MD validates the initial model too; a resume, what a fault left undone
        try:
            for position in self.mine(start, total):
                began = time.perf_counter()
                index, item, images = next(feed)
                fetched = time.perf_counter()
                if index != position:
                    raise SamplerClientError(f"training stream sent {self.unit} {index}, expected {position}")
                in_step = True
                loss, accuracy = framework.train_step(item)
                in_step = False
                self.trained.append(index)
                timer.add(fetched - began, images, loss, accuracy)
                # every rank has taken its item of this step: the window's next index
                self.next_index = timer.summary.next_index = done = position - self.rank + self.ranks
                logged = _crossed(done, self.ranks, args.log_every) or done == total
                if logged:  # the one wait for the device: the window's losses are read
                    timer.resolve(framework.to_floats)
                timer.took(time.perf_counter() - began)
                if logged:
                    recent = timer.window[-window:]
                    mean_loss, mean_accuracy = self._window_means(timer, window)
                    timer.log_point(done, mean_loss, mean_accuracy)
                    self.log(f"{self.unit} {done}/{total}: loss {mean_loss:.4f}, accuracy {mean_accuracy:.2%}; "
                             f"{len(recent) * self.ranks / sum(recent):.2f} {_PLURAL[self.unit]}/s, data wait "
                             f"{timer.summary.data_wait_seconds / timer.summary.seconds:.1%}")
                validated = self.validation is not None and due(done, self.ranks, args.validate_every)
                if validated:  # then a checkpoint, which the history written beside it reaches
                    self.validate(done)
                if _crossed(done, self.ranks, args.checkpoint_every) or done == total or validated:
                    framework.save(done, self.resume_config())
                    saved = done
        finally:
            # a fault mid-run keeps the progress made; but a rank that failed inside a step (the
            # others lost) may hold part of it (its own batch-norm update): the last checkpoint stays
            if self.next_index != saved and not (in_step and self.ranks > 1):
                framework.save(self.next_index, self.resume_config())
            feed.close()
        timer.resolve(framework.to_floats)
        timer.summary.distinct_shapes = len(framework.shapes)
        timer.summary.compile_seconds, timer.summary.compiled_graphs = framework.compile_seconds, \
            framework.compiled_graphs
        timer.summary.compile_cache = framework.compile_cache
        if not timer.losses:
            return timer.finish(None)
        recent = [float(a) for a in timer.accuracies[-window:]]
        gathered = recent if self.ranks == 1 else [a for rank in self.framework.all_gather(recent) for a in rank]
        return timer.finish(self._window_means(timer, window)[0], gathered)

    # ---- validation ------------------------------------------------------------------------------

    def _valid_accuracies(self, client: SamplerClient, name: str) -> list[float]:
        """The query accuracy of each of --validate-episodes valid episodes of ``name``
        (sharded over the ranks like the test episodes; nothing is reported)."""
        args = self.args
        spec = self.eval_spec(name, "valid")
        mine = self.mine(0, args.validate_episodes)
        rows: list[tuple[int, float]] = []
        for episode in client.episodes(spec, mine.start, len(mine), self.ranks) if len(mine) else ():
            predictions, _ = self.framework.evaluate(episode)
            rows.append((episode.index, float(np.mean(np.asarray(predictions) == episode.query_labels))))
        rows = sorted(rows if self.ranks == 1 else [row for part in self.framework.all_gather(rows) for row in part])
        if [row[0] for row in rows] != list(range(args.validate_episodes)):
            raise SamplerClientError(f"validation stream of {name!r} ended after {len(rows)} episodes")
        return [row[1] for row in rows]

    def validate(self, update: int) -> None:
        """One validation after ``update`` items; the best one's backbone is kept."""
        history = self.validation
        assert history is not None
        began = time.perf_counter()
        by_source: dict[str, float] = {}
        ci95: float | None = None
        with self.client(prefetch=4) as client:
            for name in history.sources:
                by_source[name], ci95 = mean_ci95(self._valid_accuracies(client, name))
        accuracy = float(np.mean(list(by_source.values())))
        validation = Validation(update, accuracy, ci95 if len(by_source) == 1 else None, by_source)
        if history.add(validation):
            self.framework.keep_best(update)
        if self.rank == 0:
            history.save(self.args.checkpoint_dir)
        best = history.best
        assert best is not None
        self.log(f"validation at {self.unit} {update}: accuracy {accuracy:.2%}"
                 + (f" ± {_ci(ci95)}" if len(by_source) == 1 else f" (mean of {len(by_source)} sources)")
                 + f" over {history.episodes} valid episodes of {' '.join(history.sources)}; "
                 + ("the best so far" if best is validation else f"the best is {best.accuracy:.2%} at {best.update}")
                 + f" ({time.perf_counter() - began:.1f} s)")

    def log_preset(self, resumed: bool) -> None:
        """What ``--preset md/...`` set, and what the reference starts from that it cannot."""
        name = getattr(self.args, "md_preset", None)
        if name is None:
            return
        preset = md_presets.md_preset(name)
        self.log(md_presets.describe(preset, self.args.md_preset_overridden))
        if preset.init_from and self.args.init_from is None and not resumed and not self.args.eval_only:
            self.log(f"note: the reference starts this learner from a pre-trained backbone ({preset.init_from}); "
                     "without --init-from this run trains from scratch")

    def test_best(self) -> None:
        """Load the backbone of the best validation for the test episodes."""
        best = self.validation.best if self.validation is not None else None
        if best is None:
            return
        self.framework.restore_best(best.update)
        self.log(f"testing the backbone of {self.unit} {best.update}: validation accuracy {best.accuracy:.2%}, "
                 f"the best of {len(self.validation.validations)} validations")  # type: ignore[union-attr]

    # ---- evaluation and reports ---------------------------------------------------------------

    def evaluate(self) -> dict[str, EvalSummary]:
        """Every eval source, one at a time: --eval-episodes episodes each, all reported;
        sharded over the ranks (rank r takes the episodes r, r + N, ...)."""
        args = self.args
        config = self.config() if self.ranks == 1 else self.framework.all_gather(self.config())[0]
        results: dict[str, EvalSummary] = {}
        with self.client(prefetch=4) as client, self.client() as report_client:
            for name in self.eval_names:
                spec = self.eval_spec(name, args.eval_split)
                rows: list[tuple[int, float, float, float]] = []  # index, accuracy, loss, chance
                kind = name
                began = time.perf_counter()
                mine = self.mine(0, args.eval_episodes)
                with Reporter(report_client, args.run, run_config=config, batch=args.report_batch) as reporter:
                    episodes = client.episodes(spec, mine.start, len(mine), self.ranks) if len(mine) else iter(())
                    for episode in episodes:
                        predictions, loss = self.framework.evaluate(episode)
                        rows.append((episode.index, reporter.add(episode, predictions, {"loss": loss}), loss,
                                     1.0 / episode.ways))
                        kind = episode.source
                shard = (rows, kind, reporter.stored, reporter.duplicates)
                shards = [shard] if self.ranks == 1 else self.framework.all_gather(shard)
                rows = sorted(row for part in shards for row in part[0])
                if [row[0] for row in rows] != list(range(args.eval_episodes)):
                    raise SamplerClientError(f"evaluation stream of {name!r} ended after {len(rows)} episodes")
                kind = next((part[1] for part in shards if part[0]), kind)
                stored, duplicates = sum(part[2] for part in shards), sum(part[3] for part in shards)
                accuracies = [row[1] for row in rows]
                seconds = time.perf_counter() - began
                mean, ci95 = mean_ci95(accuracies)
                results[name] = EvalSummary(
                    source=kind, split=args.eval_split, episodes=len(accuracies), mean_accuracy=mean, ci95=ci95,
                    mean_loss=float(np.mean([row[2] for row in rows])),
                    mean_chance=float(np.mean([row[3] for row in rows])), stored=stored, duplicates=duplicates,
                    seconds=round(seconds, 3), episodes_per_s=len(accuracies) / seconds if seconds > 0 else 0.0)
                self.log(f"eval {name} ({kind}) {args.eval_split}: accuracy {mean:.2%} ± {_ci(ci95)} over "
                         f"{len(accuracies)} episodes (chance {results[name].mean_chance:.2%}); reported "
                         f"{stored} new, {duplicates} again as run {args.run!r}"
                         + (f" (by {self.ranks} ranks)" if self.ranks > 1 else ""))
        return results

    # ---- all of it ------------------------------------------------------------------------------

    def rank_summaries(self, train: TrainSummary) -> list[RankSummary]:
        """What each rank trained and its model's digest, gathered (all ranks call it)."""
        framework = self.framework
        mine = RankSummary(rank=self.rank, device=framework.device, steps=len(self.trained), images=train.images,
                           indices=index_runs(self.trained), data_wait_seconds=train.data_wait_seconds,
                           parameter_digest=framework.parameter_digest())
        ranks = [mine] if self.ranks == 1 else sorted(framework.all_gather(mine), key=lambda rank: rank.rank)
        runs = ", ".join(f"{first}..{first + step * (count - 1)} every {step}" if count > 1 else str(first)
                         for first, step, count in mine.indices) or "none"
        self.log_rank(f"trained {_PLURAL[self.unit]} {runs} ({mine.steps}); "
                      f"parameters sha256 {mine.parameter_digest[:16]}")
        return ranks

    def execute(self) -> RunSummary:
        args, framework = self.args, self.framework
        self.check_names()
        found = self.find_checkpoint()
        resumed_from, start = found if found is not None else (None, 0)
        self.check_window(start)
        if args.validate_every:
            self.validation = ValidationHistory.load(args.checkpoint_dir, list(validation_sources(args)),
                                                     args.validate_episodes, up_to=start)
        feed = self.feed(start)  # receiving starts now, while the model is built
        try:
            framework.build(sum(self.class_counts))
            if resumed_from is not None:
                restored = framework.restore(resumed_from)
                if restored != start:
                    raise UsageError(f"checkpoint {resumed_from}: next index {restored}, but {start} when first read")
            self.next_index = start
            self.log(f"run {args.run}: {args.model} on {args.backbone} ({framework.parameter_count()} parameters), "
                     f"{framework.device}, {framework.step_settings()}; server {args.server} ({self.server_line})"
                     + (f", {'evaluating' if args.eval_only else 'resumed from'} {resumed_from} (index {start})"
                        if resumed_from else "")
                     + (f", rank 0 of {self.ranks} ({framework.collectives})" if self.ranks > 1 else ""))
            self.log_preset(resumed_from is not None)
            train = TrainSummary(self.unit, start, start) if args.eval_only else self.train(feed)
        finally:
            if feed is not None:
                feed.close()
        ranks = self.rank_summaries(train)
        if self.ranks > 1:  # every rank's items; the longest data wait (a waiting rank holds up the step)
            train.steps, train.images = sum(r.steps for r in ranks), sum(r.images for r in ranks)
            train.data_wait_seconds = max(r.data_wait_seconds for r in ranks)
            if train.seconds > 0:
                train.steps_per_s, train.images_per_s = train.steps / train.seconds, train.images / train.seconds
                train.data_wait_fraction = train.data_wait_seconds / train.seconds
        self.test_best()
        results = self.evaluate() if args.eval_episodes else {}
        return RunSummary(
            run=args.run, framework=framework.name, model=args.model, backbone=args.backbone, device=framework.device,
            precision=framework.precision, parameter_count=framework.parameter_count(), resumed_from=resumed_from,
            start_index=start, next_index=self.next_index, train=train, eval=results, config=self.config(),
            world_size=self.ranks, ranks=ranks,
            validation=self.validation.to_dict() if self.validation is not None else None)


def _crossed(done: int, step: int, every: int) -> bool:
    """Whether a step of ``step`` items that ended at ``done`` passed a multiple of ``every``."""
    return done // every > (done - step) // every


def index_runs(indices: Sequence[int]) -> list[list[int]]:
    """``indices`` (in order) as runs [first, step, count] of arithmetic progressions:
    a rank's training indices are one run (first = start + rank, step = ranks)."""
    runs: list[list[int]] = []
    for index in indices:
        if runs:
            first, step, count = runs[-1]
            if count == 1 and index > first:
                runs[-1] = [first, index - first, 2]
                continue
            if count > 1 and index == first + step * count:
                runs[-1][2] += 1
                continue
        runs.append([index, 1, 1])
    return runs


def source_batch_indices(drawn: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """For each step rank, rank + N, ... of ``drawn`` (the source of every step), the index of
    the batch of its source that rank ``rank`` of ``ranks`` (N) reads there: rank + N k at its
    k-th step on that source. The ranks read disjoint batches of each source, each in order,
    and a resumed run continues every source where it stopped."""
    own = np.asarray(drawn, np.int64)[rank::ranks]
    seen = np.zeros(int(own.max()) + 1 if len(own) else 0, np.int64)
    indices = np.empty(len(own), np.int64)
    for step, source in enumerate(own):
        indices[step] = rank + ranks * seen[source]
        seen[source] += 1
    return indices


def steps_before(limit: int, residue: int, period: int) -> int:
    """How many t in [0, limit) have t % period == residue."""
    return max(0, -(-(limit - residue) // period))


def _ci(ci95: float | None) -> str:
    return f"{ci95:.2%}" if ci95 is not None else "n/a (one episode)"


def server_line(transport: str, settings: pb.ServerSettings) -> str:
    """How pixels come and how much the server prepares ahead, for the run's first line."""
    if not settings.lookahead_bytes:  # an older server: its settings are unknown
        return f"{transport} transport"
    return (f"{transport} transport, lookahead {settings.lookahead_bytes / (1 << 20):g} MiB, "
            f"{settings.decode_workers} decode workers")


WAIT_HINT_SHARE = 0.10  # data wait after the first item beyond which the summary says what to change
WAIT_HINT_STEPS = 50


def data_wait_hint(train: TrainSummary) -> str | None:
    """One line when training waited for data for a good share of a long enough run
    (the first item's wait, start-up, left out): the trainer was fed slower than it steps."""
    after_first = train.seconds - train.first_wait_seconds
    if train.steps < WAIT_HINT_STEPS or after_first <= 0:
        return None
    share = (train.data_wait_seconds - train.first_wait_seconds) / after_first
    if share <= WAIT_HINT_SHARE:
        return None
    return (f"note: training waited for data {share:.0%} of the time after the first {train.unit}: the server fed "
            "it slower than it trains; a server feeding GPUs wants more decode workers (serve --workers, raw "
            "stores: pack --raw-size) and room to prepare ahead (serve --lookahead-mb 128)")


def format_summary(summary: RunSummary) -> str:
    """The run summary as the few lines printed on stdout."""
    train = summary.train
    lines = [f"run {summary.run}: {summary.framework} {summary.model} {summary.backbone} on {summary.device}, "
             f"{summary.parameter_count} parameters, {_PLURAL[train.unit]} {summary.start_index}..{summary.next_index}"
             + (f", {summary.world_size} ranks" if summary.world_size > 1 else "")]
    if train.steps:
        plural = _PLURAL[train.unit]
        lines.append(f"  train: {train.steps} {plural} in {train.seconds:.1f} s = {train.steps_per_s:.2f} {plural}/s "
                     f"({train.images_per_s:.0f} images/s), data wait {train.data_wait_fraction:.1%} of step time")
        hint = data_wait_hint(train)
        if hint:
            lines.append(f"  {hint}")
    best = summary.validation["best_update"] if summary.validation else None
    if summary.validation and best is not None:
        validation = summary.validation
        lines.append(f"  validation: best accuracy {validation['best_accuracy']:.2%} at {train.unit} {best}, of "
                     f"{len(validation['validations'])} validations on {validation['episodes']} valid episodes of "
                     f"{' '.join(validation['sources'])}; its backbone was tested")
    for name, result in summary.eval.items():
        lines.append(f"  eval {name} ({result.split}): accuracy {result.mean_accuracy:.2%} ± {_ci(result.ci95)} "
                     f"(chance {result.mean_chance:.2%}, loss {result.mean_loss:.4f}, {result.episodes} episodes)")
    return "\n".join(lines)


def run_main(framework_name: str, make: Callable[[argparse.Namespace], Framework],
             argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one trainer run; the exit status (``clients.trainer_shell``:
    0 ok, 2 bad input, 3 server fault, 130 interrupted; a framework may map its own
    errors, e.g. out of memory, to 1)."""
    prog = f"python -m clients.{framework_name}"
    try:
        args = parse_args(framework_name, argv)
    except SystemExit as stop:
        return parse_status(stop)

    framework: Framework | None = None

    def label() -> str:  # each rank's lines say whose they are
        ranks = framework.world_size if framework is not None else 1
        return f"{prog} [rank {framework.rank}/{ranks}]" if framework is not None and ranks > 1 else prog

    def interrupted() -> str:
        if not args.checkpoint_dir:
            return "interrupted"
        if framework is not None and framework.world_size > 1:
            return f"interrupted; the last checkpoint in {args.checkpoint_dir} holds the run's progress"
        return f"interrupted; progress saved in {args.checkpoint_dir}"

    console = Console(label)
    try:
        framework = make(args)
        summary = Run(framework, console.log).execute()
    except BaseException as error:
        mapped = exit_for(error, args.server, framework.classify if framework is not None else None, interrupted())
        if mapped is None:
            raise
        console.fail(mapped[1])
        return mapped[0]
    finally:
        if framework is not None:
            framework.close()
    if framework.rank != 0:  # rank 0 speaks for the run
        return 0
    print(format_summary(summary), flush=True)
    write_summary(args.json_summary, summary.to_json())
    return 0
