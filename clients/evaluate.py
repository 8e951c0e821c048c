"""``evaluate``: one checkpoint through every protocol, framework-free (the part
``clients.torch.evaluate`` and ``clients.tf.evaluate`` share).

A framework supplies an ``EvaluateFramework``: the backbone loaded by the contract
(``clients.backbone_contract``) with its frozen-feature extractor, and the ``transfer`` and
``cog`` commands' own learner and backend. The job is a list of units, each reported
to the server as it finishes:

- Meta-Dataset (preset, source, learner): test episodes 0..``--episodes``-1 of the source
  under the preset's class splits, embedded once by the frozen backbone, its batch norms
  taking each episode's support moments under ``--batch-norm md`` (the default, as
  Meta-Dataset's learners at test; ``running``: the stored statistics) (features cached
  on disk per episode, ``clients.feature_cache``: the second learner reads the first's),
  classified by a fixed-feature learner (``clients.md_fixed_features``), each episode
  reported as the MD trainer reports it (``clients.reporting.Reporter``). An adapting learner
  (``clients.evaluate_args.ADAPTING_LEARNERS``: finetune, md-transfer, bit-md, maml, protomaml)
  runs ``clients.md_learners``'s loops on each episode's images instead, over the framework's
  explicit-weight episode (``EvaluateFramework.adapting``): every episode starts from the
  checkpoint's weights (the loops never write into the model), a Finetune head is drawn from
  ``derive_seed(--md-seed, FINETUNE_HEAD_SEED_NAME, index)``, and a learner that fixes its own
  image side (bit-md, 224 px) fetches its episodes at that side, refused in one line where the
  backbone's contract fixes another.
- VTAB-1k (task): the ``transfer`` command's run (``clients.vtab_transfer.TransferRun``) on
  that task with the framework's learner, its arguments parsed by the transfer parser
  (``clients.evaluate_args.transfer_namespace``), so the sweep, the per-task choice and
  the median of the final runs are that command's. Under ``--select all-tasks`` (one
  setting for every task) the unit is all tasks together.
- ImageNet-CoG (level, N, seed): the ``cog`` command's run (``clients.cog_eval.CogRun``) on
  that one point, features from the cog command's cache under the same ``--feature-cache``.

Run ids. The metrics store keeps one configuration per run and keys MD episodes by
(run, source, split, seed, index), so two learners, or two presets, of one checkpoint
cannot share a run id. Each protocol reports under a run of its own, derived from
``--run RUN`` (``sub_runs``): ``RUN/md-v1/prototypes``, ``RUN/md-v1/logreg`` (one per
preset and learner), ``RUN/vtab`` and ``RUN/cog``. Their configurations carry the
checkpoint's fingerprint (``backbone_fingerprint``, the sha256 of the weights as loaded).
The VTAB configuration is the transfer command's less what selects work (``tasks``, the
per-task ``chosen`` settings, which the summary keeps) and the weights' path, so one run
may be completed task by task over several invocations.

Resume. Before any work the job reads what the server holds of those runs (GetReport's
"held" table: configurations and result keys) and skips every unit whose results are all
there; an MD unit stopped part way continues at its first missing episode. A run that
holds results of another checkpoint (its configuration lacks this fingerprint), or an MD
learner's results under other settings (``learner_settings``: another --finetune-steps, say),
is refused in one line, before anything is computed. One tqdm bar on stderr counts units (done,
ETA); each finished unit writes one line.
"""

from __future__ import annotations

import abc
import argparse
import copy
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import numpy as np

from clients.backbone_contract import FeatureExtractor, LoadedBackbone
from clients.client import SamplerClient
from clients.cog_eval import CogBackend, CogRun
from clients.errors import SamplerClientError, UsageError
from clients.evaluate_args import (ADAPTING_LEARNERS, MD_EXTRACT_BATCH_SIZE, cog_namespace, maml_alpha,
                                   parse_evaluate_args, transfer_namespace)
from clients.feature_cache import FeatureCache, key_text
from clients.md_fixed_features import learner_settings, predict
from clients.md_learners import IMAGE_SIZES, Finetuning, InnerLoop, finetune_inputs, finetuning, inner_loop
from clients.protocols.md import EpisodeArrays, EpisodeSpec
from clients.reporting import Reporter
from clients.seeds import FINETUNE_HEAD_SEED_NAME, derive_seed
from clients.trainer_shell import run_command
from clients.vtab_transfer import TransferLearner, TransferRun, data_points

