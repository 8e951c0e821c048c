"""The five ImageNet-CoG concept generalization levels, from IN-21K image counts.

``compute_levels(counts, level_size=, min_images=)``:
1. eligibility (``eligibility``): six sequential rules leave E eligible concepts;
2. similarity (``similarity``): each eligible concept's Lin similarity to IN-1K, the
   maximum over the IN-1K concepts in the WordNet fragment of the counts' concepts,
   rounded to ``SIMILARITY_DECIMALS`` decimals (so the last bits of ``log``, which may
   differ between C libraries, never reorder concepts; the JSON shows the values ranked);
3. ranking: by decreasing similarity, ties by wnid ascending (similarities take few
   distinct values, so ties decide level boundaries);
4. levels L1..L5 of ``level_size`` consecutive ranks spread over the whole ranked list
   with equal gaps: level k (0-based) starts at rank ``round(k * (E - level_size) / 4)``
   (Python's ``round``, halves to even). Fewer than 5 x ``level_size`` eligible
   concepts is an error that lists what each rule removed.

A level's concepts in label order (``Level.concepts``) are its wnids sorted, as the
reference numbers them. The result is a pure function of (counts, level_size,
min_images): ``CogLevels.to_json_text()`` is byte-for-byte reproducible, and
``CogLevels.fingerprint`` hashes the levels' names and sorted wnid lists.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sampler_server.core.cog.constants import LEVEL_NAMES, LEVEL_SIZE, MIN_IMAGES, NUM_LEVELS, SOURCE
from sampler_server.core.cog.eligibility import select_eligible
from sampler_server.core.cog.in1k import in1k_wnids
from sampler_server.core.cog.similarity import Fragment
from sampler_server.core.hashing import FieldHasher
from sampler_server.core.hierarchy.wordnet import is_wnid, load_wordnet_graph
from sampler_server.errors import DataLoss, FailedPrecondition, InputFormatError, InvalidArgument, NotFound
from sampler_server.quoting import quoted

if TYPE_CHECKING:  # networkx loads with a graph, not with the server (startup time)
    import networkx as nx

FORMAT = "imagenet-cog-levels/1"
SIMILARITY_DECIMALS = 12
_FINGERPRINT_DOMAIN = "sampler/cog-levels/v1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Level:
    """One level: its concepts by rank, where they sit in the ranking, their similarities."""

    name: str
    wnids_ranked: tuple[str, ...]
    rank_range: tuple[int, int]
    """[start, end) in the ranked eligible list."""
    similarity_range: tuple[float, float]
    """(min, max) similarity to IN-1K over the level's concepts."""

    @property
    def concepts(self) -> tuple[str, ...]:
        """The level's wnids sorted: label i is ``concepts[i]``."""
        return tuple(sorted(self.wnids_ranked))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "wnids": list(self.wnids_ranked),
            "rank_range": list(self.rank_range),
            "similarity_range": list(self.similarity_range),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class CogLevels:
    """The levels of one (counts, level_size, min_images), with how they were drawn."""

    level_size: int
    min_images: int
    num_concepts: int
    """Concepts in the counts (IN-21K has 21,841)."""
    fragment_size: int
    """Concepts in the WordNet fragment the information content is computed over."""
    eligible: tuple[str, ...]
    """Eligible unseen concepts, ranked (decreasing similarity, then wnid)."""
    excluded: Mapping[str, int]
    """Rule -> concepts it removed, in ``RULES`` order."""
    similarity: Mapping[str, float]
    """Eligible wnid -> Lin similarity to IN-1K (rounded, see the module docstring)."""
    levels: tuple[Level, ...]

    def level(self, name: str) -> Level:
        """The level named ``name`` (``L1``..``L5``)."""
        for level in self.levels:
            if level.name == name:
                return level
        raise NotFound(f"level {quoted(name)} does not exist; levels: {', '.join(LEVEL_NAMES)}")

    @property
    def fingerprint(self) -> str:
        """Hash of the levels' names and sorted wnid lists (what the splits are built on)."""
        hasher = FieldHasher(_FINGERPRINT_DOMAIN)
        for level in self.levels:
            hasher.text(level.name).text(",".join(level.concepts))
        return hasher.hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "level_size": self.level_size,
            "min_images": self.min_images,
            "num_concepts": self.num_concepts,
            "fragment_size": self.fragment_size,
            "num_eligible": len(self.eligible),
            "excluded": dict(self.excluded),
            "eligible": list(self.eligible),
            "similarity": dict(self.similarity),
            "levels": [level.to_json() for level in self.levels],
            "fingerprint": self.fingerprint,
        }

    def to_json_text(self) -> str:
        """Canonical JSON text: sorted keys, one-space indent, ASCII, final newline."""
        return json.dumps(self.to_json(), sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n"


def _check_config(level_size: object, min_images: object) -> tuple[int, int]:
    if isinstance(level_size, bool) or not isinstance(level_size, int) or level_size < 1:
        raise InvalidArgument(f"level_size: got {level_size!r}, expected an integer >= 1")
    if isinstance(min_images, bool) or not isinstance(min_images, int) or min_images < 0:
        raise InvalidArgument(f"min_images: got {min_images!r}, expected an integer >= 0")
    return level_size, min_images


def parse_counts(text: str | bytes, *, source: str = "counts") -> dict[str, int]:
    """A counts file's content: a JSON object mapping each wnid to its image count (int >= 0).

    Keys are checked for shape only here (``validate_counts`` checks them against WordNet).
    Raises ``InputFormatError`` naming ``source`` on anything else, duplicate keys included.
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise InputFormatError(source, f"wnid {quoted(key)} appears twice")
            out[key] = value
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputFormatError(source, f"not JSON ({error})") from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise InputFormatError(source, f"expected a JSON object mapping wnids to image counts, got a {kind}")
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputFormatError(source, f"count of {quoted(key)} is {quoted(value)}, expected an integer >= 0")
    return dict(data)


def validate_counts(counts: Mapping[str, int], graph: nx.DiGraph, *, source: str = "counts") -> None:
    """Every key a WordNet 3.0 noun synset, every count an integer >= 0 (else InvalidArgument)."""
    for wnid, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgument(f"{source}: count of {quoted(wnid)} is {quoted(count)}, expected an integer >= 0")
    unknown = sorted((w for w in counts if not (is_wnid(w) and w in graph)), key=str)
    if unknown:
        more = f" ({len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
        raise InvalidArgument(f"{source}: {quoted(unknown[0])} is not a WordNet 3.0 noun synset{more}")


def level_starts(num_eligible: int, level_size: int) -> tuple[int, ...]:
    """First rank of each level: ``round(k * (E - level_size) / 4)``, equal gaps, L5 ending at E."""
    gaps = NUM_LEVELS - 1
    return tuple(round(k * (num_eligible - level_size) / gaps) for k in range(NUM_LEVELS))


def compute_levels(
    counts: Mapping[str, int],
    *,
    level_size: int = LEVEL_SIZE,
    min_images: int = MIN_IMAGES,
    graph: nx.DiGraph | None = None,
    source: str = "counts",
) -> CogLevels:
    """The ImageNet-CoG levels of IN-21K ``counts`` (wnid -> images); see the module docstring.

    ``graph`` is the WordNet 3.0 noun graph (the shipped one by default); ``source``
    names the counts in error messages. Raises ``InvalidArgument`` for a bad config or
    an unknown wnid and ``FailedPrecondition`` when too few concepts are eligible.
    """
    level_size, min_images = _check_config(level_size, min_images)
    graph = load_wordnet_graph() if graph is None else graph
    validate_counts(counts, graph, source=source)
    selection = select_eligible(counts, min_images=min_images, graph=graph)
    needed = NUM_LEVELS * level_size
    if len(selection.eligible) < needed:
        removed = ", ".join(f"{rule} {count}" for rule, count in selection.excluded.items())
        raise FailedPrecondition(
            f"{source}: {len(selection.eligible)} of {len(counts)} concepts are eligible, the levels need "
            f"{needed} ({NUM_LEVELS} x level_size {level_size}); removed: {removed}; a smaller store needs smaller "
            f"levels: lower level_size and min_images (the demo's store takes level_size 4, min_images 60)"
        )
    fragment = Fragment(graph, counts)
    raw = fragment.similarity_to(selection.eligible, in1k_wnids())
    similarity = {wnid: round(raw[wnid], SIMILARITY_DECIMALS) for wnid in selection.eligible}
    ranked = tuple(sorted(selection.eligible, key=lambda wnid: (-similarity[wnid], wnid)))
    levels = []
    for name, start in zip(LEVEL_NAMES, level_starts(len(ranked), level_size)):
        wnids = ranked[start:start + level_size]
        levels.append(Level(
            name=name, wnids_ranked=wnids, rank_range=(start, start + level_size),
            similarity_range=(similarity[wnids[-1]], similarity[wnids[0]]),
        ))
    return CogLevels(
        level_size=level_size, min_images=min_images, num_concepts=len(counts),
        fragment_size=fragment.size, eligible=ranked, excluded=selection.excluded,
        similarity={wnid: similarity[wnid] for wnid in ranked}, levels=tuple(levels),
    )


class _ManifestLike(Protocol):
    source: str
    name: str
    classes: Any


def counts_from_manifests(manifests: Iterable[_ManifestLike]) -> dict[str, int]:
    """wnid -> image count over every IN-21K store (``manifest.source == "imagenet21k"``).

    The stores are the shards of one pack, each holding its own concepts; a concept in
    two stores (two packs of the same source in one data directory) is an error, since
    adding them would count its images twice. Keys are sorted.
    """
    counts: dict[str, int] = {}
    where: dict[str, str] = {}
    for manifest in manifests:
        if manifest.source != SOURCE:
            continue
        for info in manifest.classes:
            if not is_wnid(info.wnid):
                raise DataLoss(f"store {manifest.name}: class {info.name!r} has no wnid")
            if info.wnid in counts:
                raise FailedPrecondition(
                    f"concept {info.wnid} is in two {SOURCE} stores, {where[info.wnid]} and {manifest.name}: "
                    "keep one pack of the source in the data directory"
                )
            counts[info.wnid] = info.end - info.start
            where[info.wnid] = manifest.name
    return dict(sorted(counts.items()))
