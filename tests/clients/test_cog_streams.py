"""``clients.cog_streams.SplitChain``: splits extracted one after another through one
``extract_many``, each taken whole and in order, a short or long stream said, and the
streams not reached closed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from clients.cog_cache import SplitIds
from clients.cog_streams import Segment, SplitChain
from clients.errors import SamplerClientError


def _split(name: str, rows: int) -> SplitIds:
    ids = np.arange(rows, dtype=np.int64) + 1000 * len(name)
    return SplitIds("L1", name, f"fp-{name}", ids, ids % 3)


class Stream:
    """A split's batches of 2 rows from batch ``start``; ``stop`` batches short, ``extra`` past its end."""

    def __init__(self, split: SplitIds, start: int = 0, short: int = 0, extra: int = 0) -> None:
        self.closed = False
        total = -(-len(split.record_ids) // 2)
        self._batches = iter([SimpleNamespace(index=i, record_ids=split.record_ids[2 * i:2 * i + 2],
                                              labels=split.labels[2 * i:2 * i + 2],
                                              images=np.full((len(split.record_ids[2 * i:2 * i + 2]), 1), i, np.uint8),
                                              split_fingerprint=split.fingerprint)
                              for i in range(start, total - short + extra)])

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._batches)

    def close(self) -> None:
        self.closed = True


def _segment(split: SplitIds, start: int = 0, **stream) -> Segment:
    return Segment(split, start, -(-len(split.record_ids) // 2) - start, Stream(split, start, **stream))


def _lazy(batches):  # one batch ahead of its features, as a device queue
    pending = []
    for images in batches:
        pending.append(images[:, 0].astype(np.float32)[:, None])
        if len(pending) == 2:
            yield pending.pop(0)
    yield from pending


def test_segments_come_whole_and_in_order_through_one_extraction():
    train, test = _split("train", 7), _split("test", 4)
    chain = SplitChain(_lazy, _segment(train))
    second = _segment(test)
    assert chain.add(second) and chain.holds("L1", "test") and chain.next_is(train, 0)
    with pytest.raises(ValueError, match="not the chain's next"):
        next(chain.take(test, 0))
    taken = list(chain.take(train, 0))
    assert [t[0] for t in taken] == [0, 1, 2, 3] and np.array_equal(np.concatenate([t[1] for t in taken]),
                                                                     train.record_ids)
    assert chain.next_is(test, 0) and not chain.next_is(test, 1)
    assert [t[3][0, 0] for t in chain.take(test, 0)] == [0, 1] and not chain.broken
    assert second.stream.closed  # read to its end
    assert not chain.add(_segment(_split("later", 2)))  # the images ran out: a new chain takes it


def test_a_stream_that_ends_short_breaks_the_chain_after_its_batches():
    train, test = _split("train", 8), _split("test", 4)
    chain = SplitChain(_lazy, _segment(train, short=1))
    chain.add(_segment(test))
    assert [t[0] for t in chain.take(train, 0)] == [0, 1, 2] and chain.broken and not chain.next_is(test, 0)


def test_a_stream_past_its_split_is_an_error():
    train, test = _split("train", 4), _split("test", 4)
    chain = SplitChain(_lazy, _segment(train, extra=1))
    chain.add(_segment(test))
    taken = []
    with pytest.raises(SamplerClientError, match="StreamCogBatches L1/train: batch 2 is past the split's 2 batches"):
        taken += chain.take(train, 0)  # raised when the extraction reads past the split
        taken += chain.take(test, 0)
    assert [t[0] for t in taken] == [0, 1][:len(taken)] and chain.broken is False


def test_a_batch_of_another_split_is_refused():
    train = _split("train", 4)
    segment = _segment(train)
    segment.split = SplitIds("L1", "train", "fp-other", train.record_ids, train.labels)
    with pytest.raises(SamplerClientError, match="batch 0 is of split fp-train, expected fp-other"):
        list(SplitChain(_lazy, segment).take(segment.split, 0))


def test_closing_closes_the_streams_not_reached():
    train, test, later = _split("train", 4), _split("test", 4), _split("later", 4)
    chain = SplitChain(_lazy, _segment(train))
    segments = [_segment(test), _segment(later)]
    for segment in segments:
        chain.add(segment)
    next(chain.take(train, 0))
    chain.close()
    assert all(segment.stream.closed for segment in segments) and not chain.holds("L1", "test")