HELD_TABLE = "held"
SOURCE_TASK_PREFIX = "source:"  # packed classification sources listed as tasks: not VTAB-1k's
MD_RESIZE = "bilinear"  # the MD trainers' episodes (EpisodeSpec's default)
VTAB_DROPPED = ("tasks", "weights", "json_summary")  # what selects work or names a file (the fingerprint stays)


# ---- the pure parts ---------------------------------------------------------------------------


def sub_runs(run: str, presets: Sequence[str], learners: Sequence[str]) -> dict[str, str]:
    """The run id each protocol part reports under: ``md/<preset>/<learner>``, ``vtab``, ``cog``."""
    runs = {f"md/{preset}/{learner}": f"{run}/{preset}/{learner}" for preset in presets for learner in learners}
    runs.update(vtab=f"{run}/vtab", cog=f"{run}/cog")
    return runs


@dataclass(frozen=True)
class Unit:
    """One unit of work: its protocol, the run it reports under, what it covers and its label."""

    protocol: str
    run_id: str
    parts: tuple[Any, ...]
    label: str


def md_units(run_ids: Mapping[str, str], sources: Mapping[str, Sequence[str]],
             learners: Sequence[str]) -> list[Unit]:
    """(preset, source, learner) in that order: a source's learners one after the other, so
    the second reads the features the first cached."""
    return [Unit("md", run_ids[f"md/{preset}/{learner}"], (preset, source, learner),
                 f"md {preset} {source} {learner}")
            for preset, names in sources.items() for source in names for learner in learners]


def vtab_units(run_id: str, tasks: Sequence[str], all_tasks: bool) -> list[Unit]:
    if all_tasks:
        return [Unit("vtab", run_id, tuple(tasks), f"vtab {', '.join(tasks)} (one setting for all)")]
    return [Unit("vtab", run_id, (task,), f"vtab {task}") for task in tasks]


def cog_units(run_id: str, levels: Sequence[str], shots: Sequence[int], seeds: Sequence[int]) -> list[Unit]:
    """(level, N, seed), in the cog command's order: level, then seed, then N."""
    return [Unit("cog", run_id, (level, n, seed), f"cog {level} N={n or 'all'} seed {seed}")
            for level in levels for seed in seeds for n in shots]


@dataclass
class Held:
    """What the server holds of one run (GetReport "held"): its configuration and result keys."""

    config: dict[str, Any] | None = None
    md: dict[tuple[str, str, int], set[int]] = field(default_factory=dict)
    vtab: set[tuple[str, str, int, int]] = field(default_factory=set)
    cog: set[tuple[str, int, int]] = field(default_factory=set)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> "Held":
        if value is None:
            return cls()
        md = {(e["source"], e["split"], int(e["seed"])): {i for start, stop in e["indices"] for i in range(start, stop)}
              for e in value["md"]}
        vtab = {(e["task"], e["split"], int(e["regime"]), int(e["regime_seed"])) for e in value["vtab"]}
        cog = {(e["level"], int(e["shots"]), int(e["seed"])) for e in value["cog"]}
        return cls(dict(value["config"]), md, vtab, cog)

    def episodes(self, names: Iterable[str], split: str, seed: int) -> set[int]:
        """Indices held for a source under any of ``names`` (its store name, its kind)."""
        return set().union(*(self.md.get((name, split, seed), set()) for name in names))


def parse_held(text: str) -> dict[str, Held]:
    return {run: Held.from_json(value) for run, value in json.loads(text)["runs"].items()}


def foreign_runs(held: Mapping[str, Held], fingerprint: str) -> list[str]:
    """The runs holding a configuration that does not name this checkpoint's fingerprint."""
    return [run for run, h in held.items() if h.config is not None and fingerprint not in json.dumps(h.config)]


def other_batch_norm(held: Mapping[str, Held], md_runs: Iterable[str], batch_norm: str) -> list[tuple[str, str]]:
    """(run, its batch norm) of the Meta-Dataset runs held under another ``--batch-norm`` (a
    configuration from before the flag existed embedded with running statistics)."""
    return [(run, held[run].config.get("batch_norm", "running")) for run in sorted(md_runs)
            if run in held and held[run].config is not None
            and held[run].config.get("batch_norm", "running") != batch_norm]


