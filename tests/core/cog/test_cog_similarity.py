"""WordNet fragment, information content and Lin similarity: by hand on a small graph,
against NLTK's ``lin_similarity`` with the same IC table on the real graph, and the fast
similarity-to-IN-1K against the pairwise maximum."""

from __future__ import annotations

import math
import random
from typing import Any

import networkx as nx
import pytest
from cog_nltk import nltk_parents, open_nltk_wordnet

from sampler_server.core.cog import Fragment, in1k_wnids, select_eligible
from sampler_server.core.hierarchy.wordnet import NUM_NOUN_SYNSETS, load_wordnet_graph
from sampler_server.fixtures import cog_counts


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return load_wordnet_graph()


@pytest.fixture(scope="module")
def nltk_wn(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return open_nltk_wordnet(tmp_path_factory.mktemp("wordnet"))


@pytest.fixture(scope="module")
def in21k(graph: nx.DiGraph) -> tuple[dict[str, int], Fragment]:
    """The synthetic IN-21K counts and their fragment, built once: two tests read them, neither changes them."""
    counts = cog_counts.synthetic_in21k_counts(graph)
    return counts, Fragment(graph, counts)


def _tiny() -> nx.DiGraph:
    """entity -> a, b; a -> c, d; b -> e; c -> f (an instance); d -> g; e -> g."""
    graph = nx.DiGraph()
    edges = [("entity", "a"), ("entity", "b"), ("a", "c"), ("a", "d"), ("b", "e"), ("c", "f"), ("d", "g"), ("e", "g")]
    for parent, child in edges:
        graph.add_edge(parent, child, kind="instance" if child == "f" else "hypernym")
    graph.add_edge("entity", "x")  # outside the fragment of the concepts below
    return graph


def test_fragment_counts_and_information_content_by_hand() -> None:
    fragment = Fragment(_tiny(), ["f", "d", "e", "g"])
    assert fragment.nodes == ("a", "b", "c", "d", "e", "entity", "f", "g") and fragment.size == 8
    assert dict(fragment.under) == {"entity": 8, "a": 5, "b": 3, "c": 2, "d": 2, "e": 2, "f": 1, "g": 1}
    assert fragment.ic["entity"] == 0.0
    assert fragment.ic["a"] == pytest.approx(math.log(8 / 5))
    assert fragment.ic["g"] == pytest.approx(math.log(8))
    assert "x" not in fragment and "f" in fragment


def test_lin_by_hand() -> None:
    fragment = Fragment(_tiny(), ["f", "d", "e", "g"])
    assert fragment.lcs("f", "g") == "a"  # common: a, entity
    assert fragment.lin("f", "g") == pytest.approx(math.log(1.6) / math.log(8))
    assert fragment.lcs("e", "g") == "e"  # a concept is its own ancestor
    assert fragment.lin("e", "g") == pytest.approx(0.8)  # 2 log 4 / (log 4 + log 8)
    assert fragment.lin("d", "e") == 0.0  # only entity in common
    assert fragment.lin("f", "f") == 1.0 and fragment.lin("entity", "entity") == 1.0
    assert fragment.lin("f", "d") == pytest.approx(2 * math.log(1.6) / math.log(32))
    similarity = fragment.similarity_to(["f", "e"], seen=["g", "d", "x"])  # x: outside, ignored
    assert similarity == {"f": fragment.lin("f", "d"), "e": fragment.lin("e", "g")}
    assert fragment.similarity_to(["f"], seen=["x"]) == {"f": 0.0}


def _nltk_ic(fragment: Fragment) -> dict[str, dict[int, float]]:
    """NLTK's IC table for the fragment: offset -> under(c), and 0 -> fragment size."""
    table = {int(wnid[1:]): float(count) for wnid, count in fragment.under.items()}
    table[0] = float(fragment.size)
    return {"n": table}


def test_lin_equals_nltk_lin_similarity_on_the_fixture(graph: nx.DiGraph, nltk_wn: Any) -> None:
    counts = cog_counts.cog_counts()
    fragment = Fragment(graph, counts)
    ic = _nltk_ic(fragment)
    eligible = select_eligible(counts, min_images=cog_counts.MIN_IMAGES, graph=graph).eligible
    seen = [w for w in in1k_wnids() if w in fragment]
    assert len(seen) == len(cog_counts.SEEN_IN1K)
    synset = {w: nltk_wn.synset_from_pos_and_offset("n", int(w[1:])) for w in (*eligible, *seen)}
    for concept in eligible:
        values = [nltk_wn.lin_similarity(synset[concept], synset[i], ic) for i in seen]
        assert [fragment.lin(concept, i) for i in seen] == values
        assert fragment.similarity_to([concept], seen)[concept] == max(values)


def test_lin_equals_nltk_on_random_pairs_of_a_21841_concept_fragment(in21k: tuple[dict[str, int], Fragment],
                                                                      nltk_wn: Any) -> None:
    from nltk.corpus.reader.wordnet import information_content

    _, fragment = in21k
    ic = _nltk_ic(fragment)
    rng = random.Random(11)
    pairs = [tuple(rng.sample(fragment.nodes, 2)) for _ in range(1500)]
    for first, second in pairs:
        a = nltk_wn.synset_from_pos_and_offset("n", int(first[1:]))
        b = nltk_wn.synset_from_pos_and_offset("n", int(second[1:]))
        assert fragment.lin(first, second) == nltk_wn.lin_similarity(a, b, ic), (first, second)
        assert information_content(a, ic) == fragment.ic[first]


def test_fast_similarity_equals_the_pairwise_maximum(in21k: tuple[dict[str, int], Fragment]) -> None:
    counts, fragment = in21k
    seen = [w for w in in1k_wnids() if w in fragment]
    assert len(seen) == 999  # teddy bear is not in it
    concepts = random.Random(5).sample(sorted(counts), 60)
    fast = fragment.similarity_to(concepts, seen)
    assert fast == {c: max(fragment.lin(c, i) for i in seen) for c in concepts}


def test_graph_parents_agree_with_nltk_on_the_fragments(graph: nx.DiGraph, nltk_wn: Any) -> None:
    fragment = Fragment(graph, [*cog_counts.cog_counts(), *in1k_wnids()])
    for wnid in fragment.nodes:
        assert sorted(graph.pred[wnid]) == nltk_parents(nltk_wn, wnid), wnid


@pytest.mark.slow
def test_graph_parents_agree_with_nltk_on_every_noun(graph: nx.DiGraph, nltk_wn: Any) -> None:
    theirs = {
        f"n{s.offset():08d}": sorted(f"n{p.offset():08d}" for p in s.hypernyms() + s.instance_hypernyms())
        for s in nltk_wn.all_synsets("n")
    }
    assert len(theirs) == NUM_NOUN_SYNSETS
    assert {wnid: sorted(graph.pred[wnid]) for wnid in graph} == theirs
