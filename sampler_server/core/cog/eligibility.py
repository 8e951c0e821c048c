"""Which IN-21K concepts are eligible unseen concepts (ImageNet-CoG supplementary A.1).

Six rules, applied in this order to the concepts that survived the previous ones (the
count of a rule is of the concepts it removed at its step, so a concept is counted
once, by the first rule that removes it):

1. ``in1k``: the 1000 IN-1K concepts (seen);
2. ``in1k_ancestor``: every is-a ancestor of any of the 1000 IN-1K concepts (main text
   Sec. 3.2), whether or not that IN-1K concept has images in the counts;
3. ``too_few_images``: fewer than ``min_images`` images (782 in the paper);
4. ``person``: ``person`` (n00007846) and everything under it;
5. ``not_leaf``: every concept that is an ancestor of another concept still remaining,
   so only the leaves of the remaining set stay;
6. ``listed``: the 70 concepts of Table 2.

"Ancestor" and "under" follow WordNet 3.0 noun hypernyms AND instance hypernyms, as
NLTK's reader (which the paper used) walks them; an ancestor is proper (a concept is
not its own ancestor here) and may be reached through concepts outside the counts.

Every listing returned is sorted by wnid; nothing depends on input order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sampler_server.core.cog.constants import PERSON_WNID, RULES
from sampler_server.core.cog.in1k import in1k_wnids
from sampler_server.core.cog.listed import LISTED_WNIDS

if TYPE_CHECKING:  # networkx loads with a graph, not with the server (startup time)
    import networkx as nx


@dataclasses.dataclass(frozen=True, kw_only=True)
class Eligibility:
    """The eligible concepts and what each rule removed (both sorted by wnid)."""

    eligible: tuple[str, ...]
    removed: Mapping[str, tuple[str, ...]]
    """Rule -> the concepts it removed, keys in ``RULES`` order."""

    @property
    def excluded(self) -> dict[str, int]:
        """Rule -> how many concepts it removed, in ``RULES`` order."""
        return {rule: len(self.removed[rule]) for rule in RULES}


def proper_ancestors(graph: nx.DiGraph, nodes: Iterable[str]) -> set[str]:
    """Every node that is an ancestor of at least one of ``nodes`` (not counting itself).

    One upward sweep from all the nodes' parents at once: linear in the ancestors.
    Edges of both kinds (hypernym and instance) are followed.
    """
    pred = graph.pred
    seen: set[str] = set()
    todo = [parent for node in nodes for parent in pred[node]]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(pred[node])
    return seen


def subtree(graph: nx.DiGraph, root: str) -> set[str]:
    """``root`` and every node under it (both edge kinds)."""
    import networkx as nx

    return {root} | nx.descendants(graph, root)


def select_eligible(
    counts: Mapping[str, int],
    *,
    min_images: int,
    graph: nx.DiGraph,
    in1k: Iterable[str] | None = None,
    listed: Iterable[str] = LISTED_WNIDS,
) -> Eligibility:
    """Apply the six rules to the concepts of ``counts`` (wnid -> image count).

    Every wnid of ``counts`` must be a node of ``graph`` (``levels.validate_counts``
    checks it). ``in1k`` defaults to the shipped 1000 ILSVRC-2012 wnids and ``listed``
    to Table 2; tests pass others.
    """
    seen = frozenset(in1k_wnids() if in1k is None else in1k)
    remaining = set(counts)
    removed: dict[str, tuple[str, ...]] = {}

    def drop(rule: str, concepts: Iterable[str]) -> None:
        gone = remaining.intersection(concepts)
        remaining.difference_update(gone)
        removed[rule] = tuple(sorted(gone))

    drop("in1k", seen)
    drop("in1k_ancestor", proper_ancestors(graph, (w for w in seen if w in graph)))
    drop("too_few_images", [w for w in remaining if counts[w] < min_images])
    drop("person", subtree(graph, PERSON_WNID) if PERSON_WNID in graph else ())
    drop("not_leaf", proper_ancestors(graph, remaining))
    drop("listed", listed)
    assert tuple(removed) == RULES
    return Eligibility(eligible=tuple(sorted(remaining)), removed=removed)
