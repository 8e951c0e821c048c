"""fungi: the FGVCx Fungi 2018 converter and fixture, packed with the real pipeline."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import generate_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack
from sampler_server.errors import InputFormatError
from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources import fungi
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding

SOURCE = "fungi"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return fungi.plan(input_dir, ConverterOptions(**options))


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_class_names_carry_the_category_id(fixture: Fixture) -> None:
    train = json.loads((fixture.input_dir / "train.json").read_text())
    expected = {"%04d.%s" % (c["id"], c["name"]) for c in train["categories"]}
    assert set(fixture.class_images) == expected
    species = [name.split(".", 1)[1] for name in fixture.class_images]
    assert len(set(species)) < len(species)  # two categories share a name; the id keeps them apart


def test_train_and_val_are_merged(fixture: Fixture, packed: PackSummary) -> None:
    listed = set()
    for part in ("train", "val"):
        data = json.loads((fixture.input_dir / f"{part}.json").read_text())
        assert data["images"], part
        listed |= {image["file_name"] for image in data["images"]}
    assert {record.origin for _, record in _records(packed.store_dir)} == listed


def test_records_are_the_original_files_byte_for_byte(fixture: Fixture, packed: PackSummary) -> None:
    records = _records(packed.store_dir)
    assert len(records) == fixture.num_images
    by_class: dict[str, list[str]] = {}
    for class_name, record in records:
        assert record.origin.startswith("images/") and record.origin.endswith(".JPG")
        assert record.payload == (fixture.input_dir / record.origin).read_bytes()
        assert record.encoding is Encoding.JPEG
        by_class.setdefault(class_name, []).append(record.origin)
    assert all(origins == sorted(origins) for origins in by_class.values())


def test_official_split_file_is_honoured(tmp_path: Path, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "fungi_splits.json"
    official = json.loads(official_path.read_text())
    expected = {name: key for key in ("train", "valid", "test") for name in official[key]}
    assert len(expected) == 1394
    fixture = generate_fixture(SOURCE, tmp_path, class_names=sorted(expected), images_per_class=1)
    plan = _plan(fixture.input_dir, class_splits=official_path)
    assert {c.name: c.split.value for c in plan.classes} == expected
    assert [sum(c.split is s for c in plan.classes) for s in (Split.TRAIN, Split.VALID, Split.TEST)] == [994, 200, 200]


@pytest.mark.parametrize("file_name", ["train.json", "val.json"])
def test_missing_annotation_file(fixture: Fixture, tmp_path: Path, file_name: str) -> None:
    broken = _copy(fixture, tmp_path)
    (broken.input_dir / file_name).unlink()
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / file_name)
    assert "missing annotation file" in error.value.problem


def test_truncated_json(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / "val.json"
    path.write_text(path.read_text()[:-40])
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert "not valid JSON" in error.value.problem


def _drop_first_annotation(data: dict[str, Any]) -> None:
    data["annotations"].pop(0)


def _unknown_category(data: dict[str, Any]) -> None:
    data["annotations"][0]["category_id"] = 4242


def _unknown_image(data: dict[str, Any]) -> None:
    data["annotations"][0]["image_id"] = 987654


def _string_image_id(data: dict[str, Any]) -> None:
    data["images"][1]["id"] = "two"


def _other_categories(data: dict[str, Any]) -> None:
    data["categories"][0]["name"] = "Renamed species"


def _no_images_key(data: dict[str, Any]) -> None:
    del data["images"]


@pytest.mark.parametrize(
    ("file_name", "edit", "problem"),
    [
        ("train.json", _drop_first_annotation, "no annotation for image id(s) 1"),
        ("train.json", _unknown_category, "annotations[0]: unknown category id 4242"),
        ("val.json", _unknown_image, "annotations[0]: unknown image id 987654"),
        ("val.json", _string_image_id, "images[1]: expected an object with integer 'id'"),
        ("val.json", _other_categories, "its categories differ from those of train.json"),
        ("train.json", _no_images_key, "'images' is missing or not a list"),
    ],
)
def test_malformed_annotations(
    fixture: Fixture, tmp_path: Path, file_name: str, edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / file_name
    _edit_json(path, edit)
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert problem in error.value.problem


def test_image_listed_in_both_files(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    train = json.loads((broken.input_dir / "train.json").read_text())
    _edit_json(broken.input_dir / "val.json", lambda data: data["images"].append(train["images"][0]))
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / "val.json")
    assert f"image id {train['images'][0]['id']} is listed twice" in error.value.problem
