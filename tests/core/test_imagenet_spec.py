"""ImageNet glue: a WordNet-split DatasetSpec from a manifest with wnids (the paper's numbers)."""

from __future__ import annotations

import dataclasses
import functools
import re
from types import SimpleNamespace

import pytest
from conftest import require_reference
from episode_checks import ilsvrc_manifest

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.imagenet_spec import imagenet_spec, needs_wordnet_split, spec_for_manifest
from sampler_server.core.md import EpisodeSampler, build_plan
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.store.manifest import ClassInfo

@pytest.fixture(autouse=True, scope="module")
def _reference_counts() -> None:
    require_reference("md_specs/ilsvrc_2012_num_leaf_images.json")  # fails when ../shared is absent


@functools.cache
def _spec(variant: str) -> DatasetSpec:
    manifest = ilsvrc_manifest()
    assert manifest is not None
    return imagenet_spec(manifest, variant=variant)


def test_md_split_sizes_nodes_and_images() -> None:
    spec = _spec("md")
    assert [len(spec.classes_in(s)) for s in Split] == [712, 158, 130]
    assert [sum(c.count for c in spec.classes_in(s)) for s in Split] == [915_249, 199_833, 165_682]
    # The spec lists every node spanning >= 5 leaves; the default cap (392) picks the paper's.
    assert [len(spec.nodes_in(s)) for s in Split] == [117, 18, 15]
    assert all(len(n.leaves) >= 5 for s in Split for n in spec.nodes_in(s))
    groups = {s: build_plan(spec, s, EpisodeConfig()).groups for s in Split}
    assert [len(groups[s]) for s in Split] == [113, 18, 15]
    assert [sum(len(g.classes) > 50 for g in groups[s]) for s in Split] == [16, 4, 1]
    for split in Split:
        nodes = spec.nodes_in(split)
        members = {c.id for c in spec.classes_in(split)}
        assert [n.id for n in nodes] == sorted(n.id for n in nodes)
        assert all(list(n.leaves) == sorted(n.leaves) for n in nodes)
        assert all(5 <= len(g.classes) <= 392 for g in groups[split])
        # The eligible nodes together cover every leaf of the split.
        assert set().union(*(set(g.classes) for g in groups[split])) == members
    assert spec.source == "ilsvrc_2012" and spec.fingerprint == ilsvrc_manifest().fingerprint


# Fingerprints of default-config episodes (seed 11, indices 0-2) computed before the span
# cap became a request field: the default must keep producing exactly these.
PINNED_BEFORE_THE_CAP = {
    "md_v2/train": [
        "1f1389d0481c239d7fb1e0c16fd233a745dccd1300eb190130e5dd8dfb7fb90f",
        "de9e7de434f179e84c10d725f6c01c23821ec5b869219963d4118097ced2c596",
        "0e7090a4ff3fac9f612f6c19a0d9649fa80581ee3be64bb424e197303cfc816c",
    ],
    "md/train": [
        "b8dd997c2b0d1582b1dc038ecfb6ce63e95a8500f2566e503a2bfd971a307cb4",
        "5fa5800e4dd76c90baaab14e1de36bf0016d22e0937eb2c3dfed381543f4c3ae",
        "4198499806d2cce94149c2cad9d2e257f713199f5828c82de4eacab52151fce3",
    ],
    "md/valid": [
        "e15356acae3cee9fec50de11e28980de91fea23041e2d66b30434e2cf64d331f",
        "70c9cb4096afa9beb1da66f263ae061ae5b86faf528a8818cf0fc01de5870f30",
        "9b40a7763227eea3bfe3aa659682dd653874f1e372fcb05f36b0dcd09ba76e70",
    ],
    "md/test": [
        "0f3a71f168860a2d1d7fe9c0f70f91a712d25937a1f77aefd237d34f77949f46",
        "109170321dab3037074cadbe83a769f45f75f45e3af9024beefda75a4bada989",
        "bf775f845d707e87a661e0cd6f4eb0e4228198bd93ac3750bf71984cbdecf9f0",
    ],
}


@pytest.mark.parametrize("key", sorted(PINNED_BEFORE_THE_CAP))
def test_default_cap_keeps_every_episode(key: str) -> None:
    variant, split = key.split("/")
    sampler = EpisodeSampler(_spec(variant), split, EpisodeConfig())
    assert [sampler.sample(11, i).fingerprint for i in range(3)] == PINNED_BEFORE_THE_CAP[key]


