"""Property tests (hypothesis): every invariant of Meta-Dataset episodes over many seeds and indices.

Invariants (``episode_checks.check_episode``): query class-balanced with the paper's
size (at most 10 per class); support at least 1 per class, at most 500 in total and
at most the sum over classes of min(100, images left after the query); support and
query disjoint; classes distinct and inside the split; ways in range; Omniglot-like
episodes inside one alphabet; ImageNet-like episodes inside one eligible node's
leaves (all of them, or 50); fingerprints recomputable. Also random access.
"""

from __future__ import annotations

import functools

import pytest
from conftest import examples
from episode_checks import (
    check_episode,
    ilsvrc_manifest,
    reference_spec,
    spec_with_split,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.imagenet_spec import imagenet_spec
from sampler_server.core.md import (
    EpisodeSampler,
    MultiSourceSampler,
    sample_episode,
    sample_multisource,
)
from sampler_common.checks import MAX_INDEX, MAX_SEED
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, MAX_SEED)
indices = st.one_of(st.integers(0, 1000), st.integers(0, MAX_INDEX))
class_sizes = st.one_of(st.integers(2, 25), st.integers(26, 400), st.integers(401, 200_000))
splits = st.sampled_from(list(Split))
probabilities = st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0])


@st.composite
def flat_specs(draw: st.DrawFn, min_classes: int = 5, max_classes: int = 70) -> tuple[DatasetSpec, Split]:
    split = draw(splits)
    counts = draw(st.lists(class_sizes, min_size=min_classes, max_size=max_classes))
    others = draw(st.lists(class_sizes, max_size=6))
    return spec_with_split("flat", counts, split, others=others), split


@st.composite
def variable_configs(draw: st.DrawFn, max_min_ways: int = 5) -> EpisodeConfig:
    min_ways = draw(st.integers(1, max_min_ways))
    max_ways = draw(st.integers(min_ways, 60))
    low = draw(st.sampled_from([-2.0, -0.6931471805599453, 0.0]))
    return EpisodeConfig(
        min_ways=min_ways,
        max_ways_upper_bound=max_ways,
        max_num_query=draw(st.integers(1, 15)),
        max_support_set_size=draw(st.integers(max_ways, 700)),
        max_support_size_contrib_per_class=draw(st.integers(1, 150)),
        min_log_weight=low,
        max_log_weight=draw(st.sampled_from([low, low + 0.5, 0.6931471805599453 + max(low, 0.0)])),
        min_examples_in_class=draw(st.sampled_from([0, 0, 2])),
    )


def _check_indices(spec: DatasetSpec, split: Split, config: EpisodeConfig, seed: int, index: int) -> None:
    sampler = EpisodeSampler(spec, split, config)
    for offset in range(3):
        if index + offset <= MAX_INDEX:
            check_episode(spec, split, config, sampler.sample(seed, index + offset))


@SETTINGS
@given(spec_split=flat_specs(), seed=seeds, index=indices)
def test_flat_default_config(spec_split: tuple[DatasetSpec, Split], seed: int, index: int) -> None:
    spec, split = spec_split
    _check_indices(spec, split, EpisodeConfig(), seed, index)


@SETTINGS
@given(spec_split=flat_specs(), config=variable_configs(), seed=seeds, index=indices)
def test_flat_any_knobs(spec_split: tuple[DatasetSpec, Split], config: EpisodeConfig, seed: int, index: int) -> None:
    spec, split = spec_split
    _check_indices(spec, split, config, seed, index)


@SETTINGS
@given(
    ways=st.integers(1, 10),
    shots=st.integers(1, 10),
    query=st.integers(1, 15),
    extra=st.lists(st.integers(0, 50), min_size=20, max_size=40),
    probability=probabilities,
    seed=seeds,
    index=indices,
)
def test_fixed_ways_shots_query(
    ways: int, shots: int, query: int, extra: list[int], probability: float, seed: int, index: int
) -> None:
    counts = [shots + query + e for e in extra]
    groups = [f"alphabet_{i % 2}" for i in range(len(counts))]  # each alphabet has >= 10 classes
    config = EpisodeConfig.fixed(ways, shots, query, ignore_hierarchy_probability=probability)
    for spec in (spec_with_split("flat", counts), spec_with_split("grouped", counts, groups=groups)):
        _check_indices(spec, Split.TEST, config, seed, index)


