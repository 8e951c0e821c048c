"""A stand-in for the CoG client calls (ListCogLevels, GetCogSplit, StreamCogBatches,
ReportMetrics) over generated images, so the evaluation's own logic is tested without a
server: each concept is a colour, so even a random-init backbone separates them.

Splits as the protocol defines them (seeded RandomState draws per concept): test = the
last images of each concept, train = the rest; val(seed) = 20% (at least 1 of 2 or
more) of the full train set; search(N, seed) = N of train minus val; train(N, seed) =
N of the full train set."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from clients import cog_eval
from clients.cog_eval import HParams

COLOURS = {"L1": [(220, 30, 30), (30, 200, 30), (30, 30, 220)],
           "L2": [(200, 200, 30), (30, 200, 200), (200, 30, 200), (120, 120, 120)]}
TRAIN_PER_CONCEPT = 20
TEST_PER_CONCEPT = 6
SMALL = ["--server", "127.0.0.1:1", "--run", "cog-test", "--backbone", "tiny", "--image-size", "16",
         "--extract-batch-size", "16", "--epochs", "3", "--batch-size", "32", "--grid", "2x2", "--device", "cpu"]


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class FakeCogClient:
    """Records what was streamed (``streamed``; per split, ``streamed_of``) and reported;
    ``fail_after`` breaks the next stream of split ``fail_split`` after that many batches (the
    next split's stream may be read meanwhile: ``CogRun.open_ahead``)."""

    colours: dict[str, list[tuple[int, int, int]]] = field(default_factory=lambda: dict(COLOURS))
    streamed: int = 0
    streamed_splits: dict[tuple[str, str], int] = field(default_factory=dict)
    reports: list[Any] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)
    fail_after: int | None = None
    fail_split: str = "train"
    label_shift: int = 0  # > 0: labels disagree with those an earlier server gave, fingerprints unchanged
    train_per_concept: int = TRAIN_PER_CONCEPT

    def cog_levels(self, level_size: int = 0, min_images: int = 0) -> list[Any]:
        return [SimpleNamespace(level=level, wnids=[f"n{i:08d}" for i in range(len(colours))])
                for level, colours in self.colours.items()]

    def cog_levels_response(self, level_size: int = 0, min_images: int = 0) -> Any:
        """The ListCogLevels reply: every fake level served, none unavailable."""
        return SimpleNamespace(levels=self.cog_levels(level_size, min_images), unavailable={})

    def _ids(self, level: str, split: str) -> tuple[np.ndarray, np.ndarray]:
        offset = 100_000 * (list(self.colours).index(level) + 1)
        ids, labels = [], []
        for label in range(len(self.colours[level])):
            base = offset + 1000 * label
            train = self.train_per_concept
            numbers = range(train) if split == "train" else range(train, train + TEST_PER_CONCEPT)
            ids += [base + i for i in numbers]
            labels += [label] * len(numbers)
        return np.asarray(ids, np.int64), (np.asarray(labels, np.int64) + self.label_shift) % len(self.colours[level])

    def cog_split(self, level: str, split: str, shots: int = 0, seed: int = 0, level_size: int = 0,
                  min_images: int = 0) -> Any:
        ids, labels = self._ids(level, "test" if split == "test" else "train")
        if split != "test":
            rng = np.random.RandomState(int(_fingerprint(level, split, shots, seed)[:8], 16))
            held = np.random.RandomState(int(_fingerprint(level, "val", seed)[:8], 16))
            keep = []
            for label in np.unique(labels):
                members = np.flatnonzero(labels == label)
                val = held.permutation(members)[:max(int(0.2 * len(members)), min(len(members) - 1, 1))]
                if split == "val":
                    chosen = val
                else:
                    pool = np.setdiff1d(members, val) if split == "search" else members
                    chosen = rng.permutation(pool)[:shots] if shots else pool
                keep += sorted(int(i) for i in chosen)
            keep.sort()
            ids, labels = ids[keep], labels[keep]
        return SimpleNamespace(level=level, split=split, shots=shots, seed=seed, record_ids=ids.tolist(),
                               labels=labels.tolist(), num_classes=len(self.colours[level]),
                               fingerprint=_fingerprint(level, split, shots, seed, ids.tolist()))

    def image(self, level: str, record_id: int, size: int) -> np.ndarray:
        label = (record_id % 100_000) // 1000
        rng = np.random.RandomState(record_id)
        colour = np.asarray(self.colours[level][label], np.float32)
        pixels = colour + rng.normal(0, 25, (size, size, 3))
        return np.clip(pixels, 0, 255).astype(np.uint8)

    def stream_cog_batches(self, level: str, split: str, shots: int = 0, seed: int = 0, batch_size: int = 256,
                           start_index: int = 0, count: int = 0, image_size: int = 224, level_size: int = 0,
                           min_images: int = 0) -> Any:
        listed = self.cog_split(level, split, shots, seed)
        ids, labels = np.asarray(listed.record_ids), np.asarray(listed.labels)
        total = -(-len(ids) // batch_size)
        for index in range(start_index, total):
            if self.fail_after is not None and split == self.fail_split and index - start_index >= self.fail_after:
                self.fail_after = None
                raise ConnectionError("the stream broke")
            part = slice(index * batch_size, (index + 1) * batch_size)
            images = np.stack([self.image(level, int(r), image_size) for r in ids[part]])
            self.streamed += len(images)
            self.streamed_splits[level, split] = self.streamed_splits.get((level, split), 0) + len(images)
            yield SimpleNamespace(index=index, record_ids=ids[part].tolist(), labels=labels[part],
                                  images=images, split_fingerprint=listed.fingerprint, last=index == total - 1)

    def streamed_of(self, level: str, split: str) -> int:
        return self.streamed_splits.get((level, split), 0)

    def report(self, reports: list[Any], run_config_json: str = "") -> Any:
        self.reports += list(reports)
        self.configs.append(run_config_json)
        return SimpleNamespace(stored=len(reports), duplicates=0)


def results_of(summary: dict) -> list[tuple]:
    """(level, N, seed, test accuracy, lr, wd) of every result of a summary."""
    return [(level, r["shots"], r["seed"], r["accuracy"], r["learning_rate"], r["weight_decay"])
            for level, entry in summary["levels"].items() for r in entry["results"]]


def separable(seed: int = 0, classes: int = 4, per_class: int = 40, dim: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs around far-apart centres, L2-normalised: linearly separable."""
    rng = np.random.RandomState(seed)
    centres = rng.normal(0, 1, (classes, dim)) * 3
    labels = np.repeat(np.arange(classes), per_class)
    x = centres[labels] + rng.normal(0, 0.3, (len(labels), dim))
    return cog_eval.l2_normalise(x), labels.astype(np.int64)


def fit_toy(backend: Any, hp: HParams = HParams(1.0, 1e-6), epochs: int = 30, seed: int = 3) -> tuple[Any, float]:
    """Fit a 4-class separable toy problem; (outcome, training accuracy)."""
    x, y = separable()
    data = backend.classifier_data(x, y)
    outcome = cog_eval.fit(backend, data, len(y), x.shape[1], 4, hp, epochs, 32, seed)
    return outcome, cog_eval.accuracy(backend, data, y)
