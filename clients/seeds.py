"""Named seeds: every random draw of a trainer is seeded from the run's seed and a name.

A draw seeded this way does not move when another draw is added or reordered, and
the same (seed, name) gives the same draw in either framework. The names whose draws
both frameworks must agree on live here, once, and the PyTorch and TensorFlow modules
import them: a named or ``module:callable`` backbone's random weights
(``backbone_seed``, under the command's name) and the MD baseline's linear head.
"""

from __future__ import annotations

import hashlib
import json

MD_BACKBONE_SEED_NAME = "backbone"
"""The MD trainer's backbone weights: ``backbone_seed(--seed, MD_BACKBONE_SEED_NAME, name)``."""
TRANSFER_BACKBONE_SEED_NAME = "scratch"
"""The transfer command's backbone weights: ``backbone_seed(--seed, TRANSFER_BACKBONE_SEED_NAME, name)``."""
COG_BACKBONE_SEED_NAME = MD_BACKBONE_SEED_NAME
"""The cog command's (seed 0, no ``--seed``): the MD trainer's weights at ``--seed 0``."""
EVALUATE_BACKBONE_SEED_NAME = "evaluate"
"""The evaluate command's (seed 0), saved once and loaded by each protocol it runs."""
HEAD_SEED_NAME = "head"
"""The MD baseline's linear head: ``derive_seed(--seed, HEAD_SEED_NAME)``."""


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed hashed from ``seed`` and ``parts`` (hashing, not adding, so no two inputs collide)."""
    digest = hashlib.sha256(json.dumps([seed, *map(str, parts)]).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def backbone_seed(seed: int, seed_name: str, target: str) -> int:
    """The seed of a named or ``module:callable`` backbone's random weights: the command's
    ``seed``, its ``seed_name`` and the backbone (``BackboneSpec.target``), the same in both
    frameworks."""
    return derive_seed(int(seed), seed_name, target)
