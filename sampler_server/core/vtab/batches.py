"""Batches of one VTAB split: shuffled for training, or in split order for evaluation.

Pure (no I/O): the caller passes the split's records and labels in split order (as
``store.vtab_records.list_split`` lists them). Shuffled batch b holds steps
[b * B, (b + 1) * B) of the concatenated epochs, each epoch ordered by the same keyed
Feistel permutation MD batches use (``core.md.batches.shuffled_positions``), keyed by
(seed, ``Protocol.VTAB_1K``, "<task>:<split>", epoch): random access, resumable, O(B).
Evaluation batch b holds positions [b * B, min((b + 1) * B, n)): every example exactly
once, the last batch short. A batch's fingerprint hashes the task, split, the split's
fingerprint (which covers the store's content), the form and its ordered record ids
and labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from sampler_common.checks import MAX_INDEX, check_batch_size
from sampler_server.core.md.batches import shuffled_positions
from sampler_server.core.hashing import FieldHasher
from sampler_server.core.seeding import Protocol, check_seed_and_index
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument, field_checks

TASK_BATCH_KIND = "vtab_1k.batches/v1"
EPISODE_KIND = "vtab_1k.episode/v1"


@dataclasses.dataclass(frozen=True)
class TaskBatch:
    task: str
    split: str
    seed: int
    index: int
    epoch: int
    shuffle: bool
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]
    fingerprint: str


def shuffle_key(task: str, split: str) -> str:
    """The 'source' the seeding helper keys a task split's epochs by."""
    return f"{task}:{split}"


class TaskBatchSampler:
    """Validated once; ``sample(seed, index)`` is random access in O(batch_size)."""

    def __init__(self, task: str, split: str, split_fingerprint: str, record_ids: Sequence[int],
                 labels: Sequence[int], batch_size: int, *, shuffle: bool) -> None:
        with field_checks():
            batch_size = check_batch_size(batch_size)
        if len(record_ids) != len(labels):
            raise ValueError("record_ids and labels differ in length")
        if not record_ids:
            raise FailedPrecondition(f"task {task} split {split} has no examples")
        self.task, self.split, self.split_fingerprint = task, split, split_fingerprint
        self.batch_size, self.shuffle = batch_size, bool(shuffle)
        self._ids = np.asarray(record_ids, dtype=np.int64)
        self._labels = np.asarray(labels, dtype=np.int64)
        self.size = len(self._ids)
        if self.shuffle:
            self.max_index = min(MAX_INDEX, ((MAX_INDEX + 1) * self.size) // batch_size - 1)
        else:
            self.max_index = (self.size + batch_size - 1) // batch_size - 1

    @property
    def num_batches(self) -> int | None:
        """Batches in the evaluation form; None (unbounded) when shuffled."""
        return None if self.shuffle else self.max_index + 1

    def sample(self, seed: int, index: int) -> TaskBatch:
        check_seed_and_index(seed, index)
        if int(index) > self.max_index:
            what = (f"the evaluation form has {self.max_index + 1} batches of {self.batch_size} over {self.size}"
                    if not self.shuffle else f"batches of {self.batch_size} over {self.size} reach epoch {MAX_INDEX}")
            raise InvalidArgument(f"index: got {index}, expected at most {self.max_index} ({what})")
        if self.shuffle:
            epoch, positions = shuffled_positions(seed, Protocol.VTAB_1K, shuffle_key(self.task, self.split),
                                                  Split.TRAIN, self.size, self.batch_size, index)
        else:
            epoch = 0
            positions = np.arange(int(index) * self.batch_size, min((int(index) + 1) * self.batch_size, self.size))
        ids, labels = self._ids[positions], self._labels[positions]
        hasher = FieldHasher("sampler-server/vtab-batch/v1").text(TASK_BATCH_KIND).text(self.task).text(self.split)
        hasher.text(self.split_fingerprint).text("shuffled" if self.shuffle else "in-order")
        hasher.integers(ids.tolist()).integers(labels.tolist())
        return TaskBatch(task=self.task, split=self.split, seed=int(seed), index=int(index), epoch=int(epoch),
                         shuffle=self.shuffle, record_ids=tuple(ids.tolist()), labels=tuple(labels.tolist()),
                         fingerprint="sha256:" + hasher.hexdigest())


def episode_fingerprint(task: str, support_fingerprint: str, query_fingerprint: str) -> str:
    """A task's full-way episode: its support split then its query split, whole and in order."""
    hasher = FieldHasher("sampler-server/vtab-episode/v1").text(EPISODE_KIND).text(task)
    return "sha256:" + hasher.text(support_fingerprint).text(query_fingerprint).hexdigest()
