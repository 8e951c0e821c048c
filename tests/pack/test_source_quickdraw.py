"""Quick, Draw! converter: one class per .npy file, one PNG record per bitmap row."""

from __future__ import annotations

import inspect
import io
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_REFERENCE, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack
from PIL import Image
from reference_encoding import reference_jpeg

from sampler_server.errors import InputFormatError
from sampler_server.fixtures import quickdraw as quickdraw_fixture
from sampler_server.fixtures.base import Fixture
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions
from sampler_server.pack.splits import DEFAULT_RULE
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding, Record

SOURCE = "quickdraw"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


def _pixels(record: Record) -> np.ndarray:
    if record.encoding is Encoding.RAW:
        return np.frombuffer(record.payload, np.uint8).reshape(record.height, record.width, record.channels)
    return np.asarray(Image.open(io.BytesIO(record.payload)))


def test_class_names_are_the_file_names_with_spaces_and_case(generated: Fixture, packed: PackSummary) -> None:
    names = {c.name for c in packed.manifest.classes}
    assert "police car" in names and "The Eiffel Tower" in names


def test_default_rule_without_split_file(generated: Fixture, tmp_path: Path) -> None:
    summary = pack_fixture(generated, tmp_path, use_split_file=False)
    assert summary.manifest.split_rule == DEFAULT_RULE
    assert [c.count for c in summary.manifest.classes] == [8] * len(generated.class_images)


def test_records_are_the_bitmap_rows_not_inverted(generated: Fixture, packed: PackSummary) -> None:
    arrays = {p.name: np.load(p) for p in generated.input_dir.glob("*.npy")}
    records = _records(packed.store_dir)
    assert len(records) == generated.num_images
    seen: dict[str, list[int]] = {}
    for class_name, record in records:
        file_name, row = record.origin.split("#")
        assert file_name == f"{class_name}.npy"
        assert record.encoding is Encoding.JPEG and (record.width, record.height, record.channels) == (28, 28, 3)
        bitmap = Image.fromarray(arrays[file_name][int(row)].reshape(28, 28))
        assert record.payload == reference_jpeg(bitmap)  # the reference: row -> RGB -> JPEG q75
        seen.setdefault(class_name, []).append(int(row))
    assert all(rows == list(range(8)) for rows in seen.values())


def test_items_are_streamed(generated: Fixture) -> None:
    plan = sources.get_converter(SOURCE).plan(generated.input_dir, ConverterOptions())
    assert all(inspect.isgenerator(c.items()) for c in plan.classes)


def test_boolean_bitmaps(tmp_path: Path) -> None:
    root = tmp_path / SOURCE
    root.mkdir()
    rows = np.zeros((2, 784), dtype=bool)
    rows[1, 100:200] = True
    np.save(root / "line.npy", rows)
    fixture = Fixture(source=SOURCE, input_dir=root, class_images={"line": 2})
    summary = pack_fixture(fixture, tmp_path / "s", lossless_derived=True)
    stored = [_pixels(record) for _, record in _records(summary.store_dir)]
    assert np.array_equal(stored[1].reshape(-1), rows[1].astype(np.uint8) * 255)
    reference = pack_fixture(fixture, tmp_path / "r")
    expected = Image.fromarray((rows[1].astype(np.uint8) * 255).reshape(28, 28))
    assert _records(reference.store_dir)[1][1].payload == reference_jpeg(expected)


def test_lossless_derived_stores_the_rows_as_png(generated: Fixture, tmp_path: Path) -> None:
    arrays = {p.name: np.load(p) for p in generated.input_dir.glob("*.npy")}
    summary = pack_fixture(generated, tmp_path, lossless_derived=True)
    for _, record in _records(summary.store_dir):
        file_name, row = record.origin.split("#")
        assert record.encoding is Encoding.PNG and record.channels == 1
        assert np.array_equal(_pixels(record), arrays[file_name][int(row)].reshape(28, 28))


def test_generation_is_deterministic_and_scales(tmp_path: Path) -> None:
    first = quickdraw_fixture.generate(tmp_path / "a" / SOURCE, seed=2)
    second = quickdraw_fixture.generate(tmp_path / "b" / SOURCE, seed=2)
    for path in sorted(first.input_dir.iterdir()):
        assert path.read_bytes() == (second.input_dir / path.name).read_bytes()
    assert first.split_file is not None and second.split_file is not None
    assert first.split_file.read_bytes() == second.split_file.read_bytes()
    big = quickdraw_fixture.generate(tmp_path / "big" / SOURCE, num_classes=20, images_per_class=30)
    plan = sources.get_converter(SOURCE).plan(big.input_dir, ConverterOptions(class_splits=big.split_file))
    assert {c.name: sum(1 for _ in c.items()) for c in plan.classes} == dict(big.class_images)


def test_fixture_categories_carry_their_official_split() -> None:
    official = json.loads((SHARED_REFERENCE / "md_splits" / "quickdraw_splits.json").read_text())
    splits = {name: Split(key) for key, names in official.items() for name in names}
    assert all(splits[name] is split for name, split in quickdraw_fixture.CATEGORIES)
    assert len(dict(quickdraw_fixture.CATEGORIES)) == len(quickdraw_fixture.CATEGORIES)


@pytest.mark.parametrize(
    "content",
    [
        b"not an npy file at all",
        "shape-3d",
        "not-square",
        "header-cut",
    ],
)
def test_malformed_npy_file(generated: Fixture, tmp_path: Path, content: bytes | str) -> None:
    fixture = _copy(generated, tmp_path)
    victim = fixture.input_dir / "ant.npy"
    if content == "shape-3d":
        np.save(victim, np.zeros((2, 28, 28), dtype=np.uint8))
    elif content == "not-square":
        np.save(victim, np.zeros((2, 50), dtype=np.uint8))
    elif content == "header-cut":
        victim.write_bytes(victim.read_bytes()[:40])
    else:
        assert isinstance(content, bytes)
        victim.write_bytes(content)
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(victim)


def test_truncated_bitmaps_fail_or_are_skipped(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    victim = fixture.input_dir / "ant.npy"
    victim.write_bytes(victim.read_bytes()[:500])  # header intact, rows cut short
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "fail")
    assert error.value.path == str(victim)
    summary = pack_fixture(fixture, tmp_path / "skip", on_error="skip")
    assert summary.manifest.num_skipped == generated.class_images["ant"]
    assert summary.empty_classes == ["ant"]
    assert "ant" not in {c.name for c in summary.manifest.classes}


def test_empty_input(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match=r"\.npy") as error:
        sources.get_converter(SOURCE).plan(tmp_path, ConverterOptions())
    assert error.value.path == str(tmp_path)
