"""Plain batches: every record once per epoch, random access, stable labels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sampler_server.core.batches import BatchSampler
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument

SPEC = DatasetSpec.from_counts("toy", [5, 7, 3, 9], [Split.TRAIN, Split.TEST, Split.TRAIN, Split.TRAIN])


@given(batch_size=st.integers(1, 20), seed=st.integers(0, 2**64 - 1))
@settings(max_examples=50, deadline=None)
def test_each_epoch_visits_every_train_record_once(batch_size, seed):
    sampler = BatchSampler(SPEC, "train", batch_size)
    size = 5 + 3 + 9
    positions = []
    for index in range(-(-3 * size // batch_size)):
        positions.extend(sampler.sample(seed, index).record_ids)
    for epoch in range(3):
        chunk = positions[epoch * size : (epoch + 1) * size]
        assert sorted(chunk) == list(range(0, 5)) + list(range(12, 15)) + list(range(15, 24))


def test_labels_are_class_positions_within_the_split_and_access_is_random():
    sampler = BatchSampler(SPEC, Split.TRAIN, 4)
    batch = sampler.sample(3, 10)
    for record_id, label in zip(batch.record_ids, batch.labels):
        expected = 0 if record_id < 5 else 1 if 12 <= record_id < 15 else 2
        assert label == expected
    fresh = BatchSampler(SPEC, Split.TRAIN, 4)
    assert fresh.sample(3, 10) == batch
    assert sampler.sample(4, 10).fingerprint != batch.fingerprint
    assert batch.num_classes == 3


def test_bad_batch_requests():
    with pytest.raises(InvalidArgument, match="batch_size: got 0"):
        BatchSampler(SPEC, "train", 0)
    with pytest.raises(FailedPrecondition, match="no valid classes"):
        BatchSampler(SPEC, "valid", 4)
    with pytest.raises(InvalidArgument, match="index"):
        BatchSampler(SPEC, "train", 4).sample(0, -1)
