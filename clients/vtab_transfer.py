"""The VTAB-1k transfer learner, framework-free: the part ``clients.torch.vtab_transfer`` and
``clients.tf.vtab_transfer`` share (tasks checked with the server, the sweep, the choice,
the final fit, evaluation, reports, summary, exit codes). A framework supplies a
``TransferLearner``: weights, a training step, predictions.

The protocol is named by ``--protocol`` (``clients.vtab_transfer_protocols``: its values and
their sources; each flag given overrides one value). Every (lr, steps) of ``--lrs`` x
``--steps`` is trained on ``train800`` and scored top-1 on ``--select-split`` (``val``,
the task's regular validation split, as the VTAB paper selects for its 1000-example
runs; or ``val200``); each task's best setting is chosen (``--select per-task``) or one
for all tasks (``all-tasks``: best mean accuracy, as VTAB+MD does); ties go to the first
setting in sweep order. ``--select-split none`` skips the sweep (one setting, as the
reference script trains). The chosen setting is trained again ``--runs`` times (seeds)
on ``--final-split`` (``train800val200``, or the script's ``trainval1000``) and scored
on ``test`` (the evaluation form: every example once); the test accuracy reported is
the median of the runs (VTAB Sec. 3.1), each run kept in the summary. Optimiser: the
protocol's (``--optimizer``: SGD with momentum 0.9, or AdamW), its weight decay and schedule
(``Schedule``: warm-up and /10 decay points as fractions of the steps). Simplified against
the VTAB reference: no augmentation, one ``--image-size`` for all tasks.

Control baselines (issue 12): ``--role model|scratch|max`` is stored with every report.
With ``--regime N`` (repeatable) and ``--regime-seed S`` the sweep runs once per data
regime the server draws (``GetRegime``): trained on the regime's ``train`` part, scored on
its ``val`` part, the chosen setting retrained on the whole regime (``trainval``: train
and val) and tested on the task's ``test``; each regime's results are reported under its
N and S; ``--regime-sampling`` (uniform, stratified: scikit-learn's StratifiedShuffleSplit, or
one-per-class-first) says how the server draws them. The weight decay is VTAB's (Appendix I):
0.001 when the network trains from random init (``--mode finetune`` without weights), none
when fine-tuning a checkpoint or probing (``vtab_transfer_protocols.weight_decay_for``).
``--role max`` trains on all of the task's training data: the sweep on ``train``, scored
on ``val``, the chosen setting retrained on ``trainval``. ``scratch`` and ``max`` start
from random init (no ``--weights``, checked when parsing).

Early stopping (``--validate-every K``, the ``control-baselines`` protocol's, with
``--final-split none``): each fit is validated every K steps and at its end on the point's
val split (the mean cross-entropy over its examples, in inference mode), the weights of the
lowest validation loss are kept (``TransferLearner.snapshot``), the setting whose best
checkpoint has the lowest loss is chosen, and that checkpoint is the one tested: nothing is
retrained (the reference's ``ModelCheckpoint(monitor='val_loss')`` and ``trainer.test``).
``--augment flip`` mirrors each training image with probability 1/2, drawn here (not in a
framework) from the batch-order seed, task, split and regime (the data stream, the same for
every setting), so torch and tf train on the same images.

Determinism: every fit starts from the same initial weights (``--weights``, or drawn
from ``--seed``) and a head drawn from a seed hashed from (--seed, task, split, lr, steps, and the final run's seed after the
first); batches come from the server's shuffle under ``--seed`` (the final runs after
the first: seeds hashed from it); so two runs with the same arguments report the same
accuracies (CPU; deterministic kernels are switched on by each framework).
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from clients.backbone_contract import FeatureExtractor
from clients.client import SamplerClient
from clients.errors import SamplerClientError
from clients.protocols.vtab import VTAB_RESIZE, TaskBatchArrays, TaskEpisodeArrays
from clients.seeds import derive_seed
from sampler_common.suggest import did_you_mean
from clients.trainer_args import TRANSFER_OPERATIONAL, parse_transfer_args
from clients.trainer_shell import run_command
from clients.errors import UsageError
from clients.md_fixed_features import prototype_predictions
from clients.vtab_transfer_protocols import DECAYS, MOMENTUM, SWEEP_TRAIN_SPLIT, Schedule, median, validation_steps

MAX_SPLITS = ("train", "val", "trainval", "test")
REGIME_SPLITS = ("train", "val", "trainval", "test")  # the regime's parts, then the task's test
REGIME_POOL_SPLITS = ("train", "test")  # what regimes are drawn from and tested on
PROTONET_SPLITS = ("train800val200", "test")
SOURCE_TASK_PREFIX = "source:"
"""A packed classification source as a task (held-out train/val/trainval/test splits; ListTasks lists it
when asked by name): runs with --regime or --role max, not the VTAB-1k sweep."""


@dataclass(frozen=True)
class DataPoint:
    """The data one sweep uses: its train, val (None: no sweep), final-fit and test splits,
    and the regime (0: the task's own splits) the first three belong to."""

    regime: int
    train: str
    val: str | None
    final: str
    test: str = "test"

    def of(self, split: str) -> int:
        """The regime a split of this point is drawn from (the test never is)."""
        return self.regime if split != self.test else 0

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits this point reads: the sweep's (when there is one), the final fit's (unless none) and the test."""
        return ((self.train, self.val) if self.val else ()) + ((self.final,) if self.final != "none" else ()) + (
            self.test,)


def data_points(args: argparse.Namespace) -> list[DataPoint]:
    """The sweeps of a run in order: one per ``--regime`` (ascending), else the role's splits
    (``--role max``) or the protocol's (``--select-split``, ``--final-split``). A regime's or
    the max role's val part is its own; ``--select-split none`` drops the sweep everywhere, and
    ``--final-split none`` the final fit (early stopping tests the sweep's best checkpoint)."""
    sweep = args.select_split != "none"
    if args.regimes:
        train, val, final, test = REGIME_SPLITS
        final = "none" if args.final_split == "none" else final
        return [DataPoint(n, train, val if sweep else None, final, test) for n in args.regimes]
    if args.role == "max":
        train, val, final, test = MAX_SPLITS
        final = "none" if args.final_split == "none" else final
        return [DataPoint(0, train, val if sweep else None, final, test)]
    return [DataPoint(0, SWEEP_TRAIN_SPLIT, args.select_split if sweep else None, args.final_split)]


def flipped(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of uint8 NHWC ``images``, each mirrored left-right with probability 1/2 (one draw
    per image, in batch order: torchvision's ``RandomHorizontalFlip``)."""
    mirror = rng.random(len(images)) < 0.5
    out = np.array(images)
    out[mirror] = out[mirror][:, :, ::-1]
    return out


@dataclass
class Validated:
    """A fit checked on a val split during training: every check (step, loss, accuracy) and the
    best (lowest loss; the first of equals), whose weights the learner holds after the fit."""

    split: str
    examples: int = 0
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    best: dict[str, Any] | None = None


def run_seeds(args: argparse.Namespace) -> list[int]:
    """The batch-order seeds of the final runs: ``--seed`` first (one run is the run it
    always was), then seeds hashed from it."""
    return [args.seed] + [derive_seed(args.seed, "final-run", r) for r in range(1, args.runs)]


@dataclass(frozen=True)
class Setting:
    """One point of the sweep."""

    lr: float
    steps: int

    @property
    def label(self) -> str:
        return f"lr={self.lr:g},steps={self.steps}"


def run_schedule(args: argparse.Namespace) -> Schedule:
    """The run's step schedule: ``--decay``'s points and ``--warmup`` (protocol's or given)."""
    return Schedule(DECAYS[args.decay], args.warmup)


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


def episode_embedding(extractor: FeatureExtractor, episode: TaskEpisodeArrays, batch_norm: str,
                      chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(support, query) features of a task episode whose batch norms take its moments: the query
    in chunks of ``chunk``, each embedded with the whole support set as one episode, as the
    reference reads VTAB as episodes (meta-dataset ``data/read_episodes.py``). Under ``md`` the
    query rows enter no moment, so the chunking changes nothing; under ``transductive`` each
    chunk is normalised by its own moments."""
    parts = [extractor.episode_features(episode.support_images, episode.query_images[start:start + chunk], batch_norm)
             for start in range(0, max(len(episode.query_images), 1), chunk)]
    return parts[0][0], np.concatenate([query for _, query in parts])


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
        """Backbone back to its initial weights, a fresh ``num_classes`` head drawn from ``seed``, a fresh optimiser."""

    @abc.abstractmethod
    def train_step(self, batch: TaskBatchArrays, lr: float) -> float:
        """One SGD step at ``lr`` (linear: head only, frozen features; finetune: every weight); the loss."""

    @abc.abstractmethod
    def predict(self, batch: TaskBatchArrays) -> np.ndarray:
        """Predicted labels of a batch (inference mode)."""

    @abc.abstractmethod
    def predict_with_loss(self, batch: TaskBatchArrays) -> tuple[np.ndarray, float]:
        """Predicted labels of a batch and the sum of its examples' cross-entropy (inference mode)."""

    @abc.abstractmethod
    def snapshot(self) -> Any:
        """A copy of the weights a fit trains (head; finetuning, backbone and its statistics too)."""

    @abc.abstractmethod
    def restore(self, snapshot: Any) -> None:
        """The weights of ``snapshot`` put back."""

    @abc.abstractmethod
    def protonet_predict(self, episode: TaskEpisodeArrays) -> np.ndarray:
        """Query predictions from support prototypes of the initial embedding (its batch norms'
        stored statistics: ``--batch-norm running``)."""

    @abc.abstractmethod
    def episode_extractor(self) -> FeatureExtractor:
        """The frozen backbone's extractor of episodes (``FeatureExtractor.episode_features``)."""

    @abc.abstractmethod
    def weights_sha256(self) -> str:
        """sha256 (``determinism.weights_sha256``) of the weights the last fit trained (head; finetuning, backbone too)."""

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        """(exit status, one line) for a framework error worth a clean exit, else None."""
        return None


class TransferRun:
    """One transfer run; ``execute`` returns the JSON-able summary."""

    def __init__(self, learner: TransferLearner, client: SamplerClient, log: Callable[[str], None]) -> None:
        self.learner, self.client, self.log = learner, client, log
        self.args = learner.args
        self.num_classes: dict[str, int] = {}
        self.schedule = run_schedule(self.args)
        # the result fingerprint: every fit's final weights, in the order trained
        self.fits = hashlib.sha256()

    def check_tasks(self) -> None:
        """Every named task is served with the splits this mode reads (ListTasks) and every
        ``--regime`` fits its training pool (GetRegime), else one line, exit 2."""
        args = self.args
        if args.mode == "protonet":
            needed = PROTONET_SPLITS
        elif args.regimes:
            needed = REGIME_POOL_SPLITS
        else:
            needed = data_points(args)[0].splits
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
                raise UsageError(f"argument --tasks: got {task!r}{did_you_mean(task, served)}, expected a task this "
                                 f"server serves ({', '.join(sorted(served)) or 'none: it has no VTAB store'})")
            splits = {s.split: s for s in served[task].splits}
            for split in needed:
                if split not in splits or not splits[split].available:
                    reason = splits[split].reason if split in splits else "not listed"
                    what = f"--role {args.role}" if args.role == "max" else (
                        "--regime" if args.regimes else f"--mode {args.mode}" if args.mode == "protonet"
                        else f"--protocol {args.protocol}")
                    raise UsageError(f"argument --tasks: task {task!r} has no usable {split} split on the server "
                                     f"({reason}); {what} needs {', '.join(needed)}")
            self.num_classes[task] = int(served[task].num_classes)
            for n in args.regimes or ():
                try:
                    self.client.get_regime(task, n, args.regime_seed, "train", sampling=args.regime_sampling)
                except SamplerClientError as error:
                    if error.code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                        raise
                    raise UsageError(f"argument --regime: got {n} for task {task!r}: {error}") from None

    def config(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        config = {k: v for k, v in sorted(vars(self.args).items()) if k not in TRANSFER_OPERATIONAL}
        config.update(self.learner.describe())
        config.update(extra)
        return json.loads(json.dumps(config))

    def _regime_keys(self, regime: int) -> dict[str, Any]:
        """The request fields naming a data regime (none for the task's own splits)."""
        if not regime:
            return {"regime": 0}
        return {"regime": regime, "regime_seed": self.args.regime_seed, "regime_sampling": self.args.regime_sampling}

    def fit(self, task: str, split: str, setting: Setting, regime: int = 0, seed: int | None = None,
            validated: Validated | None = None) -> float:
        """Train a fresh head (and, finetuning, the backbone from its initial weights) for ``setting.steps``
        steps on ``split``, batches shuffled under ``seed`` (default ``--seed``); the last loss. With
        ``validated``, checked on its split every ``--validate-every`` steps and at the end, and the
        best checkpoint's weights put back at the end."""
        args = self.args
        seed = args.seed if seed is None else seed
        where = ((task, split, setting.lr, setting.steps) + ((f"regime={regime}", args.regime_seed) if regime else ())
                 + ((f"seed={seed}",) if seed != args.seed else ()))
        fit_seed = derive_seed(args.seed, *where)
        self.learner.reset(self.num_classes[task], fit_seed)
        # the flips belong to the data stream, as the batch order does: the same for every setting
        flips = (np.random.default_rng(derive_seed(seed, "flip", task, split, regime, args.regime_seed))
                 if args.augment == "flip" else None)
        checks = set(validation_steps(self.validate_every, setting.steps) if validated is not None else ())
        kept = None
        loss = float("nan")
        batches = self.client.task_batches(task, split, args.batch_size, seed=seed, count=setting.steps,
                                           image_size=args.image_size, **self._regime_keys(regime))
        label = f"{task} {split}{f' (regime {regime})' if regime else ''} {setting.label}"
        for step, batch in enumerate(batches):
            if flips is not None:
                batch = dataclasses.replace(batch, images=flipped(batch.images, flips))
            loss = self.learner.train_step(batch, self.schedule.learning_rate(setting.lr, step, setting.steps))
            if (step + 1) % args.log_every == 0:
                self.log(f"{label}: step {step + 1}/{setting.steps} loss {loss:.4f}")
            if step + 1 in checks:
                check_loss, accuracy, validated.examples = self.validate(task, validated.split, regime)
                check = {"step": step + 1, "loss": check_loss, "accuracy": accuracy}
                validated.checks.append(check)
                if validated.best is None or check_loss < validated.best["loss"]:
                    validated.best, kept = check, self.learner.snapshot()
                self.log(f"{label}: step {step + 1} {validated.split} loss {check_loss:.4f} accuracy {accuracy:.2%}"
                         f"{' (best)' if validated.best is check else ''}")
        if kept is not None:
            self.learner.restore(kept)
        self.fits.update(self.learner.weights_sha256().encode())
        return loss

    @property
    def validate_every(self) -> int:
        """``--validate-every`` scaled as the steps are (``--steps-scale``; at least 1)."""
        return max(1, round(self.args.validate_every * self.args.steps_scale)) if self.args.validate_every else 0

    def evaluate(self, task: str, split: str, regime: int = 0) -> tuple[float, int]:
        correct = total = 0
        for batch in self.client.eval_batches(task, split, self.args.eval_batch_size, image_size=self.args.image_size,
                                              **self._regime_keys(regime)):
            correct += int(np.sum(np.asarray(self.learner.predict(batch)) == batch.labels))
            total += len(batch.labels)
        return correct / max(total, 1), total

    def validate(self, task: str, split: str, regime: int) -> tuple[float, float, int]:
        """(mean cross-entropy, accuracy, examples) of the learner's weights on ``split`` (every example once)."""
        correct, summed, total = 0, 0.0, 0
        for batch in self.client.eval_batches(task, split, self.args.eval_batch_size, image_size=self.args.image_size,
                                              **self._regime_keys(regime)):
            predicted, loss = self.learner.predict_with_loss(batch)
            correct += int(np.sum(np.asarray(predicted) == batch.labels))
            summed += float(loss)
            total += len(batch.labels)
        return summed / max(total, 1), correct / max(total, 1), total

    def execute(self) -> dict[str, Any]:
        self.check_tasks()
        if self.args.mode == "protonet":
            return self._protonet()
        return self._sweep()

    def _protonet(self) -> dict[str, Any]:
        args, results = self.args, {}
        extractor = self.learner.episode_extractor()
        moments = extractor.episode_norms(args.batch_norm)  # 0: the stored statistics (running, or none to adopt)
        config = self.config({"protocol": "full-way episode: support train800val200, query test",
                              "episode_batch_norms": moments})
        for task in args.tasks:
            episode = self.client.task_episode(task, image_size=args.image_size)
            if moments:
                support, query = episode_embedding(extractor, episode, args.batch_norm, args.eval_batch_size)
                predicted = prototype_predictions(support, episode.support_labels, query, episode.num_classes)
            else:
                predicted = np.asarray(self.learner.protonet_predict(episode))
            accuracy = float(np.mean(predicted == episode.query_labels)) if len(predicted) else 0.0
            self.client.report_task(args.run, task, "test", accuracy, len(predicted), run_config=config)
            results[task] = {"test_accuracy": accuracy, "test_examples": len(predicted),
                             "support_examples": len(episode.support_labels)}
            self.log(f"{task}: protonet test accuracy {accuracy:.2%} ({len(predicted)} queries)")
        return {"run": args.run, "mode": args.mode, "config": config, "tasks": results,
                "result_sha256": self.fits.hexdigest()}

    def _sweep(self) -> dict[str, Any]:
        args = self.args
        settings = sweep_settings(args.lrs, args.steps, args.steps_scale)
        points = data_points(args)
        seeds = run_seeds(args)
        protocol = self.protocol_values(settings, seeds)
        config = self.config({"settings": [s.label for s in settings], **protocol})
        summary: dict[str, Any] = {"run": args.run, "protocol": args.protocol, "mode": args.mode,
                                   "select": args.select, "role": args.role, **protocol,
                                   "settings": [{"lr": s.lr, "steps": s.steps} for s in settings]}
        if args.validate_every:
            stopped = [self._early_stopped(point, settings, seeds) for point in points]
            for point, results in zip(points, stopped):
                key = "chosen" if not point.regime else f"chosen_regime_{point.regime}"
                config[key] = {task: results[task]["chosen_label"] for task in args.tasks}
            parts = [self._report_stopped(point, settings, results, config) for point, results in zip(points, stopped)]
        else:
            swept = [self._sweep_point(point, settings) for point in points]
            for point, (val, _, chosen) in zip(points, swept):
                key = "chosen" if not point.regime else f"chosen_regime_{point.regime}"
                config[key] = {task: s.label for task, s in chosen.items()}
            parts = [self._final(point, settings, *result, config, seeds) for point, result in zip(points, swept)]
        summary["config"] = config
        summary["result_sha256"] = self.fits.hexdigest()
        if args.regimes:
            summary["regime_seed"] = args.regime_seed
            summary["regime_sampling"] = args.regime_sampling
            summary["regimes"] = parts
        else:
            summary.update(parts[0])
        return summary

    def protocol_values(self, settings: Sequence[Setting], seeds: Sequence[int]) -> dict[str, Any]:
        """Every value the run's protocol used (given or the protocol's), the flags that
        overrode it, and each setting's schedule in steps: recorded in the summary and the
        run configuration."""
        args = self.args
        values = {key: getattr(args, key) for key in ("mode", "optimizer", "lrs", "steps", "steps_scale", "batch_size",
                                                      "decay", "warmup", "select", "select_split", "final_split",
                                                      "runs", "validate_every", "augment")}
        values.update(image_size=args.image_size, resize=VTAB_RESIZE,  # the pixels asked for, as the server serves them
                      momentum=MOMENTUM if args.optimizer == "sgd" else None, betas=[0.9, 0.999]
                      if args.optimizer == "adamw" else None, weight_decay=args.weight_decay,
                      decay_at=list(self.schedule.decay_at), validation_steps_every=self.validate_every,
                      sweep_split=SWEEP_TRAIN_SPLIT if args.select_split != "none" else None,
                      regime_sampling=args.regime_sampling if args.regimes else None)
        return {"protocol_values": values, "overridden": list(args.overridden), "run_seeds": list(seeds),
                "schedules": {s.label: self.schedule.points(s.steps) for s in settings}}

    def _sweep_point(self, point: DataPoint, settings: Sequence[Setting]
                     ) -> tuple[dict[str, dict[str, float]], dict[str, int], dict[str, Setting]]:
        """Every setting trained on the point's train split and scored on its val split; the
        choice. Without a val split (no sweep) the one setting is every task's."""
        args = self.args
        if point.val is None:
            return {}, {}, {task: settings[0] for task in args.tasks}
        val: dict[str, dict[str, float]] = {task: {} for task in args.tasks}
        val_examples: dict[str, int] = {}
        for setting in settings:
            for task in args.tasks:
                self.fit(task, point.train, setting, point.of(point.train))
                val[task][setting.label], val_examples[task] = self.evaluate(task, point.val, point.of(point.val))
                self.log(f"{task}{f' regime {point.regime}' if point.regime else ''} {setting.label}: "
                         f"{point.val} accuracy {val[task][setting.label]:.2%}")
        return val, val_examples, choose(val, settings, args.select == "per-task")

    def _early_stopped(self, point: DataPoint, settings: Sequence[Setting], seeds: Sequence[int]
                       ) -> dict[str, dict[str, Any]]:
        """Each task: every setting fitted on the point's train split and validated on its val
        split during the fit; the setting of the lowest validation loss (ties: sweep order); its best checkpoint
        tested (and, for each further ``--runs`` seed, the chosen setting fitted and validated
        again and its best checkpoint tested). Nothing is reported yet."""
        args = self.args
        results: dict[str, dict[str, Any]] = {}
        for task in args.tasks:
            validated: dict[str, Validated] = {}
            kept: tuple[Setting, Any] | None = None
            for setting in settings:
                checked = validated[setting.label] = Validated(point.val)
                self.fit(task, point.train, setting, point.of(point.train), validated=checked)
                if kept is None or checked.best["loss"] < validated[kept[0].label].best["loss"]:
                    kept = (setting, self.learner.snapshot() if len(settings) > 1 else None)
            setting, weights = kept
            if weights is not None:
                self.learner.restore(weights)
            best = validated[setting.label].best
            accuracy, examples = self.evaluate(task, point.test)
            runs = [{"seed": seeds[0], "best_step": best["step"], "test_accuracy": accuracy}]
            for seed in seeds[1:]:
                again = Validated(point.val)
                self.fit(task, point.train, setting, point.of(point.train), seed=seed, validated=again)
                runs.append({"seed": seed, "best_step": again.best["step"],
                             "test_accuracy": self.evaluate(task, point.test)[0]})
            self.log(f"{task}{f' regime {point.regime}' if point.regime else ''} {setting.label}: best {point.val} "
                     f"loss {best['loss']:.4f} at step {best['step']}, test accuracy {runs[0]['test_accuracy']:.2%}")
            results[task] = {"chosen_label": setting.label, "setting": setting, "validated": validated,
                             "runs": runs, "examples": examples}
        return results

    def _report_stopped(self, point: DataPoint, settings: Sequence[Setting], results: dict[str, dict[str, Any]],
                        config: dict[str, Any]) -> dict[str, Any]:
        """The early-stopped tests' median and the chosen checkpoint's val accuracy reported; the summary part."""
        args = self.args
        keys = {"role": args.role, "regime": point.regime, "regime_seed": args.regime_seed if point.regime else 0}
        tasks: dict[str, Any] = {}
        for task in args.tasks:
            result = results[task]
            setting, validated = result["setting"], result["validated"]
            chosen = validated[setting.label]
            accuracy = median([run["test_accuracy"] for run in result["runs"]])
            test_examples = result["examples"]
            self.client.report_task(args.run, task, point.val, chosen.best["accuracy"], chosen.examples,
                                    run_config=config, **keys)
            self.client.report_task(args.run, task, point.test, accuracy, test_examples, run_config=config, **keys)
            tasks[task] = {"chosen": {"lr": setting.lr, "steps": setting.steps}, "final_split": point.final,
                           "test_accuracy": accuracy, "test_examples": test_examples, "test_runs": result["runs"],
                           "best_step": chosen.best["step"], "val_loss": chosen.best["loss"],
                           "val_accuracy": chosen.best["accuracy"], "val_split": point.val,
                           "val_examples": chosen.examples,
                           "val": {label: v.best["accuracy"] for label, v in validated.items()},
                           "validations": {label: v.checks for label, v in validated.items()}}
        part: dict[str, Any] = {"tasks": tasks}
        if point.regime:
            part["n"] = point.regime
        if args.select == "all-tasks" or len(settings) == 1:
            part["chosen"] = tasks[args.tasks[0]]["chosen"]
        return part

    def _final(self, point: DataPoint, settings: Sequence[Setting], val: dict[str, dict[str, float]],
               val_examples: dict[str, int], chosen: dict[str, Setting], config: dict[str, Any],
               seeds: Sequence[int]) -> dict[str, Any]:
        """The chosen settings trained on the point's final split once per seed, tested; the
        median reported (and the val score of the choice); its summary part."""
        args = self.args
        keys = {"role": args.role, "regime": point.regime, "regime_seed": args.regime_seed if point.regime else 0}
        results: dict[str, Any] = {}
        for task in args.tasks:
            setting = chosen[task]
            runs = []
            for seed in seeds:
                self.fit(task, point.final, setting, point.of(point.final), seed=seed)
                accuracy, examples = self.evaluate(task, point.test)
                runs.append({"seed": seed, "test_accuracy": accuracy})
                if len(seeds) > 1:
                    self.log(f"{task} {setting.label} seed {seed}: test accuracy {accuracy:.2%}")
            accuracy = median([run["test_accuracy"] for run in runs])
            if point.val is not None:
                self.client.report_task(args.run, task, point.val, val[task][setting.label], val_examples[task],
                                        run_config=config, **keys)
            self.client.report_task(args.run, task, point.test, accuracy, examples, run_config=config, **keys)
            results[task] = {"chosen": {"lr": setting.lr, "steps": setting.steps}, "final_split": point.final,
                             "test_accuracy": accuracy, "test_examples": examples, "test_runs": runs}
            if point.val is not None:
                results[task].update({"val": val[task], "val_accuracy": val[task][setting.label],
                                      "val_split": point.val, "val_examples": val_examples[task]})
        part: dict[str, Any] = {"tasks": results}
        if point.val is not None:
            part["mean_val"] = {s.label: float(np.mean([val[t][s.label] for t in args.tasks])) for s in settings}
        if point.regime:
            part["n"] = point.regime
        if args.select == "all-tasks" or point.val is None:
            part["chosen"] = results[args.tasks[0]]["chosen"]
        return part


def format_summary(summary: Mapping[str, Any]) -> str:
    role = summary.get("role", "model")
    head = (f"run {summary['run']}: {summary['config'].get('framework', '?')} "
            f"{summary.get('protocol', '?') + ' ' if summary['mode'] != 'protonet' else ''}{summary['mode']} "
            f"{summary['config'].get('backbone', '?')}" + (f", role {role}" if role != "model" else ""))
    values = summary.get("protocol_values") or {}
    if "resize" in values:  # the pixels trained on: VTAB's reference grid unless asked otherwise
        head += f", {values['image_size']} px {values['resize']}"

    parts = summary.get("regimes")
    if parts is None:
        return "\n".join([head + (f", chosen {summary['chosen']}" if "chosen" in summary else ""),
                          *_task_lines(summary["tasks"], "  ")])
    lines = [head + f", regimes {', '.join(str(p['n']) for p in parts)} (seed {summary['regime_seed']}, "
             f"{summary.get('regime_sampling', 'uniform')})"]
    for part in parts:
        lines.append(f"  regime {part['n']}" + (f", chosen {part['chosen']}" if "chosen" in part else ""))
        lines.extend(_task_lines(part["tasks"], "    "))
    return "\n".join(lines)


def _task_lines(tasks: Mapping[str, Any], indent: str) -> list[str]:
    lines = []
    for task, result in tasks.items():
        val = f"{result.get('val_split', 'val200')} {result['val_accuracy']:.2%}, " if "val_accuracy" in result else ""
        if "best_step" in result:  # early stopping: the checkpoint tested
            val = f"best step {result['best_step']} ({result['val_split']} loss {result['val_loss']:.4f}), {val}"
        chosen = f" lr={result['chosen']['lr']:g} steps={result['chosen']['steps']}:" if "chosen" in result else ":"
        runs = result.get("test_runs", [])
        scores = " ".join(f"{run['test_accuracy']:.2%}" for run in runs)
        of_runs = f", median of {len(runs)}: {scores}" if len(runs) > 1 else ""
        lines.append(f"{indent}{task}{chosen} {val}test {result['test_accuracy']:.2%} "
                     f"({result['test_examples']} examples{of_runs})")
    return lines


def run_transfer_main(framework_name: str, make: Callable[[argparse.Namespace], TransferLearner],
                      argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one transfer run; exit status 0 ok, 2 bad input, 3 server fault."""
    return run_command(f"python -m clients.{framework_name} transfer", lambda: parse_transfer_args(framework_name, argv), make,
                       lambda part, client, log: TransferRun(part, client, log).execute(), format_summary)
