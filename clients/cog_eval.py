"""The ImageNet-CoG linear evaluation, framework-free: the part ``clients.torch.cog_eval`` and
``clients.tf.cog_eval`` share (levels checked with the server, features extracted once and
cached, the hyper-parameter search, the final fit, test, reports, summary, exit codes).
A framework supplies a ``CogBackend``: the user's backbone, and the linear layer's
training step and predictions.

The protocol (CoG paper, supplementary B; the reference's ``logreg.py`` defaults):
for each level asked (default: every level ListCogLevels gives, IN-1K first), the
backbone embeds the level's whole ``train`` split and its ``test`` split once, images
preprocessed by the server (shorter side to the backbone's input size, bicubic, centre
crop), then mapped as the backbone declares (``clients.backbone_contract``; a backbone
that declares nothing gets the reference's: divided by 255, ImageNet's mean and std).
The features are extracted in float32, as the reference's, or under bf16 autocast
(``--precision bf16``, torch only), cached on disk (``clients.cog_cache``, keyed by the
weights' sha256, the split's fingerprint, the preprocessing and the precision: a float32
run never reads bf16 features) and L2-normalised when read. The precision is in the run
configuration (``precision``): it defines the results.
For each N of ``--shots`` (``all`` = every train image) and each seed of ``--seeds``,
three subsets come from the server as record ids (GetCogSplit) and select rows of the
cached train features, as the reference draws them: val(seed), 20% of the full train
set held out first (whatever N); search(N, seed), N images per concept of the
remaining 80% (all of them for ``all``); train(N, seed), N images per concept of the
full train set. A linear layer (bias included) is trained by SGD with momentum 0.9
and weight decay, batches of ``--batch-size`` (1024; all rows when fewer) reshuffled
every epoch, the learning rate decayed by a cosine over ``--epochs`` (100) as the
reference steps it: set after each epoch to ``lr * (1 + cos(pi * e / epochs)) / 2``, so
epochs 0 and 1 use ``lr``. Each (learning rate, weight decay) of the search is trained
on search(N, seed) and scored top-1 on val(seed); the best (ties: the first in grid
order) is trained again on train(N, seed) and scored on the test split. One report
per (level, N, seed). Since val is held out of the full train set, every N (1
included) has validation images; a level whose concepts are too small to hold any out
(fewer than 2 train images) is refused with one line.

The search is a deterministic log-spaced grid, not Optuna's TPE sampler (the paper's 30
trials): the grid keeps ``clients`` installable with no further dependency, gives the
same choice on every machine, and covers the same ranges with the same budget by
default: ``--grid 6x5`` = 6 learning rates log-spaced over [0.1, 100] times 5 weight
decays log-spaced over [1e-12, 1e-4] (the reference's ``LR_INTV`` and ``WD_INTV``); a
grid of one point takes the range's geometric middle. Grid order: learning rate major.

Determinism: a fit's initial weights (drawn as ``torch.nn.Linear`` draws them, uniform
in +-1/sqrt(D)) and its per-epoch batch orders come from one legacy ``RandomState``
seeded by hashing (seed, level, N, phase): every grid point of a search sees the same
initialisation and batch order (common random numbers), so the choice measures the
hyper-parameters; both frameworks get the same draws. With deterministic kernels (each
framework switches them on for the CPU) two runs with the same arguments report the
same accuracies. A fit whose loss turns non-finite stops there, as the reference's
does; in the search it scores 0 (never preferred over one that trained).

Reports (protocol "cog"): key (run, level, N, seed); metrics ``accuracy`` (test top-1),
``val_accuracy``, ``learning_rate``, ``weight_decay``; ``examples`` = test images. The
run configuration leaves out what only selects work (``--levels``, ``--shots``,
``--seeds``) and where files live (the paths of ``--weights`` and of a model file; the
weights' sha256 is kept, ``backbone_sha256``), so one run may be completed over several
invocations.
"""

from __future__ import annotations

