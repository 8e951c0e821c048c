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
  computed levels compare.

The constants below are shared by every CoG part (splits, service, trainers, reports).
"""

from __future__ import annotations

SOURCE = "imagenet21k"
"""Source kind (manifest.source) of the IN-21K store the levels are drawn from."""
MIN_IMAGES = 782
"""Eligibility: a concept needs at least this many images (the fewest of any IN-1K class)."""
LEVEL_SIZE = 1000
"""Concepts per level L1..L5, as many as IN-1K has."""
NUM_LEVELS = 5
LEVEL_NAMES: tuple[str, ...] = ("L1", "L2", "L3", "L4", "L5")
"""From most to least similar to IN-1K."""
SEEN_LEVEL = "IN-1K"
"""The seen concepts, served from an ILSVRC-2012 store, evaluated beside L1..L5."""
PERSON_WNID = "n00007846"
"""person, individual, someone...: its whole subtree is left out (offensive concepts)."""
TEST_PER_CONCEPT = 50
MAX_TRAIN_PER_CONCEPT = 1300
SHOTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
SEEDS: tuple[int, ...] = (1, 2, 3, 4, 5)
VAL_FRACTION = 0.2
RULES: tuple[str, ...] = ("in1k", "in1k_ancestor", "too_few_images", "person", "not_leaf", "listed")
"""Eligibility rules in the order they apply; the keys of ``CogLevels.excluded``."""

# Re-exports come after the constants: the submodules import them from here.
from sampler_server.core.cog.eligibility import Eligibility, select_eligible  # noqa: E402
from sampler_server.core.cog.in1k import in1k_wnids  # noqa: E402
from sampler_server.core.cog.levels import (  # noqa: E402
    CogLevels,
    Level,
    compute_levels,
    counts_from_manifests,
    parse_counts,
    validate_counts,
)
from sampler_server.core.cog.listed import LISTED_WNIDS  # noqa: E402
from sampler_server.core.cog.similarity import Fragment  # noqa: E402

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
