"""Plain labelled batches of one split: the non-episodic training MD's baselines use.

The split's records are seen as one sequence (classes in id order, records in id
order). Step t of epoch e reads position ``permute_e(t)`` of that sequence, where
``permute_e`` is the keyed bijection of [0, size) in ``core.shuffle``, keyed by the
one seeding helper's digest of (seed, protocol, source, split, e). Batch b holds
steps [b * B, (b + 1) * B) of the concatenated epochs, so any batch index is
computed directly (random access, resumable) in O(B) time and memory whatever the
split's size: no permutation is ever materialised. A batch may straddle epochs.
Labels are the position of a record's class among the split's classes. A pure
function of (spec, split, preset, seed, batch size, index).

The fingerprint hashes ``BATCH_CONFIG_KIND`` (versioned: v1 drew a full
``RandomState.permutation`` per epoch, v2 is the keyed bijection), the protocol,
the preset whose class splits the spec follows, the source, the split, the store's
content fingerprint, the record ids and the labels.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler_common.checks import MAX_INDEX, check_batch_size
from sampler_server.core.hashing import FieldHasher
from sampler_server.core.md.presets import Benchmark
from sampler_server.core.seeding import Protocol, check_seed_and_index
from sampler_server.core.shuffle import epoch_permutation, permute_each
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument, field_checks
from sampler_server.quoting import quoted

BATCH_CONFIG_KIND = "meta_dataset.batches/v2"
DEFAULT_PRESET = Benchmark.MD_V1.value


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
    preset: str = DEFAULT_PRESET


def parse_preset(preset: str) -> str:
    """The preset's canonical name; "" means the default (md-v1), as on the wire."""
    if preset == "":
        return DEFAULT_PRESET
    if not isinstance(preset, str) or preset not in {b.value for b in Benchmark}:
        allowed = ", ".join(b.value for b in Benchmark)
        raise InvalidArgument(f"preset: got {quoted(preset)}, expected one of {allowed} (or empty for {DEFAULT_PRESET})")
    return preset


def shuffled_positions(
    seed: int, protocol: Protocol, source: str, split: Split, size: int, batch_size: int, index: int
) -> tuple[int, np.ndarray]:
    """(first epoch, positions in [0, size)) of batch ``index``: steps [index * B, (index + 1) * B)
    of the concatenated epochs, each epoch ordered by its keyed permutation. Shared by every
    protocol's shuffled batches; O(batch_size) whatever ``size``."""
    first_epoch, first_step = divmod(int(index) * batch_size, size)
    steps = first_step + np.arange(batch_size, dtype=np.int64)  # < size + 65536: no overflow
    epoch_of = steps // size
    orders = [epoch_permutation(seed, protocol, source, split, first_epoch + extra, size)
              for extra in range(int(epoch_of[-1]) + 1)]
    return first_epoch, permute_each(orders, epoch_of, steps - epoch_of * size)


class BatchSampler:
    """Validated once; ``sample(seed, index)`` is random access in O(batch_size).

    ``preset`` names the benchmark variant whose class splits ``spec`` follows (the
    caller builds the spec for it); it enters every batch's fingerprint.
    """

    def __init__(
        self, spec: DatasetSpec, split: Split | str, batch_size: int, *, preset: str = DEFAULT_PRESET
    ) -> None:
        self.spec = spec
        self.split = Split(split)
        with field_checks():
            self.batch_size = check_batch_size(batch_size)
        self.preset = parse_preset(preset)
        self.classes = spec.classes_in(self.split)
        if not self.classes:
            raise FailedPrecondition(f"source {spec.source!r} has no {self.split.value} classes")
        self._starts = np.array([info.start for info in self.classes], dtype=np.int64)
        counts = np.array([info.count for info in self.classes], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(counts)])
        self.size = int(self._offsets[-1])
        # The last batch whose final epoch the seeding helper can key (epochs are indices there).
        self.max_index = min(MAX_INDEX, ((MAX_INDEX + 1) * self.size) // batch_size - 1)

    def sample(self, seed: int, index: int) -> LabelledBatch:
        check_seed_and_index(seed, index)
        if int(index) > self.max_index:
            raise InvalidArgument(
                f"index: got {index}, expected at most {self.max_index} "
                f"(batches of {self.batch_size} over {self.size} records reach epoch {MAX_INDEX})"
            )
        first_epoch, positions = shuffled_positions(
            seed, Protocol.META_DATASET_BATCHES, self.spec.source, self.split, self.size, self.batch_size, index
        )
        labels = np.searchsorted(self._offsets, positions, side="right") - 1
        record_ids = self._starts[labels] + (positions - self._offsets[labels])
        hasher = FieldHasher("sampler-server/batch/v2").text(BATCH_CONFIG_KIND)
        hasher.text(Protocol.META_DATASET_BATCHES.value).text(self.preset).text(self.spec.source).text(self.split.value)
        hasher.text(self.spec.fingerprint).integers(record_ids.tolist()).integers(labels.tolist())
        return LabelledBatch(
            source=self.spec.source,
            split=self.split,
            seed=int(seed),
            index=int(index),
            epoch=first_epoch,
            record_ids=tuple(record_ids.tolist()),
            labels=tuple(labels.tolist()),
            num_classes=len(self.classes),
            fingerprint=hasher.hexdigest(),
            preset=self.preset,
        )
