"""Omniglot converter: structural splits, alphabet groups, inverted records."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records
from source_stores import source_fixture, source_pack
from PIL import Image, ImageOps
from reference_encoding import reference_jpeg

from sampler_server.errors import InputFormatError
from sampler_server.fixtures import omniglot as omniglot_fixture
from sampler_server.fixtures.base import Fixture
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding, Record

SOURCE = "omniglot"


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


def _file_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_alphabet_groups_hierarchy_and_class_order(generated: Fixture, packed: PackSummary) -> None:
    manifest = packed.manifest
    assert {c.name: c.group for c in manifest.classes} == generated.expected["groups"]
    assert manifest.hierarchy == "omniglot-alphabets"
    assert manifest.split_rule.startswith("omniglot")
    rank = {Split.TRAIN: 0, Split.VALID: 1, Split.TEST: 2}
    keys = [(rank[c.split], c.name) for c in manifest.classes]
    assert keys == sorted(keys)


def test_five_smallest_background_alphabets_are_valid(packed: PackSummary) -> None:
    valid = sorted({c.group for c in packed.manifest.classes if c.split is Split.VALID})
    assert valid == list(omniglot_fixture.EXPECTED_VALID)  # Bengali wins the 2-character tie with Greek by name
    assert packed.manifest.pack_options["valid_alphabets"] == list(omniglot_fixture.EXPECTED_VALID)
    assert {c.group for c in packed.manifest.classes if c.split is Split.TEST} == {"Angelic", "Kannada"}
    assert {c.group for c in packed.manifest.classes if c.split is Split.TRAIN} == {"Latin", "Greek"}


def test_records_are_the_inverted_originals(generated: Fixture, packed: PackSummary) -> None:
    records = _records(packed.store_dir)
    assert len(records) == generated.num_images
    for class_name, record in records:
        original = generated.input_dir / record.origin
        alphabet, character = record.origin.split("/")[1:3]
        assert class_name == f"{alphabet}-{character}"
        with Image.open(original) as image:
            assert image.mode == "1" and image.size == (105, 105)
            inverted = ImageOps.invert(image.convert("RGB"))
        # the reference's encoding: RGB, inverted, JPEG at PIL's default quality 75
        assert record.encoding is Encoding.JPEG and record.channels == 3
        assert record.payload == reference_jpeg(inverted)


def test_lossless_derived_stores_the_inverted_drawings_as_png(generated: Fixture, packed: PackSummary,
                                                              tmp_path: Path) -> None:
    lossless = pack_fixture(generated, tmp_path, lossless_derived=True)
    assert lossless.manifest.fingerprint == packed.manifest.fingerprint  # encoding only
    assert lossless.manifest.pack_options["lossless_derived"] is True
    jpeg_error = []
    for (_, record), (_, reference) in zip(_records(lossless.store_dir), _records(packed.store_dir)):
        with Image.open(generated.input_dir / record.origin) as image:
            expected = 255 - np.asarray(image.convert("L"), dtype=np.uint8)
        assert record.encoding is Encoding.PNG and record.channels == 1
        assert np.array_equal(_pixels(record), expected)
        jpeg_error.append(np.abs(_pixels(reference)[..., 0].astype(int) - expected).max())
    assert max(jpeg_error) > 8  # q75 JPEG moves pixels: the two encodings are not interchangeable


def test_items_in_file_order(packed: PackSummary) -> None:
    origins = [record.origin for _, record in _records(packed.store_dir)]
    for info in packed.manifest.classes:
        names = origins[info.start : info.end]
        assert names == sorted(names)


def test_generation_is_deterministic_and_scales(tmp_path: Path) -> None:
    first = omniglot_fixture.generate(tmp_path / "a" / SOURCE, seed=3)
    second = omniglot_fixture.generate(tmp_path / "b" / SOURCE, seed=3)
    assert _file_bytes(first.input_dir) == _file_bytes(second.input_dir)
    big = omniglot_fixture.generate(tmp_path / "big" / SOURCE, num_classes=20, images_per_class=2)
    plan = sources.get_converter(SOURCE).plan(big.input_dir, ConverterOptions())
    assert len(plan.classes) == 20
    assert {c.name: c.split for c in plan.classes} == dict(big.class_splits or {})
    assert len({c.group for c in plan.classes if c.split is Split.VALID}) == 5


def test_missing_evaluation_folder(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    shutil.rmtree(fixture.input_dir / "images_evaluation")
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(fixture.input_dir / "images_evaluation")


def test_alphabet_in_both_folders(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    latin = fixture.input_dir / "images_background" / "Latin"
    shutil.copytree(latin, fixture.input_dir / "images_evaluation" / "Latin")
    with pytest.raises(InputFormatError, match="Latin"):
        pack_fixture(fixture, tmp_path / "stores")
