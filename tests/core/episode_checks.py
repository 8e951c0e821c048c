"""Shared helpers for the episode tests: every invariant the paper states, and spec builders.

``check_episode`` recomputes what it can independently of the sampler (query size,
caps, group membership, fingerprint) and asserts every invariant of Meta-Dataset
Sec. 3.2 / Appendix .2 plus this project's (sorted, disjoint, in-range record ids).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from conftest import require_reference

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md import (
    ClassStructure,
    Episode,
    build_plan,
    episode_fingerprint,
)
from sampler_server.core.seeding import Protocol
from sampler_server.core.spec import DatasetSpec, NodeSpec
from sampler_server.store.manifest import ClassInfo, Split

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference"
MD_SPECS = REFERENCE / "md_specs"


def check_episode(spec: DatasetSpec, split: Split, config: EpisodeConfig, episode: Episode) -> None:
    plan = build_plan(spec, split, config)
    classes = spec.classes
    ids = episode.class_ids
    candidates = set(plan.candidates)
    # Classes: distinct, inside the split, candidates (enough images).
    assert len(set(ids)) == len(ids) >= 1
    assert all(classes[c].split is split for c in ids)
    assert set(ids) <= candidates
    assert episode.source == spec.source and episode.split is split
    ways = len(ids)
    # Hierarchy: one node / one alphabet, used exactly when it must be.
    hierarchy_always = plan.structure is not ClassStructure.FLAT and not config.all_classes
    if episode.group is not None:
        assert hierarchy_always and config.ignore_hierarchy_probability < 1
        group = {g.id: g for g in plan.groups}[episode.group]
        assert set(ids) <= set(group.classes)
        if plan.structure is ClassStructure.GROUPS:
            assert {classes[c].group for c in ids} == {episode.group}
        else:
            nodes = {node.id: node.leaves for node in spec.nodes_in(split) or ()}
            assert set(ids) <= set(nodes[episode.group])
    elif hierarchy_always:
        assert config.ignore_hierarchy_probability > 0
    # Ways.
    if config.all_classes:
        assert ids == plan.candidates
    elif config.num_ways is not None:
        assert ways == config.num_ways
    elif episode.group is None:
        assert config.min_ways <= ways <= min(config.max_ways_upper_bound, len(candidates))
    else:
        group_size = len({g.id: g for g in plan.groups}[episode.group].classes)
        assert config.min_ways <= ways <= min(config.max_ways_upper_bound, group_size)
        if plan.structure is ClassStructure.NODES:
            assert ways == min(group_size, config.max_ways_upper_bound)
    # Query: class-balanced, the paper's size.
    counts = [classes[c].count for c in ids]
    query_sizes = {len(q) for q in episode.query}
    assert len(query_sizes) == 1
    (q,) = query_sizes
    if config.num_query is not None:
        assert q == config.num_query
    elif config.num_support is not None:
        assert q == min(config.max_num_query, min(n - config.num_support for n in counts))
    else:
        assert q == min(config.max_num_query, min(n // 2 for n in counts))
        assert q <= 10 or config.max_num_query > 10
    assert q >= 1
    # Support.
    shots = episode.shots
    assert min(shots) >= 1
    if config.num_support is not None:
        assert set(shots) == {config.num_support}
    else:
        assert sum(shots) <= config.max_support_set_size
        cap = config.max_support_size_contrib_per_class
        assert sum(shots) <= sum(min(cap, n - q) for n in counts)
        assert all(k <= n - q for k, n in zip(shots, counts))
    # Records: in the class's range, sorted, distinct, support and query disjoint.
    for c, support, query in zip(ids, episode.support, episode.query):
        start, end = classes[c].start, classes[c].end
        for part in (support, query):
            assert list(part) == sorted(set(part))
            assert all(start <= r < end for r in part)
        assert not set(support) & set(query)
    assert episode.fingerprint == episode_fingerprint(
        protocol=Protocol.META_DATASET,
        source=spec.source,
        split=split,
        store_fingerprint=spec.fingerprint,
        config_hash=config.config_hash(),
        class_ids=ids,
        support=episode.support,
        query=episode.query,
    )


def spec_with_split(
    source: str,
    counts: Sequence[int],
    split: Split = Split.TEST,
    *,
    others: Sequence[int] = (),
    groups: Sequence[str] | None = None,
    nodes: Sequence[tuple[str, Sequence[int]]] | None = None,
) -> DatasetSpec:
    """Classes ``counts`` in ``split`` first, then ``others`` spread over the other splits."""
    rest = [s for s in Split if s is not split]
    splits = [split] * len(counts) + [rest[i % 2] for i in range(len(others))]
    all_groups = None if groups is None else list(groups) + [f"other_{i % 3}" for i in range(len(others))]
    hierarchy = None
    if nodes is not None:
        ordered = sorted((name, tuple(sorted(set(leaves)))) for name, leaves in nodes)
        hierarchy = {split: tuple(NodeSpec(name, leaves) for name, leaves in ordered)}
    return DatasetSpec.from_counts(
        source, list(counts) + list(others), splits, groups=all_groups, hierarchy=hierarchy, fingerprint=f"fp-{source}"
    )


def reference_spec(name: str) -> DatasetSpec:
    """A spec with the reference's per-class image counts and splits (``require_reference``:
    a missing ../shared fails the test unless the opt-out variable is set)."""
    path = require_reference(f"md_specs/{name}_dataset_spec.json")
    data = json.loads(path.read_text())
    counts = {int(k): int(v) for k, v in data["images_per_class"].items()}
    if "classes_per_split" in data:
        sizes = data["classes_per_split"]
        splits = [Split.TRAIN] * sizes["TRAIN"] + [Split.VALID] * sizes["VALID"] + [Split.TEST] * sizes["TEST"]
        return DatasetSpec.from_counts(name, [counts[i] for i in range(len(splits))], splits, fingerprint=name)
    per_split = data["superclasses_per_split"]
    super_splits = [Split.TRAIN] * per_split["TRAIN"] + [Split.VALID] * per_split["VALID"] + [Split.TEST] * per_split["TEST"]
    splits, groups = [], []
    for index, split in enumerate(super_splits):
        size = int(data["classes_per_superclass"][str(index)])
        splits += [split] * size
        groups += [data["superclass_names"][str(index)]] * size
    return DatasetSpec.from_counts(
        name, [counts[i] for i in range(len(splits))], splits, groups=groups, fingerprint=name
    )


def ilsvrc_manifest() -> SimpleNamespace:
    """A manifest-like object with the 1000 ILSVRC-2012 wnids and their image counts, split None."""
    path = require_reference("md_specs/ilsvrc_2012_num_leaf_images.json")
    images = json.loads(path.read_text())
    classes, start = [], 0
    for index, wnid in enumerate(sorted(images)):
        classes.append(ClassInfo(id=index, name=wnid, start=start, end=start + images[wnid], wnid=wnid))
        start += images[wnid]
    return SimpleNamespace(source="ilsvrc_2012", fingerprint="sha256:ilsvrc-reference-counts", classes=tuple(classes))