@SETTINGS
@given(
    counts=st.lists(class_sizes, min_size=1, max_size=60),
    shots=st.one_of(st.none(), st.integers(1, 1)),
    seed=seeds,
    index=indices,
)
def test_all_classes(counts: list[int], shots: int | None, seed: int, index: int) -> None:
    spec = spec_with_split("flat", counts, others=[7, 9])
    config = EpisodeConfig.all_of_split(num_support=shots)
    episode = sample_episode(spec, Split.TEST, config, seed, index)
    check_episode(spec, Split.TEST, config, episode)
    assert episode.class_ids == tuple(range(len(counts)))


@st.composite
def alphabet_specs(draw: st.DrawFn) -> DatasetSpec:
    sizes = draw(st.lists(st.integers(1, 60), min_size=1, max_size=12).filter(lambda s: max(s) >= 5))
    groups, counts = [], []
    for index, size in enumerate(sizes):
        groups += [f"alphabet_{index:02d}"] * size
        counts += draw(st.lists(st.sampled_from([2, 3, 20, 20, 20]), min_size=size, max_size=size))
    return spec_with_split("omniglot_like", counts, groups=groups, others=[20, 20])


@SETTINGS
@given(spec=alphabet_specs(), probability=probabilities, seed=seeds, index=indices)
def test_omniglot_like_within_one_alphabet(spec: DatasetSpec, probability: float, seed: int, index: int) -> None:
    config = EpisodeConfig(ignore_hierarchy_probability=probability)
    sampler = EpisodeSampler(spec, Split.TEST, config)
    # Alphabets with fewer than min_ways characters are never drawn.
    assert all(len(g.classes) >= config.min_ways for g in sampler.plan.groups)
    for offset in range(3):
        episode = sampler.sample(seed, min(index + offset, MAX_INDEX))
        check_episode(spec, Split.TEST, config, episode)
        if probability == 0.0:
            assert episode.group is not None


@st.composite
def node_specs(draw: st.DrawFn) -> DatasetSpec:
    num_classes = draw(st.integers(5, 150))
    counts = draw(st.lists(class_sizes, min_size=num_classes, max_size=num_classes))
    leaf_sets = st.sets(st.integers(0, num_classes - 1), min_size=min(5, num_classes), max_size=num_classes)
    nodes = draw(st.lists(leaf_sets, min_size=1, max_size=12))
    named = [(f"n{index:08d}", sorted(leaves)) for index, leaves in enumerate(nodes)]
    return spec_with_split("imagenet_like", counts, nodes=named, others=[30, 40])


@SETTINGS
@given(spec=node_specs(), probability=probabilities, seed=seeds, index=indices)
def test_imagenet_like_within_one_node(spec: DatasetSpec, probability: float, seed: int, index: int) -> None:
    _check_indices(spec, Split.TEST, EpisodeConfig(ignore_hierarchy_probability=probability), seed, index)


@functools.cache
def _ilsvrc(variant: str) -> DatasetSpec:
    return imagenet_spec(ilsvrc_manifest(), variant=variant)


@functools.cache
def _reference(name: str) -> DatasetSpec | None:
    return reference_spec(name)


@settings(max_examples=examples(60), deadline=None)
@given(split=splits, seed=seeds, index=indices)
def test_real_imagenet_episodes_inside_one_eligible_node(split: Split, seed: int, index: int) -> None:
    spec = _ilsvrc("md")
    config = EpisodeConfig()
    sampler = EpisodeSampler(spec, split, config)
    for offset in range(5):
        episode = sampler.sample(seed, min(index + offset, MAX_INDEX))
        check_episode(spec, split, config, episode)
        assert episode.group is not None and 5 <= episode.ways <= 50