def test_md_v2_is_train_only() -> None:
    spec = _spec("md_v2")
    assert [len(spec.classes_in(s)) for s in Split] == [1000, 0, 0]
    assert EpisodeSampler(spec, Split.TRAIN, EpisodeConfig()).sample(0, 0).group is not None
    with pytest.raises(InvalidArgument, match=re.escape("split: got 'valid', but source 'ilsvrc_2012' has no classes in it; expected one of: train (1000 classes)")):
        EpisodeSampler(spec, Split.VALID, EpisodeConfig())


MD_V2_UNCOVERED = {"n03814906", "n03938244", "n04296562", "n04399382", "n11939491", "n12057211"}
NECKLACE = "n03814906"
# Node episodes take all of a node's leaves (up to 1000): the leaves of the drawn node are all shown.
WIDE = {"max_ways_upper_bound": 1000, "num_support": 1, "num_query": 1}


def test_md_v2_default_cap_never_shows_the_six_leaves() -> None:
    spec = _spec("md_v2")
    hidden = {c.id for c in spec.classes if c.wnid in MD_V2_UNCOVERED}
    sampler = EpisodeSampler(spec, Split.TRAIN, EpisodeConfig(**WIDE))
    assert len(sampler.plan.groups) == 145
    assert not hidden & set().union(*(set(g.classes) for g in sampler.plan.groups))
    assert not any(hidden & set(sampler.sample(0, i).class_ids) for i in range(200))


def test_md_v2_covering_cap_shows_necklace() -> None:
    spec = _spec("md_v2")
    ids = {c.wnid: c.id for c in spec.classes}
    sampler = EpisodeSampler(spec, Split.TRAIN, EpisodeConfig(max_span_leaves=522, **WIDE))
    assert len(sampler.plan.groups) == 148
    assert set().union(*(set(g.classes) for g in sampler.plan.groups)) == set(ids.values())
    first = next(i for i in range(1000) if ids[NECKLACE] in sampler.sample(0, i).class_ids)
    assert first == 152
    episode = sampler.sample(0, first)
    assert episode.group == "n00021939" and len(episode.class_ids) == 522  # artifact, artefact
    # Under the default cap's variable ways too, the covering cap reaches it.
    variable = EpisodeSampler(spec, Split.TRAIN, EpisodeConfig(max_span_leaves=522))
    assert ids[NECKLACE] in variable.sample(0, 586).class_ids


def test_a_cap_too_small_for_the_ways_names_the_cap() -> None:
    with pytest.raises(InvalidArgument, match=r"num_ways: got 10, expected at most 9 .*max_span_leaves=9 leaves out 8 larger nodes"):
        EpisodeSampler(_spec("md"), Split.TEST, EpisodeConfig(num_ways=10, max_span_leaves=9))


def test_manifest_splits_are_ignored_and_classes_kept() -> None:
    manifest = ilsvrc_manifest()
    tagged = SimpleNamespace(**{**vars(manifest), "classes": tuple(dataclasses.replace(c, split=Split.TEST) for c in manifest.classes)})
    assert not needs_wordnet_split(tagged) and needs_wordnet_split(manifest)
    assert imagenet_spec(tagged) == _spec("md")
    spec = _spec("md")
    assert [(c.name, c.start, c.count, c.wnid) for c in spec.classes] == [
        (c.name, c.start, c.end - c.start, c.wnid) for c in manifest.classes
    ]


def test_errors() -> None:
    manifest = ilsvrc_manifest()
    broken = SimpleNamespace(**{**vars(manifest), "classes": (dataclasses.replace(manifest.classes[0], wnid=None),)})
    with pytest.raises(FailedPrecondition, match="needs a wnid on every class; class 'n01440764' has none"):
        imagenet_spec(broken)
    with pytest.raises(InvalidArgument, match="imagenet split: got 'md-v3', expected one of md, md_v2"):
        imagenet_spec(manifest, variant="md-v3")


def test_spec_for_manifest_dispatch() -> None:
    assert spec_for_manifest(ilsvrc_manifest()) == _spec("md")
    plain = SimpleNamespace(
        source="dtd",
        fingerprint="fp",
        classes=(ClassInfo(0, "banded", 0, 10, Split.TRAIN), ClassInfo(1, "woven", 10, 25, Split.TEST)),
    )
    spec = spec_for_manifest(plain)
    assert spec.hierarchy is None and [c.count for c in spec.classes] == [10, 15]
    assert [c.id for c in spec.classes_in(Split.TEST)] == [1]