import abc
import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from clients.backbone_contract import LoadedBackbone
from clients.client import SamplerClient
from clients.cog_cache import CachedFeatures, FeatureCache, FeatureCacheError, SplitIds, feature_key
from clients.cog_protocol import LR_RANGE, MOMENTUM, RESIZE, WD_RANGE
from clients.errors import SamplerClientError
from clients.cog_streams import OpenedStream, Segment, SplitChain
from clients.reporting import run_config_json
from clients.trainer_args import COG_OPERATIONAL, parse_cog_args
from clients.trainer_shell import run_command
from clients.errors import UsageError
from clients.seeds import derive_seed
from sampler_common.protocols import COG
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


# ---- the pure parts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HParams:
    """One point of the search."""

    lr: float
    wd: float

    @property
    def label(self) -> str:
        return f"lr={self.lr:.6g},wd={self.wd:.6g}"


def log_points(lo: float, hi: float, count: int) -> tuple[float, ...]:
    """``count`` values log-spaced over [lo, hi], both ends included; one point: the geometric middle."""
    if count == 1:
        return (math.sqrt(lo * hi),)
    return tuple(float(lo * (hi / lo) ** (i / (count - 1))) for i in range(count))


def search_grid(lr_points: int, wd_points: int) -> list[HParams]:
    """The search's points in order: learning rate major, both ascending."""
    return [HParams(lr, wd) for lr in log_points(*LR_RANGE, lr_points) for wd in log_points(*WD_RANGE, wd_points)]


def cosine_lr(base: float, epoch: int, epochs: int) -> float:
    """Learning rate of ``epoch`` (from 0), as the reference steps its cosine: after epoch e
    it sets ``base * (1 + cos(pi * e / epochs)) / 2``, so epochs 0 and 1 both use ``base``."""
    return base if epoch == 0 else base * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / epochs))


