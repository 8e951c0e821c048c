"""Validation of (spec, split, config) and the candidate classes and groups an episode draws from.

Everything that can make an episode impossible is checked here, once, before any
sampling: afterwards every draw succeeds in a bounded number of steps (no retries,
no clamping). Errors are ``InvalidArgument`` naming the parameter, the value and
the allowed range (``FailedPrecondition`` for a spec without class splits).

Rules (where the paper is silent, the choice is stated):
- Candidate classes: the split's classes with at least ``min_examples_in_class``
  images, sorted by id.
- Every candidate must be able to give what an episode asks of it: with fixed
  shots k and query q, k + q images; with fixed k only, k + 1 (so q >= 1); with
  fixed q only, q + 1 (so shots >= 1); otherwise 2 (q = floor(n/2) >= 1 and one
  support image). A smaller class is an error that names ``min_examples_in_class``
  as the way to leave such classes out; the sampler never skips them silently.
- Span cap (WordNet-split sources): the eligible nodes are the spec's nodes spanning
  at most ``config.span_cap`` leaves of the split (``max_span_leaves``, unset = the
  reference's 392); with the default, the nodes and their order are exactly those
  the spec held before the cap became a request field, so episodes are unchanged.
- Hierarchy: a source with eligible nodes (ImageNet-like) or class groups
  (Omniglot-like alphabets) draws a group uniformly among its *candidate groups*:
  groups with at least ``min_ways`` candidate classes (``num_ways`` when the ways
  are fixed). A smaller alphabet could never yield an in-range ways draw (the
  reference fails on it at draw time: ``randint`` with an empty range); an
  ImageNet node spanning fewer leaves than ``min_ways`` would give too few ways.
  No candidate group at all is an error. With ``ignore_hierarchy_probability`` = 1
  groups are never used and not required.
- Flat draws (no hierarchy, or ignored with probability p > 0) need at least
  ``min_ways`` (or ``num_ways``) candidate classes.
- Variable support needs the support cap to hold one image per class:
  ``max_support_set_size`` >= the largest possible ways.
"""

from __future__ import annotations

import dataclasses
import enum

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.spec import ClassSpec, DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument


class ClassStructure(enum.Enum):
    """How a source's classes are organised for Step 1."""

    FLAT = "flat"
    NODES = "nodes"  # ImageNet: eligible internal nodes of a DAG
    GROUPS = "groups"  # Omniglot: alphabets


@dataclasses.dataclass(frozen=True)
class Group:
    """A node or alphabet an episode may be drawn from, with its candidate class ids (sorted)."""

    id: str
    classes: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    """A validated (spec, split, config) with what the draws pick from."""

    spec: DatasetSpec
    split: Split
    config: EpisodeConfig
    structure: ClassStructure
    candidates: tuple[int, ...]
    groups: tuple[Group, ...]

    @property
    def draws_hierarchy_coin(self) -> bool:
        """Whether an episode draws the use-the-hierarchy coin (a source with structure, not all-classes)."""
        return self.structure is not ClassStructure.FLAT and not self.config.all_classes


def parse_split(split: Split | str) -> Split:
    """A Split from an enum member or its name ('validation' and 'val' mean 'valid')."""
    if isinstance(split, Split):
        return split
    return Split.parse(split)


def build_plan(spec: DatasetSpec, split: Split | str, config: EpisodeConfig, name: str | None = None) -> SamplingPlan:
    """Validate and return the plan (see the module docstring for every rule). ``name``: the
    store as served, which a refusal names beside its kind when the two differ."""
    split = parse_split(split)
    if not isinstance(config, EpisodeConfig):
        raise InvalidArgument(f"config: got {type(config).__name__}, expected an EpisodeConfig")
    where = (f"store {name!r} ({spec.source}) split {split.value!r}" if name and name != spec.source
             else f"source {spec.source!r} split {split.value!r}")
    if not spec.has_splits and spec.source.startswith("tfds:"):
        raise FailedPrecondition(
            f"source {spec.source!r} is a TFDS (VTAB) store: it holds VTAB splits, not Meta-Dataset classes, "
            "so it serves no episodes"
        )
    if not spec.has_splits:
        raise FailedPrecondition(
            f"source {spec.source!r}: its classes have no split; build its spec with the hierarchy "
            "that splits them (ImageNet: core.imagenet_spec)"
        )
    members = spec.classes_in(split)
    if not members:
        present = ", ".join(f"{s.value} ({len(spec.classes_in(s))} classes)" for s in Split if spec.classes_in(s))
        raise InvalidArgument(
            f"split: got {split.value!r}, but source {spec.source!r} has no classes in it; "
            f"expected one of: {present or 'none'}"
        )
    candidates = tuple(c for c in members if c.count >= config.min_examples_in_class)
    if not candidates:
        largest = max(c.count for c in members)
        raise InvalidArgument(
            f"min_examples_in_class: got {config.min_examples_in_class}, expected at most {largest} "
            f"(the largest class of {where}); no class would be left"
        )
    _check_class_sizes(candidates, config, where)
    structure = _structure(spec)
    groups = _candidate_groups(spec, split, config, structure, {c.id for c in candidates}, where)
    flat_possible = structure is ClassStructure.FLAT or config.ignore_hierarchy_probability > 0
    max_ways = _check_ways(config, len(candidates), groups, flat_possible, where)
    if config.num_support is None and max_ways > config.max_support_set_size:
        raise InvalidArgument(
            f"max_support_set_size: got {config.max_support_set_size}, expected at least {max_ways} "
            f"(episodes of {where} can have {max_ways} ways and each class needs a support image); "
            "lower the ways or fix num_support"
        )
    return SamplingPlan(
        spec=spec,
        split=split,
        config=config,
        structure=structure,
        candidates=tuple(c.id for c in candidates),
        groups=groups,
    )