def other_settings(held: Mapping[str, Held], settings: Mapping[str, Any]) -> list[str]:
    """The runs of ``settings`` (run -> its learner's settings) held under other learner settings."""
    return [run for run in sorted(settings) if run in held and held[run].config is not None
            and held[run].config.get("learner_settings") != json.loads(json.dumps(settings[run]))]


def missing_episodes(held: Held, names: Iterable[str], seed: int, episodes: int) -> list[int]:
    done = held.episodes(names, "test", seed)
    return [i for i in range(episodes) if i not in done]


def vtab_keys(unit: Unit, regimes: Sequence[tuple[int, int]]) -> set[tuple[str, str, int, int]]:
    """The test results a VTAB unit reports: each task at each (regime, regime seed)."""
    return {(task, "test", regime, seed) for task in unit.parts for regime, seed in regimes}


def stable_vtab_config(config: Mapping[str, Any], fingerprint: str) -> dict[str, Any]:
    """The transfer run's configuration as stored for ``RUN/vtab``: without what selects
    work (tasks, the per-task chosen settings) or names a file, with the fingerprint."""
    kept = {k: v for k, v in config.items() if k not in VTAB_DROPPED and not k.startswith("chosen")}
    return {**kept, "backbone_fingerprint": fingerprint, "command": "evaluate"}


# ---- what a framework supplies --------------------------------------------------------------


class AdaptingEpisodes(Protocol):
    """An adapting learner's episodes in one framework: the query predictions (labels
    0 .. ways - 1) after ``clients.md_learners``'s loop on the episode's support set, every
    episode from the checkpoint's own weights (nothing written back into the model)."""

    def finetuned(self, episode: EpisodeArrays, settings: Finetuning, head: tuple[np.ndarray, ...],
                  rows: np.ndarray | None) -> np.ndarray:
        """``finetuned_query_logits`` from the new ``head`` (``finetune_inputs``'s, with its ``rows``)."""

    def adapted(self, episode: EpisodeArrays, loop: InnerLoop) -> np.ndarray:
        """``adapted_query_logits`` at test (``loop.steps_for(False)`` steps)."""


class EvaluateFramework(abc.ABC):
    """A framework's parts of ``evaluate``; constructed from the parsed arguments."""

    name = "framework"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    @abc.abstractmethod
    def load(self, args: argparse.Namespace) -> LoadedBackbone:
        """The backbone of ``args`` by the contract (MD's default side), on the device, eval mode."""

    @abc.abstractmethod
    def extractor(self, backbone: LoadedBackbone, batch_size: int) -> FeatureExtractor:
        """Frozen features of uint8 NHWC images (the framework's ``*Features``)."""

    @abc.abstractmethod
    def adapting(self, backbone: LoadedBackbone, batch_norm: str) -> AdaptingEpisodes:
        """The adapting learners' episodes on ``backbone`` (at its preprocessing's side) under
        ``batch_norm``; a model without explicit weights is refused (UsageError, one line)."""

    @abc.abstractmethod
    def resized(self, backbone: LoadedBackbone, size: int) -> LoadedBackbone:
        """``backbone`` served at ``size`` px: the same weights, its feature size probed there."""

    @abc.abstractmethod
    def transfer_learner(self, args: argparse.Namespace) -> TransferLearner:
        """The ``transfer`` command's learner for its parsed arguments."""

    @abc.abstractmethod
    def cog_backend(self, args: argparse.Namespace) -> CogBackend:
        """The ``cog`` command's backend for its parsed arguments."""

    def save_weights(self, backbone: LoadedBackbone, directory: Path) -> str | None:
        """Write the backbone's weights under ``directory`` (named by their fingerprint) for the
        other protocols' commands to load; None where the model has no weights file form."""
        return None

    def describe(self) -> dict[str, Any]:
        """Framework and versions: stored with the MD reports."""
        return {"framework": self.name}

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        return None


