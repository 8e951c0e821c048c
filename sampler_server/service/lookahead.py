"""One stream's lookahead: the episodes it started before their turn, and what they hold
of the server's ``LookaheadBudget``.

A stream starts an episode ahead of its turn only while the server-wide budget has room
for it, and charges a packed copy of its next reply (memory beside the pixels) to the
budget too. Every byte a stream takes is on this ledger until it is given back, so the
stream's code never carries a charge in a local: an episode taken off the queue to be
sent keeps its charge here until it is handed over to the send budget, and ``close``
gives back whatever is left. However a stream ends (its last reply sent, its client
gone, a deadline, the watchdog, a damaged record found while reading or decoding, the
generator closed early), its share of the budget returns whole.

Pure bookkeeping: no gRPC, no threads of its own, no lock. One stream's thread calls it;
the watchdog calls ``shed`` only while that thread is suspended in a send, and the
stream's own lock keeps the two apart.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sampler_server.service.admission import LookaheadBudget


class Startable(Protocol):
    """An episode whose images are read or decoded once started (``stream.Prepared``):
    ``nbytes`` is what it holds once started (an estimate before, for encoded images)."""

    nbytes: int

    def start(self) -> object: ...

    def discard(self) -> None: ...


T = TypeVar("T", bound=Startable)


@dataclass
class Ahead(Generic[T]):
    """An episode started before it is sent: its index, and the bytes of the budget it holds
    (0 when it was started because its turn had come)."""

    index: int
    item: T
    charge: int


class Lookahead(Generic[T]):
    """Up to ``depth`` episodes of one stream started ahead, in order, charged to ``budget``.

    The life of a charge: ``start_ahead`` takes it (or refuses, taking nothing) and makes
    an estimate the started size; ``take_head`` moves the next episode out of the queue,
    its charge still held; ``take_packed`` charges a packed copy of the new head;
    ``handed_over`` gives back the taken episode's charge and its packed copy's (from
    there the send budget holds the reply); ``shed`` and ``close`` give back everything.
    ``held`` is always what this stream has of the budget."""

    def __init__(self, budget: LookaheadBudget, depth: int) -> None:
        self.budget = budget
        self.depth = depth
        self._ahead: collections.deque[Ahead[T]] = collections.deque()
        self._taken: T | None = None  # the episode being turned into its reply
        self._taken_charge = 0
        self._packed_charge = 0  # a packed copy of the head, built beside the reply being sent

    def __len__(self) -> int:
        return len(self._ahead)

    @property
    def full(self) -> bool:
        return len(self._ahead) >= self.depth

    @property
    def held(self) -> int:
        """Bytes of the budget this stream holds now."""
        return sum(entry.charge for entry in self._ahead) + self._taken_charge + self._packed_charge

    def head(self) -> Ahead[T] | None:
        """The next episode to send, if one is started."""
        return self._ahead[0] if self._ahead else None

    def start_ahead(self, index: int, item: T) -> bool:
        """Start ``item`` before its turn if the budget has room for ``item.nbytes``; False,
        with nothing started or taken, if not. What ``item.start`` raises propagates, with
        nothing held for it."""
        if not self.budget.try_take(item.nbytes):
            return False
        self._start(index, item, item.nbytes)
        return True

    def start_due(self, index: int, item: T) -> None:
        """Start ``item`` now, its turn having come: whatever the budget, charged nothing."""
        self._start(index, item, 0)

    def _start(self, index: int, item: T, charge: int) -> None:
        try:
            item.start()
        except BaseException:
            self.budget.give(charge)
            raise
        if charge:  # an encoded episode's estimate becomes its size
            self.budget.give(charge - item.nbytes)
            charge = item.nbytes
        self._ahead.append(Ahead(index, item, charge))

    def take_head(self) -> T:
        """The next episode, out of the queue to be turned into its reply; its charge stays
        held until ``handed_over`` (or ``close``, if building the reply fails)."""
        entry = self._ahead.popleft()
        self._taken = entry.item
        self._taken_charge += entry.charge
        return entry.item

    def take_packed(self, nbytes: int) -> bool:
        """Charge a packed copy of the head (``nbytes``) if the budget has room; False if not."""
        if not self.budget.try_take(nbytes):
            return False
        self._packed_charge += nbytes
        return True

    def drop_packed(self) -> None:
        """The packed copy was dropped: its charge is given back."""
        self.budget.give(self._packed_charge)
        self._packed_charge = 0

    def handed_over(self) -> None:
        """The taken episode's reply goes to gRPC, where the send budget holds it: its charge,
        and its packed copy's, are given back."""
        self.budget.give(self._taken_charge + self._packed_charge)
        self._taken = None
        self._taken_charge = self._packed_charge = 0

    def shed(self) -> list[int]:
        """Drop every episode started ahead (their images and their charges) while the
        stream's client reads nothing; the indices dropped, in order, to prepare again.
        A packed copy is the stream's to drop first (``drop_packed``, once built)."""
        dropped = [entry.index for entry in self._ahead]
        items = [entry.item for entry in self._ahead]
        charge = sum(entry.charge for entry in self._ahead)
        self._ahead.clear()
        self._discard(items, charge)
        return dropped

    def close(self) -> None:
        """The stream ended, however it ended: discard what was started and give back
        everything still held (``held`` is 0 from here)."""
        items = [entry.item for entry in self._ahead]
        if self._taken is not None:  # building its reply failed
            items.append(self._taken)
        charge = self.held
        self._ahead.clear()
        self._taken = None
        self._taken_charge = self._packed_charge = 0
        self._discard(items, charge)

    def _discard(self, items: list[T], charge: int) -> None:
        """Free what ``items`` hold, then give ``charge`` back (given back even if freeing fails)."""
        try:
            for item in items:
                item.discard()
        finally:
            self.budget.give(charge)
