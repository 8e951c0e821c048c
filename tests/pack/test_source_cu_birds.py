"""cu_birds: the CUB-200-2011 converter and fixture, packed with the real pipeline."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

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
from sampler_server.pack.sources import cu_birds
from sampler_server.store.manifest import Split
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding

SOURCE = "cu_birds"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return cu_birds.plan(input_dir, ConverterOptions(**options))


def test_class_names_are_the_numbered_folders(fixture: Fixture, packed: PackSummary) -> None:
    names = [c.name for c in StoreReader(packed.store_dir).manifest.classes]
    assert sorted(names) == sorted(fixture.class_images)
    assert all(name[:3].isdigit() and name[3] == "." for name in names)


def test_records_are_the_original_files_byte_for_byte(fixture: Fixture, packed: PackSummary) -> None:
    records = _records(packed.store_dir)
    assert len(records) == fixture.num_images
    by_class: dict[str, list[str]] = {}
    channels = set()
    for class_name, record in records:
        assert record.origin.startswith(f"images/{class_name}/")
        original = fixture.input_dir / record.origin
        if Image.open(original).mode == "RGB":
            assert record.payload == original.read_bytes()
        else:  # the reference re-encodes non-RGB files: RGB JPEG at quality 75
            assert record.payload == reference_jpeg(Image.open(original))
            assert record.channels == 3
        assert record.encoding is Encoding.JPEG
        assert record.metadata["bbox"] == fixture.expected["bbox"][record.origin]
        assert "crop" not in record.metadata  # MD uses the full image
        channels.add(record.channels)
        by_class.setdefault(class_name, []).append(record.origin)
    assert channels == {3}  # the fixture's greyscale photo is stored as the reference stores it: RGB
    assert all(origins == sorted(origins) for origins in by_class.values())


def test_bounding_boxes_are_optional(fixture: Fixture, tmp_path: Path) -> None:
    copy = _copy(fixture, tmp_path)
    (copy.input_dir / "bounding_boxes.txt").unlink()
    summary = pack_fixture(copy, tmp_path / "store")
    assert all("bbox" not in record.metadata for _, record in _records(summary.store_dir))


def test_official_split_file_is_honoured(tmp_path: Path, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "cu_birds_splits.json"
    official = json.loads(official_path.read_text())
    names = [name for key in ("train", "valid", "test") for name in official[key]]
    assert len(names) == 200
    fixture = generate_fixture(SOURCE, tmp_path, class_names=names, images_per_class=1)
    plan = _plan(fixture.input_dir, class_splits=official_path)
    expected = {name: key for key in ("train", "valid", "test") for name in official[key]}
    assert {c.name: c.split.value for c in plan.classes} == expected
    assert [sum(c.split is s for c in plan.classes) for s in (Split.TRAIN, Split.VALID, Split.TEST)] == [140, 30, 30]


@pytest.mark.parametrize("file_name", ["classes.txt", "images.txt", "image_class_labels.txt"])
def test_missing_annotation_file(fixture: Fixture, tmp_path: Path, file_name: str) -> None:
    broken = _copy(fixture, tmp_path)
    (broken.input_dir / file_name).unlink()
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / file_name)
    assert "missing" in error.value.problem


@pytest.mark.parametrize(
    ("file_name", "make_bad", "problem"),
    [
        ("classes.txt", lambda line: line.replace(" ", " extra "), "expected '<class id> <NNN.Name>'"),
        ("classes.txt", lambda line: "x" + line, "class id must be an integer"),
        ("images.txt", lambda line: line.split()[0] + " no_folder.jpg", "expected '<class folder>/<file>'"),
        ("image_class_labels.txt", lambda line: line.split()[0] + " 2", "is labelled '002."),
        ("image_class_labels.txt", lambda line: line.split()[0] + " 77", "class id 77 is not in classes.txt"),
        ("bounding_boxes.txt", lambda line: line.rsplit(" ", 1)[0] + " wide", "box values must be numbers"),
        ("bounding_boxes.txt", lambda line: line.rsplit(" ", 1)[0], "expected '<image id> <x> <y> <width> <height>'"),
    ],
)
def test_malformed_annotation_line(
    fixture: Fixture, tmp_path: Path, file_name: str, make_bad: Callable[[str], str], problem: str
) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / file_name
    lines = path.read_text().splitlines()
    lines[0] = make_bad(lines[0])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert error.value.problem.startswith("line 1: ")
    assert problem in error.value.problem


def test_unlabelled_image(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    path = broken.input_dir / "image_class_labels.txt"
    path.write_text("\n".join(path.read_text().splitlines()[1:]) + "\n")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(path)
    assert "no label for image id(s) [1]" in error.value.problem
