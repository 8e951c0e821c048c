"""The epoch shuffle: a keyed bijection of [0, n), pinned by golden values."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.seeding import Protocol
from sampler_server.core.shuffle import MAX_SIZE, KeyedPermutation, epoch_permutation, permute_each
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument

_SPECIAL_SIZES = [
    1, 2, 3, 4, 5, 7, 8, 13, 15, 16, 17, 31, 61, 63, 64, 65, 127, 128, 251, 255, 256, 257, 1021, 1023, 1024, 1025,
    4093, 4095, 4096, 4097, 16_383, 16_384, 16_385, 65_521, 65_536, 65_537,
]


def _is_permutation(size: int, key: bytes) -> bool:
    image = KeyedPermutation(size, key).permute(np.arange(size))
    return image.dtype == np.int64 and bool(np.array_equal(np.sort(image), np.arange(size)))


@pytest.mark.parametrize("size", _SPECIAL_SIZES)
def test_a_bijection_for_primes_powers_of_two_and_four_and_their_neighbours(size: int) -> None:
    assert _is_permutation(size, b"special")


@given(size=st.integers(1, 5000), key=st.binary(min_size=0, max_size=40))
@settings(max_examples=examples(200), deadline=None)
def test_a_bijection_for_any_size_and_key(size: int, key: bytes) -> None:
    assert _is_permutation(size, key)


@given(size=st.integers(2, 10**12), key=st.binary(max_size=16), data=st.data())
@settings(max_examples=examples(100), deadline=None)
def test_large_sizes_stay_in_range_and_are_injective_on_samples(size: int, key: bytes, data: st.DataObject) -> None:
    positions = data.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=64, unique=True))
    image = KeyedPermutation(size, key).permute(positions)
    assert len(set(image.tolist())) == len(positions)
    assert all(0 <= value < size for value in image.tolist())


def test_pointwise_equals_batched_and_order_is_kept() -> None:
    shuffle = KeyedPermutation(1_000_003, b"k")
    positions = [999_999, 0, 17, 500_000, 17]
    batched = shuffle.permute(positions).tolist()
    assert batched == [shuffle(p) for p in positions]
    assert batched[2] == batched[4]


def test_keys_and_sizes_give_unrelated_orders() -> None:
    base = KeyedPermutation(1000, b"a").permute(np.arange(1000))
    assert not np.array_equal(base, KeyedPermutation(1000, b"b").permute(np.arange(1000)))
    assert not np.array_equal(base[:999], KeyedPermutation(999, b"a").permute(np.arange(999)))
    # Far from the identity: a keyed shuffle fixes about one point in expectation.
    assert int(np.sum(base == np.arange(1000))) < 10


def test_epochs_are_keyed_by_the_seeding_helper() -> None:
    def order(seed: int, epoch: int, split: Split = Split.TRAIN, source: str = "quickdraw") -> list[int]:
        return epoch_permutation(seed, Protocol.META_DATASET_BATCHES, source, split, epoch, 100).permute(
            np.arange(100)
        ).tolist()

    reference = order(1, 2)
    assert reference == order(1, 2)
    # (seed, epoch + 1) and (seed + 1, epoch) are unrelated: keys are hashed, never added.
    others = [order(2, 2), order(1, 3), order(2, 1), order(1, 2, Split.TEST), order(1, 2, source="omniglot")]
    assert all(other != reference for other in others)


GOLDEN = {
    (10, b"golden"): ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [7, 2, 9, 4, 8, 3, 1, 0, 6, 5]),
    (1_000_003, b"golden"): ([0, 1, 2, 999_999, 1_000_002], [971646, 610591, 968978, 905652, 618187]),
    (MAX_SIZE, b"golden"): ([0, MAX_SIZE - 1], [1675543585135333711, 3797175767841126723]),
}


@pytest.mark.parametrize(("size", "key"), sorted(GOLDEN))
def test_golden_values(size: int, key: bytes) -> None:
    positions, expected = GOLDEN[(size, key)]
    assert KeyedPermutation(size, key).permute(positions).tolist() == expected


def test_golden_epoch_order() -> None:
    order = epoch_permutation(7, Protocol.META_DATASET_BATCHES, "quickdraw", Split.TRAIN, 2, 50_000_000)
    assert order.permute([0, 1, 49_999_999]).tolist() == [6294849, 21984786, 25636725]


@given(size=st.integers(1, 5000), owners=st.lists(st.integers(0, 3), min_size=1, max_size=200),
       seed=st.integers(0, 2**32))
@settings(max_examples=examples(60), deadline=None)
def test_permutations_of_one_size_evaluated_together_equal_each_alone(size: int, owners: list[int], seed: int) -> None:
    orders = [KeyedPermutation(size, f"{seed}/{k}".encode()) for k in range(4)]
    positions = np.random.default_rng(seed).integers(0, size, len(owners))
    together = permute_each(orders, np.array(owners), positions)
    assert together.tolist() == [orders[k](int(p)) for k, p in zip(owners, positions, strict=True)]


def test_permute_each_refuses_permutations_of_different_sizes() -> None:
    with pytest.raises(ValueError, match="differ in size"):
        permute_each([KeyedPermutation(10, b"a"), KeyedPermutation(11, b"a")], np.array([0, 1]), np.array([0, 0]))


def test_bad_sizes_and_positions() -> None:
    for size in (0, -1, MAX_SIZE + 1, 2.0, True):
        with pytest.raises(InvalidArgument, match="size: got"):
            KeyedPermutation(size, b"k")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"positions: got 0\.\.10, expected \[0, 10\)"):
        KeyedPermutation(10, b"k").permute([0, 10])