class VtabReports:
    """The client a VTAB unit's ``TransferRun`` reports through: every call goes to the real
    client, and each task result is stored with ``RUN/vtab``'s stable configuration."""

    def __init__(self, client: SamplerClient, fingerprint: str) -> None:
        self.client, self.fingerprint = client, fingerprint

    def report_task(self, run_id: str, task: str, split: str, accuracy: float, examples: int, *,
                    run_config: Mapping[str, Any] | None = None, **keys: Any) -> Any:
        return self.client.report_task(run_id, task, split, accuracy, examples,
                                       run_config=stable_vtab_config(run_config or {}, self.fingerprint), **keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


# ---- the job ----------------------------------------------------------------------------------


class EvaluateJob:
    """One ``evaluate`` invocation; ``execute`` returns the JSON-able summary."""

    def __init__(self, framework: EvaluateFramework, client: SamplerClient, log: Callable[[str], None]) -> None:
        self.framework, self.client, self.log = framework, client, log
        self.args = args = framework.args
        self.backbone = framework.load(copy.copy(args))  # a copy: the contract sets image_size to MD's side
        self.fingerprint = self.backbone.fingerprint
        if self.backbone.spec.kind != "file" and args.weights is None and args.init_seed is None:
            # random initial weights (a named backbone, a factory's): the VTAB and CoG commands load
            # these same ones, not weights of their own seeds, so one checkpoint is evaluated
            # (--init-seed's weights are the same in every command: they are handed on as given)
            saved = framework.save_weights(self.backbone, Path(args.feature_cache) / "initial-weights")
            if saved is not None:
                args.weights = saved
        self.runs = sub_runs(args.run, args.presets, args.md_learners)
        self.cache = FeatureCache(args.feature_cache)
        self.source_names: dict[tuple[str, str], tuple[str, ...]] = {}
        self.results: list[dict[str, Any]] = []
        self._extractor: FeatureExtractor | None = None
        self._sized: dict[int, LoadedBackbone] = {}
        self._adapting: dict[int, AdaptingEpisodes] = {}

    def say(self, message: str) -> None:
        if self.args.verbose:
            self.log(message)

    # -- planning --

    def md_sources(self) -> dict[str, list[str]]:
        """Each preset's test sources: as named, else every test source the server lists for it
        (when it serves only some of them: the served sources with test classes, said in a line)."""
        found: dict[str, list[str]] = {}
        for preset in self.args.presets:
            if self.args.md_sources:
                names = list(self.args.md_sources)
            else:
                try:
                    names = list(self.client.preset_sources(preset, "test"))
                except SamplerClientError as error:
                    if error.code != grpc.StatusCode.NOT_FOUND:
                        raise
                    names = [s.name for s in self.client.list_sources(preset) if s.test_classes]
                    self.log(f"md: {preset}: {error}; evaluating the served sources with test classes: "
                             f"{', '.join(names) or 'none'}")
            for name in names:
                try:
                    summary = self.client.describe_source(name, preset).summary
                except SamplerClientError as error:
                    if error.code not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                        raise
                    raise UsageError(f"argument --md-sources: {error}") from None
                if not summary.test_classes:
                    raise UsageError(f"argument --md-sources: source {name!r} has no test classes under {preset}")
                self.source_names[(preset, name)] = tuple(dict.fromkeys((name, summary.name, summary.source)))
                self.first_test_episode(preset, name)
            found[preset] = names
        return found

    def first_test_episode(self, preset: str, name: str) -> None:
        """Ask for source ``name``'s first test episode under ``preset``, so that episodes its test
        split cannot give (too few classes for the ways, say) are refused before any unit runs."""
        args = self.args
        spec = EpisodeSpec(sources=(name,), preset=preset, split="test", seed=args.md_seed,
                           image_size=self.backbone.preprocessing.size, resize=MD_RESIZE, ways=args.md_ways,
                           shots=args.md_shots, query=args.md_query)
        try:
            self.client.episode(spec, 0)
        except SamplerClientError as error:
            if error.code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                raise
            raise UsageError(f"argument --md-sources: {name} under {preset}: {error}; leave it out "
                             "of --md-sources (its test split cannot give these episodes), or shape them with "
                             "--md-ways/--md-shots/--md-query") from None

    def vtab_tasks(self) -> list[str]:
        if self.args.tasks:
            return list(self.args.tasks)
        listed = dict.fromkeys(s.task for s in self.client.list_tasks() if not s.task.startswith(SOURCE_TASK_PREFIX))
        if not listed:
            raise UsageError("--protocols vtab: the server serves no VTAB task (no VTAB store); leave vtab out of "
                             "--protocols or serve one")
        return list(listed)

    def cog_plan(self) -> tuple[argparse.Namespace, list[str]]:
        ns = cog_namespace(self.args, self.framework.name, self.runs["cog"])
        ns.backbone_fingerprint = self.fingerprint  # in the cog run's configuration: a rerun checks it
        files = {name: path for name, path in (("levels_file", ns.levels_file),
                                               ("concepts_split_file", ns.concepts_split_file)) if path}
        response = self.client.cog_levels_response(level_size=ns.level_size, min_images=ns.min_images, **files)
        served = [summary.level for summary in response.levels]
        if ns.levels:
            for name in ns.levels:
                if name in response.unavailable:
                    raise UsageError(f"argument --levels: {response.unavailable[name]}")
                if name not in served:
                    raise UsageError(f"argument --levels: got {name!r}, expected levels this server serves "
                                     f"({', '.join(served) or 'none'})")
            return ns, [level for level in served if level in ns.levels]
        for name, reason in sorted(response.unavailable.items()):
            self.log(f"cog: level {name} left out: {reason}")
        if not served:
            raise UsageError("--protocols cog: the server serves no ImageNet-CoG level (no imagenet21k or ILSVRC "
                             "store); leave cog out of --protocols or serve one")
        return ns, served

    def held(self) -> dict[str, Held]:
        text = self.client.call("GetReport", _held_request(list(self.runs.values()))).text
        return parse_held(text)

    # -- units --

    def extractor(self) -> FeatureExtractor:
        if self._extractor is None:
            batch = self.args.extract_batch_size or MD_EXTRACT_BATCH_SIZE
            self._extractor = self.framework.extractor(self.backbone, batch)
        return self._extractor

    def episode_features(self, episode: EpisodeArrays) -> tuple[np.ndarray, np.ndarray]:
        """(support, query) features of an episode, from the cache or embedded once."""
        preprocessing = self.backbone.preprocessing
        batch_norm = self.batch_norm()
        key = key_text(self.fingerprint, episode.fingerprint, preprocessing.key(),
                       {"resize": episode.resize, "image_size": episode.image_size, "batch_norm": batch_norm,
                        "precision": self.args.precision})

        def embed() -> dict[str, np.ndarray]:
            support, query = self.extractor().episode_features(episode.support_images, episode.query_images,
                                                               batch_norm)
            return {"support": np.asarray(support, np.float32), "query": np.asarray(query, np.float32)}

        arrays = self.cache.get_or_compute(key, embed)
        return arrays["support"], arrays["query"]

    def batch_norm(self) -> str:
        """The embedding's batch norm as it acts: ``--batch-norm``, or ``running`` (the features of
        each image alone, cacheable per image) where the backbone has no batch norm that takes an
        episode's moments."""
        return self.args.batch_norm if self.extractor().episode_norms(self.args.batch_norm) else "running"

    def learner_backbone(self, learner: str) -> LoadedBackbone:
        """The backbone as ``learner`` takes it: at the side it fixes (bit-md: 224 px), else as loaded.
        A side the backbone's contract fixes otherwise (--image-size, its input_size) is refused."""
        size = IMAGE_SIZES.get(learner, self.backbone.preprocessing.size)
        if size == self.backbone.preprocessing.size:
            return self.backbone
        if size not in self._sized:
            given, declared = self.args.image_size, getattr(self.backbone.model, "input_size", None)
            if given is not None or declared is not None:
                where = "--image-size" if given is not None else "its input_size attribute"
                raise UsageError(f"argument --md-learners: {learner} runs at {size} px, but the backbone's contract "
                                 f"fixes its input at {self.backbone.preprocessing.size} px ({where}); leave {learner} "
                                 "out")
            self._sized[size] = self.framework.resized(self.backbone, size)
        return self._sized[size]

    def adapting(self, learner: str) -> AdaptingEpisodes:
        backbone = self.learner_backbone(learner)
        size = backbone.preprocessing.size
        if size not in self._adapting:
            self._adapting[size] = self.framework.adapting(backbone, self.batch_norm())
        return self._adapting[size]

    def md_learner_args(self, preset: str) -> argparse.Namespace:
        """The arguments the adapting learners read for ``preset`` (its --maml-alpha resolved)."""
        return argparse.Namespace(**{**vars(self.args), "maml_alpha": maml_alpha(self.args.maml_alpha, preset)})

    def md_settings(self, preset: str, learner: str) -> dict[str, Any]:
        """What defines ``learner``'s predictions besides the features or weights (in its run's configuration)."""
        if learner not in ADAPTING_LEARNERS:
            return learner_settings(learner)
        args = self.md_learner_args(preset)
        settings = finetuning(args, learner)
        if settings is not None:
            return {**dataclasses.asdict(settings), "head_seed": f"derive_seed(eval_seed, {FINETUNE_HEAD_SEED_NAME!r}, "
                                                                 "index)"}
        loop = inner_loop(args, learner)
        assert loop is not None
        return {**dataclasses.asdict(loop), "test_steps": loop.steps_for(False)}

    def md_config(self, preset: str, learner: str) -> dict[str, Any]:
        """``RUN/<preset>/<learner>``'s configuration: what defines its numbers (not which sources
        or how many episodes, so a run may be completed over several invocations)."""
        backbone = self.learner_backbone(learner)
        shape = {"ways": self.args.md_ways, "shots": self.args.md_shots, "query": self.args.md_query}
        return {"command": "evaluate", "protocol": "md", "preset": preset, "split": "test",
                "eval_seed": self.args.md_seed, "learner": learner,
                "learner_settings": self.md_settings(preset, learner),
                "batch_norm": self.args.batch_norm, "episode_batch_norms": self.extractor().episode_norms(
                    self.args.batch_norm), "precision": self.args.precision,
                "backbone": backbone.spec.target, "backbone_fingerprint": self.fingerprint,
                "embedding_dim": backbone.out_dim, "resize": MD_RESIZE, "input_size": backbone.preprocessing.size,
                "preprocessing": backbone.preprocessing.as_config(), **self.framework.describe(),
                **({"episode_shape": shape} if any(shape.values()) else {})}

    def predictions(self, preset: str, learner: str, episode: EpisodeArrays) -> np.ndarray:
        """The predicted query labels of one episode by ``learner``."""
        if learner not in ADAPTING_LEARNERS:
            support, query = self.episode_features(episode)
            return predict(learner, support, episode.support_labels, query, episode.ways)
        args = self.md_learner_args(preset)
        settings = finetuning(args, learner)
        if settings is None:
            loop = inner_loop(args, learner)
            assert loop is not None
            return self.adapting(learner).adapted(episode, loop)
        backbone = self.learner_backbone(learner)
        head, rows = finetune_inputs(settings, backbone.out_dim, episode.ways, len(episode.support_labels),
                                     derive_seed(self.args.md_seed, FINETUNE_HEAD_SEED_NAME, episode.index))
        return self.adapting(learner).finetuned(episode, settings, head, rows)

    def run_md(self, unit: Unit, held: Held) -> dict[str, Any]:
        preset, source, learner = unit.parts
        args = self.args
        missing = missing_episodes(held, self.source_names[(preset, source)], args.md_seed, args.episodes)
        spec = EpisodeSpec(sources=(source,), preset=preset, split="test", seed=args.md_seed,
                           image_size=self.learner_backbone(learner).preprocessing.size, resize=MD_RESIZE,
                           ways=args.md_ways, shots=args.md_shots, query=args.md_query)
        wanted = set(missing)
        accuracies: list[float] = []
        with Reporter(self.client, unit.run_id, run_config=self.md_config(preset, learner),
                      batch=args.report_batch) as reporter:
            if missing:
                for episode in self.client.episodes(spec, start=missing[0], count=args.episodes - missing[0]):
                    if episode.index not in wanted:
                        continue
                    accuracies.append(reporter.add(episode, self.predictions(preset, learner, episode)))
        return {"episodes": len(accuracies), "held_before": args.episodes - len(missing),
                "mean_accuracy": float(np.mean(accuracies)) if accuracies else None}

    def same_weights(self, loaded: LoadedBackbone | None, command: str) -> None:
        """Refuse a protocol whose command loaded other weights than the job's checkpoint."""
        if loaded is not None and loaded.fingerprint != self.fingerprint:
            raise UsageError(f"argument --backbone: the {command} command loaded weights of sha256 "
                             f"{loaded.fingerprint[:16]}..., not the checkpoint's {self.fingerprint[:16]}... (a "
                             "backbone whose weights change from one load to the next cannot be evaluated as one "
                             "checkpoint; pass --weights)")

    def run_vtab(self, unit: Unit, ns_of: Callable[[Sequence[str]], argparse.Namespace]) -> dict[str, Any]:
        ns = ns_of(list(unit.parts))
        learner = self.framework.transfer_learner(ns)
        self.same_weights(getattr(learner, "loaded", None), "transfer")
        run = TransferRun(learner, VtabReports(self.client, self.fingerprint), self.say)  # type: ignore[arg-type]
        summary = run.execute()
        parts = summary.get("regimes") or [summary]
        return {"tasks": {f"{task}{'@' + str(p['n']) if 'n' in p else ''}": result["test_accuracy"]
                          for p in parts for task, result in p["tasks"].items()}}

    def run_cog(self, unit: Unit, backend: CogBackend) -> dict[str, Any]:
        level, shots, seed = unit.parts
        ns = backend.args
        ns.levels, ns.shots, ns.seeds = [level], [shots], [seed]  # CogRun reads its backend's arguments
        summary = CogRun(backend, self.client, self.say).execute()
        result = summary["levels"][level]["results"][0]
        return {"accuracy": result["accuracy"], "learning_rate": result["learning_rate"],
                "weight_decay": result["weight_decay"], "extracted": summary["extracted"]}

    # -- the whole job --

    def plan(self) -> tuple[list[Unit], dict[str, Any]]:
        args, units, context = self.args, [], {}
        if "md" in args.protocols:
            units += md_units(self.runs, self.md_sources(), args.md_learners)
            for learner in args.md_learners:  # refused now, not after the first units: a side, a model form
                if learner in ADAPTING_LEARNERS:
                    self.adapting(learner)
        if "vtab" in args.protocols:
            tasks = self.vtab_tasks()
            probe = transfer_namespace(args, self.framework.name, tasks, self.runs["vtab"])
            context["vtab_regimes"] = [(p.regime, probe.regime_seed if p.regime else 0) for p in data_points(probe)]
            units += vtab_units(self.runs["vtab"], tasks, probe.select == "all-tasks" and probe.mode != "protonet")
        if "cog" in args.protocols:
            ns, levels = self.cog_plan()
            context["cog"] = ns
            units += cog_units(self.runs["cog"], levels, ns.shots, ns.seeds)
        return units, context

    def finished(self, unit: Unit, held: Held, context: Mapping[str, Any]) -> bool:
        if unit.protocol == "md":
            preset, source, _ = unit.parts
            return not missing_episodes(held, self.source_names[(preset, source)], self.args.md_seed,
                                        self.args.episodes)
        if unit.protocol == "vtab":
            return vtab_keys(unit, context["vtab_regimes"]) <= held.vtab
        return unit.parts in held.cog

    def execute(self) -> dict[str, Any]:
        tqdm = _evaluate_extra()
        args = self.args
        units, context = self.plan()
        held = self.held()
        foreign = foreign_runs(held, self.fingerprint)
        if foreign:
            raise UsageError(f"argument --run: run {foreign[0]!r} holds results of another checkpoint (its "
                             f"configuration lacks sha256 {self.fingerprint[:16]}...); evaluate this checkpoint under "
                             "another --run")
        mixed = other_batch_norm(held, {u.run_id for u in units if u.protocol == "md"}, args.batch_norm)
        if mixed:
            raise UsageError(f"argument --batch-norm: run {mixed[0][0]!r} holds Meta-Dataset results embedded under "
                             f"--batch-norm {mixed[0][1]}, this job's is {args.batch_norm}; give that one or another "
                             "--run")
        settings = {u.run_id: self.md_settings(u.parts[0], u.parts[2]) for u in units if u.protocol == "md"}
        changed = other_settings(held, settings)
        if changed:
            run = changed[0]
            before, now = held[run].config.get("learner_settings") or {}, json.loads(json.dumps(settings[run]))
            differ = "; ".join(f"{key} {json.dumps(before.get(key))}, now {json.dumps(now.get(key))}"
                               for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key))
            raise UsageError(f"argument --md-learners: run {run!r} holds results of its learner under other settings "
                             f"({differ}); give those or another --run")
        pending = [u for u in units if not self.finished(u, held.get(u.run_id, Held()), context)]
        skipped = [u for u in units if u not in pending]
        # the job's first line once nothing is refused: the transfer and cog commands resolve the same
        # convention from the same flags, attributes and weights
        self.log(f"backbone {self.backbone.spec.describe()}; {self.backbone.preprocessing.describe()}; "
                 f"features cached in {self.args.feature_cache}")
        self.log(f"{len(units)} units ({len(skipped)} held by the server, {len(pending)} to run); checkpoint sha256 "
                 f"{self.fingerprint[:16]}, {self.framework.name}, runs {', '.join(sorted(set(u.run_id for u in units)))}")
        cog_backend = self.framework.cog_backend(context["cog"]) if any(u.protocol == "cog" for u in pending) else None
        if cog_backend is not None:
            self.same_weights(cog_backend.backbone, "cog")

        def vtab_ns(tasks: Sequence[str]) -> argparse.Namespace:
            return transfer_namespace(args, self.framework.name, tasks, self.runs["vtab"])

        done: list[dict[str, Any]] = [{"protocol": u.protocol, "run": u.run_id, "unit": u.label, "status": "held"}
                                      for u in skipped]
        with tqdm(total=len(units), initial=len(skipped), unit="unit", file=sys.stderr, dynamic_ncols=True,
                  desc="evaluate", disable=None) as bar:
            for unit in pending:
                if unit.protocol == "md":
                    result = self.run_md(unit, held.get(unit.run_id, Held()))
                elif unit.protocol == "vtab":
                    result = self.run_vtab(unit, vtab_ns)
                else:
                    assert cog_backend is not None
                    result = self.run_cog(unit, cog_backend)
                done.append({"protocol": unit.protocol, "run": unit.run_id, "unit": unit.label, "status": "ran",
                             "result": result})
                bar.update(1)
                bar.write(f"evaluate: {unit.label}: {_describe(result)}", file=sys.stderr)
        summary: dict[str, Any] = {"run": args.run, "framework": self.framework.name,
                                   "backbone": self.backbone.spec.target, "backbone_fingerprint": self.fingerprint,
                                   "preprocessing": self.backbone.preprocessing.as_config(),
                                   "precision": args.precision, "runs": sorted(set(u.run_id for u in units)), "units": done,
                                   "feature_cache": {"hits": self.cache.hits, "misses": self.cache.misses,
                                                     "recomputed": self.cache.recomputed}}
        if args.scratch_run and "vtab" in args.protocols:
            summary["calibrated"] = self.client.call("GetReport", _calibrated_request(
                self.runs["vtab"], args.scratch_run, args.max_run)).text
        return summary


