"""ImageNet-CoG level splits (core.cog.splits): test/train disjoint and sized as the paper's,
few-shot subsets nested, val a fifth of the full train set and disjoint from the search
set (as the reference holds it out before drawing a few-shot search set), everything a
pure function of its inputs (not of their order), and requests refused with one line
naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.cog import MAX_TRAIN_PER_CONCEPT, SHOTS, TEST_PER_CONCEPT
from sampler_server.core.cog.splits import (
    HeldOutTest,
    SplitRequest,
    batch_fingerprint,
    build_split,
    concept_records,
    few_shot,
    num_batches,
    partition_concept,
    search_train,
    split_sizes,
    val_count,
    validation,
)
from sampler_server.errors import FailedPrecondition, InvalidArgument

FP = "f" * 64


def store(counts: list[int]) -> dict[str, range]:
    """wnid -> contiguous record ids, classes in wnid order (as a store lays them out)."""
    out, start = {}, 0
    for i, n in enumerate(counts):
        out[f"n{i:08d}"] = range(start, start + n)
        start += n
    return out


counts_st = st.lists(st.integers(1, 1500), min_size=1, max_size=5)
shots_st = st.sampled_from((0, *SHOTS))
seed_st = st.integers(1, 2**64 - 1)


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(0, 1500), wnid=st.from_regex(r"n[0-9]{8}", fullmatch=True))
def test_test_and_train_are_disjoint_and_sized(n, wnid):
    ids = np.arange(1000, 1000 + n)
    test, train = partition_concept(FP, wnid, ids)
    assert len(test) == min(TEST_PER_CONCEPT, n)
    assert len(train) == min(MAX_TRAIN_PER_CONCEPT, n - len(test)) == split_sizes(n)[0]
    assert not set(test.tolist()) & set(train.tolist())
    assert set(test.tolist()) | set(train.tolist()) <= set(ids.tolist())
    assert list(test) == sorted(test) and list(train) == sorted(train)


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(1, 400), seed=seed_st)
def test_few_shot_subsets_nest_and_take_all_when_short(n, seed):
    train = np.arange(n) * 3
    previous: set[int] = set()
    for shots in SHOTS:
        subset = few_shot(FP, "n00000001", train, shots, seed)
        assert len(subset) == min(shots, n)
        assert previous <= set(subset.tolist()) <= set(train.tolist())
        previous = set(subset.tolist())


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(0, 300), shots=shots_st, seed=seed_st)
def test_val_is_a_fifth_of_the_full_train_set_and_search_is_the_rest(n, shots, seed):
    train = np.arange(n) + 7
    val = validation(FP, "n00000002", train, seed)
    expected = 0 if n < 2 else max(1, int(n * 0.2))
    assert len(val) == val_count(n) == expected
    assert set(val.tolist()) <= set(train.tolist()) and len(set(val.tolist())) == len(val)
    search = search_train(FP, "n00000002", train, shots, seed)
    assert not set(search.tolist()) & set(val.tolist())
    assert set(search.tolist()) <= set(train.tolist())
    assert len(search) == (min(shots, n - len(val)) if shots else n - len(val))


def test_val_counts_at_the_edges():
    assert [val_count(n) for n in (0, 1, 2, 4, 5, 9, 10, 1250, 1300)] == [0, 0, 1, 1, 1, 1, 2, 250, 260]


@settings(max_examples=examples(30), deadline=None)
@given(counts=counts_st, shots=shots_st, seed=seed_st, data=st.data())
def test_a_level_split_is_ordered_labelled_and_independent_of_input_order(counts, shots, seed, data):
    records = store(counts)
    concepts = list(records)
    split_name = data.draw(st.sampled_from(("train", "val", "test", "search")))
    request = SplitRequest.parse("L2", split_name, shots if split_name in ("train", "search") else 0, seed)
    split = build_split(FP, records, concepts, request, level_size=4, min_images=60)
    assert split.wnids == tuple(sorted(concepts))
    assert list(split.labels) == sorted(split.labels)  # concepts in label order
    for label, wnid in enumerate(split.wnids):
        mine = split.record_ids[split.labels == label]
        assert list(mine) == sorted(mine) and set(mine.tolist()) <= set(records[wnid])
        assert list(mine) == list(concept_records(FP, wnid, records[wnid], request))
    shuffled_concepts = data.draw(st.permutations(concepts))
    shuffled_records = {w: list(records[w])[::-1] for w in reversed(shuffled_concepts)}
    again = build_split(FP, shuffled_records, shuffled_concepts, request, level_size=4, min_images=60)
    assert again.fingerprint == split.fingerprint and list(again.record_ids) == list(split.record_ids)


@settings(max_examples=examples(20), deadline=None)
@given(counts=st.lists(st.integers(60, 400), min_size=1, max_size=4), seed=seed_st)
def test_test_train_val_fewshot_relations_in_a_level(counts, seed):
    records = store(counts)
    concepts = list(records)

    def ids(split: str, shots: int = 0, s: int = seed) -> set[int]:
        request = SplitRequest.parse("L1", split, shots, s)
        return set(build_split(FP, records, concepts, request, level_size=4, min_images=60).record_ids.tolist())

    test, train = ids("test"), ids("train")
    assert not test & train and len(test) == TEST_PER_CONCEPT * len(counts)
    val = ids("val")
    assert val <= train
    assert ids("search") == train - val
    previous: set[int] = set()
    previous_search: set[int] = set()
    for shots in SHOTS:
        subset = ids("train", shots)
        assert previous <= subset <= train
        search = ids("search", shots)
        assert previous_search <= search <= train - val
        previous, previous_search = subset, search


def test_same_inputs_same_split_and_each_input_changes_it():
    records = store([120, 90, 300])
    concepts = list(records)

    def fp(fingerprint=FP, level="L3", split="train", shots=8, seed=1, level_size=4, min_images=60) -> str:
        request = SplitRequest.parse(level, split, shots, seed)
        return build_split(fingerprint, records, concepts, request, level_size=level_size,
                           min_images=min_images).fingerprint

    base = fp()
    assert fp() == base
    others = [fp(fingerprint="e" * 64), fp(level="L4"), fp(split="search"), fp(shots=16), fp(seed=2),
              fp(level_size=5), fp(min_images=61)]
    assert len({base, *others}) == len(others) + 1
    held_out = HeldOutTest({w: range(1000 + 10 * i, 1005 + 10 * i) for i, w in enumerate(concepts)}, "v" * 64)

    def seen(level_size: int, min_images: int) -> str:
        return build_split(FP, records, concepts, SplitRequest.parse("IN-1K", "train", 8, 1), level_size=level_size,
                           min_images=min_images, held_out=held_out).fingerprint

    assert seen(4, 60) == seen(1000, 782)  # IN-1K ignores the level configuration
    # the test/train carve depends on the store content, not on the level or the seed
    a = build_split(FP, records, concepts, SplitRequest.parse("L1", "test"), level_size=4, min_images=60)
    b = build_split(FP, records, concepts, SplitRequest.parse("L5", "test", 0, 3), level_size=9, min_images=70)
    c = build_split("e" * 64, records, concepts, SplitRequest.parse("L1", "test"), level_size=4, min_images=60)
    assert list(a.record_ids) == list(b.record_ids) and list(a.record_ids) != list(c.record_ids)


def test_golden_partition_pins_the_streams():
    """Any change of the keyed permutations changes every CoG split: it must be deliberate."""
    test, train = partition_concept(FP, "n01440764", np.arange(60))
    assert train.tolist() == [5, 6, 9, 10, 25, 32, 49, 51, 52, 57]
    assert few_shot(FP, "n01440764", train, 4, 1).tolist() == [10, 32, 49, 52]
    assert validation(FP, "n01440764", np.arange(20), 1).tolist() == [10, 14, 15, 16]
    assert search_train(FP, "n01440764", np.arange(20), 4, 1).tolist() == [2, 4, 11, 12]


def test_requests_are_checked_with_one_line_naming_the_field():
    cases = {
        ("L9", "train", 0, 0): "level: got 'L9', expected one of IN-1K, L1, L2, L3, L4, L5",
        ("L1", "trainval", 0, 0): "split: got 'trainval', expected one of train, val, test, search",
        ("L1", "val", 2, 1): "shots: got 2 for split val, expected 0",
        ("L1", "search", 2, 0): "seed: the search split (train minus val) is drawn at random and needs a seed >= 1",
        ("L1", "train", 3, 1): "shots: got 3, expected 0 (all images) or one of 1, 2, 4, 8, 16, 32, 64, 128",
        ("L1", "test", 4, 1): "shots: got 4 for split test",
        ("L1", "train", 4, 0): "seed: a 4-shot train set is drawn at random and needs a seed >= 1",
        ("L1", "val", 0, 0): "seed: the val split is drawn at random and needs a seed >= 1",
        ("L1", "val", 0, -1): "seed: got -1, expected an integer in [0, 18446744073709551615]",
    }
    for args, message in cases.items():
        with pytest.raises(InvalidArgument) as caught:
            SplitRequest.parse(*args)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert SplitRequest.parse("L1", "test", 0, 5) == SplitRequest("L1", "test", 0, 0)
    assert SplitRequest.parse("IN-1K", "train", 0, 5) == SplitRequest("IN-1K", "train", 0, 0)
    assert SplitRequest.parse("L1", "val", 0, 5) == SplitRequest("L1", "val", 0, 5)


def test_one_shot_search_has_one_image_per_concept_and_an_empty_split_is_one_batch():
    records = store([80, 70])
    split = build_split(FP, records, list(records), SplitRequest.parse("L1", "search", 1, 2), level_size=4,
                        min_images=60)
    assert split.size == 2 and split.num_classes == 2
    val = build_split(FP, records, list(records), SplitRequest.parse("L1", "val", 0, 2), level_size=4, min_images=60)
    assert val.size == 6 + 4  # int(0.2 * 30) + int(0.2 * 20): 20% of each concept's full train set
    assert num_batches(0, 256) == 1 and num_batches(256, 256) == 1 and num_batches(257, 256) == 2


def test_build_split_refuses_concepts_without_records():
    with pytest.raises(InvalidArgument, match="1 have no records in the store, e.g. 'n99999999'"):
        build_split(FP, store([70]), ["n00000000", "n99999999"], SplitRequest.parse("L1", "test"), level_size=4,
                    min_images=60)


def test_batch_fingerprint_covers_split_index_records_and_labels():
    base = batch_fingerprint("a" * 64, 3, [1, 2], [0, 1])
    assert base == batch_fingerprint("a" * 64, 3, np.array([1, 2]), np.array([0, 1]))
    assert len({base, batch_fingerprint("b" * 64, 3, [1, 2], [0, 1]), batch_fingerprint("a" * 64, 4, [1, 2], [0, 1]),
                batch_fingerprint("a" * 64, 3, [1, 3], [0, 1]), batch_fingerprint("a" * 64, 3, [1, 2], [0, 0])}) == 5


@settings(max_examples=examples(40), deadline=None)
@given(counts=st.lists(st.integers(1, 1500), min_size=1, max_size=4), held=st.integers(1, 60), seed=seed_st,
       shots=shots_st)
def test_a_held_out_test_partition_is_the_test_split_and_train_is_every_pool_record(counts, held, seed, shots):
    """IN-1K as naver/cog evaluates it: test = the validation records, train = every train
    record (no 50 held out, no 1300 cap); val, search and few-shot drawn from that train set."""
    records = store(counts)
    concepts = list(records)
    end = sum(counts)
    tests = {w: range(end + held * i, end + held * (i + 1)) for i, w in enumerate(concepts)}
    held_out = HeldOutTest(tests, "v" * 64)

    def split(name: str, shots: int = 0, seed: int = 0):
        return build_split(FP, records, concepts, SplitRequest.parse("IN-1K", name, shots, seed), level_size=0,
                           min_images=0, held_out=held_out)

    test, train = split("test"), split("train")
    assert test.record_ids.tolist() == list(range(end, end + held * len(concepts)))
    assert test.partitions == ["validation"] * test.size and set(train.partitions) <= {"train"}
    assert train.record_ids.tolist() == list(range(end))
    for wnid, label in zip(concepts, range(len(concepts))):
        pool = list(records[wnid])
        assert concept_records(FP, wnid, records[wnid], SplitRequest.parse("IN-1K", "val", 0, seed),
                               tests[wnid]).tolist() == validation(FP, wnid, pool, seed).tolist()
        assert train.record_ids[train.labels == label].tolist() == pool
    assert set(split("search", shots, seed).record_ids.tolist()) <= set(range(end))
    assert test.fingerprint != build_split(FP, records, concepts, SplitRequest.parse("IN-1K", "test"), level_size=0,
                                           min_images=0, held_out=HeldOutTest(tests, "w" * 64)).fingerprint


def test_in1k_without_a_held_out_partition_is_refused_never_drawn_from_train_records():
    records = store([80, 90])
    with pytest.raises(FailedPrecondition, match="pack ilsvrc_2012 --input TRAIN_DIR --validation VAL_DIR"):
        build_split(FP, records, list(records), SplitRequest.parse("IN-1K", "test"), level_size=0, min_images=0)
