"""The shipped IN-1K wnid list and Table 2's list: what they must equal, and their rebuild."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import require_reference

from sampler_server.core.cog import LISTED_WNIDS, build_in1k, in1k_wnids
from sampler_server.core.cog.in1k import NUM_IN1K, TEDDY_BEAR_WNID, parse_in1k
from sampler_server.core.hierarchy.wordnet import load_wordnet_graph
from sampler_server.errors import InputFormatError, NotFound

PAPER = "001_39e358d909a48a1a.txt"
"""The CoG paper, in ../shared/seeds."""


def test_shipped_list_equals_a_fresh_build_from_the_tfds_package() -> None:
    assert build_in1k.SHIPPED_PATH.read_bytes() == build_in1k.build_in1k_bytes()


def test_shipped_list_is_the_meta_dataset_ilsvrc_classes() -> None:
    spec = json.loads(require_reference("md_specs/ilsvrc_2012_num_leaf_images.json").read_text())
    assert in1k_wnids() == tuple(sorted(spec))
    assert len(in1k_wnids()) == NUM_IN1K
    assert TEDDY_BEAR_WNID in in1k_wnids()
    graph = load_wordnet_graph()
    assert all(wnid in graph for wnid in in1k_wnids())


def test_build_writes_the_file_and_refuses_bad_lists(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{w}\n" for w in reversed(in1k_wnids())))
    out = tmp_path / "out.txt"
    assert build_in1k.main(["--labels", str(labels), "--output", str(out)]) == 0
    assert out.read_bytes() == build_in1k.SHIPPED_PATH.read_bytes()
    labels.write_text("".join(f"{w}\n" for w in in1k_wnids()[:999]))
    with pytest.raises(InputFormatError, match="999 lines"):
        build_in1k.build_in1k_bytes(labels)
    labels.write_text("".join(f"{w}\n" for w in (*in1k_wnids()[:999], "n99999999")))
    with pytest.raises(InputFormatError, match="n99999999 is not a WordNet 3.0 noun synset"):
        build_in1k.build_in1k_bytes(labels)
    with pytest.raises(NotFound, match="does not exist"):
        build_in1k.build_in1k_bytes(tmp_path / "missing.txt")
    assert build_in1k.main(["--labels", str(tmp_path / "missing.txt"), "--output", str(out)]) == 1


def test_parse_refuses_unsorted_duplicated_or_malformed_text() -> None:
    wnids = list(in1k_wnids())
    with pytest.raises(InputFormatError, match="not sorted"):
        parse_in1k("".join(f"{w}\n" for w in reversed(wnids)))
    with pytest.raises(InputFormatError, match="999 distinct"):
        parse_in1k("".join(f"{w}\n" for w in [wnids[0], *wnids[:-1]]))
    with pytest.raises(InputFormatError, match="final newline"):
        parse_in1k("\n".join(wnids))
    with pytest.raises(InputFormatError, match="'dog' is not a noun wnid"):
        parse_in1k("dog\n")


def test_listed_is_table_2_of_the_paper() -> None:
    lines = require_reference().parent.joinpath("seeds", PAPER).read_text().splitlines()
    caption = next(i for i, line in enumerate(lines) if line.startswith("Table 2: WordNet IDs of the 70 concepts"))
    table = [w for line in lines[caption - 8:caption] for w in line.split()]
    assert LISTED_WNIDS == tuple(table)
    assert len(set(LISTED_WNIDS)) == 70
    graph = load_wordnet_graph()
    assert all(wnid in graph for wnid in LISTED_WNIDS)
