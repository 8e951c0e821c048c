"""Training items received and staged ahead of the step, in the training process.

``Feed(items, stage)`` starts a thread at once that pulls (index, item, images) from
``items`` (the service's streams), applies ``stage`` (the framework's: pad to a shape
bucket, copy to the device) and queues the result, ``depth`` items ahead. The
trainer creates it before it builds its model, so the first episode is received
while the model is constructed and waits for nothing when the first step asks.

Why a thread and not DataLoader worker processes: spawning workers costs seconds
(each imports torch and connects anew: about 3 s before the first episode), a
forked worker would inherit the parent's gRPC state, and worker processes copy every
episode three more times (into a tensor, into shared memory, into pinned memory).
gRPC's C core receives off the GIL, parsing leaves the pixels as views of the
received bytes, and the one copy of staging (into pinned memory) releases the GIL,
so the training thread keeps the interpreter almost to itself. Several streams
(``streams`` in ``Run``) spread receiving over several connections' worth of
server work.

Order and errors: items come out in the order ``items`` yields them; an error
raised while receiving or staging is raised by ``next`` in the consumer, after the
items before it. ``close`` stops the thread and the streams under it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

_DONE = object()


class Feed:
    """An iterator of staged (index, item, images) tuples filled by a background thread."""

    def __init__(self, items: Iterator[tuple[int, Any, int]], stage: Callable[[Any], Any], depth: int = 2) -> None:
        self._items = items
        self._stage = stage
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self.received = threading.Event()  # set once the first item is staged (tests, benches)
        self._thread = threading.Thread(target=self._run, name="trainer-feed", daemon=True)
        self._thread.start()

    def _put(self, value: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for index, item, images in self._items:
                staged = (index, self._stage(item), images)
                self.received.set()
                if not self._put(staged):
                    return
            self._put(_DONE)
        except BaseException as error:  # raised in the consumer, in order
            self._put(error)
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> "Feed":
        return self

    def __next__(self) -> tuple[int, Any, int]:
        value = self._queue.get()
        if value is _DONE:
            self._queue.put(_DONE)  # stays exhausted
            raise StopIteration
        if isinstance(value, BaseException):
            raise value
        return value

    def close(self) -> None:
        """Stop receiving; returns within seconds even while a stream is stalled."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=5)
