"""Meta-Dataset ImageNet split: the paper's and the reference's figures, invariants, errors."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import examples, require_reference

from sampler_server.core.hierarchy import Split
from sampler_server.core.hierarchy.imagenet import (
    ENTITY_WNID,
    TEST_ROOT_WNID,
    VALID_ROOT_WNID,
    ImageNetSplit,
    ImageNetVariant,
    build_imagenet_split,
    smallest_covering_max_span,
)
from sampler_server.core.hierarchy.wordnet import is_a_parents, load_wordnet_graph
from sampler_server.errors import InvalidArgument

REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference"
LEAF_IMAGES = REFERENCE / "md_specs" / "ilsvrc_2012_num_leaf_images.json"

@pytest.fixture(autouse=True, scope="module")
def _reference_counts() -> None:
    require_reference("md_specs/ilsvrc_2012_num_leaf_images.json")  # fails when ../shared is absent


@pytest.fixture(scope="module")
def images_per_class() -> dict[str, int]:
    return json.loads(LEAF_IMAGES.read_text())


@pytest.fixture(scope="module")
def ilsvrc(images_per_class: dict[str, int]) -> list[str]:
    assert len(images_per_class) == 1000
    return list(images_per_class)


@pytest.fixture(scope="module")
def md(ilsvrc: list[str]) -> ImageNetSplit:
    return build_imagenet_split(ilsvrc)


def _ancestors(wnid: str) -> set[str]:
    graph, seen, pending = load_wordnet_graph(), set(), [wnid]
    while pending:
        for parent in is_a_parents(graph, pending.pop()):
            if parent not in seen:
                seen.add(parent)
                pending.append(parent)
    return seen


def test_sampling_graph_over_all_classes(md: ImageNetSplit) -> None:
    full = md.all_classes
    assert full.split is None and full.root == ENTITY_WNID
    assert (full.graph.number_of_nodes(), len(full.internal_nodes), len(full.leaves)) == (1397, 397, 1000)


def test_split_sizes_are_712_158_130(md: ImageNetSplit, images_per_class: dict[str, int]) -> None:
    sizes = tuple(len(md.for_split(s).leaves) for s in Split)
    assert sizes == (712, 158, 130)
    assert sorted(md.class_order) == sorted(images_per_class)
    images = tuple(sum(images_per_class[w] for w in md.for_split(s).leaves) for s in Split)
    assert images == (915_249, 199_833, 165_682)
    for split in Split:
        assert list(md.for_split(split).leaves) == sorted(md.for_split(split).leaves)
    assert all(VALID_ROOT_WNID in _ancestors(w) for w in md.valid.leaves)
    assert all(TEST_ROOT_WNID in _ancestors(w) for w in md.test.leaves)


@pytest.mark.parametrize(
    ("split", "root", "nodes", "internal", "eligible", "over_50"),
    [
        (Split.TRAIN, ENTITY_WNID, 1011, 299, 113, 16),
        (Split.VALID, VALID_ROOT_WNID, 200, 42, 18, 4),
        (Split.TEST, TEST_ROOT_WNID, 180, 50, 15, 1),
    ],
)
def test_per_split_graphs_and_eligible_nodes(
    md: ImageNetSplit, split: Split, root: str, nodes: int, internal: int, eligible: int, over_50: int
) -> None:
    h = md.for_split(split)
    assert h.split is split and h.root == root
    assert (h.graph.number_of_nodes(), len(h.internal_nodes)) == (nodes, internal)
    assert len(h.eligible) == eligible
    assert sum(len(node.leaves) > 50 for node in h.eligible) == over_50
    assert all(5 <= len(node.leaves) <= 392 for node in h.eligible)
    assert [node.wnid for node in h.eligible] == sorted(node.wnid for node in h.eligible)
    assert all(list(node.leaves) == sorted(node.leaves) for node in h.eligible)
    assert h.uncovered_leaves() == ()


def test_392_is_the_smallest_covering_bound_on_train(md: ImageNetSplit) -> None:
    assert smallest_covering_max_span(md.train) == 392
    narrower = build_imagenet_split(md.train.leaves, max_span=391)
    assert narrower.train.uncovered_leaves() != ()


def test_instance_hypernyms_change_nothing(md: ImageNetSplit, ilsvrc: list[str]) -> None:
    assert build_imagenet_split(ilsvrc, include_instance_hypernyms=True) == md


def test_result_ignores_input_order(md: ImageNetSplit, ilsvrc: list[str]) -> None:
    again = build_imagenet_split(list(reversed(ilsvrc)))
    assert again == md
    assert list(again.train.graph.nodes) == list(md.train.graph.nodes)


def test_md_v2_puts_every_class_in_train(md: ImageNetSplit, ilsvrc: list[str]) -> None:
    v2 = build_imagenet_split(ilsvrc, variant=ImageNetVariant.MD_V2)
    assert v2.train.split is Split.TRAIN and len(v2.train.leaves) == 1000
    assert v2.train.edges == md.all_classes.edges and v2.train.graph.number_of_nodes() == 1397
    assert len(v2.train.eligible) == 145
    assert v2.valid.leaves == v2.test.leaves == () and v2.valid.root is None
    # On the 1000-leaf graph the 392 bound leaves 6 classes under no eligible node
    # (the smallest covering bound there is 522); MD only fixed 392 on its train graph.
    assert [(w, v2.train.name_of(w)) for w in v2.train.uncovered_leaves()] == MD_V2_UNCOVERED
    assert smallest_covering_max_span(v2.train) == 522


MD_V2_UNCOVERED = [
    ("n03814906", "necklace"),
    ("n03938244", "pillow"),
    ("n04296562", "stage"),
    ("n04399382", "teddy"),
    ("n11939491", "daisy"),
    ("n12057211", "yellow_lady's_slipper"),
]


def test_md_v2_smallest_covering_cap_reaches_every_leaf(ilsvrc: list[str]) -> None:
    covering = build_imagenet_split(ilsvrc, variant=ImageNetVariant.MD_V2, max_span=522)
    assert covering.train.uncovered_leaves() == ()
    assert len(covering.train.eligible) == 148  # 145 at 392, 152 with no upper cap
    narrower = build_imagenet_split(ilsvrc, variant=ImageNetVariant.MD_V2, max_span=521)
    assert narrower.train.uncovered_leaves() != ()
    # uncovered_leaves(max_span) restricts a wider build to the same answer as a narrower one.
    assert covering.train.uncovered_leaves(max_span=392) == tuple(w for w, _ in MD_V2_UNCOVERED)


def test_md_v1_splits_cover_every_leaf_at_the_default_cap(md: ImageNetSplit) -> None:
    assert [smallest_covering_max_span(md.for_split(s)) for s in Split] == [392, 158, 130]
    assert all(md.for_split(s).uncovered_leaves() == () for s in Split)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_subsets_keep_the_invariants(ilsvrc: list[str], data: st.DataObject) -> None:
    chosen = data.draw(st.lists(st.sampled_from(sorted(ilsvrc)), min_size=1, max_size=60, unique=True))
    result = build_imagenet_split(chosen)
    assert build_imagenet_split(sorted(chosen, reverse=True)) == result
    parts = [set(result.for_split(s).leaves) for s in Split]
    assert sum(map(len, parts)) == len(chosen) and set().union(*parts) == set(chosen)
    for split in Split:
        h = result.for_split(split)
        graph = h.graph
        assert {n for n in graph if graph.out_degree(n) == 0} == set(h.leaves)
        assert all(graph.out_degree(n) != 1 for n in graph), "a single-child node survived"
        assert nx.is_directed_acyclic_graph(graph)
        assert [n for n in graph if graph.in_degree(n) == 0] == ([h.root] if h.leaves else [])
        assert all(parent in _ancestors(child) for parent, child in graph.edges)
        assert all(5 <= len(node.leaves) <= 392 for node in h.eligible)


def test_empty_unknown_and_repeated_wnids_are_rejected(ilsvrc: list[str]) -> None:
    with pytest.raises(InvalidArgument, match="empty list"):
        build_imagenet_split([])
    for bad in ("n99999999", "n00000001", "cat", 1740):
        with pytest.raises(InvalidArgument, match=f"wnid {bad!r} is not a WordNet 3.0 noun synset"):
            build_imagenet_split([*ilsvrc[:3], bad])
    with pytest.raises(InvalidArgument, match=f"wnid {ilsvrc[1]} is listed more than once"):
        build_imagenet_split([ilsvrc[0], ilsvrc[1], ilsvrc[1]])
    with pytest.raises(InvalidArgument, match="expected a list of wnids"):
        build_imagenet_split("n02084071")


def test_classes_that_contain_each_other_are_rejected() -> None:
    with pytest.raises(InvalidArgument, match="n02084071 is an ancestor of n02085620"):
        build_imagenet_split(["n02084071", "n02085620"])  # dog, Chihuahua


def test_instance_synsets_need_instance_hypernyms() -> None:
    orion = "n09380117"  # has an @ and an @i parent: fine either way
    hegira = "n00060548"  # only an @i parent
    assert build_imagenet_split([orion]).train.leaves == (orion,)
    with pytest.raises(InvalidArgument, match=f"wnid {hegira} has no hypernym path to entity"):
        build_imagenet_split([hegira])
    assert build_imagenet_split([hegira], include_instance_hypernyms=True).train.leaves == (hegira,)


def test_subsets_may_leave_a_split_empty() -> None:
    result = build_imagenet_split(["n02085620"])  # Chihuahua: a carnivore
    assert (result.train.leaves, result.valid.leaves, result.test.leaves) == ((), ("n02085620",), ())
    assert result.train.root is None and result.train.graph.number_of_nodes() == 0
    assert result.valid.root == "n02085620" and result.valid.eligible == ()
