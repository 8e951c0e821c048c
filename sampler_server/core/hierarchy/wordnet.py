"""WordNet 3.0 noun is-a graph: parser, shipped derived file, loader.

The graph is a ``networkx.DiGraph`` whose edges run parent -> child (hypernym ->
hyponym). Nodes are wnids, ``'n'`` + the 8-digit noun synset offset (the byte position
of the synset's line in ``data.noun``), with attribute ``name`` = the synset's first
lemma as WordNet spells it (underscores kept, e.g. ``'physical_entity'``). Each edge
carries ``kind``: ``'hypernym'`` for an ``@`` pointer, ``'instance'`` for ``@i``. No
synset has both kinds to the same parent, so one edge never stands for two pointers.

Invariants and determinism:
- 82,115 noun synsets; ``entity`` (n00001740) is the only synset without parents.
- Synsets are listed, and nodes and edges inserted, in wnid order with parents sorted,
  so iteration order is a function of the data alone.
- The derived file is a gzip (mtime 0, no file name, level 9) of a sorted TSV; built
  from the same ``data.noun`` it is the same bytes.
- The loaded graph is frozen (``networkx.freeze``) because it is cached and shared.

networkx is imported where a graph is built, not with this module: a server whose
WordNet splits were precomputed at pack time (``hierarchy.precomputed``) never loads it.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import importlib.resources
import io
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sampler_server.errors import InputFormatError, NotFound

if TYPE_CHECKING:
    import networkx as nx

ROOT_WNID = "n00001740"
NUM_NOUN_SYNSETS = 82_115
HYPERNYM = "hypernym"
INSTANCE = "instance"
DERIVED_FILE_NAME = "wordnet30_nouns.tsv.gz"
DERIVED_HEADER = "#wordnet30_nouns/1\twnid\tname\thypernyms\tinstance_hypernyms"

_WNID_RE = re.compile(r"n[0-9]{8}")
_POINTER_KINDS = {"@": HYPERNYM, "@i": INSTANCE}


@dataclasses.dataclass(frozen=True, kw_only=True)
class NounSynset:
    """One noun synset with its is-a parents (each tuple sorted by wnid)."""

    wnid: str
    name: str
    hypernyms: tuple[str, ...]
    instance_hypernyms: tuple[str, ...]


def is_wnid(text: object) -> bool:
    """True for a string shaped like a noun wnid (``'n'`` + 8 digits)."""
    return isinstance(text, str) and _WNID_RE.fullmatch(text) is not None


def parse_data_noun(data: bytes, *, source: str = "data.noun") -> tuple[NounSynset, ...]:
    """Parse WordNet's ``data.noun`` (bytes, as on disk) into synsets sorted by wnid.

    Licence lines (two leading spaces) are skipped. Each synset's offset must equal the
    byte position of its line: that is what makes an offset a stable id.
    Raises ``InputFormatError`` naming ``source`` and the line on any malformed line.
    """
    synsets: list[NounSynset] = []
    position = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        start, position = position, position + len(line) + 1
        if not line or line.startswith(b"  "):
            continue
        try:
            synset = _parse_line(line.decode("ascii"))
        except (ValueError, IndexError) as exc:
            raise InputFormatError(source, f"line {number}: {exc}") from None
        if synset.wnid != f"n{start:08d}":
            raise InputFormatError(
                source, f"line {number}: offset {synset.wnid[1:]} is not the line's byte position {start}"
            )
        synsets.append(synset)
    return tuple(synsets)


def _parse_line(line: str) -> NounSynset:
    """One synset line: offset lex_file pos w_cnt (word lex_id)* p_cnt (ptr)* | gloss."""
    fields = line.split(" ")
    if fields[2] != "n":
        raise ValueError(f"part of speech {fields[2]!r}, expected 'n'")
    word_count = int(fields[3], 16)
    name = fields[4]
    at = 4 + 2 * word_count
    pointer_count = int(fields[at])
    at += 1
    parents: dict[str, list[str]] = {HYPERNYM: [], INSTANCE: []}
    for _ in range(pointer_count):
        symbol, offset, pos = fields[at], fields[at + 1], fields[at + 2]
        at += 4
        kind = _POINTER_KINDS.get(symbol)
        if kind is not None:
            if pos != "n" or not offset.isdigit() or len(offset) != 8:
                raise ValueError(f"bad {symbol} pointer {offset} {pos}")
            parents[kind].append("n" + offset)
    if fields[at] != "|":
        raise ValueError(f"expected '|' after {pointer_count} pointers, got {fields[at]!r}")
    return NounSynset(
        wnid="n" + fields[0],
        name=name,
        hypernyms=tuple(sorted(set(parents[HYPERNYM]))),
        instance_hypernyms=tuple(sorted(set(parents[INSTANCE]))),
    )


def graph_from_synsets(synsets: Iterable[NounSynset]) -> nx.DiGraph:
    """Build the is-a DiGraph (parent -> child, edge attribute ``kind``) in wnid order."""
    import networkx as nx

    ordered = sorted(synsets, key=lambda s: s.wnid)
    graph = nx.DiGraph()
    for synset in ordered:
        graph.add_node(synset.wnid, name=synset.name)
    for synset in ordered:
        for kind, parents in ((HYPERNYM, synset.hypernyms), (INSTANCE, synset.instance_hypernyms)):
            for parent in parents:
                if parent not in graph:
                    raise InputFormatError("wordnet", f"{synset.wnid} points to unknown synset {parent}")
                graph.add_edge(parent, synset.wnid, kind=kind)
    return graph


def encode_derived(synsets: Iterable[NounSynset]) -> bytes:
    """Serialise synsets to the shipped format: a sorted TSV, gzip'd reproducibly."""
    lines = [DERIVED_HEADER]
    for s in sorted(synsets, key=lambda s: s.wnid):
        lines.append("\t".join((s.wnid, s.name, ",".join(s.hypernyms), ",".join(s.instance_hypernyms))))
    payload = ("\n".join(lines) + "\n").encode("ascii")
    buffer = io.BytesIO()
    # GzipFile (not gzip.compress) so the header is fixed: no name, mtime 0, OS 255.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as out:
        out.write(payload)
    return buffer.getvalue()


