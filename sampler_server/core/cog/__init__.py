"""ImageNet-CoG: concept generalization levels computed from WordNet 3.0 and IN-21K counts.

Pure functions (the only I/O reads the files shipped in the package: the WordNet noun
graph and the IN-1K wnid list). The levels are a function of the per-concept image
counts and the level configuration (``level_size``, ``min_images``) alone: no set or
dict order, hash seed or input order reaches a result.

Modules:
- ``in1k``: the 1000 ILSVRC-2012 (seen) wnids, shipped; ``build_in1k`` rebuilds the file;
- ``listed``: the 70 concepts of the paper's Table 2;
- ``eligibility``: the six sequential rules that select the eligible unseen concepts;
- ``similarity``: the WordNet fragment, information content and Lin similarity;
- ``levels``: ranking, the five levels, canonical JSON, counts from manifests;
- ``official_files``: naver/cog's published level and split pickles, read by a
  restricted unpickler; ``official_levels``: levels and splits from them, and how our
  computed levels compare;
- ``constants``: what every CoG part shares (splits, service, trainers, reports), re-exported here.
"""

from __future__ import annotations

from sampler_server.core.cog.constants import (
    LEVEL_NAMES,
    LEVEL_SIZE,
    MAX_TRAIN_PER_CONCEPT,
    MIN_IMAGES,
    NUM_LEVELS,
    PERSON_WNID,
    RULES,
    SEEDS,
    SEEN_LEVEL,
    SHOTS,
    SOURCE,
    TEST_PER_CONCEPT,
    VAL_FRACTION,
)
from sampler_server.core.cog.eligibility import Eligibility, select_eligible
from sampler_server.core.cog.in1k import in1k_wnids
from sampler_server.core.cog.levels import (
    CogLevels,
    Level,
    compute_levels,
    counts_from_manifests,
    parse_counts,
    validate_counts,
)
from sampler_server.core.cog.listed import LISTED_WNIDS
from sampler_server.core.cog.similarity import Fragment

__all__ = [
    "LEVEL_NAMES",
    "LEVEL_SIZE",
    "LISTED_WNIDS",
    "MAX_TRAIN_PER_CONCEPT",
    "MIN_IMAGES",
    "NUM_LEVELS",
    "PERSON_WNID",
    "RULES",
    "SEEDS",
    "SEEN_LEVEL",
    "SHOTS",
    "SOURCE",
    "TEST_PER_CONCEPT",
    "VAL_FRACTION",
    "CogLevels",
    "Eligibility",
    "Fragment",
    "Level",
    "compute_levels",
    "counts_from_manifests",
    "in1k_wnids",
    "parse_counts",
    "select_eligible",
    "validate_counts",
]
