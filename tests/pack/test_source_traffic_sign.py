"""GTSRB converter: class names from labels or split file, ROI metadata, fixed shuffle."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from reference_encoding import reference_jpeg
from conftest import SHARED_REFERENCE, generate_fixture, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack

from sampler_server.errors import InputFormatError
from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding

SOURCE = "traffic_sign"
OFFICIAL_SPLITS = SHARED_REFERENCE / "md_splits" / "traffic_sign_splits.json"
OFFICIAL_LABELS = SHARED_REFERENCE / "md_splits" / "TrafficSign_labels.txt"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory, use_split_file=False)


def _file_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _documented_order(names: list[str], class_id: int) -> list[str]:
    """The module docstring's rule, restated: sorted names permuted by a sha256-seeded RandomState."""
    seed = int.from_bytes(hashlib.sha256(f"traffic_sign/{class_id}".encode()).digest()[:4], "big")
    ordered = sorted(names)
    return [ordered[int(i)] for i in np.random.RandomState(seed).permutation(len(ordered))]


def test_classes_all_test_by_default(generated: Fixture, packed: PackSummary) -> None:
    manifest = packed.manifest
    assert all(c.split is Split.TEST for c in manifest.classes)
    assert manifest.split_rule == "all-test"
    assert [c.name for c in manifest.classes][:2] == ["00.synthetic sign 0", "01.synthetic sign 1"]


def test_split_file_gives_the_same_content(generated: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    summary = pack_fixture(generated, tmp_path)
    assert summary.manifest.split_rule.startswith("file:traffic_sign_splits.json")
    assert summary.manifest.fingerprint == packed.manifest.fingerprint


def test_records_are_whole_ppms_with_roi_in_shuffled_order(generated: Fixture, packed: PackSummary) -> None:
    records = _records(packed.store_dir)
    assert len(records) == generated.num_images
    origins: dict[str, list[str]] = {}
    for class_name, record in records:
        # the reference re-encodes every non-JPEG original: RGB JPEG at quality 75
        assert record.encoding is Encoding.JPEG and record.channels == 3
        assert record.payload == reference_jpeg(Image.open(generated.input_dir / record.origin))
        assert record.metadata["roi"] == generated.expected["roi"][record.origin]
        origins.setdefault(class_name, []).append(record.origin)
    for class_id, (class_name, names) in enumerate(sorted(origins.items())):
        assert names == _documented_order(names, class_id)
    assert any(names != sorted(names) for names in origins.values())


def test_images_folder_as_input_gives_the_same_store(generated: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    images = dataclasses.replace(generated, input_dir=generated.input_dir / "Final_Training" / "Images")
    summary = pack_fixture(images, tmp_path, use_split_file=False)
    assert summary.manifest.fingerprint == packed.manifest.fingerprint


def test_names_without_labels_or_split_file(generated: Fixture, tmp_path: Path) -> None:
    summary = pack_fixture(generated, tmp_path, use_split_file=False, converter_overrides={"labels": None})
    assert [c.name for c in summary.manifest.classes] == ["00", "01", "02", "03"]


def test_official_split_and_labels_files_are_honoured(tmp_path: Path) -> None:
    fixture = generate_fixture(SOURCE, tmp_path, num_classes=43, images_per_class=1)
    official = json.loads(OFFICIAL_SPLITS.read_text())
    expected = {name: Split(key) for key, names in official.items() for name in names}
    with_labels = pack_fixture(
        fixture, tmp_path / "labels", converter_overrides={"class_splits": OFFICIAL_SPLITS, "labels": OFFICIAL_LABELS}
    )
    assert {c.name: c.split for c in with_labels.manifest.classes} == expected
    assert with_labels.manifest.classes[0].name == "00.Speed limit (20km/h)"
    split_only = pack_fixture(
        fixture, tmp_path / "split", converter_overrides={"class_splits": OFFICIAL_SPLITS, "labels": None}
    )
    assert split_only.manifest.fingerprint == with_labels.manifest.fingerprint


def test_labels_file_too_short(generated: Fixture, tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("# two names\nStop\nYield\n")
    with pytest.raises(InputFormatError, match="2 classes") as error:
        pack_fixture(generated, tmp_path, converter_overrides={"labels": labels})
    assert error.value.path == str(labels)


def test_missing_annotation_file(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    victim = fixture.input_dir / "Final_Training" / "Images" / "00001" / "GT-00001.csv"
    victim.unlink()
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(victim)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda text: text.replace("Roi.X1", "RoiX1"), "header"),
        (lambda text: text.replace(";1\n", ";7\n", 1), "ClassId 7"),
        (lambda text: text.replace(";1\n", ";x\n", 1), "integers"),
        (lambda text: text + "00009_00000.ppm;30;30;3;3;26;26;1\n", "missing image"),
        (lambda text: "\n".join(text.splitlines()[:-1]) + "\n", "no row"),
        (lambda text: text.replace(";1\n", "\n", 1), "fields"),
    ],
)
def test_malformed_annotation_file(
    generated: Fixture, tmp_path: Path, edit: Callable[[str], str], problem: str
) -> None:
    fixture = _copy(generated, tmp_path)
    victim = fixture.input_dir / "Final_Training" / "Images" / "00001" / "GT-00001.csv"
    victim.write_text(edit(victim.read_text()))
    with pytest.raises(InputFormatError, match=problem) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(victim)


def test_class_folder_that_is_not_a_class_id(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    (fixture.input_dir / "Final_Training" / "Images" / "stop").mkdir()
    with pytest.raises(InputFormatError, match="5-digit"):
        pack_fixture(fixture, tmp_path / "stores")


def test_lossless_derived_keeps_the_ppm_files(generated: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    summary = pack_fixture(generated, tmp_path, use_split_file=False, lossless_derived=True)
    assert summary.manifest.fingerprint == packed.manifest.fingerprint
    for _, record in _records(summary.store_dir):
        assert record.encoding is Encoding.PPM and record.channels == 3
        assert record.payload == (generated.input_dir / record.origin).read_bytes()
