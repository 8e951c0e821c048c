"""Information content over a WordNet fragment and Lin similarity (CoG supplementary A.2).

The fragment is every IN-21K concept (every wnid with a count) plus all its is-a
ancestors up to ``entity`` (hypernym and instance edges, as NLTK walks them). With
``F`` its size and ``under(c)`` the number of fragment concepts that are ``c`` or
below ``c``:

    p(c)  = under(c) / F              (so p(entity) = 1, and p(child) < p(parent))
    IC(c) = -log p(c)
    Lin(c1, c2) = 2 IC(LCS) / (IC(c1) + IC(c2))

where the lowest common subsumer LCS is the common ancestor of highest IC, a concept
counting as its own ancestor (so Lin(c, c) = 1). These are the definitions of NLTK's
``lin_similarity`` with the information-content table {offset: under(c), 0: F};
a test checks equality on the real graph. When both concepts are the root (IC sum 0)
Lin is 1 by convention.

Similarity to the seen concepts, sim(c) = max over the seen concepts i in the fragment
of Lin(c, i), is computed without visiting every pair: for an ancestor a of c that is
also an ancestor of i, 2 IC(a) / (IC(c) + IC(i)) is largest for the i of least IC under
a, so sim(c) = max over the ancestors a of c of 2 IC(a) / (IC(c) + m(a)), with
m(a) = the least IC of a seen concept at or under a, computed once per fragment node.
Division and addition being monotone, this gives bit for bit the value of the pairwise
maximum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # networkx loads with a graph, not with the server (startup time)
    import networkx as nx


class Fragment:
    """The WordNet fragment of a set of concepts, with ``under`` counts and IC."""

    def __init__(self, graph: nx.DiGraph, concepts: Iterable[str]) -> None:
        pred = graph.pred
        ancestors: dict[str, frozenset[str]] = {}

        def closure(node: str) -> frozenset[str]:
            # Iterative post-order so deep chains never hit the recursion limit.
            stack = [node]
            while stack:
                top = stack[-1]
                if top in ancestors:
                    stack.pop()
                    continue
                missing = [p for p in pred[top] if p not in ancestors]
                if missing:
                    stack.extend(missing)
                    continue
                stack.pop()
                ancestors[top] = frozenset([top]).union(*(ancestors[p] for p in pred[top]))
            return ancestors[node]

        for concept in sorted(set(concepts)):
            closure(concept)
        under = dict.fromkeys(ancestors, 0)
        for chain in ancestors.values():
            for node in chain:
                under[node] += 1
        self.size = len(ancestors)
        self.nodes: tuple[str, ...] = tuple(sorted(ancestors))
        self.under: Mapping[str, int] = {node: under[node] for node in self.nodes}
        self.ancestors: Mapping[str, frozenset[str]] = ancestors
        """Fragment node -> its ancestors, itself included (all in the fragment)."""
        self.ic: Mapping[str, float] = {node: -math.log(under[node] / self.size) for node in self.nodes}

    def __contains__(self, wnid: object) -> bool:
        return wnid in self.under

    def lcs(self, first: str, second: str) -> str:
        """The common ancestor of highest IC (ties: the smallest wnid)."""
        common = self.ancestors[first] & self.ancestors[second]
        return min(common, key=lambda node: (-self.ic[node], node))

    def lin(self, first: str, second: str) -> float:
        """Lin similarity of two fragment concepts, in [0, 1]."""
        total = self.ic[first] + self.ic[second]
        if total == 0.0:
            return 1.0
        return 2.0 * self.ic[self.lcs(first, second)] / total

    def similarity_to(self, concepts: Iterable[str], seen: Iterable[str]) -> dict[str, float]:
        """concept -> max Lin to the ``seen`` concepts that are in the fragment (0.0 if none).

        Every concept must be in the fragment. Linear in the ancestors of the concepts
        and of the seen ones (see the module docstring).
        """
        least: dict[str, float] = {}
        for wnid in sorted(set(seen)):
            if wnid not in self.under:
                continue  # e.g. teddy bear: not an IN-21K concept, outside the fragment
            ic = self.ic[wnid]
            for node in self.ancestors[wnid]:
                if ic < least.get(node, math.inf):
                    least[node] = ic
        out: dict[str, float] = {}
        for concept in concepts:
            ic = self.ic[concept]
            best = 0.0
            for node in self.ancestors[concept]:
                m = least.get(node)
                if m is None:
                    continue
                total = ic + m
                value = 1.0 if total == 0.0 else 2.0 * self.ic[node] / total
                if value > best:
                    best = value
            out[concept] = best
        return out
