"""Packed classification sources as transfer tasks: ``source:<store>`` and its fixed held-out splits.

A VTAB task brings its own train/val/test splits; a store packed from any other source
(a Meta-Dataset source, an image folder, ImageNet-21K) holds classes and their records
only. To run data regimes, scratch and max runs and the blind guess on it, the source is
served as the task ``source:<store name>``:

- Labels are the store's class ids (manifest order, 0 to classes - 1); every class takes
  part, whatever MD class split it has.
- Splits ("train", "val", "trainval", "test", the names a VTAB task's max run reads) are
  fixed per store and independent of every seed: one legacy ``RandomState`` from the
  seeding helper (protocol ``source_holdout``, source = the store's fingerprint, seed 0,
  index 0) draws, class after class in id order, a permutation of each class's records.
  Of a class of c records, the first ``test_count(c)`` = floor(0.2 c) of that permutation
  are "test", the next ``val_count(c - test)`` = floor(0.2 (c - test)) are "val", the rest
  "train"; "trainval" is train and val together. Classes of fewer than 5 records give no
  test example (fewer than 5 left: no val example), so every class is in "train".
- Each split lists its records in record-id order (so classes in id order).
- Regimes of the task are cut from its "train" split and tested on its "test" split, as for a
  VTAB task (``core.baselines.regimes``); the split fingerprint hashes (store fingerprint,
  task, split, ordered record ids, labels).

Pure: a function of the store's fingerprint and class sizes only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sampler_server.core.hashing import listing_fingerprint
from sampler_server.core.seeding import Protocol, derive_rng
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted

SOURCE_TASK_PREFIX = "source:"
SOURCE_SPLITS = ("train", "val", "trainval", "test")
HOLDOUT_FRACTION = 0.2
"""Share of each class held out as "test", then of the rest as "val"."""


def is_source_task(name: str) -> bool:
    """Whether a task name names a packed source (``source:<store>``) rather than a VTAB task."""
    return name.startswith(SOURCE_TASK_PREFIX)


def source_task(store: str) -> str:
    """The task name of a packed source's store."""
    return SOURCE_TASK_PREFIX + store


def store_of(task: str) -> str:
    """The store a ``source:<store>`` task names; ``InvalidArgument`` when it names none."""
    if not is_source_task(task) or not task[len(SOURCE_TASK_PREFIX):]:
        raise InvalidArgument(f"task: got {quoted(task)}, expected {SOURCE_TASK_PREFIX}<store name> (a packed "
                              "classification source) or a VTAB task name")
    return task[len(SOURCE_TASK_PREFIX):]


def holdout_count(count: int) -> int:
    """Records of a class of ``count`` held out: floor(0.2 count), none below 5."""
    return math.floor(count * HOLDOUT_FRACTION) if count >= 5 else 0


@dataclass(frozen=True)
class SourceSplit:
    """One split of a source task: its records in id order and their labels (class ids)."""

    task: str
    split: str
    store: str
    store_fingerprint: str
    num_classes: int
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def fingerprint(self) -> str:
        return source_split_fingerprint(self.task, self.store_fingerprint, self.split, self.record_ids, self.labels)


def source_split_fingerprint(task: str, store_fingerprint: str, split: str, record_ids: Sequence[int],
                             labels: Sequence[int]) -> str:
    """Stable hash of a source split's composition."""
    return listing_fingerprint("sampler-server/source-split/v1", task, store_fingerprint, split, record_ids, labels)


def check_source_split(task: str, split: str) -> str:
    if split not in SOURCE_SPLITS:
        raise InvalidArgument(f"split: got {quoted(split)} for task {task}, expected one of "
                              f"{', '.join(SOURCE_SPLITS)} (the held-out splits of a packed source)")
    return split


def split_source(*, store: str, store_fingerprint: str, class_ranges: Sequence[tuple[int, int]],
                 split: str) -> SourceSplit:
    """Split ``split`` of the source task of ``store``.

    Args:
        class_ranges: (first record id, record count) of each class, in class-id order.
    """
    task = source_task(store)
    check_source_split(task, split)
    if not store_fingerprint:
        raise InvalidArgument(f"task {task}: the store has no fingerprint; the held-out splits are keyed on it")
    if not class_ranges:
        raise InvalidArgument(f"task {task}: the store has no classes")
    rng = derive_rng(0, Protocol.SOURCE_HOLDOUT, store_fingerprint, Split.TEST, 0)
    ids: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for label, (start, count) in enumerate(class_ranges):
        order = rng.permutation(int(count)).astype(np.int64)
        test = holdout_count(int(count))
        val = holdout_count(int(count) - test)
        if split == "test":
            chosen = order[:test]
        elif split == "val":
            chosen = order[test:test + val]
        elif split == "train":
            chosen = order[test + val:]
        else:
            chosen = order[test:]
        chosen = np.sort(chosen) + int(start)
        ids.append(chosen)
        labels.append(np.full(len(chosen), label, dtype=np.int64))
    record_ids = np.concatenate(ids)
    return SourceSplit(task=task, split=split, store=store, store_fingerprint=store_fingerprint,
                       num_classes=len(class_ranges), record_ids=tuple(int(i) for i in record_ids),
                       labels=tuple(int(v) for v in np.concatenate(labels)))


__all__ = [
    "HOLDOUT_FRACTION",
    "SOURCE_SPLITS",
    "SOURCE_TASK_PREFIX",
    "SourceSplit",
    "check_source_split",
    "holdout_count",
    "is_source_task",
    "source_split_fingerprint",
    "source_task",
    "split_source",
    "store_of",
]
