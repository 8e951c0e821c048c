"""Each ImageNet-CoG eligibility rule on the real WordNet 3.0 graph: it removes what it
should and nothing else, in order (a concept is counted by the first rule removing it)."""

from __future__ import annotations

import networkx as nx
import pytest

from sampler_server.core.cog import LISTED_WNIDS, PERSON_WNID, RULES, in1k_wnids, select_eligible
from sampler_server.core.cog.eligibility import proper_ancestors, subtree
from sampler_server.core.hierarchy.wordnet import load_wordnet_graph
from sampler_server.fixtures import cog_counts

MANY = 1000
"""Enough images for every rule but too_few_images (default threshold 782)."""

# name -> wnid, checked against the graph's first lemma by ``test_names_are_right``.
W = {
    "entity": "n00001740", "animal": "n00015388", "person": PERSON_WNID,
    "tench": "n01440764", "Chihuahua": "n02085620", "teddy": "n04399382", "volcano": "n09472597",
    "dog": "n02084071", "domestic_cat": "n02121808",
    "dace": "n01441117", "mouser": "n02122430", "Etna": "n09174718",
    "Buddha": "n09532214", "Bunyan": "n09591155", "lumberman": "n10276045", "Babar": "n09589748",
    "fictional_character": "n09587565",
    "river": "n09411430", "Nile": "n09371360", "tree": "n13104059", "oak": "n12268246", "live_oak": "n12269241",
    "pet": "n01318894", "people": "n07942152", "sister_ship": "n04224543",
}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return load_wordnet_graph()


def _select(graph: nx.DiGraph, counts: dict[str, int], min_images: int = 782) -> dict[str, set[str]]:
    """Rule -> names it removed, plus ``eligible`` -> names left."""
    names = {wnid: name for name, wnid in W.items()}
    result = select_eligible({W[name]: count for name, count in counts.items()}, min_images=min_images, graph=graph)
    out = {rule: {names[w] for w in result.removed[rule]} for rule in RULES}
    out["eligible"] = {names[w] for w in result.eligible}
    assert result.excluded == {rule: len(out[rule]) for rule in RULES}
    assert list(result.eligible) == sorted(result.eligible)
    return out


def _expect(**removed: set[str]) -> dict[str, set[str]]:
    return {rule: removed.get(rule, set()) for rule in (*RULES, "eligible")}


def test_names_are_right(graph: nx.DiGraph) -> None:
    assert {name: graph.nodes[wnid]["name"] for name, wnid in W.items()} == {name: name for name in W}


def test_in1k_removes_the_seen_concepts_only(graph: nx.DiGraph) -> None:
    counts = {"tench": MANY, "Chihuahua": MANY, "teddy": MANY, "dace": MANY, "mouser": MANY}
    assert _select(graph, counts) == _expect(in1k={"tench", "Chihuahua", "teddy"}, eligible={"dace", "mouser"})


def test_in1k_ancestor_removes_ancestors_of_all_1000_but_not_descendants(graph: nx.DiGraph) -> None:
    # dog and domestic_cat are ancestors of IN-1K concepts that are not in the counts;
    # Etna is under volcano (an IN-1K concept) through an instance edge: not an ancestor.
    counts = {"entity": MANY, "animal": MANY, "dog": MANY, "domestic_cat": MANY, "Etna": MANY}
    assert _select(graph, counts) == _expect(
        in1k_ancestor={"entity", "animal", "dog", "domestic_cat"}, eligible={"Etna"}
    )
    ancestors = proper_ancestors(graph, in1k_wnids())
    assert len(ancestors) == 860 and not ancestors & set(in1k_wnids())
    assert W["person"] in ancestors  # scuba diver, groom and ballplayer are IN-1K concepts


def test_too_few_images_is_strict_below_the_threshold(graph: nx.DiGraph) -> None:
    counts = {"dace": 781, "mouser": 782, "Etna": 0, "Nile": 5000, "tench": 3}
    assert _select(graph, counts) == _expect(
        in1k={"tench"}, too_few_images={"dace", "Etna"}, eligible={"mouser", "Nile"}
    )
    assert _select(graph, counts, min_images=0) == _expect(in1k={"tench"}, eligible={"dace", "mouser", "Etna", "Nile"})


def test_person_removes_the_whole_subtree_through_instances_and_second_parents(graph: nx.DiGraph) -> None:
    # Buddha is an instance (of a person concept); Bunyan is both a fictional character
    # and a lumberman; Babar is a fictional character only.
    counts = {"Buddha": MANY, "Bunyan": MANY, "lumberman": MANY, "Babar": MANY, "person": MANY, "dace": 10}
    assert _select(graph, counts) == _expect(
        in1k_ancestor={"person"}, too_few_images={"dace"}, person={"Buddha", "Bunyan", "lumberman"}, eligible={"Babar"}
    )
    people = subtree(graph, PERSON_WNID)
    assert W["Bunyan"] in people and W["Babar"] not in people and W["fictional_character"] not in people


def test_not_leaf_looks_at_remaining_concepts_only(graph: nx.DiGraph) -> None:
    # river is above Nile through an instance edge; tree is above live_oak two levels up
    # (oak is not in the counts); a concept whose descendants were all removed earlier
    # is a leaf of what remains (fictional_character above Bunyan, a person).
    counts = {"river": MANY, "Nile": MANY, "tree": MANY, "live_oak": MANY, "fictional_character": MANY, "Bunyan": MANY}
    assert _select(graph, counts) == _expect(
        person={"Bunyan"}, not_leaf={"river", "tree"}, eligible={"Nile", "live_oak", "fictional_character"}
    )
    counts = {"tree": MANY, "oak": MANY, "live_oak": 5}
    assert _select(graph, counts) == _expect(too_few_images={"live_oak"}, not_leaf={"tree"}, eligible={"oak"})


def test_listed_removes_table_2_concepts_that_are_left(graph: nx.DiGraph) -> None:
    # people is in Table 2 but has too few images: counted once, by the earlier rule.
    counts = {"pet": MANY, "sister_ship": MANY, "people": 3, "Nile": MANY}
    assert _select(graph, counts) == _expect(
        too_few_images={"people"}, listed={"pet", "sister_ship"}, eligible={"Nile"}
    )
    assert {W["pet"], W["sister_ship"], W["people"]} <= set(LISTED_WNIDS)


def test_fixture_concepts_are_removed_by_the_rule_their_group_names(graph: nx.DiGraph) -> None:
    counts = cog_counts.cog_counts()
    result = select_eligible(counts, min_images=cog_counts.MIN_IMAGES, graph=graph)
    assert result.removed == {rule: tuple(sorted(group)) for rule, group in cog_counts.RULE_GROUPS.items()}
    assert result.eligible == tuple(sorted(cog_counts.ELIGIBLE))
    assert all(count >= 1 for count in result.excluded.values())
    assert len(result.eligible) == 30 and 150 <= len(counts) <= 400
    assert all(60 <= counts[w] <= 80 for w in result.eligible)
    few = [counts[w] for rule in ("in1k", "in1k_ancestor", "too_few_images") for w in result.removed[rule]]
    assert sum(3 <= c <= 8 for c in few) == len(few) - 1  # Angora has 59


def test_result_does_not_depend_on_insertion_order(graph: nx.DiGraph) -> None:
    counts = cog_counts.cog_counts()
    reverse = dict(reversed(list(counts.items())))
    assert select_eligible(reverse, min_images=60, graph=graph) == select_eligible(counts, min_images=60, graph=graph)
