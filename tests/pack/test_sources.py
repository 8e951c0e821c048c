"""What every source converter must do, one test per behaviour, parametrized over the
sources whose test was the same test (each source's own behaviour stays in its
``test_source_<name>.py``). Every fixture is in the source's original on-disk layout and
packed with the real pipeline; ``source_stores`` builds each once per session."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_fixture, generate_fixture, pack_fixture, records_by_class
from source_stores import source_fixture, source_pack

from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.fixtures.base import Fixture
from sampler_server.pack import sources
from sampler_server.pack.plan import ConverterOptions
from sampler_server.store.manifest import Split
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding


def _file_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _ids(cases: list[Any]) -> list[str]:
    return [case.source for case in cases]


# ---- the manifest: classes, counts and splits as the fixture defines them --------------

@dataclass(frozen=True)
class ManifestCase:
    source: str
    split_rule: str  # what the manifest's split rule starts with
    use_split_file: bool = True


def _from_split_file(source: str) -> str:
    return f"file:{source}_splits.json:sha256="


MANIFEST_CASES = [
    *(ManifestCase(source, _from_split_file(source))
      for source in ("aircraft", "cu_birds", "dtd", "fungi", "mscoco", "quickdraw", "vgg_flower")),
    ManifestCase("omniglot", "omniglot"),
    ManifestCase("traffic_sign", "all-test", use_split_file=False),
]


@pytest.mark.parametrize("case", MANIFEST_CASES, ids=_ids(MANIFEST_CASES))
def test_classes_counts_and_splits_as_the_fixture_defines(case: ManifestCase, tmp_path_factory) -> None:
    fixture = source_fixture(case.source, tmp_path_factory)
    manifest = StoreReader(source_pack(case.source, tmp_path_factory, use_split_file=case.use_split_file).store_dir).manifest
    assert {c.name: c.count for c in manifest.classes} == dict(fixture.class_images)
    assert {c.name: c.split for c in manifest.classes} == dict(fixture.class_splits or {})
    assert manifest.split_rule.startswith(case.split_rule)
    assert manifest.num_skipped == 0


# ---- the fingerprint: what the records are, not how they were packed ---------------------

@dataclass(frozen=True)
class EncodingCase:
    source: str
    workers: int  # of the repeated pack (the session's pack has one)
    max_side: int
    raw_size: int
    every_record_at_max_side: bool  # every original is larger than max_side
    square: bool = False  # every original is square
    use_split_file: bool = True
    small_encoding: Encoding | None = None  # what every record packed with max_side is


ENCODING_CASES = [
    EncodingCase("aircraft", 1, 24, 16, False),
    EncodingCase("cu_birds", 1, 32, 20, False),
    EncodingCase("dtd", 1, 40, 12, False),
    EncodingCase("fungi", 1, 30, 10, False),
    EncodingCase("mscoco", 1, 20, 14, False),
    EncodingCase("omniglot", 2, 50, 32, True, square=True),
    EncodingCase("quickdraw", 2, 20, 16, True, square=True),
    EncodingCase("traffic_sign", 2, 20, 16, True, use_split_file=False),
    EncodingCase("vgg_flower", 2, 48, 20, True),
    EncodingCase("ilsvrc_2012", 2, 40, 24, True, small_encoding=Encoding.JPEG),
]


@pytest.mark.parametrize("case", ENCODING_CASES, ids=_ids(ENCODING_CASES))
def test_fingerprint_ignores_workers_and_encoding(case: EncodingCase, tmp_path_factory, tmp_path: Path) -> None:
    fixture = source_fixture(case.source, tmp_path_factory)
    packed = source_pack(case.source, tmp_path_factory, use_split_file=case.use_split_file)
    again = pack_fixture(fixture, tmp_path / "again", use_split_file=case.use_split_file, workers=case.workers)
    small = pack_fixture(fixture, tmp_path / "small", use_split_file=case.use_split_file, max_side=case.max_side)
    raw = pack_fixture(fixture, tmp_path / "raw", use_split_file=case.use_split_file, raw_size=case.raw_size)
    assert again.manifest.fingerprint == small.manifest.fingerprint == raw.manifest.fingerprint
    assert again.manifest.fingerprint == packed.manifest.fingerprint
    smaller = [record for _, record in records_by_class(small.store_dir)]
    sides = [max(record.width, record.height) for record in smaller]
    assert all(side <= case.max_side for side in sides) and max(sides) == case.max_side
    if case.every_record_at_max_side:
        assert set(sides) == {case.max_side}
    if case.square:
        assert all(record.width == record.height for record in smaller)
    if case.small_encoding is not None:
        assert {record.encoding for record in smaller} == {case.small_encoding}
    size = case.raw_size
    for _, record in records_by_class(raw.store_dir):
        assert (record.encoding, record.width, record.height, record.channels) == (Encoding.RAW, size, size, 3)
        assert len(record.payload) == size * size * 3


# ---- a corrupt image: the pack fails naming it, or skips exactly it ---------------------

@dataclass(frozen=True)
class CorruptCase:
    source: str
    victim: Callable[[Fixture], Path]  # the image to damage, in the fixture's copy
    damage: Callable[[bytes], bytes]


def _first_listed_cub_image(fixture: Fixture) -> Path:
    return fixture.input_dir / "images" / (fixture.input_dir / "images.txt").read_text().splitlines()[0].split()[1]


def _last_image_of_the_largest_dtd_class(fixture: Fixture) -> Path:
    largest = max(fixture.class_images, key=lambda name: fixture.class_images[name])
    return sorted((fixture.input_dir / "images" / largest).glob("*.jpg"))[-1]


def _first_fungi_val_image(fixture: Fixture) -> Path:
    return fixture.input_dir / json.loads((fixture.input_dir / "val.json").read_text())["images"][0]["file_name"]


CORRUPT_CASES = [
    CorruptCase("aircraft", lambda f: f.input_dir / sorted(f.expected["crops"])[0], lambda data: data[:200]),
    CorruptCase("cu_birds", _first_listed_cub_image, lambda data: data[:150]),
    CorruptCase("dtd", _last_image_of_the_largest_dtd_class, lambda data: data[:100]),
    CorruptCase("fungi", _first_fungi_val_image, lambda data: b"\xff\xd8\xff\xe0 not really a jpeg"),
    CorruptCase("omniglot", lambda f: sorted((f.input_dir / "images_background" / "Greek").rglob("*.png"))[0],
                lambda data: data[:60]),
    CorruptCase("traffic_sign", lambda f: f.input_dir / "Final_Training" / "Images" / "00002" / "00000_00003.ppm",
                lambda data: data[:100]),
    CorruptCase("vgg_flower", lambda f: f.input_dir / "jpg" / "image_00003.jpg", lambda data: data[:150]),
    CorruptCase("ilsvrc_2012", lambda f: sorted((f.input_dir / "n02085620").glob("*.JPEG"))[1],
                lambda data: data[:200]),
]


@pytest.mark.parametrize("case", CORRUPT_CASES, ids=_ids(CORRUPT_CASES))
def test_corrupt_image_fails_or_is_skipped(case: CorruptCase, tmp_path_factory, tmp_path: Path) -> None:
    fixture = source_fixture(case.source, tmp_path_factory)
    broken = copy_fixture(fixture, tmp_path)
    victim = case.victim(broken)
    victim.write_bytes(case.damage(victim.read_bytes()))
    with pytest.raises(InputFormatError) as error:
        pack_fixture(broken, tmp_path / "fail")
    assert error.value.path == str(victim)
    assert "corrupt or truncated" in error.value.problem
    summary = pack_fixture(broken, tmp_path / "skip", on_error="skip")
    assert summary.manifest.num_skipped == 1
    assert summary.manifest.skipped[0]["origin"] == victim.relative_to(broken.input_dir).as_posix()
    assert summary.manifest.num_records == fixture.num_images - 1
    counts = {c.name: c.count for c in summary.manifest.classes}
    assert sorted(fixture.class_images[name] - count for name, count in counts.items()) == [0] * (len(counts) - 1) + [1]


# ---- class split files -----------------------------------------------------------------

SPLIT_FILE_SOURCES = ["aircraft", "cu_birds", "dtd", "fungi", "mscoco", "quickdraw", "traffic_sign", "vgg_flower"]


@pytest.mark.parametrize("source", SPLIT_FILE_SOURCES)
def test_official_split_file_needs_every_class(source: str, tmp_path_factory, tmp_path: Path,
                                               shared_reference: Path) -> None:
    """The fixture has a few of the official classes: the official file names the others."""
    official = shared_reference / "md_splits" / f"{source}_splits.json"
    overrides: dict[str, Any] = {"class_splits": official}
    if source in ("traffic_sign", "vgg_flower"):
        overrides["labels"] = None  # names from the split file alone
    with pytest.raises(InputFormatError) as error:
        pack_fixture(source_fixture(source, tmp_path_factory), tmp_path, converter_overrides=overrides)
    assert error.value.path == str(official)
    assert "unknown class" in error.value.problem


UNKNOWN_CLASSES = [
    ("aircraft", "test", "Concorde"),
    ("cu_birds", "valid", "999.Dodo"),
    ("dtd", "test", "glittery"),
    ("fungi", "train", "9999.Phallus impudicus"),
    ("mscoco", "valid", "unicorn"),
    ("quickdraw", "train", "zebra"),
    ("vgg_flower", "test", "077.passion flower"),
]


@pytest.mark.parametrize(("source", "split", "unknown"), UNKNOWN_CLASSES, ids=[c[0] for c in UNKNOWN_CLASSES])
def test_unknown_class_in_a_split_file(source: str, split: str, unknown: str, tmp_path_factory, tmp_path: Path) -> None:
    fixture = source_fixture(source, tmp_path_factory)
    assert fixture.split_file is not None
    data = json.loads(fixture.split_file.read_text())
    data[split].append(unknown)
    bad = tmp_path / "splits.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InputFormatError) as error:
        pack_fixture(fixture, tmp_path / "store", converter_overrides={"class_splits": bad})
    assert error.value.path == str(bad)
    assert repr(unknown) in error.value.problem


@pytest.mark.parametrize("source", ["aircraft", "cu_birds", "dtd", "fungi"])
def test_default_split_rule_without_a_split_file(source: str, tmp_path_factory, tmp_path: Path) -> None:
    fixture = source_fixture(source, tmp_path_factory)
    manifest = pack_fixture(fixture, tmp_path, use_split_file=False).manifest
    assert manifest.split_rule == "default-70-15-15"
    n = len(fixture.class_images)
    counts = [len(manifest.classes_in(split)) for split in (Split.TRAIN, Split.VALID, Split.TEST)]
    assert counts == [int(0.7 * n), int(0.85 * n) - int(0.7 * n), n - int(0.85 * n)]


# ---- options a converter does not take -------------------------------------------------

REFUSED_OPTIONS = [
    ("omniglot", "class_splits", lambda tmp: tmp / "x.json", "--class-splits"),
    ("quickdraw", "labels", lambda tmp: tmp / "labels.txt", "--labels"),
    ("traffic_sign", "duplicates", lambda tmp: (tmp / "d.txt",), "--duplicates"),
    ("vgg_flower", "duplicates", lambda tmp: (tmp / "d.txt",), "--duplicates"),
    ("ilsvrc_2012", "class_splits", lambda tmp: tmp / "x.json", "--class-splits"),
]


@pytest.mark.parametrize(("source", "option", "value", "flag"), REFUSED_OPTIONS, ids=[c[0] for c in REFUSED_OPTIONS])
def test_flags_it_does_not_take(source: str, option: str, value: Callable[[Path], object], flag: str,
                                tmp_path_factory, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=flag):
        pack_fixture(source_fixture(source, tmp_path_factory), tmp_path, converter_overrides={option: value(tmp_path)})


# ---- the fixture generators ------------------------------------------------------------

@dataclass(frozen=True)
class GeneratorCase:
    source: str
    seed: int
    num_classes: int | None = None  # None: the generator's defaults
    images_per_class: int | None = None
    also: Callable[[Fixture], bool] = lambda fixture: True  # what else the generator promises
    seeded: Path | None = None  # a file another seed changes


GENERATOR_CASES = [
    GeneratorCase("aircraft", 3, 7, 6, seeded=Path("data") / "images_box.txt"),
    GeneratorCase("cu_birds", 5, 9, 4, lambda f: len((f.input_dir / "images.txt").read_text().splitlines()) == 36),
    GeneratorCase("dtd", 2, 50, 2),
    GeneratorCase("fungi", 9, 14, 3),
    GeneratorCase("mscoco", 1, 10, 5, lambda f: f.expected["num_annotations"] == 50),
    GeneratorCase("traffic_sign", 4),
    GeneratorCase("vgg_flower", 6),
]


@pytest.mark.parametrize("case", GENERATOR_CASES, ids=_ids(GENERATOR_CASES))
def test_fixture_is_deterministic_and_scales(case: GeneratorCase, tmp_path: Path) -> None:
    sizes = {} if case.num_classes is None else {"num_classes": case.num_classes,
                                                 "images_per_class": case.images_per_class}
    first = generate_fixture(case.source, tmp_path / "a", seed=case.seed, **sizes)
    second = generate_fixture(case.source, tmp_path / "b", seed=case.seed, **sizes)
    assert _file_bytes(first.input_dir) == _file_bytes(second.input_dir)
    if first.split_file is not None:
        assert second.split_file is not None and first.split_file.read_bytes() == second.split_file.read_bytes()
    for name, value in first.pack_args.items():
        if isinstance(value, Path):
            assert value.read_bytes() == second.pack_args[name].read_bytes(), name
    if case.seeded is not None:
        other = generate_fixture(case.source, tmp_path / "c", seed=case.seed + 1, **sizes)
        assert (first.input_dir / case.seeded).read_bytes() != (other.input_dir / case.seeded).read_bytes()
    plan = sources.get_converter(case.source).plan(first.input_dir, ConverterOptions(**first.pack_args))
    assert {c.name: sum(1 for _ in c.items()) for c in plan.classes} == dict(first.class_images)
    if case.num_classes is not None:
        assert len(first.class_images) == case.num_classes
        assert set(first.class_images.values()) == {case.images_per_class}
    assert case.also(first)
