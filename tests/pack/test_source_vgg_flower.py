"""VGG Flower converter: classes from imagelabels.mat, names from labels or split file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_REFERENCE, generate_fixture, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack

from sampler_server.errors import InputFormatError
from sampler_server.fixtures import vgg_flower as vgg_fixture
from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.splits import DEFAULT_RULE
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding

SOURCE = "vgg_flower"
OFFICIAL_SPLITS = SHARED_REFERENCE / "md_splits" / "vgg_flower_splits.json"
OFFICIAL_LABELS = SHARED_REFERENCE / "md_splits" / "VggFlower_labels.txt"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _file_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_class_names_carry_the_label_number(generated: Fixture, packed: PackSummary) -> None:
    assert "001.synthetic flower 1" in {c.name for c in packed.manifest.classes}


def test_records_follow_imagelabels_and_keep_their_bytes(generated: Fixture, packed: PackSummary) -> None:
    labels = generated.expected["image_labels"]
    expected: dict[int, list[str]] = {}
    for number, label in enumerate(labels, start=1):
        expected.setdefault(label, []).append(f"jpg/image_{number:05d}.jpg")
    found: dict[int, list[str]] = {}
    for class_name, record in _records(packed.store_dir):
        assert record.encoding is Encoding.JPEG
        assert record.payload == (generated.input_dir / record.origin).read_bytes()
        found.setdefault(int(class_name[:3]), []).append(record.origin)
    assert found == expected


def test_default_rule_and_plain_names(generated: Fixture, tmp_path: Path) -> None:
    summary = pack_fixture(generated, tmp_path, use_split_file=False, converter_overrides={"labels": None})
    assert summary.manifest.split_rule == DEFAULT_RULE
    assert sorted(c.name for c in summary.manifest.classes) == ["001", "002", "003", "004", "005"]


def test_official_split_and_labels_files_are_honoured(tmp_path: Path) -> None:
    fixture = generate_fixture(SOURCE, tmp_path, num_classes=102, images_per_class=1)
    official = json.loads(OFFICIAL_SPLITS.read_text())
    expected = {name: Split(key) for key, names in official.items() for name in names}
    with_labels = pack_fixture(
        fixture, tmp_path / "labels", converter_overrides={"class_splits": OFFICIAL_SPLITS, "labels": OFFICIAL_LABELS}
    )
    assert {c.name: c.split for c in with_labels.manifest.classes} == expected
    counts = {split: len(with_labels.manifest.classes_in(split)) for split in Split}
    assert counts == {Split.TRAIN: 71, Split.VALID: 15, Split.TEST: 16}
    split_only = pack_fixture(
        fixture, tmp_path / "split", converter_overrides={"class_splits": OFFICIAL_SPLITS, "labels": None}
    )
    assert split_only.manifest.fingerprint == with_labels.manifest.fingerprint


def test_missing_labels_mat(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    victim = fixture.input_dir / "imagelabels.mat"
    victim.unlink()
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(victim)


@pytest.mark.parametrize(
    ("variables", "problem"),
    [
        (None, "MATLAB"),
        ({"lables": np.ones((1, 20), dtype=np.uint8)}, "no 'labels'"),
        ({"labels": np.full((1, 20), 1.5)}, "integers"),
        ({"labels": np.zeros((1, 20), dtype=np.uint8)}, "integers"),
        ({"labels": np.ones((1, 19), dtype=np.uint8)}, "19 labels"),
        ({"labels": np.ones((4, 5), dtype=np.uint8)}, "vector"),
    ],
)
def test_malformed_labels_mat(
    generated: Fixture, tmp_path: Path, variables: dict[str, np.ndarray] | None, problem: str
) -> None:
    fixture = _copy(generated, tmp_path)
    victim = fixture.input_dir / "imagelabels.mat"
    if variables is None:
        victim.write_bytes(b"MATLAB? no, just some bytes" * 10)
    else:
        vgg_fixture.write_mat(victim, variables)
    with pytest.raises(InputFormatError, match=problem) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(victim)


def test_missing_image_disagrees_with_labels(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    (fixture.input_dir / "jpg" / "image_00007.jpg").unlink()
    with pytest.raises(InputFormatError, match="20 labels") as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(fixture.input_dir / "imagelabels.mat")
