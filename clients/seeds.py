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

import numpy as np

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
RELATION_SEED_NAME = "relation-module"
"""RelationNet's relation module without ``--init-seed``: ``neutral_relation(..., derive_seed(--seed, RELATION_SEED_NAME))``."""
FINETUNE_HEAD_SEED_NAME = "finetune-head"
"""The Finetune baseline's new head of episode i: ``derive_seed(--seed, FINETUNE_HEAD_SEED_NAME, i)``."""
BATCH_SOURCES_SEED_NAME = "batch-sources"
"""The MD baseline's source of each training batch: ``batch_sources``."""
_SOURCE_BLOCK = 4096


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed hashed from ``seed`` and ``parts`` (hashing, not adding, so no two inputs collide)."""
    digest = hashlib.sha256(json.dumps([seed, *map(str, parts)]).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def backbone_seed(seed: int, seed_name: str, target: str) -> int:
    """The seed of a named or ``module:callable`` backbone's random weights: the command's
    ``seed``, its ``seed_name`` and the backbone (``BackboneSpec.target``), the same in both
    frameworks."""
    return derive_seed(int(seed), seed_name, target)


def batch_sources(seed: int, sources: int, end: int) -> np.ndarray:
    """The source (0 .. sources - 1) of each training batch 0 .. end - 1 of the MD baseline,
    drawn uniformly and independently per batch, as Meta-Dataset draws each batch's source
    (``data/pipeline.py``). A pure function of (seed, batch index): blocks of 4096 draws, each
    from a generator keyed by (``derive_seed(seed, BATCH_SOURCES_SEED_NAME)``, block), so a longer
    run extends a shorter one's sequence."""
    if sources < 1 or end < 0:
        raise ValueError(f"sources, end: got {sources}, {end}, expected sources >= 1 and end >= 0")
    if sources == 1 or end == 0:
        return np.zeros(end, np.int64)
    key = derive_seed(seed, BATCH_SOURCES_SEED_NAME)
    blocks = [np.random.default_rng([key, block]).integers(0, sources, _SOURCE_BLOCK)
              for block in range(-(-end // _SOURCE_BLOCK))]
    return np.concatenate(blocks)[:end].astype(np.int64)
