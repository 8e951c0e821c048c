"""The VTAB-1k transfer learner, framework-free: the part ``clients.torch.transfer`` and
``clients.tf.transfer`` share (tasks checked with the server, the sweep, the choice,
the final fit, evaluation, reports, summary, exit codes). A framework supplies a
``TransferLearner``: weights, a training step, predictions.

The protocol (VTAB+MD Sec. 4, after the VTAB lightweight sweep of Zhai et al. 2019):
every (lr, steps) of ``--lrs`` x ``--steps`` is trained on ``train800`` and scored
top-1 on ``val200``; one setting is chosen for all tasks (best mean val200 accuracy,
as VTAB+MD does) or, with ``--select per-task``, each task's best; ties go to the
first setting in sweep order. The chosen setting is trained again on
``train800val200`` and scored on ``test`` (the evaluation form: every example once).
Optimiser: SGD, momentum 0.9, batch 512 by default, the reference's schedule scaled to
the steps (``learning_rate``). Simplified against the reference: no weight decay (the
VTAB paper uses none when fine-tuning), no augmentation, one ``--image-size`` for all
tasks.

Control baselines (issue 12): ``--role model|scratch|max`` is stored with every report.
With ``--regime N`` (repeatable) and ``--regime-seed S`` the sweep runs once per data
regime the server draws (``GetRegime``): trained on the regime's ``train`` part, scored on
its ``val`` part, the chosen setting retrained on the whole regime (``trainval``: train
and val) and tested on the task's ``test``; each regime's results are reported under its
N and S. ``--role max`` trains on all of the task's training data: the sweep on ``train``,
scored on ``val``, the chosen setting retrained on ``trainval``. ``scratch`` and ``max``
start from random init (``--init scratch``, checked when parsing).

Determinism: every fit starts from the same ``--init`` weights and a head drawn from a
seed hashed from (--seed, task, split, lr, steps); batches come from the server's
seeded shuffle; so two runs with the same arguments report the same accuracies
(CPU; deterministic kernels are switched on by each framework).
"""

from __future__ import annotations

import abc
import argparse
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from clients.core import SamplerClient, SamplerClientError, TaskBatchArrays, TaskEpisodeArrays
from clients.orchestration import UsageError, run_command
from clients.trainer_args import OPERATIONAL, parse_transfer_args

MOMENTUM = 0.9
SWEEP_SPLITS = ("train800", "val200", "train800val200", "test")
MAX_SPLITS = ("train", "val", "trainval", "test")
REGIME_SPLITS = ("train", "val", "trainval", "test")  # the regime's parts, then the task's test
REGIME_POOL_SPLITS = ("train", "test")  # what regimes are drawn from and tested on
PROTONET_SPLITS = ("train800val200", "test")
SOURCE_TASK_PREFIX = "source:"
"""A packed classification source as a task (held-out train/val/trainval/test splits; ListTasks lists it
when asked by name): runs with --regime or --role max, not the VTAB-1k sweep."""


@dataclass(frozen=True)
class DataPoint:
    """The data one sweep uses: its train, val, final-fit and test splits, and the regime
    (0: the task's own splits) the first three belong to."""

    regime: int
    train: str
    val: str
    final: str
    test: str = "test"

    def of(self, split: str) -> int:
        """The regime a split of this point is drawn from (the test never is)."""
        return self.regime if split != self.test else 0


def data_points(args: argparse.Namespace) -> list[DataPoint]:
    """The sweeps of a run in order: one per ``--regime`` (ascending), else the role's splits."""
    if args.regimes:
        return [DataPoint(n, *REGIME_SPLITS) for n in args.regimes]
    return [DataPoint(0, *(MAX_SPLITS if args.role == "max" else SWEEP_SPLITS))]


