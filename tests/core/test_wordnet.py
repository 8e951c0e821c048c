"""WordNet 3.0 noun graph: parser, shipped derived file, loader, regeneration."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prerequisites import missing

from sampler_server.core.hierarchy import build_wordnet
from sampler_server.core.hierarchy.wordnet import (
    HYPERNYM,
    INSTANCE,
    NUM_NOUN_SYNSETS,
    ROOT_WNID,
    NounSynset,
    decode_derived,
    encode_derived,
    graph_from_synsets,
    is_a_parents,
    is_a_view,
    is_wnid,
    load_synsets,
    load_wordnet_graph,
    parse_data_noun,
)
from sampler_server.errors import InputFormatError, NotFound

WORDNET_DIR = Path("/usr/share/wordnet")
SHIPPED = Path(build_wordnet.__file__).resolve().parents[2] / "data" / "wordnet30_nouns.tsv.gz"


def _data_noun(lines: list[str]) -> bytes:
    """A tiny data.noun: two licence lines, then synset lines with true byte offsets."""
    out = b"  1 licence line  \n  2 more licence  \n"
    for line in lines:
        out += line.replace("OFFSET", f"{len(out):08d}").encode("ascii") + b"  \n"
    return out


def _append(text: bytes, line: str) -> tuple[bytes, str]:
    """Append a synset line (``OFFSET`` replaced by its byte position); return the wnid too."""
    offset = f"{len(text):08d}"
    return text + line.replace("OFFSET", offset).encode("ascii") + b"  \n", "n" + offset


def test_parser_reads_names_offsets_and_both_pointer_kinds() -> None:
    text, root = _append(_data_noun([]), "OFFSET 03 n 01 entity 0 000 | the root")
    text, dog = _append(text, f"OFFSET 05 n 02 dog 0 domestic_dog 0 002 @ {root[1:]} n 0000 ~ 00000001 n 0000 | a dog")
    text, rex = _append(
        text, f"OFFSET 15 n 01 Rex 0 003 @i {dog[1:]} n 0000 @ {root[1:]} n 0000 + 00123456 v 0101 | a name"
    )
    synsets = parse_data_noun(text)
    assert root == "n00000038"
    assert [s.wnid for s in synsets] == [root, dog, rex]
    assert synsets[0] == NounSynset(wnid=root, name="entity", hypernyms=(), instance_hypernyms=())
    assert synsets[1] == NounSynset(wnid=dog, name="dog", hypernyms=(root,), instance_hypernyms=())
    assert synsets[2] == NounSynset(wnid=rex, name="Rex", hypernyms=(root,), instance_hypernyms=(dog,))
    graph = graph_from_synsets(synsets)
    assert graph.edges[root, rex]["kind"] == HYPERNYM
    assert graph.edges[dog, rex]["kind"] == INSTANCE
    assert graph.nodes[dog]["name"] == "dog"


def test_parser_rejects_wrong_offset_and_malformed_lines() -> None:
    with pytest.raises(InputFormatError, match="byte position"):
        parse_data_noun(_data_noun(["00000999 03 n 01 entity 0 000 | x"]), source="dn")
    with pytest.raises(InputFormatError, match=r"dn: line 3"):
        parse_data_noun(_data_noun(["OFFSET 03 n 01 entity 0 001 @ 00000001 n 0000 extra | x"]), source="dn")
    with pytest.raises(InputFormatError, match="part of speech"):
        parse_data_noun(_data_noun(["OFFSET 03 v 01 run 0 000 | x"]))


@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**8 - 1),
            st.text(alphabet="abcxyz_-'.0123456789", min_size=1, max_size=12),
            st.lists(st.integers(0, 10**8 - 1), max_size=3, unique=True),
            st.lists(st.integers(0, 10**8 - 1), max_size=2, unique=True),
        ),
        max_size=20,
        unique_by=lambda row: row[0],
    )
)
def test_derived_format_round_trips_and_is_reproducible(rows: list[tuple[int, str, list[int], list[int]]]) -> None:
    synsets = [
        NounSynset(
            wnid=f"n{o:08d}",
            name=name,
            hypernyms=tuple(sorted(f"n{p:08d}" for p in hyper)),
            instance_hypernyms=tuple(sorted(f"n{p:08d}" for p in inst)),
        )
        for o, name, hyper, inst in rows
    ]
    blob = encode_derived(synsets)
    assert blob == encode_derived(list(reversed(synsets)))
    assert blob[4:8] == b"\0\0\0\0" and blob[3] == 0  # mtime 0, no file name
    assert decode_derived(blob) == tuple(sorted(synsets, key=lambda s: s.wnid))


def test_corrupt_or_missing_derived_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="not a gzip"):
        decode_derived(b"plain text")
    with pytest.raises(InputFormatError, match="header"):
        decode_derived(gzip.compress(b"wnid\tname\n"))
    with pytest.raises(NotFound, match="does not exist"):
        load_synsets(tmp_path / "absent.tsv.gz")


def test_shipped_graph_has_every_noun_synset_rooted_at_entity() -> None:
    graph = load_wordnet_graph()
    assert graph.number_of_nodes() == NUM_NOUN_SYNSETS == 82_115
    assert all(is_wnid(node) for node in graph)
    assert [node for node in graph if graph.in_degree(node) == 0] == [ROOT_WNID]
    kinds = [kind for _, _, kind in graph.edges(data="kind")]
    assert (kinds.count(HYPERNYM), kinds.count(INSTANCE)) == (75_850, 8_577)
    assert nx.is_directed_acyclic_graph(graph)
    names = {"n00001740": "entity", "n02075296": "carnivore", "n03183080": "device", "n02084071": "dog"}
    assert {wnid: graph.nodes[wnid]["name"] for wnid in names} == names
    assert list(graph) == sorted(graph)


def test_shipped_graph_is_cached_and_frozen() -> None:
    graph = load_wordnet_graph()
    assert load_wordnet_graph() is graph
    with pytest.raises(nx.NetworkXError):
        graph.add_node("n99999999")


def test_instance_edges_are_kept_apart_from_hypernym_edges() -> None:
    graph = load_wordnet_graph()
    alabama = "n09053185"  # one of 5 synsets with both an @ and an @i parent
    hyper = is_a_parents(graph, alabama)
    both = is_a_parents(graph, alabama, include_instance=True)
    assert hyper and set(hyper) < set(both)
    assert all(graph.edges[p, alabama]["kind"] == HYPERNYM for p in hyper)
    view = is_a_view(graph)
    assert view.number_of_edges() == 75_850
    assert is_a_view(graph, include_instance=True).number_of_edges() == graph.number_of_edges()
    assert set(view.predecessors(alabama)) == set(hyper)


def test_rebuild_from_wordnet_base_matches_shipped_file_byte_for_byte(tmp_path: Path) -> None:
    if not (WORDNET_DIR / "data.noun").is_file():
        missing("SAMPLER_TESTS_WITHOUT_WORDNET",
                f"{WORDNET_DIR}/data.noun is absent (make test installs it: apt-get install wordnet-base)")
    output = tmp_path / "rebuilt.tsv.gz"
    assert build_wordnet.main(["--wordnet-dir", str(WORDNET_DIR), "--output", str(output)]) == 0
    rebuilt, shipped = output.read_bytes(), SHIPPED.read_bytes()
    assert gzip.decompress(rebuilt) == gzip.decompress(shipped), "shipped WordNet file is stale: rerun build_wordnet"
    assert rebuilt == shipped, "same content but different gzip bytes: zlib differs from the one that built it"
    assert load_synsets(output) == load_synsets()


def test_build_script_fails_with_one_line_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build_wordnet.main(["--wordnet-dir", str(tmp_path), "--output", str(tmp_path / "x.gz")]) == 1
    err = capsys.readouterr().err
    assert "data.noun does not exist" in err and err.count("\n") == 1
    assert not (tmp_path / "x.gz").exists()


def test_hierarchy_modules_import_no_grpc_lmdb_torch_or_tensorflow() -> None:
    code = (
        "import sys\n"
        "import sampler_server.core.hierarchy.imagenet, sampler_server.core.hierarchy.omniglot\n"
        "import sampler_server.core.hierarchy.build_wordnet\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'grpc', 'lmdb', 'torch', 'tensorflow'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
