"""The constants every ImageNet-CoG part shares (splits, service, trainers, reports).

Their own module so the submodules read them without importing the package that
re-exports those submodules (no import circle).
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
