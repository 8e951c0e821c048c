"""Resume state of a stream in a user's own loop: a small JSON-able dict.

A dataset reads a window [start, start + count) (count 0 = unbounded) of one
canonical index space of one request. Its state is the window's next index: the
indices before it are consumed, and a dataset that loads the state yields exactly
the items from there on that an unbroken run would have yielded.

Consumption is counted in the consumer's order. One process (any number of
DataLoader workers) sees start, start + 1, ...; with W ranks, rank r sees
start + r, start + r + W, ... (``clients.torch`` gives worker w of rank r the shard
w * W + r, so a rank's order does not depend on its workers). Ranks that consume in
lockstep have consumed a prefix of the window after each step, so the state after
consuming index i on any rank is start + ((i - start) // W + 1) * W, the same on
every rank, and it resumes under any rank or worker count.

The state names the request it belongs to (``kind`` and ``request``) and the window;
loading a state of another request or window is refused with the fields that differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

STATE_FORMAT = 1


def request_identity(message: Message) -> dict[str, Any]:
    """A request as a JSON-able dict without its index window (canonical: field names)."""
    data = json_format.MessageToDict(message, preserving_proto_field_name=True)
    for window in ("start_index", "count", "index_step"):
        data.pop(window, None)
    return json.loads(json.dumps(data, sort_keys=True))


class StreamCursor:
    """The next index of a window; ``consumed`` advances it, ``state_dict`` saves it."""

    def __init__(self, kind: str, request: Message, start: int, count: int) -> None:
        if start < 0 or count < 0:
            raise ValueError(f"start, count: got {start}, {count}, expected integers >= 0")
        self.kind = kind
        self.request = request_identity(request)
        self.start = start
        self.count = count
        self.next_index = start

    @property
    def end(self) -> int | None:
        """One past the window's last index; None when unbounded."""
        return self.start + self.count if self.count else None

    def begin_pass(self) -> tuple[int, int]:
        """(first index, count; 0 = unbounded) a new iteration reads: from the next index,
        or the whole window again once a pass has consumed all of it (a new epoch)."""
        if self.end is None:
            return self.next_index, 0
        if self.next_index >= self.end:
            self.next_index = self.start
        return self.next_index, self.end - self.next_index

    def after(self, index: int, ranks: int = 1) -> int:
        """The window's next index once ``index`` is consumed (ranks in lockstep)."""
        if index < self.start or (self.end is not None and index >= self.end):
            raise ValueError(f"last_index: got {index}, expected an index of the window "
                             f"[{self.start}, {self.end if self.end is not None else 'unbounded'})")
        following = self.start + ((index - self.start) // ranks + 1) * ranks
        return min(following, self.end) if self.end is not None else following

    def consumed(self, index: int, ranks: int = 1) -> None:
        self.next_index = max(self.next_index, self.after(index, ranks))

    def state_dict(self, last_index: int | None = None, ranks: int = 1) -> dict[str, Any]:
        next_index = self.next_index if last_index is None else max(self.next_index, self.after(last_index, ranks))
        return {"format": STATE_FORMAT, "kind": self.kind, "request": self.request, "start": self.start,
                "count": self.count, "next_index": next_index}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"state: format {state.get('format')!r}, expected {STATE_FORMAT}")
        if state.get("kind") != self.kind:
            raise ValueError(f"state: it is of a stream of {state.get('kind')}, this dataset streams {self.kind}")
        theirs = state.get("request") or {}
        if theirs != self.request:
            differing = sorted(key for key in set(theirs) | set(self.request) if theirs.get(key) != self.request.get(key))
            details = "; ".join(f"{key}: {theirs.get(key)!r} there, {self.request.get(key)!r} here" for key in differing)
            raise ValueError(f"state: it is of another request ({details})")
        for key in ("start", "count"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"state: {key} {state.get(key)!r} there, {getattr(self, key)!r} here "
                                 "(load a state into a dataset of the same window)")
        next_index = state.get("next_index")
        end = self.end
        if not isinstance(next_index, int) or next_index < self.start or (end is not None and next_index > end):
            raise ValueError(f"state: next_index got {next_index!r}, expected {self.start} to "
                             f"{end if end is not None else 'unbounded'}")
        self.next_index = next_index


def shard_window(start: int, count: int, shard: int, num_shards: int) -> tuple[int, int, int]:
    """(start, count, step) of shard ``shard`` of indices [start, start + count): every
    index i with (i - start) % num_shards == shard, in order. ``count`` 0 = unbounded;
    a bounded window with no index for this shard returns count -1 (nothing to do)."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard: got {shard}, expected 0 to {num_shards - 1}")
    if count == 0:
        return start + shard, 0, num_shards
    mine = max(0, -(-(count - shard) // num_shards))
    return start + shard, (mine if mine else -1), num_shards