def _evaluate_extra() -> Any:
    """tqdm's bar class, once the ``[evaluate]`` extra (scikit-learn, tqdm) is known installed."""
    try:
        import sklearn.linear_model  # noqa: F401  (the logreg learner; checked before any work)
        from tqdm import tqdm
    except ImportError as error:
        raise UsageError(f"evaluate needs the [evaluate] extra ({error.name} is missing): pip install "
                         "'sampler-server[evaluate]'") from None
    return tqdm


def _describe(result: Mapping[str, Any]) -> str:
    if "mean_accuracy" in result:
        mean = result["mean_accuracy"]
        return f"{result['episodes']} episodes" + (f", mean accuracy {mean:.2%}" if mean is not None else "")
    if "tasks" in result:
        return ", ".join(f"{task} test {accuracy:.2%}" for task, accuracy in result["tasks"].items())
    return f"test accuracy {result['accuracy']:.2%} (lr={result['learning_rate']:.4g}, wd={result['weight_decay']:.3g})"


def _held_request(run_ids: list[str]) -> Any:
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

    return pb.GetReportRequest(run_ids=run_ids, format="json", table=HELD_TABLE)


def _calibrated_request(run_id: str, scratch_run: str, max_run: str) -> Any:
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

    return pb.GetReportRequest(run_ids=[run_id], format="markdown", table="calibrated", scratch_run=scratch_run,
                               max_run=max_run)


