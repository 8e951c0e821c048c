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
from source_stores import source_fixture, source_pack

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
    return source_fixture(SOURCE, tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return source_pack(SOURCE, tmp_path_factory)


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
    for layout in ("folders", "flat"):
        assert _file_bytes(first.expected["validation"][layout]) == _file_bytes(second.expected["validation"][layout])
    for labels in ("loc_solution", "ground_truth"):
        assert first.expected["validation"][labels].read_bytes() == second.expected["validation"][labels].read_bytes()
    from sampler_server.pack.sources.ilsvrc_validation import parse_devkit_meta

    assert parse_devkit_meta(first.expected["validation"]["devkit_meta"]) == parse_devkit_meta(
        second.expected["validation"]["devkit_meta"])  # the file's header holds its creation time
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


# ---- the official validation images (--validation) ----------------------------------------


def _layouts(generated: Fixture) -> dict[str, dict[str, object]]:
    """Every layout of the fixture's validation images, as ConverterOptions fields."""
    files = generated.expected["validation"]
    return {
        "wnid folders": {"validation": files["folders"]},
        "flat + LOC_val_solution.csv": {"validation": files["flat"], "validation_labels": files["loc_solution"]},
        "flat + ground truth + meta.mat": {"validation": files["flat"], "validation_labels": files["ground_truth"],
                                           "devkit_meta": files["devkit_meta"]},
    }


def _validation_records(store_dir: Path) -> list[tuple[str, int, object]]:
    """(class name, record id, record) of every validation record, in record-id order."""
    from sampler_server.store.reader import StoreReader

    reader = StoreReader(store_dir)
    held_out = reader.manifest.validation
    assert held_out is not None
    return [(info.name, record_id, reader.read(record_id))
            for info, (start, end) in zip(reader.manifest.classes, held_out.ranges) for record_id in range(start, end)]


@pytest.mark.parametrize("layout", ["wnid folders", "flat + LOC_val_solution.csv", "flat + ground truth + meta.mat"])
def test_validation_images_are_a_held_out_partition_after_every_train_record(
    generated: Fixture, packed: PackSummary, tmp_path: Path, layout: str
) -> None:
    summary = pack_fixture(generated, tmp_path, converter_overrides=_layouts(generated)[layout])
    manifest = summary.manifest
    held_out = manifest.validation
    assert held_out is not None and held_out.labels.split(" + ")[0] == {
        "wnid folders": "wnid folders", "flat + LOC_val_solution.csv": "LOC_val_solution.csv",
        "flat + ground truth + meta.mat": "ILSVRC2012_validation_ground_truth.txt"}[layout]
    # the classes (train partition) and their fingerprint are those of the default pack
    assert manifest.classes == packed.manifest.classes and manifest.fingerprint == packed.manifest.fingerprint
    assert held_out.start == manifest.num_records == generated.num_images
    assert manifest.total_records == held_out.end == manifest.num_records + sum(
        generated.expected["validation_images"].values())
    assert {c.name: end - start for c, (start, end) in zip(manifest.classes, held_out.ranges)} == dict(
        generated.expected["validation_images"])
    # each class's validation files, in name order, as the reference stores them
    folders = generated.expected["validation"]["folders"]
    expected = [(wnid, path) for wnid in sorted(generated.class_images) for path in sorted((folders / wnid).iterdir())]
    records = _validation_records(summary.store_dir)
    assert [(name, record.origin) for name, _, record in records] == [(w, p.name) for w, p in expected]
    for (_, _, record), (_, path) in zip(records, expected):
        original = Image.open(path)
        assert record.payload == (path.read_bytes() if original.mode == "RGB" else reference_jpeg(original))
    # every layout is the same content: same records, same validation fingerprint
    assert held_out.fingerprint == packed.manifest.validation.fingerprint
    assert held_out.fingerprint != manifest.fingerprint


def test_a_pack_without_validation_has_none_and_the_same_train_partition(
    generated: Fixture, packed: PackSummary, tmp_path: Path
) -> None:
    alone = pack_fixture(generated, tmp_path, converter_overrides={"validation": None})
    assert alone.manifest.validation is None and alone.manifest.total_records == alone.manifest.num_records
    assert alone.manifest.fingerprint == packed.manifest.fingerprint
    assert alone.manifest.classes == packed.manifest.classes
    assert [(n, r.origin) for n, r in _records(alone.store_dir)] == [(n, r.origin) for n, r in _records(packed.store_dir)]


def test_repacking_other_validation_images_into_the_same_store_is_refused(
    generated: Fixture, packed: PackSummary, tmp_path: Path
) -> None:
    from sampler_server.errors import FailedPrecondition

    pack_fixture(generated, tmp_path)
    with pytest.raises(FailedPrecondition, match="already holds a different ilsvrc_2012 store.*with validation"):
        pack_fixture(generated, tmp_path, converter_overrides={"validation": None})
    assert pack_fixture(generated, tmp_path).unchanged


def _flat_copy(generated: Fixture, tmp_path: Path) -> dict[str, Path]:
    import shutil

    files = generated.expected["validation"]
    flat = tmp_path / "val_flat"
    shutil.copytree(files["flat"], flat)
    solution, truth = tmp_path / "LOC_val_solution.csv", tmp_path / "ILSVRC2012_validation_ground_truth.txt"
    shutil.copyfile(files["loc_solution"], solution)
    shutil.copyfile(files["ground_truth"], truth)
    return {"flat": flat, "solution": solution, "truth": truth, "meta": files["devkit_meta"]}


def _pack_error(generated: Fixture, tmp_path: Path, **overrides: object) -> str:
    with pytest.raises((InputFormatError, InvalidArgument)) as error:
        pack_fixture(generated, tmp_path / "stores", converter_overrides=overrides)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_bad_validation_labels_are_one_line_naming_the_file(generated: Fixture, tmp_path: Path) -> None:
    files = _flat_copy(generated, tmp_path)
    flat, solution, truth, meta = files["flat"], files["solution"], files["truth"], files["meta"]
    lines = solution.read_text().splitlines()
    first = lines[1].split(",")[0]

    solution.write_text("\n".join([lines[0], f"{first},goldfinch 1 2 3 4", *lines[2:]]) + "\n")
    message = _pack_error(generated, tmp_path, validation=flat, validation_labels=solution)
    assert message.startswith(f"{solution}: line 2: PredictionString of {first} starts with 'goldfinch'")

    solution.write_text("\n".join([lines[0], *lines[2:]]) + "\n")  # one image without its row
    message = _pack_error(generated, tmp_path, validation=flat, validation_labels=solution)
    assert message == f"{flat / (first + '.JPEG')}: has no label in {solution} (no row {first})"

    solution.write_text("\n".join([*lines, "ILSVRC2012_val_00049999,n01531178 1 2 3 4"]) + "\n")
    message = _pack_error(generated, tmp_path, validation=flat, validation_labels=solution)
    assert message.startswith(f"{solution}: labels 1 images that {flat} lacks: ILSVRC2012_val_00049999")

    solution.write_text("ImageId;PredictionString\n")
    assert "expected the header ImageId,PredictionString" in _pack_error(
        generated, tmp_path, validation=flat, validation_labels=solution)

    message = _pack_error(generated, tmp_path, validation=flat, validation_labels=truth)
    assert "needs --devkit-meta (the devkit's data/meta.mat)" in message
    numbers = truth.read_text().splitlines()
    truth.write_text("\n".join(["999", *numbers[1:]]) + "\n")
    message = _pack_error(generated, tmp_path, validation=flat, validation_labels=truth, devkit_meta=meta)
    assert message == f"{truth}: line 1: ILSVRC2012_ID 999 is not a synset of {meta}"
    truth.write_text("\n".join(["one", *numbers[1:]]) + "\n")
    assert _pack_error(generated, tmp_path, validation=flat, validation_labels=truth, devkit_meta=meta) == (
        f"{truth}: line 1: expected an ILSVRC2012_ID (an integer), got 'one'")
    not_mat = tmp_path / "meta.mat"
    not_mat.write_bytes(b"not a MATLAB file")
    assert _pack_error(generated, tmp_path, validation=flat, validation_labels=truth, devkit_meta=not_mat).startswith(
        f"{not_mat}: is not a readable MATLAB file")


def test_validation_layout_and_class_problems_are_one_line(generated: Fixture, tmp_path: Path) -> None:
    files = _flat_copy(generated, tmp_path)
    message = _pack_error(generated, tmp_path, validation=files["flat"])
    assert message.startswith(f"{files['flat']}: holds images but no wnid folders") and "--validation-labels" in message
    import shutil

    folders = tmp_path / "val"
    shutil.copytree(generated.expected["validation"]["folders"], folders)
    (folders / "n01440764").mkdir()  # tench: not one of the train classes
    shutil.copyfile(next((folders / "n01531178").iterdir()), folders / "n01440764" / "ILSVRC2012_val_00049999.JPEG")
    message = _pack_error(generated, tmp_path, validation=folders)
    assert message.startswith(f"{folders}: validation images of 1 wnids the train input has no folder for: n01440764")
    shutil.rmtree(folders / "n01440764")
    shutil.rmtree(folders / "n02085620")
    message = _pack_error(generated, tmp_path, validation=folders)
    assert message.startswith(f"{folders}: no validation images of 1 train classes: n02085620")
    (folders / "n02085620").mkdir()
    (folders / "n02085620" / "ILSVRC2012_val_00000001.JPEG").write_bytes(
        next((folders / "n01531178").iterdir()).read_bytes())
    message = _pack_error(generated, tmp_path, validation=folders)
    assert "has the file name of" in message
    message = _pack_error(generated, tmp_path, validation=None, validation_labels=files["solution"])
    assert message == "--validation-labels and --devkit-meta describe the images of --validation VAL_DIR; pass it too"
    message = _pack_error(generated, tmp_path, validation=folders, devkit_meta=files["meta"])
    assert message.startswith("--devkit-meta maps the ground truth's ids to wnids")


def test_other_sources_refuse_validation(tmp_path: Path) -> None:
    fixture = generate_fixture("dtd", tmp_path, num_classes=2, images_per_class=2)
    with pytest.raises(InvalidArgument, match="--validation does not apply to source 'dtd'"):
        pack_fixture(fixture, tmp_path / "stores", converter_overrides={"validation": tmp_path})


def test_cli_packs_the_flat_download_and_shows_the_partition(generated: Fixture, tmp_path: Path, capsys) -> None:
    from sampler_server.cli.main import main

    files = generated.expected["validation"]
    argv = ["pack", SOURCE, "--input", str(generated.input_dir), "--output", str(tmp_path), "--quiet", "--workers", "1",
            "--duplicates", str(generated.pack_args["duplicates"][0]), "--validation", str(files["flat"]),
            "--validation-labels", str(files["ground_truth"]), "--devkit-meta", str(files["devkit_meta"])]
    assert main([*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    held = sum(generated.expected["validation_images"].values())
    assert summary["images"] == generated.num_images and summary["validation"]["images"] == held
    assert summary["validation"]["labels"] == "ILSVRC2012_validation_ground_truth.txt + meta.mat"
    assert main(["inspect", str(tmp_path / SOURCE)]) == 0
    assert f"  validation   {held} images, a held-out partition Meta-Dataset never reads" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / SOURCE)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{SOURCE}: OK ({generated.num_images + held} records, {held} of them validation")
