"""ILSVRC-2012 converter: wnid folders, duplicate removal, records stored as-is."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from PIL import Image
from reference_encoding import reference_jpeg
from conftest import SHARED_REFERENCE, generate_fixture, pack_fixture
from conftest import copy_fixture as _copy
from conftest import records_by_class as _records

from sampler_server.core.hierarchy.wordnet import is_a_view, load_wordnet_graph
from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.fixtures import ilsvrc as ilsvrc_fixture
from sampler_server.fixtures.base import Fixture
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackSummary
from sampler_server.pack.plan import ConverterOptions
from sampler_server.pack.sources.ilsvrc import parse_duplicates
from sampler_server.store.manifest import Split
from sampler_server.store.record import Encoding

SOURCE = "ilsvrc_2012"
CARNIVORE, DEVICE = "n02075296", "n03183080"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return generate_fixture(SOURCE, tmp_path_factory.mktemp("ilsvrc"))


@pytest.fixture(scope="module")
def packed(generated: Fixture, tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return pack_fixture(generated, tmp_path_factory.mktemp("stores"))


def _file_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_classes_are_wnids_left_to_the_hierarchy(generated: Fixture, packed: PackSummary) -> None:
    manifest = packed.manifest
    assert [c.name for c in manifest.classes] == sorted(generated.class_images)
    assert {c.name: c.count for c in manifest.classes} == dict(generated.class_images)
    assert all(c.wnid == c.name and c.split is None and c.group is None for c in manifest.classes)
    assert manifest.split_rule == "wordnet-hierarchy"
    assert manifest.hierarchy == "wordnet-3.0"


def test_duplicates_are_removed_and_noted(generated: Fixture, packed: PackSummary) -> None:
    origins = {record.origin for _, record in _records(packed.store_dir)}
    removed = generated.expected["removed_files"]
    assert len(removed) == generated.expected["duplicates_removed"] == 2
    assert all((generated.input_dir / name).is_file() for name in removed)
    assert origins.isdisjoint(removed)
    options = packed.manifest.pack_options
    assert options["duplicates_listed"] == generated.expected["duplicates_listed"] == 3
    assert options["duplicates_removed"] == 2
    assert options["duplicates_files"] == [generated.pack_args["duplicates"][0].name]


def test_without_duplicates_list_every_file_is_packed(generated: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    summary = pack_fixture(generated, tmp_path, converter_overrides={"duplicates": ()})
    assert summary.manifest.num_records == generated.num_images + 2
    assert summary.manifest.pack_options["duplicates_removed"] == 0
    assert summary.manifest.fingerprint != packed.manifest.fingerprint


def test_records_are_the_original_bytes(generated: Fixture, packed: PackSummary) -> None:
    records = _records(packed.store_dir)
    assert len(records) == generated.num_images
    for class_name, record in records:
        assert record.origin.split("/")[0] == class_name
        assert record.encoding is Encoding.JPEG
        original = generated.input_dir / record.origin
        if Image.open(original).mode == "RGB":
            assert record.payload == original.read_bytes()
        else:  # the reference re-encodes non-RGB files: RGB JPEG at quality 75
            assert record.payload == reference_jpeg(Image.open(original))
    per_class: dict[str, list[str]] = {}
    for class_name, record in records:
        per_class.setdefault(class_name, []).append(record.origin)
    assert all(names == sorted(names) for names in per_class.values())


def test_fingerprint_ignores_workers_and_encoding(generated: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    again = pack_fixture(generated, tmp_path / "again", workers=2)
    smaller = pack_fixture(generated, tmp_path / "small", max_side=40)
    raw = pack_fixture(generated, tmp_path / "raw", raw_size=24)
    assert again.manifest.fingerprint == smaller.manifest.fingerprint == raw.manifest.fingerprint
    assert again.manifest.fingerprint == packed.manifest.fingerprint
    for _, record in _records(smaller.store_dir):
        assert max(record.width, record.height) == 40 and record.encoding is Encoding.JPEG
    for _, record in _records(raw.store_dir):
        assert (record.encoding, record.width, record.height, record.channels) == (Encoding.RAW, 24, 24, 3)


def test_fixture_wnids_are_ilsvrc_classes_where_the_fixture_says() -> None:
    leaves = json.loads((SHARED_REFERENCE / "md_specs" / "ilsvrc_2012_num_leaf_images.json").read_text())
    assert all(wnid in leaves for wnid, _, _ in ilsvrc_fixture.WNIDS)
    assert len({wnid for wnid, _, _ in ilsvrc_fixture.WNIDS}) == len(ilsvrc_fixture.WNIDS)
    graph = is_a_view(load_wordnet_graph())
    carnivores, devices = nx.descendants(graph, CARNIVORE), nx.descendants(graph, DEVICE)
    for wnid, _, split in ilsvrc_fixture.WNIDS:
        found = Split.VALID if wnid in carnivores else Split.TEST if wnid in devices else Split.TRAIN
        assert found is split, wnid


def test_generation_is_deterministic_and_scales(tmp_path: Path) -> None:
    first = ilsvrc_fixture.generate(tmp_path / "a" / SOURCE, seed=5)
    second = ilsvrc_fixture.generate(tmp_path / "b" / SOURCE, seed=5)
    assert _file_bytes(first.input_dir) == _file_bytes(second.input_dir)
    assert (tmp_path / "a" / f"{SOURCE}_duplicates.txt").read_bytes() == (
        tmp_path / "b" / f"{SOURCE}_duplicates.txt"
    ).read_bytes()
    big = ilsvrc_fixture.generate(tmp_path / "big" / SOURCE, num_classes=20, images_per_class=2)
    plan = sources.get_converter(SOURCE).plan(big.input_dir, ConverterOptions(duplicates=big.pack_args["duplicates"]))
    assert {c.name: sum(1 for _ in c.items()) for c in plan.classes} == dict(big.class_images)


def test_other_files_in_the_root_are_ignored(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    (fixture.input_dir / "wordnet.is_a.txt").write_text("n00001740 n00001930\n")
    (fixture.input_dir / "n01531178.tar").write_bytes(b"already extracted")
    assert pack_fixture(fixture, tmp_path / "stores").manifest.num_records == generated.num_images


def test_folder_that_is_not_a_wnid(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    (fixture.input_dir / "goldfinch").mkdir()
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "stores")
    assert error.value.path == str(fixture.input_dir / "goldfinch")


def test_unextracted_archives(tmp_path: Path) -> None:
    root = tmp_path / "ILSVRC2012_img_train"
    root.mkdir()
    (root / "n01440764.tar").write_bytes(b"tar")
    with pytest.raises(InputFormatError, match="extract") as error:
        sources.get_converter(SOURCE).plan(root, ConverterOptions())
    assert error.value.path == str(root)


def test_official_duplicates_lists_parse() -> None:
    entries = set()
    for path in sorted((SHARED_REFERENCE / "md_duplicates").glob("ImageNet_*_duplicates.txt")):
        entries |= parse_duplicates(path)
    assert len(entries) == 403  # unique files, as meta_dataset.md states
    assert len({wnid for wnid, _ in entries}) == 122


def test_malformed_or_missing_duplicates_list(generated: Fixture, tmp_path: Path) -> None:
    bad = tmp_path / "bad_duplicates.txt"
    bad.write_text("# header\nn01531178/n01531178_12730.JPEG  # fine\nn01531178_9.JPEG  # no folder\n")
    with pytest.raises(InputFormatError, match="line 3") as error:
        pack_fixture(generated, tmp_path / "a", converter_overrides={"duplicates": (bad,)})
    assert error.value.path == str(bad)
    missing = tmp_path / "missing.txt"
    with pytest.raises(InputFormatError) as error:
        pack_fixture(generated, tmp_path / "b", converter_overrides={"duplicates": (missing,)})
    assert error.value.path == str(missing)


def test_flags_it_does_not_take(generated: Fixture, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="--class-splits"):
        pack_fixture(generated, tmp_path, converter_overrides={"class_splits": tmp_path / "x.json"})


def test_corrupt_image_fails_or_is_skipped(generated: Fixture, tmp_path: Path) -> None:
    fixture = _copy(generated, tmp_path)
    victim = sorted((fixture.input_dir / "n02085620").glob("*.JPEG"))[1]
    victim.write_bytes(victim.read_bytes()[:200])
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "fail")
    assert error.value.path == str(victim)
    summary = pack_fixture(fixture, tmp_path / "skip", on_error="skip")
    assert summary.manifest.num_skipped == 1
    assert summary.manifest.num_records == generated.num_images - 1