def l2_normalise(features: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (at least 1e-12, as ``torch.nn.functional.normalize``), float32."""
    x = np.asarray(features, np.float32)
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.float32(1e-12))).astype(np.float32)


def choose(scores: Sequence[float], grid: Sequence[HParams]) -> HParams:
    """The best-scoring point; ties go to the first in grid order."""
    return grid[max(range(len(grid)), key=lambda i: (scores[i], -i))]


# ---- what a framework supplies --------------------------------------------------------------


class CogBackend(abc.ABC):
    """A framework's backbone (``LoadedBackbone``: frozen, inference mode; its fingerprint and
    preprocessing key the feature cache) and linear classifier."""

    name = "framework"

    def __init__(self, args: argparse.Namespace, backbone: LoadedBackbone) -> None:
        self.args, self.backbone = args, backbone

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Framework, versions, device, feature size: stored with the reports."""

    @abc.abstractmethod
    def extract(self, images: np.ndarray) -> np.ndarray:
        """Features float32 [B, D] of uint8 RGB images [B, S, S, 3], preprocessed as the backbone declares."""

    def extract_many(self, batches: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """``extract`` of each batch in order; a framework may run one batch ahead on its device."""
        for images in batches:
            yield self.extract(images)

    @abc.abstractmethod
    def classifier_data(self, features: np.ndarray, labels: np.ndarray) -> Any:
        """The (L2-normalised) features and labels placed where the classifier trains."""

    @abc.abstractmethod
    def reset(self, weight: np.ndarray, bias: np.ndarray, weight_decay: float) -> None:
        """A fresh linear layer (weight [C, D], bias [C]) and a fresh SGD (momentum 0.9, weight decay)."""

    @abc.abstractmethod
    def train_step(self, data: Any, indices: np.ndarray, lr: float) -> float:
        """One SGD step at ``lr`` on rows ``indices`` of ``data`` (mean cross-entropy); the loss."""

    @abc.abstractmethod
    def predict(self, data: Any) -> np.ndarray:
        """Predicted labels of every row of ``data``."""

    @abc.abstractmethod
    def weights_sha256(self) -> str:
        """sha256 (``determinism.weights_sha256``) of the linear classifier as trained last."""

    def classify(self, error: BaseException) -> tuple[int, str] | None:
        """(exit status, one line) for a framework error worth a clean exit, else None."""
        return None


@dataclass(frozen=True)
class FitOutcome:
    loss: float
    diverged: bool


def fit(backend: CogBackend, data: Any, count: int, dim: int, num_classes: int, hp: HParams, epochs: int,
        batch_size: int, seed: int) -> FitOutcome:
    """Train a fresh linear layer on ``count`` rows of ``data``: the init and the batch orders
    drawn from ``seed``, the reference's schedule; stops at a non-finite loss."""
    rng = np.random.RandomState(seed)
    bound = 1.0 / math.sqrt(dim)
    weight = rng.uniform(-bound, bound, (num_classes, dim)).astype(np.float32)
    bias = rng.uniform(-bound, bound, num_classes).astype(np.float32)
    backend.reset(weight, bias, hp.wd)
    step = min(batch_size, count)
    loss = float("nan")
    for epoch in range(epochs):
        order = rng.permutation(count)
        lr = cosine_lr(hp.lr, epoch, epochs)
        for start in range(0, count, step):
            loss = backend.train_step(data, order[start:start + step], lr)
            if not math.isfinite(loss):
                return FitOutcome(loss, True)
    return FitOutcome(loss, False)


def accuracy(backend: CogBackend, data: Any, labels: np.ndarray) -> float:
    predicted = np.asarray(backend.predict(data)).reshape(-1)
    return float(np.mean(predicted == labels)) if len(labels) else 0.0


# ---- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    """The search of one (level, N, seed): every point's val accuracy and the choice."""

    scores: tuple[float, ...]
    best: HParams
    fit_examples: int
    val_examples: int


SPLIT_NAMES = ("train", "test")  # a level's splits, in the order their features are extracted
AHEAD = 2  # splits whose streams are open and received while one is extracted (see ``splits_after``)


def extraction_order(levels: Iterable[str]) -> list[tuple[str, str]]:
    """(level, split) of every split a run extracts, in its order."""
    return [(level, split) for level in levels for split in SPLIT_NAMES]


def splits_after(order: Sequence[tuple[str, str]], current: tuple[str, str],
                 ahead: int = AHEAD) -> list[tuple[str, str]]:
    """The ``ahead`` splits extracted after ``current``, across levels: a stream's start waits
    for the server's first batch (a batch assembled before any is sent), so the streams of the
    next two open while one is extracted, the next level's train split among them while a
    level's short test split is. Served alone on one H200 (ResNet-50's 224 px raw store), the
    streams delivered 15,600-19,200 images/s with one split ahead and 20,400-21,500 with two."""
    at = list(order).index(current)
    return list(order[at + 1:at + 1 + ahead])


def _split_ids(message: Any, level: str, split: str) -> SplitIds:
    return SplitIds(level, split, str(message.fingerprint), np.asarray(message.record_ids, np.int64),
                    np.asarray(message.labels, np.int64))


class CogRun:
    """One evaluation run; ``execute`` returns the JSON-able summary."""

    def __init__(self, backend: CogBackend, client: SamplerClient, log: Callable[[str], None]) -> None:
        self.backend, self.client, self.log = backend, client, log
        self.args = args = backend.args
        self.grid = search_grid(*args.grid)
        self.cache = FeatureCache(args.feature_cache)
        self.fingerprint = backend.backbone.fingerprint
        self.splits: dict[tuple[str, str, int, int], SplitIds] = {}
        self.features: dict[str, CachedFeatures] = {}
        self.num_classes: dict[str, int] = {}
        # naver/cog's level and split files, paths on the server; passed with every CoG request when given
        files = {"levels_file": args.levels_file, "concepts_split_file": args.concepts_split_file}
        self.files = {name: path for name, path in files.items() if path}
        # the result fingerprint: every fitted classifier's weights, in the order fitted
        self.fits = hashlib.sha256()
        # streams opened before their split's extraction (``open_ahead``) and not in ``chain``, by
        # (level, split), in extraction order
        self.ahead: dict[tuple[str, str], Segment] = {}
        # the splits being extracted through one ``extract_many``, the next ones after this one
        self.chain: SplitChain | None = None

    # -- server-side facts --

    def levels(self) -> list[Any]:
        """The levels to evaluate, in the server's order; unknown names are one line, exit 2."""
        response = self.client.cog_levels_response(level_size=self.args.level_size,
                                                   min_images=self.args.min_images, **self.files)
        served, unavailable = list(response.levels), dict(response.unavailable)
        names = [summary.level for summary in served]
        if not self.args.levels:
            for name, reason in sorted(unavailable.items()):  # e.g. IN-1K without validation images: said, not hidden
                print(f"cog: level {name} left out: {reason}", file=sys.stderr, flush=True)
            if not served:
                raise UsageError("the server serves no ImageNet-CoG level (no imagenet21k or ILSVRC store)")
            return served
        for name in self.args.levels:
            if name in unavailable:
                raise UsageError(f"argument --levels: {unavailable[name]}")
            if name not in names:
                raise UsageError(f"argument --levels: got {name!r}, expected levels this server serves "
                                 f"({', '.join(names) or 'none'})")
        return [summary for summary in served if summary.level in self.args.levels]

    def split(self, level: str, split: str, shots: int = 0, seed: int = 0) -> SplitIds:
        key = (level, split, shots, seed)
        if key not in self.splits:
            message = self.client.cog_split(level, split, shots=shots, seed=seed, level_size=self.args.level_size,
                                            min_images=self.args.min_images, **self.files)
            self.splits[key] = _split_ids(message, level, split)
            self.num_classes[level] = int(message.num_classes)
        return self.splits[key]

    # -- features --

    def cache_fields(self, split: SplitIds) -> dict[str, Any]:
        return feature_key(self.fingerprint, split.fingerprint, self.backend.backbone.preprocessing.key(), RESIZE,
                           self.args.precision)

    def _stream(self, split: SplitIds, start: int) -> Iterator[Any]:
        args = self.args
        return self.client.stream_cog_batches(
            split.level, split.split, batch_size=args.extract_batch_size, start_index=start,
            image_size=args.image_size, level_size=args.level_size, min_images=args.min_images, **self.files)

    def open_ahead(self, level: str, split_name: str) -> None:
        """Open the stream of a split extracted later, unless its features are cached, so its
        first batches are on their way while this one is extracted (a stream's start waits for
        the server to prepare its first batch: on the bench's small levels, a quarter of the
        time served alone went there); it joins the running chain (``clients.cog_streams``)
        when it can, so its batches are staged and launched before this split's end."""
        split = self.split(level, split_name)
        fields = self.cache_fields(split)
        if (level, split_name) in self.ahead or (self.chain is not None and self.chain.holds(level, split_name)):
            return
        if not len(split.record_ids) or self.cache.path(fields).exists():
            return
        start = self.cache.resume_point(fields, split, self.args.extract_batch_size)  # an interrupted one's next
        batches = self._batch_count(split)
        if start >= batches:
            return
        segment = Segment(split, start, batches - start, OpenedStream(self._stream(split, start)))
        if self.chain is None or not self.chain.add(segment):
            self.ahead[(level, split_name)] = segment

    def close_ahead(self) -> None:
        """Cancel the streams opened ahead and not used, and the chain (a run that ended early)."""
        self._close_chain()
        for segment in self.ahead.values():
            segment.close()
        self.ahead.clear()

    def _close_chain(self) -> None:
        if self.chain is not None:
            self.chain.close()
            self.chain = None

    def _batch_count(self, split: SplitIds) -> int:
        return -(-len(split.record_ids) // self.args.extract_batch_size)

    def _chain_at(self, split: SplitIds, start: int, batches: int) -> SplitChain:
        """The chain whose next segment is ``split`` from ``start``: the running one, else a new
        one starting there, the streams opened ahead joining it in their order."""
        if self.chain is not None and self.chain.next_is(split, start):
            return self.chain
        self._close_chain()
        opened = self.ahead.pop((split.level, split.split), None)
        if opened is not None and opened.start != start:  # not this extraction's batches
            opened.close()
            opened = None
        first = opened or Segment(split, start, batches - start, self._stream(split, start))
        self.chain = chain = SplitChain(self.backend.extract_many, first)
        for key, segment in list(self.ahead.items()):
            if chain.add(segment):
                del self.ahead[key]
        return chain

    def _batches(self, split: SplitIds) -> Callable[[int], Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]]:
        args = self.args

        def batches(start: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
            total = self._batch_count(split)
            if start >= total:
                return
            chain = self._chain_at(split, start, total)
            try:
                for index, record_ids, labels, embedded in chain.take(split, start):
                    features = np.asarray(embedded, np.float32)
                    if features.ndim != 2 or features.shape[0] != len(record_ids):
                        raise UsageError(f"argument --backbone: it maps {len(record_ids)} images to an output of "
                                         f"shape {tuple(features.shape)}, expected [{len(record_ids)}, D] features")
                    if not np.all(np.isfinite(features)):
                        raise UsageError(f"argument --backbone: its features of {split.level}/{split.split} batch "
                                         f"{index} are not all finite")
                    if (index + 1) % args.log_every == 0:
                        self.log(f"{split.level} {split.split}: embedded batch {index + 1}/{total}")
                    yield index, record_ids, labels, features
            except BaseException:  # an error, or the cache refused a batch: what is on its way is dropped
                self._close_chain()
                raise
            if chain.broken:
                self._close_chain()

        return batches

    def level_features(self, level: str, split_name: str,
                       then: Sequence[tuple[str, str]] = ()) -> CachedFeatures:
        """The features of ``level``/``split_name``, from the cache or extracted; ``then``: the
        (level, split)s extracted next, in order, whose streams open now (``open_ahead``)."""
        split = self.split(level, split_name)
        if not len(split.record_ids):
            raise SamplerClientError(f"GetCogSplit {level}/{split_name}: the server lists an empty split")
        for upcoming in then:
            self.open_ahead(*upcoming)
        found = self.cache.get_or_extract(self.cache_fields(split), split, self.args.extract_batch_size,
                                          self._batches(split), self.log)
        self._unused(level, split_name)
        self.log(f"{level} {split_name}: {len(split.record_ids)} images, features "
                 f"{'extracted' if found.extracted else 'from the cache'} ({found.path})")
        return found

    def _unused(self, level: str, split_name: str) -> None:
        """Drop the stream opened ahead for a split whose features came from the cache after
        all (another run finished them meanwhile)."""
        segment = self.ahead.pop((level, split_name), None)
        if segment is not None:
            segment.close()
        if self.chain is not None and self.chain.holds(level, split_name):
            self._close_chain()

    # -- classifiers --

    def _rows(self, level: str, split: str, shots: int, seed: int) -> np.ndarray:
        """Rows of the cached train features holding ``split`` (train, search or val) of (N, seed)."""
        listed = self.split(level, split, shots, seed)
        try:  # the cached ids equal the server's full train split: a subset outside it is the server's fault
            return self.features[f"{level}/train"].rows(listed.record_ids, listed.labels,
                                                        f"{split} split (N={shots or 'all'}, seed {seed})")
        except FeatureCacheError as error:
            raise SamplerClientError(f"GetCogSplit {level}: {error}") from None

    def _data(self, level: str, rows: np.ndarray) -> tuple[Any, np.ndarray, int]:
        """(classifier data, labels, feature size) of rows of the level's train features, L2-normalised."""
        features = self.features[f"{level}/train"]
        rows = np.sort(rows)
        x = l2_normalise(features.features[rows])
        labels = features.labels[rows]
        return self.backend.classifier_data(x, labels), labels, int(x.shape[1])

    def _fit(self, level: str, data: Any, count: int, dim: int, hp: HParams, seed: int) -> FitOutcome:
        outcome = fit(self.backend, data, count, dim, self.num_classes[level], hp, self.args.epochs,
                      self.args.batch_size, seed)
        self.fits.update(self.backend.weights_sha256().encode())
        return outcome

    def search(self, level: str, shots: int, seed: int) -> Search:
        """Every grid point trained on search(N, seed) and scored on val(seed); the choice."""
        search_rows = self._rows(level, "search", shots, seed)
        val_rows = self._rows(level, "val", 0, seed)
        if not len(val_rows) or not len(search_rows):
            raise UsageError(f"level {level}, seed {seed}: the {'val' if not len(val_rows) else 'search'} split is "
                             "empty (its concepts have too few train images to hold 20% out; try a larger "
                             "--min-images)")
        if np.intersect1d(search_rows, val_rows).size:
            raise SamplerClientError(f"GetCogSplit {level}: search (N={shots or 'all'}, seed {seed}) holds images of "
                                     f"val (seed {seed})")
        fit_data, _, dim = self._data(level, search_rows)
        val_data, val_labels, _ = self._data(level, val_rows)
        fit_seed = derive_seed(seed, "cog", level, shots, "search")
        scores = []
        for hp in self.grid:
            outcome = self._fit(level, fit_data, len(search_rows), dim, hp, fit_seed)
            # a diverged trial keeps its measured accuracy: naver/cog's logreg.py validates the
            # epoch that hit a non-finite loss, stops, and returns that last top-1
            score = accuracy(self.backend, val_data, val_labels)
            scores.append(score)
            self.log(f"{level} N={shots or 'all'} seed {seed} {hp.label}: val accuracy {score:.2%}"
                     f"{' (diverged)' if outcome.diverged else ''}")
        return Search(tuple(scores), choose(scores, self.grid), len(search_rows), len(val_rows))

    def evaluate(self, level: str, shots: int, seed: int, test: Any) -> dict[str, Any]:
        search = self.search(level, shots, seed)
        train_rows = self._rows(level, "train", shots, seed)
        data, _, dim = self._data(level, train_rows)
        final_seed = derive_seed(seed, "cog", level, shots, "final")
        outcome = self._fit(level, data, len(train_rows), dim, search.best, final_seed)
        test_accuracy = accuracy(self.backend, test, self.features[f"{level}/test"].labels)
        return {"shots": shots, "seed": seed, "accuracy": test_accuracy, "val_accuracy": max(search.scores),
                "learning_rate": search.best.lr, "weight_decay": search.best.wd,
                "train_examples": int(len(train_rows)), "search_examples": search.fit_examples,
                "val_examples": search.val_examples, "test_examples": int(len(self.features[f"{level}/test"].labels)),
                "diverged": outcome.diverged,
                "search": [{"lr": hp.lr, "wd": hp.wd, "val_accuracy": s} for hp, s in zip(self.grid, search.scores)]}

    def report(self, level: str, result: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        metrics = {"accuracy": result["accuracy"], "val_accuracy": result["val_accuracy"],
                   "learning_rate": result["learning_rate"], "weight_decay": result["weight_decay"]}
        report = pb.MetricReport(run_id=self.args.run, protocol=COG, cog_level=level, shots=result["shots"],
                                 seed=result["seed"], examples=result["test_examples"], metrics=metrics)
        self.client.report([report], run_config_json=run_config_json(config))

    def backbone_name(self) -> str:
        """The backbone as the configuration names it: a file's path is where it lives (its sha256 says what it is)."""
        spec = self.backend.backbone.spec
        return "file" if spec.kind == "file" else spec.target

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {k: v for k, v in sorted(vars(self.args).items()) if k not in COG_OPERATIONAL}
        config.update(self.backend.describe())
        config.update({"protocol": COG, "backbone": self.backbone_name(), "backbone_sha256": self.fingerprint,
                       "preprocessing": self.backend.backbone.preprocessing.as_config(),
                       "search": "log grid, learning rate major",
                       "grid": [asdict(hp) for hp in self.grid], "momentum": MOMENTUM, "resize": RESIZE})
        return json.loads(json.dumps(config))

    def execute(self) -> dict[str, Any]:
        try:
            return self._execute()
        finally:
            self.close_ahead()

    def _execute(self) -> dict[str, Any]:
        args = self.args
        config = self.config()
        levels: dict[str, Any] = {}
        extracted = 0
        served = self.levels()  # a level refused: one line, before any other
        backbone = self.backend.backbone
        self.log(f"backbone {backbone.spec.describe()}; {backbone.preprocessing.describe()}; "
                 f"features cached in {self.args.feature_cache}")
        order = extraction_order(summary.level for summary in served)
        for summary in served:
            level = summary.level
            for split_name in SPLIT_NAMES:  # the next splits' streams open while this one is extracted
                self.features[f"{level}/{split_name}"] = found = self.level_features(
                    level, split_name, splits_after(order, (level, split_name)))
                extracted += found.extracted
            test = self.features[f"{level}/test"]
            test_data = self.backend.classifier_data(l2_normalise(test.features), test.labels)
            results = []
            for seed in args.seeds:
                for shots in args.shots:
                    result = self.evaluate(level, shots, seed, test_data)
                    self.report(level, result, config)
                    results.append(result)
                    self.log(f"{level} N={shots or 'all'} seed {seed}: lr={result['learning_rate']:.6g} "
                             f"wd={result['weight_decay']:.6g}, val {result['val_accuracy']:.2%}, "
                             f"test accuracy {result['accuracy']:.2%}")
            levels[level] = {"num_classes": self.num_classes[level],
                             "train_size": len(self.features[f"{level}/train"].labels),
                             "test_size": len(test.labels), "feature_dim": int(test.features.shape[1]),
                             "cache": {s: str(self.features[f"{level}/{s}"].path) for s in ("train", "test")},
                             "extracted": {s: self.features[f"{level}/{s}"].extracted for s in ("train", "test")},
                             "results": results}
            # one level's ids and features held at a time (IN-1K's train split alone is 1.28 M rows)
            self.splits = {key: value for key, value in self.splits.items() if key[0] != level}
            del self.features[f"{level}/train"], self.features[f"{level}/test"], test, test_data
        return {"run": args.run, "config": config, "levels": levels, "extracted": extracted,
                "result_sha256": self.fits.hexdigest()}


def format_summary(summary: Mapping[str, Any]) -> str:
    config = summary["config"]
    lines = [f"run {summary['run']}: {config.get('framework', '?')} ImageNet-CoG linear evaluation, backbone "
             f"{config.get('backbone', '?')} (sha256 {config.get('backbone_sha256', '?')[:12]}), "
             f"{summary['extracted']} images embedded"]
    for level, entry in summary["levels"].items():
        for result in entry["results"]:
            lines.append(f"  {level} N={result['shots'] or 'all'} seed {result['seed']}: "
                         f"lr={result['learning_rate']:.4g} wd={result['weight_decay']:.3g} "
                         f"test {result['accuracy']:.2%} ({result['test_examples']} images)")
    return "\n".join(lines)


def run_cog_main(framework_name: str, make: Callable[[argparse.Namespace], CogBackend],
                 argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one CoG evaluation; exit status 0 ok, 2 bad input, 3 server fault."""
    return run_command(f"python -m clients.{framework_name} cog", lambda: parse_cog_args(framework_name, argv), make,
                       lambda part, client, log: CogRun(part, client, log).execute(), format_summary)


__all__ = ["CogBackend", "CogRun", "HParams", "Search", "accuracy", "choose", "cosine_lr", "fit",
           "l2_normalise", "log_points", "run_cog_main", "search_grid"]

