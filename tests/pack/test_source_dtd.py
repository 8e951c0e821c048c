"""dtd: the Describable Textures converter and fixture, packed with the real pipeline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import generate_fixture, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack
from sampler_server.errors import InputFormatError
from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources import dtd
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding

SOURCE = "dtd"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return dtd.plan(input_dir, ConverterOptions(**options))


def test_records_are_the_original_files_byte_for_byte(fixture: Fixture, packed: PackSummary) -> None:
    records = _records(packed.store_dir)
    assert len(records) == fixture.num_images
    by_class: dict[str, list[str]] = {}
    for class_name, record in records:
        assert record.origin.startswith(f"images/{class_name}/{class_name}_")
        assert record.payload == (fixture.input_dir / record.origin).read_bytes()
        assert record.encoding is Encoding.JPEG
        by_class.setdefault(class_name, []).append(record.origin)
    assert all(origins == sorted(origins) for origins in by_class.values())


def test_stray_directory_file_is_skipped(fixture: Fixture, packed: PackSummary) -> None:
    stray = fixture.expected["stray_files"]
    assert stray and all((fixture.input_dir / path).is_file() for path in stray)
    origins = {record.origin for _, record in _records(packed.store_dir)}
    assert not origins & set(stray)
    assert packed.manifest.num_skipped == 0


def test_official_split_file_is_honoured_with_all_47_classes(tmp_path: Path, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "dtd_splits.json"
    official = json.loads(official_path.read_text())
    expected = {name: key for key in ("train", "valid", "test") for name in official[key]}
    fixture = generate_fixture(SOURCE, tmp_path, num_classes=47, images_per_class=1)
    assert set(fixture.class_images) == set(expected)  # the fixture's names are DTD's own
    summary = pack_fixture(fixture, tmp_path / "store", converter_overrides={"class_splits": official_path})
    manifest = summary.manifest
    assert {c.name: c.split.value for c in manifest.classes} == expected
    assert [len(manifest.classes_in(s)) for s in (Split.TRAIN, Split.VALID, Split.TEST)] == [33, 7, 7]
    assert manifest.num_records == 47


def test_class_missing_from_a_split_file(fixture: Fixture, tmp_path: Path) -> None:
    data = json.loads(fixture.split_file.read_text())
    dropped = data["train"].pop()
    split_path = tmp_path / "splits.json"
    split_path.write_text(json.dumps(data))
    with pytest.raises(InputFormatError) as error:
        _plan(fixture.input_dir, class_splits=split_path)
    assert error.value.path == str(split_path)
    assert f"classes in no split: {dropped!r}" in error.value.problem


def test_missing_images_directory(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    shutil.rmtree(broken.input_dir / "images")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / "images")
    assert "missing images directory" in error.value.problem