def decode_derived(blob: bytes, *, source: str = DERIVED_FILE_NAME) -> tuple[NounSynset, ...]:
    """Inverse of ``encode_derived``; raises ``InputFormatError`` on a corrupt file."""
    try:
        lines = gzip.decompress(blob).decode("ascii").split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputFormatError(source, f"not a gzip'd ASCII file: {exc}") from None
    if lines[0] != DERIVED_HEADER or lines[-1] != "":
        raise InputFormatError(source, f"header {lines[0]!r}, expected {DERIVED_HEADER!r}")
    synsets = []
    for number, line in enumerate(lines[1:-1], start=2):
        fields = line.split("\t")
        if len(fields) != 4 or not is_wnid(fields[0]):
            raise InputFormatError(source, f"line {number}: expected wnid, name and two parent lists")
        wnid, name, hypernyms, instances = fields
        synsets.append(
            NounSynset(
                wnid=wnid,
                name=name,
                hypernyms=tuple(hypernyms.split(",")) if hypernyms else (),
                instance_hypernyms=tuple(instances.split(",")) if instances else (),
            )
        )
    return tuple(synsets)


def load_synsets(path: str | Path | None = None) -> tuple[NounSynset, ...]:
    """Read the derived file: the one shipped in the package unless ``path`` is given."""
    return _load_synsets_cached(None if path is None else str(Path(path).resolve()))


def load_wordnet_graph(path: str | Path | None = None) -> nx.DiGraph:
    """The frozen WordNet 3.0 noun graph (cached per path; shipped file by default)."""
    return _load_graph_cached(None if path is None else str(Path(path).resolve()))


def derived_file_digest(path: str | Path | None = None) -> str:
    """``"sha256:<hex>"`` of the derived file (the shipped one unless ``path`` is given):
    what a result computed from the graph records to show which WordNet it came from."""
    return _digest_cached(None if path is None else str(Path(path).resolve()))


def _derived_bytes(path: str | None) -> tuple[bytes, str]:
    """(bytes, name for messages) of the shipped derived file or of ``path``."""
    if path is None:
        resource = importlib.resources.files("sampler_server") / "data" / DERIVED_FILE_NAME
        return resource.read_bytes(), f"sampler_server/data/{DERIVED_FILE_NAME}"
    try:
        return Path(path).read_bytes(), path
    except FileNotFoundError:
        raise NotFound(f"WordNet derived file {path} does not exist") from None


@functools.lru_cache(maxsize=4)
def _digest_cached(path: str | None) -> str:
    return "sha256:" + hashlib.sha256(_derived_bytes(path)[0]).hexdigest()


@functools.lru_cache(maxsize=4)
def _load_synsets_cached(path: str | None) -> tuple[NounSynset, ...]:
    blob, source = _derived_bytes(path)
    return decode_derived(blob, source=source)


@functools.lru_cache(maxsize=4)
def _load_graph_cached(path: str | None) -> nx.DiGraph:
    import networkx as nx

    return nx.freeze(graph_from_synsets(_load_synsets_cached(path)))


def is_a_parents(graph: nx.DiGraph, wnid: str, *, include_instance: bool = False) -> tuple[str, ...]:
    """Sorted parents of ``wnid`` through ``@`` edges (and ``@i`` edges if asked)."""
    return tuple(
        sorted(
            parent
            for parent in graph.predecessors(wnid)
            if include_instance or graph.edges[parent, wnid]["kind"] == HYPERNYM
        )
    )


def is_a_view(graph: nx.DiGraph, *, include_instance: bool = False) -> nx.DiGraph:
    """Read-only view keeping ``@`` edges only (or all edges with ``include_instance``)."""
    import networkx as nx

    if include_instance:
        return nx.subgraph_view(graph)
    return nx.subgraph_view(graph, filter_edge=lambda u, v: graph.edges[u, v]["kind"] == HYPERNYM)
