"""Omniglot alphabet -> character hierarchy and its Meta-Dataset split."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import examples, require_reference

from sampler_server.core.hierarchy import Split
from sampler_server.core.hierarchy.omniglot import OmniglotFolder, build_omniglot_split, omniglot_class_name
from sampler_server.errors import InvalidArgument

REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference"
SPEC = REFERENCE / "md_specs" / "omniglot_dataset_spec.json"
VALID_ALPHABETS = (
    "Alphabet_of_the_Magi",
    "Blackfoot_(Canadian_Aboriginal_Syllabics)",
    "Inuktitut_(Canadian_Aboriginal_Syllabics)",
    "Ojibwe_(Canadian_Aboriginal_Syllabics)",
    "Tagalog",
)


@functools.cache
def _real_omniglot() -> list[tuple[str, str, str]]:
    """(alphabet, character folder, original folder) for all 1623 real characters.

    The reference spec numbers superclasses train (25), valid (5), test (20) and lists
    classes superclass by superclass; train and valid alphabets are the background ones.
    """
    spec = json.loads(require_reference(SPEC.relative_to(REFERENCE)).read_text())
    counts = spec["classes_per_superclass"]
    names = [spec["class_names"][str(i)] for i in range(len(spec["class_names"]))]
    background = spec["superclasses_per_split"]["TRAIN"] + spec["superclasses_per_split"]["VALID"]
    rows, start = [], 0
    for index in range(len(counts)):
        alphabet = spec["superclass_names"][str(index)]
        for class_name in names[start : start + counts[str(index)]]:
            assert class_name.startswith(alphabet + "-")
            folder = "background" if index < background else "evaluation"
            rows.append((alphabet, class_name[len(alphabet) + 1 :], folder))
        start += counts[str(index)]
    return rows


def test_real_omniglot_splits_25_5_20_alphabets_883_81_659_characters() -> None:
    rows = _real_omniglot()
    assert len(rows) == 1623
    assert sum(folder == "background" for _, _, folder in rows) == 964
    split = build_omniglot_split(rows)
    assert tuple(len(split.for_split(s)) for s in Split) == (25, 5, 20)
    assert tuple(len(split.class_names(s)) for s in Split) == (883, 81, 659)
    assert tuple(a.name for a in split.valid) == VALID_ALPHABETS
    sizes = [len(a.characters) for a in split.train]
    assert (min(sizes), max(sizes)) == (22, 55)
    assert all(a.folder is OmniglotFolder.EVALUATION for a in split.test)
    assert sorted(split.class_order) == sorted(omniglot_class_name(a, c) for a, c, _ in rows)
    assert split.class_names(Split.VALID)[:2] == ("Alphabet_of_the_Magi-character01", "Alphabet_of_the_Magi-character02")
    for alphabets in (split.train, split.valid, split.test):
        assert [a.name for a in alphabets] == sorted(a.name for a in alphabets)
        assert all(list(a.characters) == sorted(a.characters) for a in alphabets)


@settings(max_examples=examples(20), deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_result_ignores_input_order(seed: int) -> None:
    rows = _real_omniglot()
    shuffled = [rows[i] for i in np.random.RandomState(seed).permutation(len(rows))]
    assert build_omniglot_split(shuffled) == build_omniglot_split(rows)


def _alphabets(sizes: dict[str, int], folder: str = "background") -> list[tuple[str, str, str]]:
    return [(name, f"character{i:02d}", folder) for name, size in sizes.items() for i in range(1, size + 1)]


def test_size_ties_are_broken_by_name() -> None:
    rows = _alphabets({"E": 3, "D": 3, "C": 3, "B": 3, "A": 4, "F": 2, "G": 9}) + _alphabets({"Z": 1}, "evaluation")
    split = build_omniglot_split(rows)
    assert [a.name for a in split.valid] == ["B", "C", "D", "E", "F"]
    assert [a.name for a in split.train] == ["A", "G"]
    assert [a.name for a in split.test] == ["Z"]
    assert split.for_split("train") == split.train  # type: ignore[arg-type]


def test_few_background_alphabets_all_go_to_validation() -> None:
    split = build_omniglot_split(_alphabets({"A": 2, "B": 3}))
    assert split.train == () and [a.name for a in split.valid] == ["A", "B"] and split.test == ()
    assert [a.name for a in build_omniglot_split(_alphabets({"A": 2, "B": 3}), num_valid_alphabets=1).train] == ["B"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "empty list"),
        ([("A", "character01", "train")], "expected 'background' or 'evaluation'"),
        ([("A", "c1", "background"), ("A", "c2", "evaluation")], "'A' is in both"),
        ([("A", "c1", "background"), ("A", "c1", "background")], "A/c1 is listed more than once"),
        ([("", "c1", "background")], "alphabet: got ''"),
        ([("A", None, "background")], "character: got None"),
    ],
)
def test_bad_input_is_rejected(rows: list[tuple[str, str, str]], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        build_omniglot_split(rows)


def test_negative_validation_count_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="num_valid_alphabets: got -1"):
        build_omniglot_split(_alphabets({"A": 1}), num_valid_alphabets=-1)
