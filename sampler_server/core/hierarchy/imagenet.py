"""The Meta-Dataset ImageNet class split and its eligible internal nodes.

Construction (Meta-Dataset, Sec. 3.1 and appendix "ImageNet class sampling"), from the
WordNet 3.0 noun graph and a list of class wnids (the leaves):
1. sampling graph: the leaves and all their is-a ancestors; links leaving that node
   set are cut; then, until none is left, every node with exactly one child is removed
   and its child reattached to all of its parents (class nodes are never removed);
2. split: valid = leaves under ``carnivore``, test = leaves under ``device``, train =
   the rest; each split's graph is rebuilt by step 1 from its own leaves, valid and
   test keeping only nodes at or below their root;
3. eligible nodes: internal nodes spanning between 5 and 392 leaves inclusive.
With the 1000 ILSVRC-2012 classes: 712 / 158 / 130 leaves, 113 / 18 / 15 eligible.

Coverage: 392 is the smallest cap under which MD's eligible nodes cover every leaf
of its 712-class train graph. On MD-v2's train graph (all 1000 classes) the same cap
leaves 6 leaves in no eligible node (necklace, pillow, stage, teddy, daisy, yellow
lady's slipper): hierarchical episodes never show them. The reference behaviour
(392) stays the default; ``smallest_covering_max_span`` gives the cap that covers
every leaf (522 there), which a request may choose (``EpisodeConfig.max_span_leaves``).

Determinism: every tuple is sorted by wnid, graphs are rebuilt with nodes and edges
in sorted order, and the single-child removal sweeps nodes in wnid order, so the
result is a function of the inputs alone. Equality of results compares leaves,
edges and eligible nodes, not graph identity. Instance hypernyms (``@i``) are left out
by default, as in Meta-Dataset; with the ILSVRC classes they change nothing.

``SPLIT_ALGORITHM`` names this construction in results computed ahead of time
(``hierarchy.precomputed``); it changes whenever the same inputs would give another
split or other nodes, so an old precomputed result is rebuilt rather than served.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sampler_server.core.hierarchy import MAX_SPAN_LEAVES, MIN_SPAN_LEAVES, Split
from sampler_server.core.hierarchy.wordnet import is_a_parents, is_wnid, load_wordnet_graph
from sampler_server.errors import InvalidArgument

if TYPE_CHECKING:
    import networkx as nx

ENTITY_WNID = "n00001740"
VALID_ROOT_WNID = "n02075296"  # carnivore
TEST_ROOT_WNID = "n03183080"  # device
MIN_SPAN = MIN_SPAN_LEAVES
MAX_SPAN = MAX_SPAN_LEAVES
SPLIT_ALGORITHM = "meta-dataset-imagenet-split/1"


class ImageNetVariant(enum.Enum):
    """MD: the carnivore/device split. MD_V2 (VTAB+MD): every class in train."""

    MD = "md"
    MD_V2 = "md_v2"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EligibleNode:
    """An internal node an episode may be drawn from, with the leaves it spans."""

    wnid: str
    leaves: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitHierarchy:
    """One split's sampling graph (frozen; edges parent -> child) and eligible nodes.

    ``split`` is None for the graph over all classes of an MD split; ``root`` is the
    graph's only node without parents, None for an empty split.
    """

    split: Split | None
    root: str | None
    leaves: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    eligible: tuple[EligibleNode, ...]
    graph: nx.DiGraph = dataclasses.field(compare=False, repr=False)

    @property
    def internal_nodes(self) -> tuple[str, ...]:
        """Sorted wnids of the nodes that have children."""
        return tuple(sorted(node for node in self.graph if self.graph.out_degree(node) > 0))

    def uncovered_leaves(self, max_span: int | None = None) -> tuple[str, ...]:
        """Leaves no eligible node spans (empty for every MD-v1 split; 6 on MD-v2 train).

        ``max_span`` further restricts the eligible nodes to those spanning at most
        that many leaves (None: the bound the hierarchy was built with).
        """
        nodes = self.eligible if max_span is None else [n for n in self.eligible if len(n.leaves) <= max_span]
        covered = {leaf for node in nodes for leaf in node.leaves}
        return tuple(leaf for leaf in self.leaves if leaf not in covered)

    def name_of(self, wnid: str) -> str:
        """The WordNet name (first lemma) of a node of this graph."""
        return str(self.graph.nodes[wnid].get("name", wnid))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageNetSplit:
    """The three split hierarchies plus the sampling graph over all classes.

    ``all_classes`` (split None) is the 1397-node graph for the ILSVRC classes; in the
    MD_V2 variant ``train`` has the same content and valid and test are empty.
    """

    variant: ImageNetVariant
    train: SplitHierarchy
    valid: SplitHierarchy
    test: SplitHierarchy
    all_classes: SplitHierarchy

    def for_split(self, split: Split) -> SplitHierarchy:
        """The hierarchy of ``split``."""
        return {Split.TRAIN: self.train, Split.VALID: self.valid, Split.TEST: self.test}[Split(split)]

    @property
    def class_order(self) -> tuple[str, ...]:
        """Class ids as the reference numbers them: sorted train, then valid, then test."""
        return self.train.leaves + self.valid.leaves + self.test.leaves


def build_imagenet_split(
    wnids: Iterable[str],
    *,
    graph: nx.DiGraph | None = None,
    variant: ImageNetVariant = ImageNetVariant.MD,
    include_instance_hypernyms: bool = False,
    min_span: int = MIN_SPAN,
    max_span: int = MAX_SPAN,
) -> ImageNetSplit:
    """Split the classes ``wnids`` (any order, any count >= 1) as Meta-Dataset does.

    ``graph`` defaults to the shipped WordNet graph. Raises ``InvalidArgument`` for an
    empty list, a repeated or unknown wnid, a class that is an ancestor of another, or
    a class with no is-a path to ``entity``.
    """
    if not 1 <= min_span <= max_span:
        raise InvalidArgument(f"span bounds: got min_span={min_span}, max_span={max_span}, expected 1 <= min <= max")
    wordnet = load_wordnet_graph() if graph is None else graph
    leaves = _validated_leaves(wordnet, wnids)
    parents = _ancestor_parents(wordnet, leaves, include_instance_hypernyms)
    _check_leaves(parents, leaves)

    def hierarchy(split: Split | None, split_leaves: tuple[str, ...], root: str | None) -> SplitHierarchy:
        return _split_hierarchy(wordnet, parents, split, split_leaves, root, min_span, max_span)

    all_classes = hierarchy(None, leaves, None)
    if variant is ImageNetVariant.MD_V2:
        return ImageNetSplit(
            variant=variant,
            train=dataclasses.replace(all_classes, split=Split.TRAIN),
            valid=hierarchy(Split.VALID, (), None),
            test=hierarchy(Split.TEST, (), None),
            all_classes=all_classes,
        )
    valid = _leaves_under(parents, leaves, VALID_ROOT_WNID)
    test = _leaves_under(parents, leaves, TEST_ROOT_WNID)
    both = sorted(set(valid) & set(test))
    if both:
        raise InvalidArgument(f"wnid {both[0]} lies under both carnivore and device; a class needs one split")
    held_out = set(valid) | set(test)
    train = tuple(leaf for leaf in leaves if leaf not in held_out)
    return ImageNetSplit(
        variant=variant,
        train=hierarchy(Split.TRAIN, train, None),
        valid=hierarchy(Split.VALID, valid, VALID_ROOT_WNID),
        test=hierarchy(Split.TEST, test, TEST_ROOT_WNID),
        all_classes=all_classes,
    )


def _validated_leaves(wordnet: nx.DiGraph, wnids: Iterable[str]) -> tuple[str, ...]:
    """Check the class list and return it sorted."""
    if isinstance(wnids, str):
        raise InvalidArgument(f"wnids: got the string {wnids!r}, expected a list of wnids")
    seen: set[str] = set()
    for wnid in wnids:
        if not is_wnid(wnid) or wnid not in wordnet:
            raise InvalidArgument(f"wnid {wnid!r} is not a WordNet 3.0 noun synset ('n' + 8-digit offset)")
        if wnid in seen:
            raise InvalidArgument(f"wnid {wnid} is listed more than once")
        seen.add(wnid)
    if not seen:
        raise InvalidArgument("wnids: got an empty list, expected at least one class")
    return tuple(sorted(seen))


def _ancestor_parents(
    wordnet: nx.DiGraph, leaves: tuple[str, ...], include_instance: bool
) -> dict[str, tuple[str, ...]]:
    """Parents of every node in the leaves' ancestor closure (the cut subgraph)."""
    parents: dict[str, tuple[str, ...]] = {}
    pending = list(leaves)
    while pending:
        node = pending.pop()
        if node in parents:
            continue
        parents[node] = is_a_parents(wordnet, node, include_instance=include_instance)
        pending.extend(parents[node])
    return parents


