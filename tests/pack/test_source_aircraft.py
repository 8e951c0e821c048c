"""aircraft: the FGVC-Aircraft 2013b converter and fixture, packed with the real pipeline."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

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
from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources import aircraft
from sampler_server.pack.pipeline import PackSummary
from sampler_server.store.manifest import Split
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, Record

SOURCE = "aircraft"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _pixels(record: Record) -> np.ndarray:
    if record.encoding is Encoding.RAW:
        return np.frombuffer(record.payload, np.uint8).reshape(record.height, record.width, record.channels)
    return np.asarray(Image.open(io.BytesIO(record.payload)).convert("RGB"), dtype=np.int16)


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return aircraft.plan(input_dir, ConverterOptions(**options))


def test_classes_are_ordered_by_split_then_name(fixture: Fixture, packed: PackSummary) -> None:
    manifest = StoreReader(packed.store_dir).manifest
    rank = {Split.TRAIN: 0, Split.VALID: 1, Split.TEST: 2}
    keys = [(rank[c.split], c.name) for c in manifest.classes]
    assert keys == sorted(keys)
    assert "F/A-18" in fixture.class_images  # a class name, not a path


def test_records_are_the_md_crops_of_their_boxes(fixture: Fixture, packed: PackSummary) -> None:
    crops = fixture.expected["crops"]
    records = _records(packed.store_dir)
    assert len(records) == fixture.num_images == len(crops)
    for class_name, record in records:
        box = tuple(crops[record.origin])
        assert record.metadata["bbox"] == list(box)
        assert record.metadata["crop"] == list(box)
        assert record.encoding is Encoding.JPEG
        assert (record.width, record.height) == (box[2] - box[0], box[3] - box[1])
        original = Image.open(fixture.input_dir / record.origin).convert("RGB")
        assert record.payload == reference_jpeg(original.crop(box)), record.origin  # MD: crop -> JPEG q75
    origins = {}
    for class_name, record in records:
        origins.setdefault(class_name, []).append(record.origin)
    assert all(items == sorted(items) for items in origins.values())


def test_crop_keeps_the_references_reading_of_the_box(tmp_path: Path) -> None:
    """images_box.txt is 1-based inclusive; MD hands the numbers to PIL unchanged."""
    path = tmp_path / "images_box.txt"
    image_id, box = aircraft.parse_box_line(path, 1, "1234567 1 1 10 20")
    assert (image_id, box) == ("1234567", (1, 1, 10, 20))
    # The PIL box (1, 1, 10, 20) is 9 x 19 pixels: the annotation's first column and row go.
    image = Image.new("L", (30, 30))
    assert image.crop(box).size == (9, 19)


def test_official_split_file_is_honoured(tmp_path: Path, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "aircraft_splits.json"
    official = json.loads(official_path.read_text())
    names = [name for key in ("train", "valid", "test") for name in official[key]]
    assert len(names) == 100
    fixture = generate_fixture(SOURCE, tmp_path, class_names=names, images_per_class=1)
    summary = pack_fixture(fixture, tmp_path / "store", converter_overrides={"class_splits": official_path})
    got = {c.name: c.split.value for c in summary.manifest.classes}
    assert got == {name: key for key in ("train", "valid", "test") for name in official[key]}
    assert [len(summary.manifest.classes_in(s)) for s in (Split.TRAIN, Split.VALID, Split.TEST)] == [70, 15, 15]


@pytest.mark.parametrize(
    "file_name",
    ["images_box.txt", "variants.txt", "images_variant_train.txt", "images_variant_val.txt", "images_variant_test.txt"],
)
def test_missing_annotation_file(fixture: Fixture, tmp_path: Path, file_name: str) -> None:
    broken = _copy(fixture, tmp_path)
    (broken.input_dir / "data" / file_name).unlink()
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / "data" / file_name)
    assert "missing" in error.value.problem


def _first_line(path: Path) -> str:
    return path.read_text().splitlines()[0]


@pytest.mark.parametrize(
    ("file_name", "make_bad", "problem"),
    [
        ("images_box.txt", lambda line: line.rsplit(" ", 1)[0] + " 12.5", "must be integers"),
        ("images_box.txt", lambda line: line.rsplit(" ", 1)[0], "expected '<image id> <xmin>"),
        ("images_box.txt", lambda line: " ".join(line.split()[:3] + line.split()[1:3]), "empty"),
        ("images_variant_val.txt", lambda line: line.split()[0], "expected '<image id> <variant name>'"),
        ("images_variant_test.txt", lambda line: line.split()[0] + " Concorde", "unknown variant 'Concorde'"),
    ],
)
def test_malformed_annotation_line(
    fixture: Fixture, tmp_path: Path, file_name: str, make_bad: Callable[[str], str], problem: str
) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / "data" / file_name
    lines = path.read_text().splitlines()
    lines[0] = make_bad(lines[0])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert error.value.problem.startswith("line 1: ")
    assert problem in error.value.problem


def test_image_without_a_box(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / "data" / "images_box.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert lines[0].split()[0] in error.value.problem


def test_lossless_derived_stores_the_exact_crops(fixture: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    summary = pack_fixture(fixture, tmp_path, lossless_derived=True)
    assert summary.manifest.fingerprint == packed.manifest.fingerprint
    for _, record in _records(summary.store_dir):
        box = tuple(fixture.expected["crops"][record.origin])
        assert record.encoding is Encoding.PNG
        original = Image.open(fixture.input_dir / record.origin).convert("RGB")
        assert np.array_equal(_pixels(record), np.asarray(original.crop(box)))
