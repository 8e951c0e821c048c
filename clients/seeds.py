"""Named seeds: every random draw of a trainer is seeded from the run's seed and a name.

A draw seeded this way does not move when another draw is added or reordered, and
the same (seed, name) gives the same draw in either framework.
"""

from __future__ import annotations

import hashlib
import json


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed hashed from ``seed`` and ``parts`` (hashing, not adding, so no two inputs collide)."""
    digest = hashlib.sha256(json.dumps([seed, *map(str, parts)]).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
