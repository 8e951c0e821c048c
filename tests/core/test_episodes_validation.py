"""Impossible requests fail before any sampling, naming the parameter, the value and the range."""

from __future__ import annotations

import re

import pytest
from episode_checks import spec_with_split

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md import (
    EpisodeSampler,
    MultiSourceSampler,
    sample_episode,
)
from sampler_server.core.spec import ClassSpec, DatasetSpec, NodeSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound

FLAT = spec_with_split("flat", [20, 20, 12, 30, 40, 25, 8], others=[50, 50])
GROUPED = spec_with_split("grouped", [20] * 12, groups=["a"] * 4 + ["b"] * 8)
NODES = spec_with_split("nodes", [20] * 12, nodes=[("n1", range(6)), ("n2", range(3, 12))])


@pytest.mark.parametrize(
    "spec, config, message",
    [
        (FLAT, EpisodeConfig(min_ways=8), "min_ways: got 8, expected at most 7 (the classes of source 'flat' split 'test')"),
        (FLAT, EpisodeConfig(num_ways=9), "num_ways: got 9, expected at most 7 (the classes of source 'flat' split 'test')"),
        (
            FLAT,
            EpisodeConfig(min_examples_in_class=21, min_ways=5),
            ("min_ways: got 5, expected at most 3 (the classes of source 'flat' split 'test' with at least "
            "min_examples_in_class=21 images)"),
        ),
        (
            FLAT,
            EpisodeConfig.fixed(5, 5, 15),
            ("num_support + num_query: got 5 + 15 = 20, expected at most 8: class 'class_00006' (id 6) of source "
            "'flat' split 'test' has 8 images; set min_examples_in_class=20 to leave smaller classes out"),
        ),
        (FLAT, EpisodeConfig(num_support=8), "num_support: got 8, expected at most 7: class 'class_00006' (id 6)"),
        (FLAT, EpisodeConfig(num_query=8), "num_query: got 8, expected at most 7: class 'class_00006' (id 6)"),
        (
            FLAT,
            EpisodeConfig(min_examples_in_class=41),
            "min_examples_in_class: got 41, expected at most 40 (the largest class of source 'flat' split 'test')",
        ),
        (
            FLAT,
            EpisodeConfig(max_support_set_size=6),
            "max_support_set_size: got 6, expected at least 7 (episodes of source 'flat' split 'test' can have 7 ways",
        ),
        (
            FLAT,
            EpisodeConfig.all_of_split(max_support_set_size=5),
            "max_support_set_size: got 5, expected at least 7",
        ),
        (
            GROUPED,
            EpisodeConfig(min_ways=9),
            ("min_ways: got 9, expected at most 8 (the most candidate classes any group of source 'grouped' split "
            "'test' has; 2 groups); set ignore_hierarchy_probability=1"),
        ),
        (GROUPED, EpisodeConfig.fixed(10, 1, 1), "num_ways: got 10, expected at most 8 (the most candidate classes any group"),
        (NODES, EpisodeConfig.fixed(10, 1, 1), "num_ways: got 10, expected at most 9 (the most candidate classes any eligible node"),
        (
            NODES,
            EpisodeConfig.fixed(10, 1, 1, ignore_hierarchy_probability=0.5),
            "num_ways: got 10, expected at most 9 (the most candidate classes any eligible node",
        ),
    ],
)
def test_impossible_configs(spec: DatasetSpec, config: EpisodeConfig, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        EpisodeSampler(spec, Split.TEST, config)


def test_hierarchy_not_required_when_ignored() -> None:
    config = EpisodeConfig.fixed(10, 1, 1, ignore_hierarchy_probability=1.0)
    assert EpisodeSampler(NODES, Split.TEST, config).sample(0, 0).ways == 10
    assert EpisodeSampler(GROUPED, Split.TEST, config).sample(0, 0).group is None


def test_single_image_class_needs_min_examples() -> None:
    spec = spec_with_split("tiny", [1, 5, 5, 5, 5, 5])
    with pytest.raises(InvalidArgument, match=re.escape("min_examples_in_class: got 0, expected at least 2 here: class 'class_00000' (id 0) of source 'tiny' split 'test' has 1 image,")):
        EpisodeSampler(spec, Split.TEST, EpisodeConfig())
    assert 0 not in EpisodeSampler(spec, Split.TEST, EpisodeConfig(min_examples_in_class=2)).sample(0, 0).class_ids


def test_split_without_classes_names_source_and_splits() -> None:
    spec = DatasetSpec.from_counts("traffic_sign", [30] * 6, [Split.TEST] * 6)
    with pytest.raises(InvalidArgument, match=re.escape("split: got 'train', but source 'traffic_sign' has no classes in it; expected one of: test (6 classes)")):
        EpisodeSampler(spec, Split.TRAIN, EpisodeConfig())
    with pytest.raises(InvalidArgument, match=re.escape("split: got 'training', expected one of train, valid, test")):
        EpisodeSampler(spec, "training", EpisodeConfig())


def test_unsplit_spec_is_a_failed_precondition() -> None:
    classes = (ClassSpec(0, "n01440764", 0, 10, None, wnid="n01440764"),)
    spec = DatasetSpec(source="ilsvrc_2012", fingerprint="f", classes=classes)
    with pytest.raises(FailedPrecondition, match="its classes have no split"):
        EpisodeSampler(spec, Split.TRAIN, EpisodeConfig())


@pytest.mark.parametrize("seed, index, message", [(-1, 0, "seed: got -1"), (0, -1, "index: got -1"), (0, 2**63, "index: got 9223372036854775808")])
def test_bad_seed_or_index_before_sampling(seed: int, index: int, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        sample_episode(FLAT, Split.TEST, EpisodeConfig(), seed, index)


def test_multisource_errors() -> None:
    specs = {"flat": FLAT, "grouped": GROUPED}
    with pytest.raises(NotFound, match="source 'nosuch' is not loaded; available: flat, grouped"):
        MultiSourceSampler(specs, ["flat", "nosuch"], "test", EpisodeConfig())
    with pytest.raises(InvalidArgument, match="sources: got 'flat' more than once"):
        MultiSourceSampler(specs, ["flat", "flat"], "test", EpisodeConfig())
    with pytest.raises(InvalidArgument, match="sources: got \\[\\], expected a non-empty list"):
        MultiSourceSampler(specs, [], "test", EpisodeConfig())
    with pytest.raises(InvalidArgument, match=re.escape("specs['grouped'] describes source 'flat'")):
        MultiSourceSampler({"grouped": FLAT}, ["grouped"], "test", EpisodeConfig())
    # Every source is validated up front: one impossible source fails the whole sampler.
    with pytest.raises(InvalidArgument, match="min_ways: got 8, expected at most 7 .*'flat'"):
        MultiSourceSampler(specs, ["grouped", "flat"], "test", EpisodeConfig(min_ways=8))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: DatasetSpec.from_counts("s", [3, 0], [Split.TEST] * 2), "class 'class_00001' has records [3, 3), expected a non-empty range starting at 3"),
        (lambda: DatasetSpec(source="s", fingerprint="f", classes=(ClassSpec(1, "a", 0, 3, Split.TEST),)), "class 'a' has id 1, expected 0"),
        (lambda: DatasetSpec(source="s", fingerprint="f", classes=(ClassSpec(0, "a", 5, 3, Split.TEST),)), "class 'a' has records [5, 8)"),
        (lambda: DatasetSpec.from_counts("s", [3, 3], [Split.TEST, None]), "every class or none needs one"),
        (lambda: DatasetSpec.from_counts("s", [3, 3], [Split.TEST] * 2, groups=["a", None]), "some classes have a group and some do not"),
        (lambda: DatasetSpec.from_counts("s", [3], [Split.TEST, Split.TEST]), "got 1 counts, 2 splits, expected equal lengths"),
        (lambda: DatasetSpec.from_counts("", [3], [Split.TEST]), "source: got '', expected a non-empty name"),
        (
            lambda: DatasetSpec.from_counts("s", [3] * 6, [Split.TEST] * 6, hierarchy={Split.TEST: (NodeSpec("n2", (0, 1)), NodeSpec("n1", (2, 3)))}),
            "hierarchy nodes must be unique and sorted by id",
        ),
        (
            lambda: DatasetSpec.from_counts("s", [3] * 6, [Split.TEST] * 5 + [Split.TRAIN], hierarchy={Split.TEST: (NodeSpec("n1", (0, 5)),)}),
            "node n1 must list sorted, unique class ids of that split, got (0, 5)",
        ),
        (
            lambda: DatasetSpec.from_counts("s", [3] * 2, [Split.TEST] * 2, groups=["a", "b"], hierarchy={Split.TEST: ()}),
            "a node hierarchy and class groups are exclusive",
        ),
    ],
)
def test_bad_specs(build, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        build()
