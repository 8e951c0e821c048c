"""The closest known names to a name nobody knows: "did you mean 'aircraft'?" (pure).

One rule for every layer that refuses a name (the server's NOT_FOUND for a store or source,
an unknown VTAB task, the trainers' ``--tasks``), so a typo gets the same hint wherever it is
made. The closeness is ``difflib.get_close_matches`` (the standard library's ratio of
matching characters), at most two names, best first; nothing when none is close.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.6
"""difflib's default: 'aircaft' and 'aircraft' score 0.93, 'omniglot' and 'aircraft' 0.25."""


def closest(wanted: object, known: Iterable[str], count: int = 2) -> list[str]:
    """The known names closest to ``wanted`` (a string), best first; none when nothing is close."""
    if not isinstance(wanted, str) or not wanted:
        return []
    return difflib.get_close_matches(wanted, sorted(set(known)), n=count, cutoff=CUTOFF)


def did_you_mean(wanted: object, known: Iterable[str]) -> str:
    """``"; did you mean 'aircraft'?"`` (or ``'a' or 'b'``) to end a refusal with; ``""`` when none is close."""
    names = closest(wanted, known)
    return f"; did you mean {' or '.join(repr(name) for name in names)}?" if names else ""


__all__ = ["closest", "did_you_mean"]
