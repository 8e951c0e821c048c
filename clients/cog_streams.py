"""CoG splits' batch streams: opened ahead of their extraction, and extracted one after
another through one ``extract_many``.

Why one extraction across splits: each split's features end in a cache entry whose closing
(fsyncs, a rename) takes tens of milliseconds on the thread that launches the model, and a
new ``extract_many`` per split stages its first batch only when it is asked for. On one H200
(``bench/feature_bench.py``, ResNet-50 224 px bf16, 2,111-image splits) the device had
nothing queued for 15.7% of the pass between one split's last features and the next one's
first launch. In a ``SplitChain`` the next splits' batches follow this one's into the same
``extract_many``: they are received, staged and launched while this split's last features
are written, and its cache entry is closed while they run.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clients.cog_cache import SplitIds
from clients.errors import SamplerClientError
from clients.feed import Feed


class OpenedStream:
    """A split's stream whose batches are received from now on, by a thread of its own
    (``Feed``), not when its extraction first asks (a stream's start waits for the server to
    prepare its first batch)."""

    def __init__(self, stream: Iterator[Any]) -> None:
        self._feed = Feed(((0, batch, 0) for batch in stream), lambda batch: batch)

    def __iter__(self) -> "OpenedStream":
        return self

    def __next__(self) -> Any:
        return next(self._feed)[1]

    def close(self) -> None:
        self._feed.close()


@dataclass(eq=False)
class Segment:
    """The batches of one split from batch ``start`` on: ``batches`` of them, ``stream`` their
    source (an ``OpenedStream``, or the client's stream)."""

    split: SplitIds
    start: int
    batches: int
    stream: Any = field(repr=False)

    def names(self, split: SplitIds, start: int) -> bool:
        return (self.split.level, self.split.split, self.split.fingerprint, self.start) == (
            split.level, split.split, split.fingerprint, start)

    def close(self) -> None:
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


class SplitChain:
    """Segments extracted in order through one ``extract_many(images)``: ``take`` gives one
    segment's (index, record ids, labels, features), the segments after it already on their
    way. A segment joins (``add``) while the chain's images have not run out; after that,
    and after ``broken``, the caller starts another chain."""

    def __init__(self, extract_many: Callable[[Iterable[np.ndarray]], Iterator[np.ndarray]], first: Segment) -> None:
        self._lock = threading.Lock()
        self._order: deque[Segment] = deque([first])    # segments not yet taken, in order (the caller's thread)
        self._planned: deque[Segment] = deque([first])  # segments the images have not reached (guarded by _lock)
        self._ended = False  # the images ran out: no segment joins any more (guarded by _lock)
        # (segment, index, record ids, labels) of each batch handed to extract_many, in order; the
        # ids and labels copied, so no reply is held while its features are on their way
        self._received: deque[tuple[Segment, int, np.ndarray, np.ndarray]] = deque()
        self.broken = False  # a segment ended short: the chain is out of step (its caller starts another)
        self._features = extract_many(self._images())

    def add(self, segment: Segment) -> bool:
        """Queue ``segment`` after the others; False when the images already ran out."""
        with self._lock:
            if self._ended:
                return False
            self._planned.append(segment)
            self._order.append(segment)
            return True

    def holds(self, level: str, split: str) -> bool:
        return any((s.split.level, s.split.split) == (level, split) for s in self._order)

    def next_is(self, split: SplitIds, start: int) -> bool:
        """Whether ``take(split, start)`` is the chain's next."""
        return not self.broken and bool(self._order) and self._order[0].names(split, start)

    def _images(self) -> Iterator[np.ndarray]:
        current: Segment | None = None
        try:
            while True:
                with self._lock:
                    if not self._planned:
                        self._ended = True
                        return
                    current = self._planned.popleft()
                split, index = current.split, current.start
                where = f"StreamCogBatches {split.level}/{split.split}"
                for batch in current.stream:
                    if batch.split_fingerprint != split.fingerprint:
                        raise SamplerClientError(f"{where}: batch {batch.index} is of split "
                                                 f"{batch.split_fingerprint[:16]}, expected {split.fingerprint[:16]}")
                    if index >= current.start + current.batches:
                        raise SamplerClientError(f"{where}: batch {batch.index} is past the split's "
                                                 f"{current.start + current.batches} batches")
                    self._received.append((current, int(batch.index), np.asarray(batch.record_ids, np.int64),
                                           np.array(batch.labels, np.int64)))  # a copy: no view into the reply
                    index += 1
                    yield batch.images
                current.close()
                current = None
        finally:
            with self._lock:
                self._ended = True
                left = [*([current] if current is not None else []), *self._planned]
                self._planned.clear()
            for segment in left:
                segment.close()

    def take(self, split: SplitIds, start: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """The next segment's (index, record ids, labels, features); fewer when its stream
        ended short (then ``broken``)."""
        if not self.next_is(split, start):
            raise ValueError(f"take {split.level}/{split.split} at {start}: not the chain's next segment")
        segment = self._order.popleft()
        for _ in range(segment.batches):
            try:
                features = next(self._features)
            except StopIteration:
                self.broken = True
                return
            owner, index, record_ids, labels = self._received.popleft()
            if owner is not segment:  # its stream ended short: these are the next segment's
                self.broken = True
                return
            yield index, record_ids, labels, features

    def close(self) -> None:
        """Stop the extraction and the streams of the segments not taken."""
        close = getattr(self._features, "close", None)
        if close is not None:
            close()
        with self._lock:
            self._ended = True
            left = list(self._planned)
            self._planned.clear()
        for segment in left:
            segment.close()
        self._order.clear()


__all__ = ["OpenedStream", "Segment", "SplitChain"]