def format_summary(summary: Mapping[str, Any]) -> str:
    ran = [u for u in summary["units"] if u["status"] == "ran"]
    lines = [f"run {summary['run']}: {summary['framework']} evaluate of {summary['backbone']} (sha256 "
             f"{summary['backbone_fingerprint'][:12]}): {len(ran)} units run, {len(summary['units']) - len(ran)} held "
             "already",
             f"  reported under: {', '.join(summary['runs'])}",
             f"  the card: sampler-server report --card --data DIR --run {summary['run']}"]
    if "calibrated" in summary:
        lines += ["", summary["calibrated"]]
    return "\n".join(lines)


def run_evaluate_main(framework_name: str, make: Callable[[argparse.Namespace], EvaluateFramework],
                      argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one evaluation; exit status 0 ok, 2 bad input, 3 server fault."""
    return run_command(f"python -m clients.{framework_name} evaluate",
                       lambda: parse_evaluate_args(framework_name, argv), make,
                       lambda part, client, log: EvaluateJob(part, client, log).execute(), format_summary)


__all__ = ["AdaptingEpisodes", "EvaluateFramework", "EvaluateJob", "Held", "Unit", "VtabReports", "cog_units",
           "foreign_runs", "format_summary", "md_units", "missing_episodes", "other_settings", "parse_held",
           "run_evaluate_main", "stable_vtab_config", "sub_runs", "vtab_keys", "vtab_units"]
