"""ImageNet glue: a WordNet-split DatasetSpec from a manifest with wnids (the paper's numbers)."""

from __future__ import annotations

import dataclasses
import functools
import re
from types import SimpleNamespace

import pytest
from episode_checks import ilsvrc_manifest

from sampler_server.core.config import EpisodeConfig
from sampler_server.core.imagenet_spec import imagenet_spec, needs_wordnet_split, spec_for_manifest
from sampler_server.core.sampling import EpisodeSampler
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.store.manifest import ClassInfo

pytestmark = pytest.mark.skipif(ilsvrc_manifest() is None, reason="reference ILSVRC counts absent")


@functools.cache
def _spec(variant: str) -> DatasetSpec:
    manifest = ilsvrc_manifest()
    assert manifest is not None
    return imagenet_spec(manifest, variant=variant)


def test_md_split_sizes_nodes_and_images() -> None:
    spec = _spec("md")
    assert [len(spec.classes_in(s)) for s in Split] == [712, 158, 130]
    assert [sum(c.count for c in spec.classes_in(s)) for s in Split] == [915_249, 199_833, 165_682]
    assert [len(spec.nodes_in(s)) for s in Split] == [113, 18, 15]
    assert [sum(len(n.leaves) > 50 for n in spec.nodes_in(s)) for s in Split] == [16, 4, 1]
    for split in Split:
        nodes = spec.nodes_in(split)
        members = {c.id for c in spec.classes_in(split)}
        assert [n.id for n in nodes] == sorted(n.id for n in nodes)
        assert all(list(n.leaves) == sorted(n.leaves) and 5 <= len(n.leaves) <= 392 for n in nodes)
        # The eligible nodes together cover every leaf of the split.
        assert set().union(*(set(n.leaves) for n in nodes)) == members
    assert spec.source == "ilsvrc_2012" and spec.fingerprint == ilsvrc_manifest().fingerprint


def test_md_v2_is_train_only() -> None:
    spec = _spec("md_v2")
    assert [len(spec.classes_in(s)) for s in Split] == [1000, 0, 0]
    assert EpisodeSampler(spec, Split.TRAIN, EpisodeConfig()).sample(0, 0).group is not None
    with pytest.raises(InvalidArgument, match=re.escape("split: got 'valid', but source 'ilsvrc_2012' has no classes in it; expected one of: train (1000 classes)")):
        EpisodeSampler(spec, Split.VALID, EpisodeConfig())


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
