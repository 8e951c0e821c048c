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
    return generate_fixture(SOURCE, tmp_path_factory.mktemp("cu_birds"))


@pytest.fixture(scope="module")
def packed(fixture: Fixture, tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return pack_fixture(fixture, tmp_path_factory.mktemp("store"))


def _plan(input_dir: Path, **options: object) -> SourcePlan:
    return cu_birds.plan(input_dir, ConverterOptions(**options))


def test_classes_counts_and_splits_as_the_fixture_defines(fixture: Fixture, packed: PackSummary) -> None:
    manifest = StoreReader(packed.store_dir).manifest
    assert {c.name: c.count for c in manifest.classes} == dict(fixture.class_images)
    assert {c.name: c.split for c in manifest.classes} == dict(fixture.class_splits or {})
    assert manifest.split_rule.startswith(f"file:{SOURCE}_splits.json:sha256=")
    assert all(name[:3].isdigit() and name[3] == "." for name in fixture.class_images)
    assert manifest.num_skipped == 0


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


def test_fingerprint_is_stable_and_independent_of_encoding(
    fixture: Fixture, packed: PackSummary, tmp_path: Path
) -> None:
    again = pack_fixture(fixture, tmp_path / "again")
    assert again.manifest.fingerprint == packed.manifest.fingerprint
    small = pack_fixture(fixture, tmp_path / "small", max_side=32)
    assert small.manifest.fingerprint == packed.manifest.fingerprint
    assert all(max(r.width, r.height) <= 32 for _, r in _records(small.store_dir))
    raw = pack_fixture(fixture, tmp_path / "raw", raw_size=20)
    assert raw.manifest.fingerprint == packed.manifest.fingerprint
    for _, record in _records(raw.store_dir):
        assert (record.encoding, record.width, record.height, record.channels) == (Encoding.RAW, 20, 20, 3)


def test_default_split_rule_without_a_split_file(fixture: Fixture, tmp_path: Path) -> None:
    manifest = pack_fixture(fixture, tmp_path, use_split_file=False).manifest
    assert manifest.split_rule == "default-70-15-15"
    n = len(fixture.class_images)
    counts = [len(manifest.classes_in(split)) for split in (Split.TRAIN, Split.VALID, Split.TEST)]
    assert counts == [int(0.7 * n), int(0.85 * n) - int(0.7 * n), n - int(0.85 * n)]


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


def test_official_split_file_needs_every_class(fixture: Fixture, shared_reference: Path) -> None:
    official_path = shared_reference / "md_splits" / "cu_birds_splits.json"
    with pytest.raises(InputFormatError) as error:
        _plan(fixture.input_dir, class_splits=official_path)
    assert error.value.path == str(official_path)
    assert "unknown class" in error.value.problem


def test_unknown_class_in_a_split_file(fixture: Fixture, tmp_path: Path) -> None:
    data = json.loads(fixture.split_file.read_text())
    data["valid"].append("999.Dodo")
    split_path = tmp_path / "splits.json"
    split_path.write_text(json.dumps(data))
    with pytest.raises(InputFormatError) as error:
        _plan(fixture.input_dir, class_splits=split_path)
    assert error.value.path == str(split_path)
    assert "'999.Dodo'" in error.value.problem


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


def test_corrupt_image_fails_or_is_skipped(fixture: Fixture, tmp_path: Path) -> None:
    broken = _copy(fixture, tmp_path)
    victim = "images/" + (broken.input_dir / "images.txt").read_text().splitlines()[0].split()[1]
    path = broken.input_dir / victim
    path.write_bytes(path.read_bytes()[:150])
    with pytest.raises(InputFormatError) as error:
        pack_fixture(broken, tmp_path / "fail")
    assert error.value.path == str(path)
    summary = pack_fixture(broken, tmp_path / "skip", on_error="skip")
    assert summary.manifest.num_skipped == 1
    assert summary.manifest.skipped[0]["origin"] == victim
    assert summary.manifest.num_records == fixture.num_images - 1


def test_fixture_is_deterministic_and_scales(tmp_path: Path) -> None:
    first = generate_fixture(SOURCE, tmp_path / "a", seed=5, num_classes=9, images_per_class=4)
    second = generate_fixture(SOURCE, tmp_path / "b", seed=5, num_classes=9, images_per_class=4)
    files = sorted(p.relative_to(first.input_dir) for p in first.input_dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second.input_dir) for p in second.input_dir.rglob("*") if p.is_file())
    assert all((first.input_dir / f).read_bytes() == (second.input_dir / f).read_bytes() for f in files)
    assert len(first.class_images) == 9 and set(first.class_images.values()) == {4}
    assert len((first.input_dir / "images.txt").read_text().splitlines()) == 36