@settings(max_examples=examples(60), deadline=None)
@given(
    name=st.sampled_from(["omniglot", "fungi", "quickdraw", "traffic_sign", "mscoco", "aircraft", "cu_birds"]),
    split=splits,
    seed=seeds,
    index=indices,
)
def test_reference_class_sizes(name: str, split: Split, seed: int, index: int) -> None:
    spec = _reference(name)
    if not spec.classes_in(split):
        return
    _check_indices(spec, split, EpisodeConfig(), seed, index)


@settings(max_examples=examples(80), deadline=None)
@given(spec_split=flat_specs(), config=variable_configs(), seed=seeds, index=st.integers(0, 30))
def test_random_access(spec_split: tuple[DatasetSpec, Split], config: EpisodeConfig, seed: int, index: int) -> None:
    spec, split = spec_split
    sequential = EpisodeSampler(spec, split, config)
    in_order = [sequential.sample(seed, i) for i in range(index + 1)]
    alone = sample_episode(spec, split, config, seed, index)
    assert alone == in_order[index]
    # Going backwards or repeating changes nothing either.
    assert sequential.sample(seed, index) == alone
    assert [sequential.sample(seed, i) for i in reversed(range(index + 1))] == in_order[::-1]


@settings(max_examples=examples(80), deadline=None)
@given(
    specs=st.lists(flat_specs(), min_size=1, max_size=4),
    order=st.randoms(use_true_random=False),
    seed=seeds,
    index=indices,
)
def test_multisource(specs: list[tuple[DatasetSpec, Split]], order, seed: int, index: int) -> None:
    by_name = {}
    for number, (spec, _) in enumerate(specs):
        name = f"source_{number}"
        renamed = DatasetSpec.from_counts(
            name, [c.count for c in spec.classes], [c.split for c in spec.classes], fingerprint=name
        )
        by_name[name] = renamed
    usable = [n for n, s in by_name.items() if len(s.classes_in(Split.TEST)) >= 5]
    if not usable:
        return
    config = EpisodeConfig()
    shuffled = list(usable)
    order.shuffle(shuffled)
    episode = sample_multisource(by_name, usable, Split.TEST, config, seed, index)
    assert episode == MultiSourceSampler(by_name, shuffled, "test", config).sample(seed, index)
    assert episode.source in usable
    check_episode(by_name[episode.source], Split.TEST, config, episode)
    if len(usable) == 1:
        assert episode == sample_episode(by_name[usable[0]], Split.TEST, config, seed, index)


def test_large_nodes_give_fifty_random_leaves_small_nodes_all() -> None:
    spec = spec_with_split("imagenet_like", [30] * 130, nodes=[("n00000001", range(120)), ("n00000002", range(120, 127))])
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig())
    seen = {"n00000001": set(), "n00000002": set()}
    for index in range(200):
        episode = sampler.sample(3, index)
        seen[episode.group].update(episode.class_ids)
        assert episode.ways == (50 if episode.group == "n00000001" else 7)
    assert seen["n00000001"] == set(range(120)) and seen["n00000002"] == set(range(120, 127))
    # Classes 127..129 belong to no eligible node: only a flat draw could reach them.
    flat = EpisodeSampler(spec, Split.TEST, EpisodeConfig(ignore_hierarchy_probability=1.0))
    assert {c for i in range(200) for c in flat.sample(3, i).class_ids} == set(range(130))


def test_alphabets_smaller_than_min_ways_are_never_drawn() -> None:
    groups = ["a_small"] * 3 + ["b_small"] * 4 + ["c_large"] * 30
    spec = spec_with_split("omniglot_like", [20] * 37, groups=groups)
    sampler = EpisodeSampler(spec, Split.TEST, EpisodeConfig())
    assert [g.id for g in sampler.plan.groups] == ["c_large"]
    assert {sampler.sample(0, i).group for i in range(50)} == {"c_large"}
    # With a fixed 3-way request every alphabet qualifies.
    fixed = EpisodeSampler(spec, Split.TEST, EpisodeConfig.fixed(3, 1, 1))
    assert {fixed.sample(0, i).group for i in range(100)} == {"a_small", "b_small", "c_large"}