@dataclass(frozen=True)
class Setting:
    """One point of the sweep."""

    lr: float
    steps: int

    @property
    def label(self) -> str:
        return f"lr={self.lr:g},steps={self.steps}"


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed hashed from ``seed`` and ``parts`` (hashing, not adding, so no two inputs collide)."""
    digest = hashlib.sha256(json.dumps([seed, *map(str, parts)]).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


DECAY_AT = (0.3, 0.6, 0.9)  # fractions of the steps: the reference script's 300, 600, 900 of 1000
WARMUP = 0.08  # ... and its 80 warm-up steps of 1000


def learning_rate(base: float, step: int, total: int) -> float:
    """The reference's schedule, scaled to ``total`` steps: a linear warm-up over the first
    8%, then ``base`` divided by 10 after each of 30%, 60% and 90% of the steps (the VTAB
    paper: after 1/3 and 2/3, and once more shortly before the end; the numbers are those
    of the reference's run script, which trains 1000 steps). ``step`` counts from 0."""
    warmup = int(round(WARMUP * total))
    if step < warmup:
        return base * step / warmup
    drops = sum(step > round(fraction * total) for fraction in DECAY_AT)
    return base * 0.1 ** drops


def sweep_settings(lrs: Sequence[float], steps: Sequence[int], scale: float) -> list[Setting]:
    """The sweep in order (lr major), steps scaled (at least 1); settings that scaling merges appear once."""
    settings: list[Setting] = []
    for lr in lrs:
        for count in steps:
            setting = Setting(float(lr), max(1, round(count * scale)))
            if setting not in settings:
                settings.append(setting)
    return settings


def choose(val: Mapping[str, Mapping[str, float]], settings: Sequence[Setting], per_task: bool) -> dict[str, Setting]:
    """Each task's chosen setting from val accuracies ``val[task][setting.label]``: the
    best mean over tasks (one setting for all) or each task's best; ties: sweep order."""
    if per_task:
        return {task: max(settings, key=lambda s: (scores[s.label], -settings.index(s))) for task, scores in val.items()}
    best = max(settings, key=lambda s: (float(np.mean([val[t][s.label] for t in val])), -settings.index(s)))
    return {task: best for task in val}


class TransferLearner(abc.ABC):
    """A framework's model for the transfer learner; images arrive uint8 NHWC from the wire."""

    name = "framework"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Framework, versions, device, parameter count: stored with the reports."""

    @abc.abstractmethod
    def reset(self, num_classes: int, seed: int) -> None:
        """Backbone back to ``--init``, a fresh ``num_classes`` head drawn from ``seed``, a fresh optimiser."""

    @abc.abstractmethod
    def train_step(self, batch: TaskBatchArrays, lr: float) -> float:
        """One SGD step at ``lr`` (linear: head only, frozen features; finetune: every weight); the loss."""

    @abc.abstractmethod
    def predict(self, batch: TaskBatchArrays) -> np.ndarray:
        """Predicted labels of a batch (inference mode)."""

    @abc.abstractmethod
    def protonet_predict(self, episode: TaskEpisodeArrays) -> np.ndarray:
        """Query predictions from support prototypes of the ``--init`` embedding."""

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        """(exit status, one line) for a framework error worth a clean exit, else None."""
        return None


class TransferRun:
    """One transfer run; ``execute`` returns the JSON-able summary."""

    def __init__(self, learner: TransferLearner, client: SamplerClient, log: Callable[[str], None]) -> None:
        self.learner, self.client, self.log = learner, client, log
        self.args = learner.args
        self.num_classes: dict[str, int] = {}

    def check_tasks(self) -> None:
        """Every named task is served with the splits this mode reads (ListTasks) and every
        ``--regime`` fits its training pool (GetRegime), else one line, exit 2."""
        args = self.args
        if args.mode == "protonet":
            needed = PROTONET_SPLITS
        elif args.regimes:
            needed = REGIME_POOL_SPLITS
        else:
            needed = MAX_SPLITS if args.role == "max" else SWEEP_SPLITS
        served: dict[str, Any] = {}
        for summary in self.client.list_tasks():
            served.setdefault(summary.task, summary)
        for task in self.args.tasks:
            if task.startswith(SOURCE_TASK_PREFIX) and task not in served:  # listed only when named
                try:
                    served[task] = self.client.list_tasks(task)[0]
                except SamplerClientError as error:
                    if error.code not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                                          grpc.StatusCode.FAILED_PRECONDITION):
                        raise
                    raise UsageError(f"argument --tasks: got {task!r}: {error}") from None
            if task not in served:
                raise UsageError(f"argument --tasks: got {task!r}, expected a task this server serves "
                                 f"({', '.join(sorted(served)) or 'none: it has no VTAB store'})")
            splits = {s.split: s for s in served[task].splits}
            for split in needed:
                if split not in splits or not splits[split].available:
                    reason = splits[split].reason if split in splits else "not listed"
                    what = f"--role {args.role}" if args.role == "max" else (
                        "--regime" if args.regimes else f"--mode {args.mode}")
                    raise UsageError(f"argument --tasks: task {task!r} has no usable {split} split on the server "
                                     f"({reason}); {what} needs {', '.join(needed)}")
            self.num_classes[task] = int(served[task].num_classes)
            for n in args.regimes or ():
                try:
                    self.client.get_regime(task, n, args.regime_seed, "train")
                except SamplerClientError as error:
                    if error.code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                        raise
                    raise UsageError(f"argument --regime: got {n} for task {task!r}: {error}") from None

    def config(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        config = {k: v for k, v in sorted(vars(self.args).items()) if k not in OPERATIONAL}
        config.update(self.learner.describe())
        config.update(extra)
        return json.loads(json.dumps(config))

    def fit(self, task: str, split: str, setting: Setting, regime: int = 0) -> float:
        args = self.args
        where = (task, split, setting.lr, setting.steps) + ((f"regime={regime}", args.regime_seed) if regime else ())
        self.learner.reset(self.num_classes[task], derive_seed(args.seed, *where))
        loss = float("nan")
        batches = self.client.task_batches(task, split, args.batch_size, seed=args.seed, count=setting.steps,
                                           image_size=args.image_size, regime=regime,
                                           regime_seed=args.regime_seed if regime else 0)
        label = f"{task} {split}{f' (regime {regime})' if regime else ''} {setting.label}"
        for step, batch in enumerate(batches):
            loss = self.learner.train_step(batch, learning_rate(setting.lr, step, setting.steps))
            if (step + 1) % args.log_every == 0:
                self.log(f"{label}: step {step + 1}/{setting.steps} loss {loss:.4f}")
        return loss

    def evaluate(self, task: str, split: str, regime: int = 0) -> tuple[float, int]:
        correct = total = 0
        for batch in self.client.eval_batches(task, split, self.args.eval_batch_size, image_size=self.args.image_size,
                                              regime=regime, regime_seed=self.args.regime_seed if regime else 0):
            correct += int(np.sum(np.asarray(self.learner.predict(batch)) == batch.labels))
            total += len(batch.labels)
        return correct / max(total, 1), total

    def execute(self) -> dict[str, Any]:
        self.check_tasks()
        if self.args.mode == "protonet":
            return self._protonet()
        return self._sweep()

    def _protonet(self) -> dict[str, Any]:
        args, results = self.args, {}
        config = self.config({"protocol": "full-way episode: support train800val200, query test"})
        for task in args.tasks:
            episode = self.client.task_episode(task, image_size=args.image_size)
            predicted = np.asarray(self.learner.protonet_predict(episode))
            accuracy = float(np.mean(predicted == episode.query_labels)) if len(predicted) else 0.0
            self.client.report_task(args.run, task, "test", accuracy, len(predicted), run_config=config)
            results[task] = {"test_accuracy": accuracy, "test_examples": len(predicted),
                             "support_examples": len(episode.support_labels)}
            self.log(f"{task}: protonet test accuracy {accuracy:.4f} ({len(predicted)} queries)")
        return {"run": args.run, "mode": args.mode, "config": config, "tasks": results}

    def _sweep(self) -> dict[str, Any]:
        args = self.args
        settings = sweep_settings(args.lrs, args.steps, args.steps_scale)
        points = data_points(args)
        config = self.config({"settings": [s.label for s in settings]})
        swept = [self._sweep_point(point, settings) for point in points]
        for point, (val, _, chosen) in zip(points, swept):
            key = "chosen" if not point.regime else f"chosen_regime_{point.regime}"
            config[key] = {task: s.label for task, s in chosen.items()}
        summary: dict[str, Any] = {"run": args.run, "mode": args.mode, "select": args.select, "role": args.role,
                                   "settings": [{"lr": s.lr, "steps": s.steps} for s in settings]}
        parts = [self._final(point, settings, *result, config) for point, result in zip(points, swept)]
        summary["config"] = config
        if args.regimes:
            summary["regime_seed"] = args.regime_seed
            summary["regimes"] = parts
        else:
            summary.update(parts[0])
        return summary

    def _sweep_point(self, point: DataPoint, settings: Sequence[Setting]
                     ) -> tuple[dict[str, dict[str, float]], dict[str, int], dict[str, Setting]]:
        """Every setting trained on the point's train split and scored on its val split; the choice."""
        args = self.args
        val: dict[str, dict[str, float]] = {task: {} for task in args.tasks}
        val_examples: dict[str, int] = {}
        for setting in settings:
            for task in args.tasks:
                self.fit(task, point.train, setting, point.of(point.train))
                val[task][setting.label], val_examples[task] = self.evaluate(task, point.val, point.of(point.val))
                self.log(f"{task}{f' regime {point.regime}' if point.regime else ''} {setting.label}: "
                         f"{point.val} accuracy {val[task][setting.label]:.4f}")
        return val, val_examples, choose(val, settings, args.select == "per-task")

    def _final(self, point: DataPoint, settings: Sequence[Setting], val: dict[str, dict[str, float]],
               val_examples: dict[str, int], chosen: dict[str, Setting], config: dict[str, Any]) -> dict[str, Any]:
        """The chosen settings retrained on the point's final split, tested, reported; its summary part."""
        args = self.args
        keys = {"role": args.role, "regime": point.regime, "regime_seed": args.regime_seed if point.regime else 0}
        results: dict[str, Any] = {}
        for task in args.tasks:
            setting = chosen[task]
            self.fit(task, point.final, setting, point.of(point.final))
            accuracy, examples = self.evaluate(task, point.test)
            self.client.report_task(args.run, task, point.val, val[task][setting.label], val_examples[task],
                                    run_config=config, **keys)
            self.client.report_task(args.run, task, point.test, accuracy, examples, run_config=config, **keys)
            results[task] = {"chosen": {"lr": setting.lr, "steps": setting.steps}, "val": val[task],
                             "val_accuracy": val[task][setting.label], "val_split": point.val,
                             "val_examples": val_examples[task], "test_accuracy": accuracy,
                             "test_examples": examples}
        part: dict[str, Any] = {
            "mean_val": {s.label: float(np.mean([val[t][s.label] for t in args.tasks])) for s in settings},
            "tasks": results}
        if point.regime:
            part["n"] = point.regime
        if args.select == "all-tasks":
            part["chosen"] = results[args.tasks[0]]["chosen"]
        return part


def format_summary(summary: Mapping[str, Any]) -> str:
    role = summary.get("role", "model")
    head = (f"run {summary['run']}: {summary['config'].get('framework', '?')} {summary['mode']} "
            f"{summary['config'].get('backbone', '?')}" + (f", role {role}" if role != "model" else ""))
    parts = summary.get("regimes")
    if parts is None:
        return "\n".join([head + (f", chosen {summary['chosen']}" if "chosen" in summary else ""),
                          *_task_lines(summary["tasks"], "  ")])
    lines = [head + f", regimes {', '.join(str(p['n']) for p in parts)} (seed {summary['regime_seed']})"]
    for part in parts:
        lines.append(f"  regime {part['n']}" + (f", chosen {part['chosen']}" if "chosen" in part else ""))
        lines.extend(_task_lines(part["tasks"], "    "))
    return "\n".join(lines)


def _task_lines(tasks: Mapping[str, Any], indent: str) -> list[str]:
    lines = []
    for task, result in tasks.items():
        val = f"{result.get('val_split', 'val200')} {result['val_accuracy']:.4f}, " if "val_accuracy" in result else ""
        chosen = f" lr={result['chosen']['lr']:g} steps={result['chosen']['steps']}:" if "chosen" in result else ":"
        lines.append(f"{indent}{task}{chosen} {val}test {result['test_accuracy']:.4f} "
                     f"({result['test_examples']} examples)")
    return lines


def run_transfer_main(framework_name: str, make: Callable[[argparse.Namespace], TransferLearner],
                      argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one transfer run; exit status 0 ok, 2 bad input, 3 server fault."""
    return run_command(f"python -m clients.{framework_name} transfer", lambda: parse_transfer_args(framework_name, argv), make,
                       lambda part, client, log: TransferRun(part, client, log).execute(), format_summary)
