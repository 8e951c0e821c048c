"""mscoco: the MS-COCO 2017 converter and fixture, packed with the real pipeline."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from reference_encoding import reference_jpeg

from conftest import generate_fixture, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack
from sampler_server.errors import InputFormatError
from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources import mscoco
from sampler_server.store.manifest import Split
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, Record

SOURCE = "mscoco"
ANNOTATIONS = Path("annotations") / "instances_train2017.json"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return mscoco.plan(input_dir, ConverterOptions(**options))


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _pixels(record: Record) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(record.payload)).convert("RGB"), dtype=np.int16)


def test_every_annotation_is_a_record_and_no_class_is_train(fixture: Fixture, packed: PackSummary) -> None:
    manifest = StoreReader(packed.store_dir).manifest
    assert not manifest.classes_in(Split.TRAIN)
    assert manifest.pack_options["annotations_skipped_empty_crop"] == 0
    assert manifest.num_records == fixture.expected["num_annotations"]


@pytest.mark.parametrize(
    ("bbox", "size", "crop"),
    [
        ((10.3, 20.3, 30.0, 40.0), (100, 100), (7, 16, 44, 65)),  # scaled to (7.3, 16.3, 36, 48)
        ((0.0, 0.0, 50.0, 50.0), (40, 40), (0, 0, 40, 40)),  # clipped on every side
        ((10.2, 10.2, 0.0, 0.0), (100, 100), (10, 10, 11, 11)),  # a zero-size box gives one pixel
        ((3.0, 3.0, 0.0, 0.0), (100, 100), (2, 2, 3, 3)),  # round(2.5) == 2: Python 3 rounds halves to even
        ((200.0, 10.0, 5.0, 5.0), (100, 100), None),  # wholly outside the image: no crop
    ],
)
def test_md_crop_box(bbox: tuple[float, float, float, float], size: tuple[int, int], crop: object) -> None:
    assert mscoco.md_crop_box(bbox, *size) == crop


def test_records_are_the_md_crops_of_each_object(fixture: Fixture, packed: PackSummary) -> None:
    document = json.loads((fixture.input_dir / ANNOTATIONS).read_text())
    annotations = {a["id"]: a for a in document["annotations"]}
    category_names = {c["id"]: c["name"] for c in document["categories"]}
    crops = fixture.expected["crops"]
    records = _records(packed.store_dir)
    assert {record.origin for _, record in records} == set(crops)
    classes_per_file: dict[str, set[str]] = {}
    for class_name, record in records:
        file_part, fragment = record.origin.split("#ann=")
        annotation = annotations[int(fragment)]
        assert record.metadata["annotation_id"] == annotation["id"]
        assert record.metadata["category_id"] == annotation["category_id"]
        assert record.metadata["image_id"] == annotation["image_id"]
        assert record.metadata["bbox"] == annotation["bbox"]
        assert category_names[annotation["category_id"]] == class_name
        box = tuple(crops[record.origin])
        assert record.metadata["crop"] == list(box)
        assert (record.encoding, record.width, record.height) == (Encoding.JPEG, box[2] - box[0], box[3] - box[1])
        original = Image.open(fixture.input_dir / file_part).convert("RGB")
        assert record.payload == reference_jpeg(original.crop(box)), record.origin  # MD: crop -> JPEG q75
        classes_per_file.setdefault(file_part, set()).add(class_name)
    assert max(len(names) for names in classes_per_file.values()) == 3  # one photo, several classes
    assert any(box[0] == 0 for box in crops.values())  # some crops are clipped at the border
    empty = fixture.expected["empty_images"]
    assert not set(empty) & {Path(f).name for f in classes_per_file}


def test_items_are_sorted_by_file_then_annotation(fixture: Fixture) -> None:
    for class_plan in _plan(fixture.input_dir, class_splits=fixture.split_file).classes:
        keys = [(item.path.name, item.metadata["annotation_id"]) for item in class_plan.items()]
        assert keys == sorted(keys)


def test_default_split_is_half_valid_half_test(fixture: Fixture, tmp_path: Path) -> None:
    manifest = pack_fixture(fixture, tmp_path, use_split_file=False).manifest
    assert manifest.split_rule == "default-half-valid-half-test"
    n = len(fixture.class_images)
    counts = [len(manifest.classes_in(split)) for split in (Split.TRAIN, Split.VALID, Split.TEST)]
    assert counts == [0, n // 2, n - n // 2]


def test_official_split_file_is_honoured(tmp_path: Path, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "mscoco_splits.json"
    official = json.loads(official_path.read_text())
    expected = {name: key for key in ("train", "valid", "test") for name in official[key]}
    assert len(expected) == 80
    fixture = generate_fixture(SOURCE, tmp_path, num_classes=80, images_per_class=1)
    assert set(fixture.class_images) == set(expected)  # the fixture's names are COCO's own
    summary = pack_fixture(fixture, tmp_path / "store", converter_overrides={"class_splits": official_path})
    manifest = summary.manifest
    assert {c.name: c.split.value for c in manifest.classes} == expected
    assert [len(manifest.classes_in(s)) for s in (Split.TRAIN, Split.VALID, Split.TEST)] == [0, 40, 40]


def test_annotation_file_in_the_root_is_accepted(fixture: Fixture, tmp_path: Path) -> None:
    moved = _copy(fixture, tmp_path)
    (moved.input_dir / ANNOTATIONS).rename(moved.input_dir / ANNOTATIONS.name)
    plan = _plan(moved.input_dir, class_splits=fixture.split_file)
    assert {c.name: len(list(c.items())) for c in plan.classes} == dict(fixture.class_images)


def test_box_outside_its_image_is_skipped_and_counted(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)

    def add_outside(data: dict[str, Any]) -> None:
        image = data["images"][0]
        outside = dict(data["annotations"][0], id=99_999_999, image_id=image["id"])
        outside["bbox"] = [image["width"] + 5.0, 2.0, 10.0, 10.0]
        data["annotations"].append(outside)

    _edit_json(broken.input_dir / ANNOTATIONS, add_outside)
    plan = _plan(broken.input_dir, class_splits=fixture.split_file)
    assert plan.notes["annotations_skipped_empty_crop"] == 1
    assert {c.name: len(list(c.items())) for c in plan.classes} == dict(fixture.class_images)


def test_missing_annotation_file(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    (broken.input_dir / ANNOTATIONS).unlink()
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / ANNOTATIONS)
    assert "missing annotation file" in error.value.problem


def test_missing_image_directory(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    shutil.rmtree(broken.input_dir / "train2017")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / "train2017")


def test_truncated_json(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / ANNOTATIONS
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert "not valid JSON" in error.value.problem


def _unknown_image(data: dict[str, Any]) -> None:
    data["annotations"][0]["image_id"] = 123


def _unknown_category(data: dict[str, Any]) -> None:
    data["annotations"][1]["category_id"] = 91


def _short_bbox(data: dict[str, Any]) -> None:
    data["annotations"][2]["bbox"] = [1.0, 2.0, 3.0]


def _negative_bbox(data: dict[str, Any]) -> None:
    data["annotations"][0]["bbox"][2] = -4.0


def _image_without_size(data: dict[str, Any]) -> None:
    del data["images"][0]["width"]


def _duplicate_annotation(data: dict[str, Any]) -> None:
    data["annotations"].append(data["annotations"][0])


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (_unknown_image, "annotations[0]: unknown image id 123"),
        (_unknown_category, "annotations[1]: unknown category id 91"),
        (_short_bbox, "annotations[2]: expected an object with integer 'id'"),
        (_negative_bbox, "has a negative size"),
        (_image_without_size, "images[0]: expected an object"),
        (_duplicate_annotation, "is listed twice"),
    ],
)
def test_malformed_annotations(
    fixture: Fixture, tmp_path: Path, edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / ANNOTATIONS
    _edit_json(path, edit)
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert problem in error.value.problem


def test_corrupt_image_fails_or_skips_each_of_its_objects(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    per_file: dict[str, list[str]] = {}
    for origin in fixture.expected["crops"]:
        per_file.setdefault(origin.split("#")[0], []).append(origin)
    victim = max(sorted(per_file), key=lambda name: len(per_file[name]))
    path = broken.input_dir / victim
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(InputFormatError) as error:
        pack_fixture(broken, tmp_path / "fail")
    assert error.value.path == str(path)
    summary = pack_fixture(broken, tmp_path / "skip", on_error="skip")
    assert summary.manifest.num_skipped == len(per_file[victim]) == 3
    assert {s["origin"] for s in summary.manifest.skipped} == set(per_file[victim])
    assert summary.manifest.num_records == fixture.num_images - 3