def _check_leaves(parents: Mapping[str, tuple[str, ...]], leaves: tuple[str, ...]) -> None:
    """Classes must be leaves of their ancestor graph, and that graph must be rooted at entity."""
    leaf_set = set(leaves)
    for leaf in leaves:
        inner = sorted(_ancestors(parents, leaf) & leaf_set)
        if inner:
            raise InvalidArgument(f"wnid {inner[0]} is an ancestor of {leaf}; classes must not contain each other")
        if not _reaches(parents, leaf, ENTITY_WNID):
            raise InvalidArgument(
                f"wnid {leaf} has no hypernym path to entity (an instance synset?); "
                "pass include_instance_hypernyms=True to use its instance hypernyms"
            )


def _ancestors(parents: Mapping[str, tuple[str, ...]], node: str) -> set[str]:
    """All proper ancestors of ``node``."""
    seen: set[str] = set()
    pending = list(parents[node])
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.add(current)
            pending.extend(parents[current])
    return seen


def _reaches(parents: Mapping[str, tuple[str, ...]], node: str, ancestor: str) -> bool:
    """True when ``ancestor`` is ``node`` or one of its ancestors."""
    return node == ancestor or ancestor in _ancestors(parents, node)


def _leaves_under(parents: Mapping[str, tuple[str, ...]], leaves: tuple[str, ...], root: str) -> tuple[str, ...]:
    """Sorted leaves at or below ``root`` in the uncollapsed ancestor graph."""
    return tuple(leaf for leaf in leaves if _reaches(parents, leaf, root))


