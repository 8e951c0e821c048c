"""Plain labelled batches of one split: the non-episodic training MD's baselines use.

The split's records are seen as one sequence (classes in id order, records in id
order); epoch e visits them in the order of a permutation derived from (seed,
protocol, source, split, e) by the one seeding helper. Batch b holds positions
[b * B, (b + 1) * B) of the concatenated epochs, so any batch index is computed
directly (random access, resumable) and a batch may straddle two epochs. Labels are
the position of a record's class among the split's classes. A pure function of
(spec, split, seed, batch size, index).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools

import numpy as np

from sampler_server.core.hashing import FieldHasher
from sampler_server.core.seeding import Protocol, check_seed_and_index, derive_rng
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument

MAX_BATCH_SIZE = 65536


@dataclasses.dataclass(frozen=True)
class LabelledBatch:
    source: str
    split: Split
    seed: int
    index: int
    epoch: int
    record_ids: tuple[int, ...]
    labels: tuple[int, ...]
    num_classes: int
    fingerprint: str


@functools.lru_cache(maxsize=8)
def _epoch_order(seed: int, source: str, split: Split, epoch: int, size: int) -> np.ndarray:
    rng = derive_rng(seed, Protocol.META_DATASET_BATCHES, source, split, epoch)
    return rng.permutation(size)


class BatchSampler:
    """Validated once; ``sample(seed, index)`` is random access."""

    def __init__(self, spec: DatasetSpec, split: Split | str, batch_size: int) -> None:
        self.spec = spec
        self.split = Split(split)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise InvalidArgument(f"batch_size: got {batch_size!r}, expected 1 to {MAX_BATCH_SIZE}")
        self.batch_size = batch_size
        self.classes = spec.classes_in(self.split)
        if not self.classes:
            raise FailedPrecondition(f"source {spec.source!r} has no {self.split.value} classes")
        self._offsets = [0]
        for info in self.classes:
            self._offsets.append(self._offsets[-1] + info.count)
        self.size = self._offsets[-1]

    def _record(self, position: int) -> tuple[int, int]:
        label = bisect.bisect_right(self._offsets, position) - 1
        return self.classes[label].start + (position - self._offsets[label]), label

    def sample(self, seed: int, index: int) -> LabelledBatch:
        check_seed_and_index(seed, index)
        first = index * self.batch_size
        record_ids, labels = [], []
        order = None
        current_epoch = -1
        for position in range(first, first + self.batch_size):
            epoch, offset = divmod(position, self.size)
            if epoch != current_epoch:
                order = _epoch_order(seed, self.spec.source, self.split, epoch, self.size)
                current_epoch = epoch
            assert order is not None
            record_id, label = self._record(int(order[offset]))
            record_ids.append(record_id)
            labels.append(label)
        hasher = FieldHasher("sampler-server/batch/v1")
        hasher.text(Protocol.META_DATASET_BATCHES.value).text(self.spec.source).text(self.split.value)
        hasher.text(self.spec.fingerprint).integers(record_ids).integers(labels)
        return LabelledBatch(
            source=self.spec.source,
            split=self.split,
            seed=seed,
            index=index,
            epoch=first // self.size,
            record_ids=tuple(record_ids),
            labels=tuple(labels),
            num_classes=len(self.classes),
            fingerprint=hasher.hexdigest(),
        )
