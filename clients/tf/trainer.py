"""The TensorFlow trainer: Prototypical Networks or MD's inference-only baseline,
trained on data from a sampler server, evaluated on test episodes one source at a
time, every evaluation episode reported back to the server.

Guarantees:

- Resume is exact. Training items are a pure function of (request, seed, index) on
  the server, and a checkpoint holds the model, the optimizer and the next training
  index, so a resumed run sees the same sequence an unbroken run would have seen.
  A checkpoint also records the arguments that define the model and that sequence;
  resuming with different ones is refused (exit 2) rather than silently mixed.
- Reports are repeatable. Op determinism is on and weights are seeded from --seed,
  so evaluating the same checkpoint again gives the same metrics, which the server
  accepts as duplicates of what it holds (it rejects a different result for an
  episode a run already reported).
- Faults end cleanly. A server that stays unreachable, an unknown source or a
  request the server refuses ends in one line on stderr naming the server and the
  problem, exit 3 (after saving a checkpoint of the progress made). Bad local input
  ends in one line and exit 2.

Data comes from ``clients.core.SamplerClient`` directly rather than through
``clients.tf.episode_dataset``: episodes vary in shape (handled here by
``tf.function`` input signatures with unknown dimensions), and inside ``tf.data``
a client error would surface as an opaque ``UnknownError`` instead of the server's
message.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tensorflow as tf

from clients.core import EpisodeArrays, EpisodeSpec, RetryPolicy, SamplerClient, SamplerClientError
from clients.tf import models
from clients.trainer_args import UnknownSource, eval_sources, parse_args, resolve_store, run_config, train_sources
from sampler_server.wire.gen.sampler.v1 import sampler_pb2 as pb

keras = tf.keras
EXIT_BAD_INPUT = 2
EXIT_SERVER = 3
PROTOCOL = "md-episode"
# The arguments that fix the model and the training sequence: a checkpoint resumes only under the same values.
RESUME_KEYS = ("model", "backbone", "image_size", "sources", "preset", "seed", "ways", "shots", "query", "batch_size")
EVAL_KEYS = ("framework", "model", "backbone", "image_size")  # what --eval-only must match
EVAL_CHUNK = 256  # images embedded per call at evaluation (bounds memory for 500-image support sets)


class TrainerError(RuntimeError):
    """Bad local input (device, checkpoint directory): one line, exit 2."""


def log(message: str) -> None:
    print(f"clients.tf: {message}", file=sys.stderr, flush=True)


# ---- set-up ---------------------------------------------------------------------------


def select_device(requested: str) -> str:
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised (an earlier run in this process)
            pass
    if requested == "cpu":
        return "/CPU:0"
    if requested in ("cuda", "gpu"):
        if not gpus:
            raise TrainerError(f"--device {requested}: TensorFlow sees no GPU (tensorflow-cpu, or no driver)")
        return "/GPU:0"
    return "/GPU:0" if gpus else "/CPU:0"


def make_client(args: argparse.Namespace, prefetch: int = 2) -> SamplerClient:
    return SamplerClient(args.server, retry=RetryPolicy(max_attempts=args.retries), prefetch=prefetch,
                         connect_timeout=args.connect_timeout)


def resolve_stores(names: Sequence[str], served: Sequence[pb.SourceSummary], image_size: int,
                   what: str) -> tuple[str, ...]:
    """Store names for source names (``trainer_args.resolve_store``: a store name stands for
    itself, a source kind, as presets list them, for its store). Two stores of one source
    kind are refused: the server keys episodes and reports by source kind."""
    kinds = {summary.name: summary.source for summary in served}
    stores: list[str] = []
    for name in names:
        try:
            store = resolve_store(name, served, image_size)
        except UnknownSource as error:
            raise SamplerClientError(f"{what}: {error}", grpc.StatusCode.NOT_FOUND) from None
        twin = next((other for other in stores if kinds[other] == kinds[store]), None)
        if twin is not None:
            raise TrainerError(f"{what}: {twin!r} and {store!r} are both stores of source {kinds[store]!r}; "
                               "name one store per source")
        stores.append(store)
    return tuple(stores)


def training_spec(args: argparse.Namespace, stores: Sequence[str]) -> EpisodeSpec:
    return EpisodeSpec(
        sources=() if args.preset else tuple(stores), preset=args.preset or "", split="train", seed=args.seed,
        image_size=args.image_size, ways=args.ways, shots=args.shots, query=args.query,
    )


def baseline_classes(args: argparse.Namespace, stores: Sequence[str]) -> list[int]:
    """Train classes of each store, as the batch stream counts them (one 1-image batch each)."""
    counts = []
    with make_client(args) as client:
        for store in stores:
            stream = client.batches(store, "train", 1, seed=args.seed, count=1, image_size=args.image_size)
            try:
                counts.append(int(next(stream).num_classes))
            finally:
                stream.close()  # type: ignore[attr-defined]
    return counts


# ---- model, optimizer and checkpoint -----------------------------------------------------


@dataclass
class Learner:
    backbone: keras.Model
    head: keras.Model | None
    optimizer: keras.optimizers.Optimizer
    next_index: tf.Variable
    checkpoint: tf.train.Checkpoint
    manager: tf.train.CheckpointManager | None
    restored_from: str = ""

    @property
    def trainable(self) -> list[tf.Variable]:
        return list(self.backbone.trainable_variables) + (list(self.head.trainable_variables) if self.head else [])

    def save(self) -> None:
        if self.manager is not None:
            self.manager.save(checkpoint_number=int(self.next_index.numpy()))


def resume_config(args: argparse.Namespace) -> str:
    return json.dumps({"framework": "tf", **{key: getattr(args, key) for key in RESUME_KEYS}}, sort_keys=True)


def build_learner(args: argparse.Namespace, num_classes: int) -> Learner:
    tf.keras.utils.set_random_seed(args.seed)
    backbone = models.build_backbone(args.backbone, args.image_size)
    training = not args.eval_only  # evaluation restores the embedding only (no head, no optimizer)
    head = models.build_head(num_classes, backbone.output_shape[-1]) if args.model == "baseline" and training else None
    optimizer = keras.optimizers.Adam(learning_rate=args.lr)
    next_index = tf.Variable(0, dtype=tf.int64, trainable=False, name="next_index")
    config = tf.Variable(resume_config(args), dtype=tf.string, trainable=False, name="config")
    parts: dict[str, Any] = {"backbone": backbone, "next_index": next_index, "config": config}
    if training:
        parts["optimizer"] = optimizer
    if head is not None:
        parts["head"] = head
    checkpoint = tf.train.Checkpoint(**parts)
    learner = Learner(backbone, head, optimizer, next_index, checkpoint, None)
    if training:
        optimizer.build(learner.trainable)  # slots exist before a restore fills them
    if args.checkpoint_dir is None:
        return learner
    learner.manager = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3)
    latest = learner.manager.latest_checkpoint
    if latest is None:
        if args.eval_only:
            raise TrainerError(f"--eval-only: no checkpoint in {args.checkpoint_dir}")
        return learner
    _check_resumable(latest, args)
    try:
        status = learner.checkpoint.restore(latest).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise TrainerError(f"checkpoint {latest} does not fit this model: {error}") from None
    if args.eval_only:
        status.expect_partial()
    learner.restored_from = latest
    return learner


def _check_resumable(path: str, args: argparse.Namespace) -> None:
    try:
        stored = json.loads(tf.train.load_checkpoint(path).get_tensor("config/.ATTRIBUTES/VARIABLE_VALUE").decode())
    except (tf.errors.OpError, ValueError) as error:
        raise TrainerError(f"checkpoint {path} is not one of this trainer's ({error})") from None
    wanted = json.loads(resume_config(args))
    keys = EVAL_KEYS if args.eval_only else tuple(wanted)
    differences = [f"--{key.replace('_', '-')} {stored.get(key)!r} there, {wanted[key]!r} here"
                   for key in keys if stored.get(key) != wanted[key]]
    if differences:
        raise TrainerError(f"checkpoint {path} was made with other settings ({'; '.join(differences)}); "
                           "use another --checkpoint-dir")


# ---- compiled steps --------------------------------------------------------------------------


def _accuracy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32))


def protonet_step(learner: Learner, image_size: int) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
    images = tf.TensorSpec((None, image_size, image_size, 3), tf.uint8)
    labels = tf.TensorSpec((None,), tf.int64)

    @tf.function(input_signature=[images, labels, images, labels, tf.TensorSpec((), tf.int32)])
    def step(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, query_labels: tf.Tensor,
             ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        count = tf.shape(support)[0]
        with tf.GradientTape() as tape:
            embedded = learner.backbone(models.to_unit_range(tf.concat([support, query], 0)), training=True)
            logits = models.prototype_logits(embedded[:count], support_labels, embedded[count:], ways)
            loss = models.episode_loss(logits, query_labels)
        variables = learner.trainable
        learner.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss, _accuracy(logits, query_labels)

    return step


def baseline_step(learner: Learner, image_size: int) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
    assert learner.head is not None
    head = learner.head
    classes = int(head.output_shape[-1])

    @tf.function(input_signature=[tf.TensorSpec((None, image_size, image_size, 3), tf.uint8),
                                  tf.TensorSpec((None,), tf.int64)])
    def step(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            logits = head(learner.backbone(models.to_unit_range(images), training=True), training=True)
            loss = models.episode_loss(logits, labels, classes)
        variables = learner.trainable
        learner.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss, _accuracy(logits, labels)

    return step


# ---- training ---------------------------------------------------------------------------------


@dataclass
class TrainStats:
    unit: str
    start_index: int
    next_index: int
    seconds: float = 0.0
    data_wait_seconds: float = 0.0
    items: int = 0
    losses: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "unit": self.unit, "start_index": self.start_index, "next_index": self.next_index, "items": self.items,
            "seconds": round(self.seconds, 3),
            "per_s": round(self.items / self.seconds, 3) if self.seconds else 0.0,
            "data_wait_fraction": round(self.data_wait_seconds / self.seconds, 4) if self.seconds else 0.0,
            "final_loss": round(float(np.mean(self.losses[-20:])), 4) if self.losses else None,
        }


def train_loop(args: argparse.Namespace, learner: Learner, items: Iterator[tuple[int, Any]],
               step: Callable[[Any], tuple[tf.Tensor, tf.Tensor]], target: int, unit: str) -> TrainStats:
    """Run ``step`` on items next_index .. target - 1; time the wait for each item
    against the whole step; checkpoint every --checkpoint-every items, on the way out too."""
    start = int(learner.next_index.numpy())
    stats = TrainStats(unit, start, start)
    saved = start
    accuracies: list[float] = []
    try:
        for position in range(start, target):
            began = time.perf_counter()
            index, item = next(items)
            fetched = time.perf_counter()
            if index != position:
                raise SamplerClientError(f"got {unit[:-1]} {index}, expected {position}")
            loss, accuracy = step(item)
            stats.losses.append(float(loss))  # float() waits for the step to finish
            accuracies.append(float(accuracy))
            finished = time.perf_counter()
            stats.data_wait_seconds += fetched - began
            stats.seconds += finished - began
            stats.items += 1
            learner.next_index.assign(position + 1)
            stats.next_index = position + 1
            if stats.next_index % args.checkpoint_every == 0:
                learner.save()
                saved = stats.next_index
            if stats.next_index % args.log_every == 0 or stats.next_index == target:
                window = slice(-args.log_every, None)
                log(f"train {unit} {stats.next_index}/{target}: loss {np.mean(stats.losses[window]):.4f}, "
                    f"accuracy {np.mean(accuracies[window]):.3f}; {stats.items / stats.seconds:.2f} {unit}/s, "
                    f"data wait {100 * stats.data_wait_seconds / stats.seconds:.1f}%")
    finally:
        if stats.next_index != saved:
            learner.save()
    return stats


def episode_items(args: argparse.Namespace, spec: EpisodeSpec, start: int, count: int) -> Iterator[tuple[int, Any]]:
    """Training episodes start .. start + count - 1 as (index, step arguments)."""
    with make_client(args, prefetch=4) as client:
        stream = client.episodes(spec, start, count)
        try:
            for episode in stream:
                yield episode.index, (episode.support_images, episode.support_labels, episode.query_images,
                                      episode.query_labels, np.int32(episode.ways))
        finally:
            stream.close()  # type: ignore[attr-defined]


def _before(limit: int, residue: int, period: int) -> int:
    """How many t in [0, limit) have t % period == residue."""
    return max(0, -(-(limit - residue) // period))


def round_robin_batches(args: argparse.Namespace, stores: Sequence[str], classes: Sequence[int],
                        start: int, target: int) -> Iterator[tuple[int, Any]]:
    """Step t takes batch t // S of store t % S (S stores), its labels offset by the
    classes of the stores before it, so one head spans the union of the train classes."""
    period = len(stores)
    offsets = np.cumsum([0, *classes[:-1]])
    clients = [make_client(args, prefetch=2) for _ in stores]
    streams: list[Iterator[Any] | None] = []
    for residue, (client, store) in enumerate(zip(clients, stores, strict=True)):
        first = _before(start, residue, period)
        count = _before(target, residue, period) - first
        streams.append(client.batches(store, "train", args.batch_size, seed=args.seed, start=first, count=count,
                                      image_size=args.image_size) if count > 0 else None)
    try:
        for position in range(start, target):
            residue = position % period
            stream = streams[residue]
            assert stream is not None
            batch = next(stream)
            if batch.index != position // period or batch.num_classes != classes[residue]:
                raise SamplerClientError(f"{stores[residue]}: batch {batch.index} with {batch.num_classes} classes, "
                                         f"expected batch {position // period} with {classes[residue]}")
            yield position, (batch.images, batch.labels + offsets[residue])
    finally:
        for stream in streams:
            if stream is not None:
                stream.close()  # type: ignore[attr-defined]
        for client in clients:
            client.close()


# ---- evaluation -------------------------------------------------------------------------------


class Evaluator:
    """Prototype classification of one episode with the frozen embedding (inference mode)."""

    def __init__(self, backbone: keras.Model, image_size: int) -> None:
        images = tf.TensorSpec((None, image_size, image_size, 3), tf.uint8)
        features = tf.TensorSpec((None, None), tf.float32)
        labels = tf.TensorSpec((None,), tf.int64)

        @tf.function(input_signature=[images])
        def embed(batch: tf.Tensor) -> tf.Tensor:
            return backbone(models.to_unit_range(batch), training=False)

        @tf.function(input_signature=[features, labels, features, labels, tf.TensorSpec((), tf.int32)])
        def score(support: tf.Tensor, support_labels: tf.Tensor, query: tf.Tensor, query_labels: tf.Tensor,
                  ways: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            logits = models.prototype_logits(support, support_labels, query, ways)
            return models.episode_loss(logits, query_labels), _accuracy(logits, query_labels), tf.argmax(logits, 1)

        self._embed = embed
        self._score = score

    def embed(self, images: np.ndarray) -> tf.Tensor:
        return tf.concat([self._embed(images[i:i + EVAL_CHUNK]) for i in range(0, len(images), EVAL_CHUNK)], 0)

    def __call__(self, episode: EpisodeArrays) -> tuple[float, float, list[int]]:
        loss, accuracy, predicted = self._score(
            self.embed(episode.support_images), episode.support_labels, self.embed(episode.query_images),
            episode.query_labels, np.int32(episode.ways),
        )
        return float(loss), float(accuracy), [int(p) for p in predicted.numpy()]


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, float("nan")
    return mean, 1.96 * float(np.std(values, ddof=1)) / math.sqrt(len(values))


def evaluate(args: argparse.Namespace, evaluator: Evaluator, stores: Sequence[str], config_json: str) -> dict[str, Any]:
    """Evaluate and report --eval-episodes episodes of each store, one store at a time."""
    results: dict[str, Any] = {}
    with make_client(args, prefetch=4) as client, make_client(args) as reporter:
        for store in stores:
            spec = EpisodeSpec(sources=(store,), split=args.eval_split, seed=args.eval_seed, image_size=args.image_size)
            request = spec.to_request()
            accuracies: list[float] = []
            losses: list[float] = []
            pending: list[pb.MetricReport] = []
            stored = duplicates = 0
            began = time.perf_counter()
            for episode in client.episodes(spec, 0, args.eval_episodes):
                loss, accuracy, predicted = evaluator(episode)
                accuracies.append(accuracy)
                losses.append(loss)
                pending.append(pb.MetricReport(
                    run_id=args.run, protocol=PROTOCOL, source=episode.source, split=request.split,
                    seed=args.eval_seed, index=episode.index, fingerprint=episode.fingerprint,
                    metrics={"accuracy": accuracy, "loss": loss}, request=request, predicted_labels=predicted,
                ))
                if len(pending) >= args.report_batch or len(accuracies) == args.eval_episodes:
                    answer = reporter.report(pending, run_config_json=config_json)
                    stored, duplicates = stored + answer.stored, duplicates + answer.duplicates
                    pending = []
            seconds = time.perf_counter() - began
            mean, ci95 = mean_ci95(accuracies)
            results[store] = {
                "split": args.eval_split, "episodes": len(accuracies), "mean_accuracy": round(mean, 6),
                "ci95": round(ci95, 6) if math.isfinite(ci95) else None, "mean_loss": round(float(np.mean(losses)), 6), "stored": stored,
                "duplicates": duplicates, "episodes_per_s": round(len(accuracies) / seconds, 3) if seconds else 0.0,
            }
            log(f"eval {store} ({args.eval_split}): accuracy {100 * mean:.2f}% ± {100 * ci95:.2f} over "
                f"{len(accuracies)} episodes, loss {np.mean(losses):.4f}; reported {stored} new, {duplicates} again")
    return results


# ---- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train (unless --eval-only), evaluate, report; returns the run summary."""
    tf.config.experimental.enable_op_determinism()
    device = select_device(args.device)
    with make_client(args) as client:
        served = client.list_sources()
    train_what = f"--preset {args.preset} (train)" if args.preset else "--sources"
    eval_what = ("--eval-sources" if args.eval_sources else
                 f"--preset {args.preset} ({args.eval_split})" if args.preset else "--sources")
    # --eval-only needs no training data: only the embedding is restored.
    train_stores = () if args.eval_only else resolve_stores(train_sources(args), served, args.image_size, train_what)
    eval_stores = resolve_stores(eval_sources(args), served, args.image_size, eval_what) if args.eval_episodes else ()
    classes = baseline_classes(args, train_stores) if args.model == "baseline" and not args.eval_only else []
    summary: dict[str, Any] = {"run": args.run, "framework": "tf", "model": args.model, "backbone": args.backbone,
                               "device": device, "train_stores": list(train_stores), "eval_stores": list(eval_stores)}
    with tf.device(device):
        learner = build_learner(args, sum(classes))
        parameters = models.parameter_count(learner.backbone, *([learner.head] if learner.head else []))
        summary.update(parameters=parameters, resumed_from=learner.restored_from or None)
        log(f"run {args.run}: {args.model} on {args.backbone} ({parameters} parameters), {device}, server "
            f"{args.server}" + (f", {'evaluating' if args.eval_only else 'resuming'} {learner.restored_from}"
                                if learner.restored_from else ""))
        if not args.eval_only:
            summary["train"] = _train(args, learner, train_stores, classes).summary()
        if args.eval_episodes:
            extra = {"framework": "tf", "tensorflow_version": tf.__version__, "keras_version": keras.__version__,
                     "device": device, "parameter_count": parameters, "train_stores": list(train_stores),
                     "eval_stores": list(eval_stores), "baseline_classes": classes,
                     "trained_to_index": int(learner.next_index.numpy())}
            config_json = json.dumps(run_config(args, extra), sort_keys=True)
            summary["eval"] = evaluate(args, Evaluator(learner.backbone, args.image_size), eval_stores, config_json)
    summary["next_index"] = int(learner.next_index.numpy())
    return summary