def _structure(spec: DatasetSpec) -> ClassStructure:
    if spec.hierarchy is not None:
        return ClassStructure.NODES
    if spec.classes and spec.classes[0].group is not None:
        return ClassStructure.GROUPS
    return ClassStructure.FLAT


def _check_class_sizes(candidates: tuple[ClassSpec, ...], config: EpisodeConfig, where: str) -> None:
    """Every candidate class holds what an episode may take from it."""
    smallest = min(candidates, key=lambda c: (c.count, c.id))
    n = smallest.count
    who = f"class {smallest.name!r} (id {smallest.id}) of {where} has {n} image{'s' if n != 1 else ''}"
    k, q = config.num_support, config.num_query
    if k is not None and q is not None:
        if k + q > n:
            raise InvalidArgument(
                f"num_support + num_query: got {k} + {q} = {k + q}, expected at most {n}: {who}; "
                f"set min_examples_in_class={k + q} to leave smaller classes out"
            )
    elif k is not None:
        if k + 1 > n:
            raise InvalidArgument(
                f"num_support: got {k}, expected at most {n - 1}: {who} and needs one left for the query; "
                f"set min_examples_in_class={k + 1} to leave smaller classes out"
            )
    elif q is not None:
        if q + 1 > n:
            raise InvalidArgument(
                f"num_query: got {q}, expected at most {n - 1}: {who} and needs one left for the support; "
                f"set min_examples_in_class={q + 1} to leave smaller classes out"
            )
    elif n < 2:
        raise InvalidArgument(
            f"min_examples_in_class: got {config.min_examples_in_class}, expected at least 2 here: {who}, "
            "and variable-shot episodes take at least 1 query and 1 support image per class"
        )


def _candidate_groups(
    spec: DatasetSpec,
    split: Split,
    config: EpisodeConfig,
    structure: ClassStructure,
    candidate_ids: set[int],
    where: str,
) -> tuple[Group, ...]:
    """Groups with enough candidate classes; empty when the hierarchy is never used."""
    if structure is ClassStructure.FLAT or config.all_classes or config.ignore_hierarchy_probability >= 1.0:
        return ()
    capped = 0
    if structure is ClassStructure.NODES:
        # The span cap counts every leaf a node spans in the split, not only the candidates.
        nodes = spec.nodes_in(split) or ()
        raw = tuple((node.id, node.leaves) for node in nodes if len(node.leaves) <= config.span_cap)
        capped = len(nodes) - len(raw)
        kind = "eligible node"
    else:
        raw = spec.groups_in(split) or ()
        kind = "group"
    filtered = [(name, tuple(c for c in classes if c in candidate_ids)) for name, classes in raw]
    needed = config.num_ways if config.num_ways is not None else config.min_ways
    parameter = "num_ways" if config.num_ways is not None else "min_ways"
    groups = tuple(Group(name, classes) for name, classes in filtered if len(classes) >= needed)
    if not groups:
        largest = max((len(classes) for _, classes in filtered), default=0)
        raise InvalidArgument(
            f"{parameter}: got {needed}, expected at most {largest} (the most candidate classes any {kind} "
            f"of {where} has; {len(filtered)} {kind}s); set ignore_hierarchy_probability=1 to draw across "
            f"{kind}s or lower {parameter}"
            + (f"; max_span_leaves={config.span_cap} leaves out {capped} larger nodes" if capped else "")
        )
    return groups


def _check_ways(
    config: EpisodeConfig, num_candidates: int, groups: tuple[Group, ...], flat_possible: bool, where: str
) -> int:
    """Check flat draws are possible and return the largest number of ways an episode can have."""
    if config.all_classes:
        return num_candidates
    suffix = (
        f" with at least min_examples_in_class={config.min_examples_in_class} images"
        if config.min_examples_in_class
        else ""
    )
    if config.num_ways is not None:
        if flat_possible and config.num_ways > num_candidates:
            raise InvalidArgument(
                f"num_ways: got {config.num_ways}, expected at most {num_candidates} "
                f"(the classes of {where}{suffix})"
            )
        return config.num_ways
    if flat_possible and config.min_ways > num_candidates:
        raise InvalidArgument(
            f"min_ways: got {config.min_ways}, expected at most {num_candidates} (the classes of {where}{suffix})"
        )
    largest = max([len(g.classes) for g in groups] + ([num_candidates] if flat_possible else []))
    return min(config.max_ways_upper_bound, largest)
