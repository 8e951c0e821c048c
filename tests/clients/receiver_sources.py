"""Item sources for ``clients.receiver``'s tests: module-level, so a child process imports them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class Item:
    images: np.ndarray  # uint8 [rows, 8, 8, 3], every value the item's index
    labels: np.ndarray  # int64 [rows]: index, index + 1, ...
    name: str


def numbered(count: int, fail_at: int | None = None, growing: bool = False) -> Iterator[tuple[int, Item, int]]:
    """``count`` items, each one's arrays saying its index; ``growing``: each larger than the last
    (the ring's slots must regrow); ``fail_at``: raise there instead."""
    for index in range(count):
        if index == fail_at:
            raise ValueError(f"source broke at item {index}")
        rows = 4 + (index * 40 if growing else 0)
        yield index, Item(np.full((rows, 8, 8, 3), index % 251, np.uint8), np.arange(rows, dtype=np.int64) + index,
                          f"item {index}"), rows


def endless_then_pid(path: str) -> Iterator[tuple[int, Item, int]]:
    """Writes the child's pid to ``path``, then yields items slowly for ever."""
    with open(path, "w") as out:
        out.write(str(os.getpid()))
    index = 0
    while True:
        yield index, Item(np.zeros((2, 8, 8, 3), np.uint8), np.zeros(2, np.int64), ""), 2
        index += 1
        time.sleep(0.05)
