"""dtd: the Describable Textures converter and fixture, packed with the real pipeline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import generate_fixture, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from sampler_server.errors import InputFormatError
from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources import dtd
from sampler_server.store.manifest import Split
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding

SOURCE = "dtd"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return generate_fixture(SOURCE, tmp_path_factory.mktemp("dtd"))


@pytest.fixture(scope="module")
def packed(fixture: Fixture, tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return pack_fixture(fixture, tmp_path_factory.mktemp("store"))


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return dtd.plan(input_dir, ConverterOptions(**options))


def test_classes_counts_and_splits_as_the_fixture_defines(fixture: Fixture, packed: PackSummary) -> None:
    manifest = StoreReader(packed.store_dir).manifest
    assert {c.name: c.count for c in manifest.classes} == dict(fixture.class_images)
    assert {c.name: c.split for c in manifest.classes} == dict(fixture.class_splits or {})
    assert manifest.split_rule.startswith(f"file:{SOURCE}_splits.json:sha256=")
    assert manifest.num_skipped == 0


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


def test_fingerprint_is_stable_and_independent_of_encoding(
    fixture: Fixture, packed: PackSummary, tmp_path: Path
) -> None:
    again = pack_fixture(fixture, tmp_path / "again")
    assert again.manifest.fingerprint == packed.manifest.fingerprint
    small = pack_fixture(fixture, tmp_path / "small", max_side=40)
    assert small.manifest.fingerprint == packed.manifest.fingerprint
    sizes = [(r.width, r.height) for _, r in _records(small.store_dir)]
    assert all(max(size) <= 40 for size in sizes) and max(max(size) for size in sizes) == 40
    raw = pack_fixture(fixture, tmp_path / "raw", raw_size=12)
    assert raw.manifest.fingerprint == packed.manifest.fingerprint
    for _, record in _records(raw.store_dir):
        assert (record.encoding, record.width, record.height, record.channels) == (Encoding.RAW, 12, 12, 3)


def test_default_split_rule_without_a_split_file(fixture: Fixture, tmp_path: Path) -> None:
    manifest = pack_fixture(fixture, tmp_path, use_split_file=False).manifest
    assert manifest.split_rule == "default-70-15-15"
    n = len(fixture.class_images)
    counts = [len(manifest.classes_in(split)) for split in (Split.TRAIN, Split.VALID, Split.TEST)]
    assert counts == [int(0.7 * n), int(0.85 * n) - int(0.7 * n), n - int(0.85 * n)]


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


def test_official_split_file_needs_every_class(fixture: Fixture, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "dtd_splits.json"
    with pytest.raises(InputFormatError) as error:
        _plan(fixture.input_dir, class_splits=official_path)
    assert error.value.path == str(official_path)
    assert "unknown class" in error.value.problem


def test_class_missing_from_a_split_file(fixture: Fixture, tmp_path: Path) -> None:
    data = json.loads(fixture.split_file.read_text())
    dropped = data["train"].pop()
    split_path = tmp_path / "splits.json"
    split_path.write_text(json.dumps(data))
    with pytest.raises(InputFormatError) as error:
        _plan(fixture.input_dir, class_splits=split_path)
    assert error.value.path == str(split_path)
    assert f"classes in no split: {dropped!r}" in error.value.problem


def test_unknown_class_in_a_split_file(fixture: Fixture, tmp_path: Path) -> None:
    data = json.loads(fixture.split_file.read_text())
    data["test"].append("glittery")
    split_path = tmp_path / "splits.json"
    split_path.write_text(json.dumps(data))
    with pytest.raises(InputFormatError) as error:
        _plan(fixture.input_dir, class_splits=split_path)
    assert error.value.path == str(split_path)
    assert "'glittery'" in error.value.problem


def test_missing_images_directory(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    shutil.rmtree(broken.input_dir / "images")
    with pytest.raises(InputFormatError) as error:
        _plan(broken.input_dir)
    assert error.value.path == str(broken.input_dir / "images")
    assert "missing images directory" in error.value.problem


def test_corrupt_image_fails_or_is_skipped(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    class_name = max(fixture.class_images, key=lambda name: fixture.class_images[name])
    path = sorted((broken.input_dir / "images" / class_name).glob("*.jpg"))[-1]
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(InputFormatError) as error:
        pack_fixture(broken, tmp_path / "fail")
    assert error.value.path == str(path)
    summary = pack_fixture(broken, tmp_path / "skip", on_error="skip")
    assert summary.manifest.num_skipped == 1
    assert summary.manifest.skipped[0]["origin"] == path.relative_to(broken.input_dir).as_posix()
    counts = {c.name: c.count for c in summary.manifest.classes}
    assert counts[class_name] == fixture.class_images[class_name] - 1


def test_fixture_is_deterministic_and_scales(tmp_path: Path) -> None:
    first = generate_fixture(SOURCE, tmp_path / "a", seed=2, num_classes=50, images_per_class=2)
    second = generate_fixture(SOURCE, tmp_path / "b", seed=2, num_classes=50, images_per_class=2)
    files = sorted(p.relative_to(first.input_dir) for p in first.input_dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second.input_dir) for p in second.input_dir.rglob("*") if p.is_file())
    assert all((first.input_dir / f).read_bytes() == (second.input_dir / f).read_bytes() for f in files)
    assert len(first.class_images) == 50 and set(first.class_images.values()) == {2}
    assert len(_plan(first.input_dir).classes) == 50