def _split_hierarchy(
    wordnet: nx.DiGraph,
    parents: Mapping[str, tuple[str, ...]],
    split: Split | None,
    leaves: tuple[str, ...],
    root: str | None,
    min_span: int,
    max_span: int,
) -> SplitHierarchy:
    """Build one split's collapsed sampling graph and its eligible nodes."""
    graph = sampling_graph(wordnet, parents, leaves, root=root)
    spans = spanned_leaves(graph)
    eligible = tuple(
        EligibleNode(wnid=node, leaves=spans[node])
        for node in sorted(graph)
        if graph.out_degree(node) > 0 and min_span <= len(spans[node]) <= max_span
    )
    sources = sorted(node for node in graph if graph.in_degree(node) == 0)
    assert len(sources) <= 1, f"{split} graph has several roots: {sources[:5]}"
    return SplitHierarchy(
        split=split,
        root=sources[0] if sources else None,
        leaves=leaves,
        edges=tuple(sorted(graph.edges)),
        eligible=eligible,
        graph=graph,
    )


def sampling_graph(
    wordnet: nx.DiGraph,
    parents: Mapping[str, tuple[str, ...]],
    leaves: tuple[str, ...],
    *,
    root: str | None = None,
) -> nx.DiGraph:
    """Collapsed ancestor graph of ``leaves`` (optionally only nodes at or below ``root``).

    ``parents`` maps each node of the leaves' ancestor closure to its is-a parents.
    Returns a frozen DiGraph with nodes and edges inserted in sorted order and each
    node's ``name`` attribute copied from ``wordnet``.
    """
    import networkx as nx

    nodes: set[str] = set()
    pending = list(leaves)
    while pending:
        node = pending.pop()
        if node not in nodes:
            nodes.add(node)
            pending.extend(parents[node])
    if root is not None:
        nodes = {node for node in nodes if _reaches(parents, node, root)}
    work = nx.DiGraph()
    work.add_nodes_from(sorted(nodes))
    work.add_edges_from(sorted((p, c) for c in nodes for p in parents[c] if p in nodes))
    _remove_single_child_nodes(work, frozenset(leaves))
    result = nx.DiGraph()
    for node in sorted(work):
        result.add_node(node, name=wordnet.nodes[node].get("name", node))
    result.add_edges_from(sorted(work.edges))
    return nx.freeze(result)


def _remove_single_child_nodes(graph: nx.DiGraph, keep: frozenset[str]) -> None:
    """Until none is left, replace each node with one child by edges parents -> child.

    Sweeps in wnid order; a removal can leave a parent with one child (when it already
    had an edge to the grandchild), hence the outer loop.
    """
    changed = True
    while changed:
        changed = False
        for node in sorted(graph):
            if node in keep or graph.out_degree(node) != 1:
                continue
            (child,) = graph.successors(node)
            node_parents = sorted(graph.predecessors(node))
            graph.remove_node(node)
            graph.add_edges_from((parent, child) for parent in node_parents)
            changed = True


def spanned_leaves(graph: nx.DiGraph) -> dict[str, tuple[str, ...]]:
    """For every node, the sorted leaves (nodes without children) at or below it."""
    import networkx as nx

    spans: dict[str, frozenset[str]] = {}
    for node in reversed(list(nx.topological_sort(graph))):
        children = list(graph.successors(node))
        spans[node] = frozenset({node}) if not children else frozenset().union(*(spans[c] for c in children))
    return {node: tuple(sorted(spans[node])) for node in sorted(spans)}


def smallest_covering_max_span(hierarchy: SplitHierarchy, *, min_span: int = MIN_SPAN) -> int | None:
    """Smallest max span for which eligible nodes cover every leaf (392 on the MD train graph).

    None when some leaf lies under no internal node spanning at least ``min_span``.
    """
    spans = spanned_leaves(hierarchy.graph)
    best: dict[str, int] = {}
    for node, span in spans.items():
        if hierarchy.graph.out_degree(node) > 0 and len(span) >= min_span:
            for leaf in span:
                best[leaf] = min(best.get(leaf, len(span)), len(span))
    if any(leaf not in best for leaf in hierarchy.leaves):
        return None
    return max(best.values(), default=None)