def _train(args: argparse.Namespace, learner: Learner, stores: Sequence[str], classes: Sequence[int]) -> TrainStats:
    start = int(learner.next_index.numpy())
    target = args.train_episodes if args.model == "protonet" else args.train_steps
    unit = "episodes" if args.model == "protonet" else "steps"
    if start >= target:
        log(f"training already at {unit[:-1]} {start} of {target}; nothing to train")
        return TrainStats(unit, start, start)
    if args.model == "protonet":
        step = protonet_step(learner, args.image_size)
        items = episode_items(args, training_spec(args, stores), start, target - start)
    else:
        step = baseline_step(learner, args.image_size)
        items = round_robin_batches(args, stores, classes, start, target)
    try:
        return train_loop(args, learner, items, lambda item: step(*item), target, unit)
    finally:
        items.close()  # type: ignore[attr-defined]


def print_summary(summary: dict[str, Any]) -> None:
    train = summary.get("train")
    if train:
        print(f"train: {train['unit']} {train['start_index']}..{train['next_index']} in {train['seconds']:.1f} s, "
              f"{train['per_s']:.2f} {train['unit']}/s, data wait {100 * train['data_wait_fraction']:.1f}%")
    for store, result in summary.get("eval", {}).items():
        print(f"eval {store} ({result['split']}): accuracy {100 * result['mean_accuracy']:.2f}% "
              f"± {100 * (result['ci95'] or 0.0):.2f} over {result['episodes']} episodes")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input, 3 server fault)."""
    try:
        args = parse_args("tf", argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else EXIT_BAD_INPUT
    try:
        summary = run(args)
    except SamplerClientError as error:
        log(f"sampler server {args.server}: {' '.join(str(error).split())}")
        return EXIT_SERVER
    except TrainerError as error:
        log(" ".join(str(error).split()))
        return EXIT_BAD_INPUT
    except tf.errors.ResourceExhaustedError as error:
        log(f"out of memory on {args.device}: {' '.join(error.message.split())[:300]} "
            "(try a smaller --image-size, fixed --ways/--shots/--query, or --batch-size)")
        return 1
    except KeyboardInterrupt:
        log("interrupted" + (f"; progress saved in {args.checkpoint_dir}" if args.checkpoint_dir else ""))
        return 130
    print_summary(summary)
    if args.json_summary:
        path = Path(args.json_summary)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0
