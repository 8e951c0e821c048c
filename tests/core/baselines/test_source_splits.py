"""A packed source as a task: its held-out splits partition the store, keep every class in train,
follow the documented per-class sizes, list records in id order and depend on the store's
fingerprint and class sizes only."""

from __future__ import annotations

import math

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.baselines import SOURCE_SPLITS, build_regime, split_source, store_of
from sampler_server.core.baselines.sources import holdout_count, source_task
from sampler_server.errors import InvalidArgument

counts = st.lists(st.integers(1, 40), min_size=1, max_size=12)
fingerprints = st.sampled_from(["sha256:aa", "sha256:bb", "sha256:0123"])


def _ranges(class_counts: list[int]) -> list[tuple[int, int]]:
    starts = [0]
    for count in class_counts[:-1]:
        starts.append(starts[-1] + count)
    return list(zip(starts, class_counts))


def _splits(class_counts, fingerprint):
    ranges = _ranges(class_counts)
    return {split: split_source(store="s", store_fingerprint=fingerprint, class_ranges=ranges, split=split)
            for split in SOURCE_SPLITS}


@settings(max_examples=examples(80), deadline=None)
@given(class_counts=counts, fingerprint=fingerprints)
def test_the_splits_partition_the_store_with_the_documented_sizes(class_counts, fingerprint):
    splits = _splits(class_counts, fingerprint)
    train, val, test = (set(splits[s].record_ids) for s in ("train", "val", "test"))
    assert not (train & val or train & test or val & test)
    assert train | val | test == set(range(sum(class_counts)))
    assert splits["trainval"].record_ids == tuple(sorted(train | val))
    for split in SOURCE_SPLITS:
        listing = splits[split]
        assert list(listing.record_ids) == sorted(listing.record_ids)
        assert listing.num_classes == len(class_counts) and listing.task == "source:s"
        for label, (start, count) in enumerate(_ranges(class_counts)):
            members = [i for i, l in zip(listing.record_ids, listing.labels) if l == label]
            assert all(start <= i < start + count for i in members)
            held = math.floor(0.2 * count) if count >= 5 else 0
            held_val = math.floor(0.2 * (count - held)) if count - held >= 5 else 0
            expected = {"test": held, "val": held_val, "train": count - held - held_val,
                        "trainval": count - held}[split]
            assert len(members) == expected
    assert set(splits["train"].labels) == set(range(len(class_counts)))  # every class trains


@settings(max_examples=examples(30), deadline=None)
@given(class_counts=counts)
def test_the_splits_are_a_function_of_the_fingerprint_and_sizes(class_counts):
    first, again = _splits(class_counts, "sha256:aa"), _splits(class_counts, "sha256:aa")
    assert {s: v.fingerprint for s, v in first.items()} == {s: v.fingerprint for s, v in again.items()}
    assert first == again


def test_another_store_holds_out_other_records():
    a, b = _splits([30] * 4, "sha256:aa"), _splits([30] * 4, "sha256:bb")
    assert a["test"].record_ids != b["test"].record_ids
    assert len(a["test"].record_ids) == len(b["test"].record_ids) == 4 * 6
    assert a["test"].fingerprint != b["test"].fingerprint


def test_holdout_counts_and_a_regime_over_a_source():
    assert [holdout_count(c) for c in (1, 4, 5, 9, 10, 100)] == [0, 0, 1, 1, 2, 20]
    splits = _splits([12, 12, 12], "sha256:aa")
    pool, test = splits["train"], splits["test"]
    assert len(pool.record_ids) == 3 * 8 and len(test.record_ids) == 3 * 2
    regime = build_regime(task=pool.task, store_fingerprint=pool.store_fingerprint, num_classes=3,
                          pool_record_ids=pool.record_ids, pool_labels=pool.labels, test_labels=test.labels,
                          n=9, seed=3, split="train")
    assert set(regime.record_ids) <= set(pool.record_ids) and set(regime.labels) == {0, 1, 2}
    assert regime.blind.test_examples == 6 and regime.blind.test_accuracy == pytest.approx(1 / 3)


@pytest.mark.parametrize(("call", "words"), [
    (lambda: store_of("source:"), ["source:<store name>"]),
    (lambda: store_of("cifar100"), ["'cifar100'", "source:<store name>"]),
    (lambda: split_source(store="s", store_fingerprint="sha256:aa", class_ranges=[(0, 5)], split="train800"),
     ["split", "'train800'", "train, val, trainval, test", "source:s"]),
    (lambda: split_source(store="s", store_fingerprint="sha256:aa", class_ranges=[], split="train"),
     ["source:s", "no classes"]),
])
def test_bad_inputs_are_one_line_invalid_arguments(call, words):
    with pytest.raises(InvalidArgument) as error:
        call()
    assert "\n" not in str(error.value) and all(w in str(error.value) for w in words)
    assert source_task("s") == "source:s"
