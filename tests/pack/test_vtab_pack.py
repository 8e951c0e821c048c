"""``pack vtab`` on real prepared TFDS data: canonical order, attributes, labels, bad input.

The datasets are written by TFDS's own writer from subclasses of the real builders
(``tfds_builders``), several shards per split with more than 16 examples each, so
TFDS's default interleaved read is not canonical order and the tests can tell.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tfds_builders as tb
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)
from conftest import REPO_ROOT
from PIL import Image

from sampler_server.assembly.decode import record_pixels
from sampler_server.core.vtab import ATTRIBUTE_NAMES, attributes_for_dataset, get_task
from sampler_server.errors import DataLoss, FailedPrecondition, InputFormatError, InvalidArgument, NotFound
from sampler_server.imaging import ResizeMethod
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, run_pack
from sampler_server.pack.plan import ConverterOptions
from sampler_server.pack.sources import vtab
from sampler_server.store.reader import StoreReader, find_stores
from sampler_server.store.record import Encoding, encode_record
from sampler_server.store.vtab_records import COLUMNS_FILE, TfdsRecords, list_split

DATASETS = ("clevr", "dsprites", "kitti", "cifar100")


def pack(tfds_dir, tfds_name, output, **options):
    plan = sources.get_converter("vtab").plan(tfds_dir, ConverterOptions(tfds_name=tfds_name))
    options.setdefault("progress", False)
    options.setdefault("workers", 1)
    return run_pack(plan, output, PackOptions(**options))


@pytest.fixture(scope="module")
def packed(tfds_dir, tmp_path_factory):
    """The four datasets packed into one data directory (two worker processes for clevr)."""
    data = tmp_path_factory.mktemp("vtab-data")
    return {name: pack(tfds_dir, name, data, workers=2 if name == "clevr" else 1) for name in DATASETS}


def _version_dir(tfds_dir, name):
    (path,) = (tfds_dir / name).iterdir()
    return path


def test_records_follow_one_example_slices_not_the_default_interleaved_read(tfds_dir, packed):
    clevr = _version_dir(tfds_dir, "clevr")
    records = TfdsRecords(packed["clevr"].store_dir)
    reader = StoreReader(packed["clevr"].store_dir)
    assert records.split_sizes() == {"train": 70, "validation": 40}
    assert [(c.name, c.start, c.end) for c in reader.manifest.classes] == [("train", 0, 70), ("validation", 70, 110)]
    shards = reader.manifest.tfds["splits"]["train"]["shard_lengths"]
    assert len(shards) == tb.SHARDS and min(shards) > 16  # more than one interleave block per shard
    stored = [reader.read(records.record_id("train", i)).payload for i in range(70)]
    assert stored != tb.default_order(clevr, "train")  # the pitfall is exercised
    assert tb.slice_example(clevr, "train", 25)["image"] == stored[25]  # one slice on its own
    for index, example in enumerate(tb.slice_examples(clevr, "train", list(range(70)))):
        record = reader.read(index)  # record_id = start[train] + index
        assert record.payload == bytes(example["image"])
        assert record.metadata["tfds_split"] == "train" and record.metadata["tfds_index"] == index
        assert records.attributes([index])[0]["objects_pixel_z"] == example["objects"]["pixel_coords"][:, 2].tolist()
    for index, example in zip((0, 17, 39), tb.slice_examples(clevr, "validation", [0, 17, 39])):
        assert reader.read(records.record_id("validation", index)).payload == bytes(example["image"])
        assert records.location(70 + index) == ("validation", index)


def test_the_manifest_records_the_shard_layout_tfds_reads_by(tfds_dir, packed):
    """trainval1000 (TFDS's default read order) follows from these; a store without them refuses it."""
    for name in DATASETS:
        info = tb.tfds.builder_from_directory(str(_version_dir(tfds_dir, name))).info
        tfds_block = StoreReader(packed[name].store_dir).manifest.tfds
        assert tfds_block["disable_shuffling"] is info.disable_shuffling is False
        assert {split: block["shard_lengths"] for split, block in tfds_block["splits"].items()} == {
            split: list(info.splits[split].shard_lengths) for split in info.splits}
        layout = TfdsRecords(packed[name].store_dir).shard_layout()
        assert layout.cycle_length == 16 and layout.shard_lengths["train"] == tuple(info.splits["train"].shard_lengths)


def test_clevr_keeps_ragged_depths_for_its_two_tasks(tfds_dir, packed):
    records = TfdsRecords(packed["clevr"].store_dir)
    manifest = records.manifest
    assert manifest.source == "tfds:clevr" and manifest.name == "tfds_clevr" and records.version == "3.1.0"
    assert [a["name"] for a in manifest.tfds["attributes"]] == ["objects_pixel_z"]
    clevr = _version_dir(tfds_dir, "clevr")
    for task_name in ("clevr_count", "clevr_distance"):
        listing = list_split(records, get_task(task_name), "test")  # CLEVR's VTAB test is TFDS validation
        assert listing.locations == tuple(("validation", i) for i in range(40))
        for index, example in zip((0, 5, 39), tb.slice_examples(clevr, "validation", [0, 5, 39])):
            depths = example["objects"]["pixel_coords"][:, 2]
            closest = float(min(depths))
            expected = len(depths) - 3 if task_name == "clevr_count" else \
                sum(t < closest for t in (0, 8, 8.5, 9, 9.5, 10, 100)) - 1
            assert listing.labels[index] == expected
        assert len(set(listing.labels)) > 3


def test_dsprites_masks_are_stored_times_255_and_attributes_kept(tfds_dir, packed):
    dsprites = _version_dir(tfds_dir, "dsprites")
    reader = StoreReader(packed["dsprites"].store_dir)
    records = TfdsRecords(packed["dsprites"].store_dir)
    for index, example in zip((0, 21, 59), tb.slice_examples(dsprites, "train", [0, 21, 59])):
        record = reader.read(index)
        mask = np.asarray(Image.open(io.BytesIO(bytes(example["image"]))))
        assert set(np.unique(mask)) <= {0, 1}
        stored = np.asarray(Image.open(io.BytesIO(record.payload)))
        assert record.encoding is Encoding.PNG and record.channels == 1
        assert np.array_equal(stored, mask.astype(np.uint8) * 255)
        assert records.attributes([index]) == [{"label_orientation": int(example["label_orientation"]),
                                                "label_x_position": int(example["label_x_position"])}]
    assert reader.manifest.tfds["image"]["scale"] == 255
    location = list_split(records, get_task("dsprites_location"), "train")
    assert location.labels == tuple(records.attributes([i])[0]["label_x_position"] // 2 for i in range(48))


def test_raw_size_and_max_side_keep_the_fingerprint(tfds_dir, packed, tmp_path):
    raw = pack(tfds_dir, "dsprites", tmp_path, raw_size=16, name="dsprites_raw16")
    encoded = packed["dsprites"]
    assert raw.manifest.fingerprint == encoded.manifest.fingerprint
    raw_reader, encoded_reader = StoreReader(raw.store_dir), StoreReader(encoded.store_dir)
    for record_id in (0, 30):
        record = raw_reader.read(record_id)
        assert (record.encoding, record.width, record.height, record.channels) == (Encoding.RAW, 16, 16, 3)
        expected = record_pixels(encode_record(encoded_reader.read(record_id)), 16, ResizeMethod.BILINEAR)
        assert record.payload == expected.tobytes()
    assert TfdsRecords(raw.store_dir).attributes([3]) == TfdsRecords(encoded.store_dir).attributes([3])
    small = pack(tfds_dir, "cifar100", tmp_path, max_side=16, name="cifar_small")
    assert small.manifest.fingerprint == packed["cifar100"].manifest.fingerprint
    assert {(r.width, r.height) for _, r in StoreReader(small.store_dir).iter_records()} == {(16, 16)}


def test_kitti_objects_are_ragged_with_empty_frames(tfds_dir, packed):
    kitti = _version_dir(tfds_dir, "kitti")
    records = TfdsRecords(packed["kitti"].store_dir)
    assert records.split_sizes() == {"test": 20, "train": 50, "validation": 20}
    empty = 0
    for split in ("test", "validation"):
        for index, example in enumerate(tb.slice_examples(kitti, split, list(range(20)))):
            (attributes,) = records.attributes([records.record_id(split, index)])
            assert attributes["objects_type"] == example["objects"]["type"].tolist()
            assert attributes["objects_location_z"] == example["objects"]["location"][:, 2].tolist()
            empty += not attributes["objects_type"]
    assert empty > 0
    listing = list_split(records, get_task("kitti_distance"), "test")
    for position, (_, index) in enumerate(listing.locations):
        (attributes,) = records.attributes([listing.record_ids[position]])
        vehicles = [z for t, z in zip(attributes["objects_type"], attributes["objects_location_z"]) if t < 3]
        closest = min(vehicles + [1000.0])
        assert listing.labels[position] == sum(t < closest for t in (-100, 8, 20, 999)) - 1


def test_cifar100_label_and_split_fingerprint(tfds_dir, packed):
    cifar = _version_dir(tfds_dir, "cifar100")
    records = TfdsRecords(packed["cifar100"].store_dir)
    for index, example in zip((0, 44, 79), tb.slice_examples(cifar, "train", [0, 44, 79])):
        assert records.attributes([records.record_id("train", index)]) == [{"label": int(example["label"])}]
    task = get_task("cifar100")
    first, again = list_split(records, task, "val"), list_split(records, task, "val")
    assert first.fingerprint == again.fingerprint and first.fingerprint.startswith("sha256:")
    assert first.locations == tuple(("train", i) for i in range(72, 80))  # T = 90% of 80
    assert list_split(records, task, "train").fingerprint != first.fingerprint


def test_every_attribute_the_registry_reads_has_a_rule():
    assert set(vtab.RULES) == set(ATTRIBUTE_NAMES)
    for name in ("clevr", "dsprites", "smallnorb", "kitti", "cifar100"):
        assert set(attributes_for_dataset(name)) <= set(vtab.RULES)


def test_side_file_is_covered_by_manifest_and_verify(packed, tmp_path):
    store = tmp_path / "copy"
    shutil.copytree(packed["kitti"].store_dir, store)
    TfdsRecords(store).verify()
    side = store / COLUMNS_FILE
    data = bytearray(side.read_bytes())
    data[3] ^= 0xFF
    side.write_bytes(bytes(data))
    with pytest.raises(DataLoss, match="sha256"):
        TfdsRecords(store).verify()
    side.write_bytes(bytes(data[:-8]))
    with pytest.raises(DataLoss, match="its manifest records"):
        TfdsRecords(store)


def _nothing_left(output):
    return not output.exists() or (find_stores(output) == [] and not any(output.iterdir()))


def test_missing_dataset_or_version_is_one_line(tfds_dir, tmp_path):
    with pytest.raises(InputFormatError, match=r"no prepared TFDS dataset 'dtd'") as caught:
        pack(tfds_dir, "dtd", tmp_path / "out")
    assert "\n" not in str(caught.value)
    with pytest.raises(InputFormatError, match=r"no version 3\.0\.0 of TFDS dataset 'clevr' \(versions here: 3\.1\.0\)"):
        pack(tfds_dir, "clevr:3.0.0", tmp_path / "out")
    with pytest.raises(InputFormatError, match="missing TFDS data directory"):
        pack(tmp_path / "nowhere", "clevr", tmp_path / "out")
    with pytest.raises(InvalidArgument, match="no VTAB task reads TFDS dataset 'mnist'"):
        pack(tfds_dir, "mnist", tmp_path / "out")
    with pytest.raises(InvalidArgument, match="--tfds-name: got 'Clevr!'"):
        pack(tfds_dir, "Clevr!", tmp_path / "out")
    assert _nothing_left(tmp_path / "out")


def test_label_outside_the_class_range_fails_and_leaves_nothing(tfds_dir, tmp_path):
    data = tmp_path / "tfds"
    shutil.copytree(tfds_dir / "cifar100", data / "cifar100")
    tb.set_num_classes(_version_dir(data, "cifar100"), "label", 50)
    with pytest.raises(InputFormatError) as caught:
        pack(data, "cifar100", tmp_path / "out", workers=2)
    message = str(caught.value)
    assert message.startswith("tfds cifar100:3.0.2: split test, index ") and "\n" not in message
    assert "field label: class " in message and "outside the dataset's class range [0, 50)" in message
    assert _nothing_left(tmp_path / "out")


def test_attribute_a_label_needs_missing_from_dataset_or_example(tmp_path):
    class NoPixelCoords(tb.TestClevr, skip_registration=True):
        name = "clevr"

        def _info(self):
            info = super()._info()
            objects = dict(info.features["objects"].feature)
            objects.pop("pixel_coords")
            features = dict(info.features)
            features["objects"] = tb.tfds.features.Sequence(objects)
            return tb.tfds.core.DatasetInfo(builder=self, features=tb.tfds.features.FeaturesDict(features))

        def _generate_examples(self, split, n):
            for key, example in super()._generate_examples(split, n):
                example["objects"].pop("pixel_coords")
                yield key, example

    NoPixelCoords.pkg_dir_path = tb.TestClevr.pkg_dir_path
    tb.prepare(NoPixelCoords, tmp_path / "a", shards=1, SIZES={"train": 4, "validation": 2})
    with pytest.raises(InputFormatError, match=r"^tfds clevr:3\.1\.0: field objects/pixel_coords: missing from "
                                               r"the dataset's features; VTAB's labels need it \(attribute objects_pixel_z\)$"):
        pack(tmp_path / "a", "clevr", tmp_path / "out")
    tb.prepare(tb.TestClevr, tmp_path / "b", shards=2, SIZES={"train": 30, "validation": 4},
               OBJECTS={("train", 11): 0})
    with pytest.raises(InputFormatError) as caught:
        pack(tmp_path / "b", "clevr", tmp_path / "out")
    message = str(caught.value)
    assert message.startswith("tfds clevr:3.1.0: split train, index ") and "objects_pixel_z=[]" in message
    assert _nothing_left(tmp_path / "out")


def test_corrupt_image_fails_or_is_skipped_and_indices_stay_canonical(tmp_path):
    cifar = tb.prepare(tb.TestCifar100, tmp_path / "tfds", shards=2, SIZES={"train": 40, "test": 36},
                       CORRUPT=("test", 7))
    with pytest.raises(InputFormatError, match=r"^tfds cifar100:3\.0\.2: split test, index \d+, field image: "
                                               r"corrupt or truncated image"):
        pack(tmp_path / "tfds", "cifar100", tmp_path / "out")
    assert _nothing_left(tmp_path / "out")
    summary = pack(tmp_path / "tfds", "cifar100", tmp_path / "out", on_error="skip")
    assert summary.num_skipped == 1
    records = TfdsRecords(summary.store_dir)
    reader = StoreReader(summary.store_dir)
    assert records.split_range("test") == (0, 35)
    images = [bytes(example["image"]) for example in tb.slice_examples(cifar, "test", list(range(36)))]
    bad = next(i for i, image in enumerate(images) if len(image) == 40)
    with pytest.raises(NotFound, match=f"split test index {bad}: skipped"):
        records.record_id("test", bad)
    for index, image in enumerate(images):
        if index != bad:
            assert reader.read(records.record_id("test", index)).payload == image
    with pytest.raises(NotFound):
        list_split(records, get_task("cifar100"), "test")


def test_a_damaged_shard_is_one_line_and_leaves_nothing(tfds_dir, tmp_path):
    data = tmp_path / "tfds"
    shutil.copytree(tfds_dir / "kitti", data / "kitti")
    shard = sorted(_version_dir(data, "kitti").glob("kitti-train.tfrecord-*"))[1]
    shard.write_bytes(shard.read_bytes()[:-30])
    with pytest.raises(DataLoss) as caught:
        pack(data, "kitti", tmp_path / "out")
    message = str(caught.value)
    assert "split train, index " in message and "unreadable TFDS record" in message and "\n" not in message
    assert _nothing_left(tmp_path / "out")


def test_without_tensorflow_datasets_the_error_names_the_extra(tfds_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(FailedPrecondition, match=r"pip install 'sampler-server\[vtab\]'"):
        pack(tfds_dir, "clevr", tmp_path / "out")


def test_reading_a_vtab_store_imports_neither_tensorflow_nor_tfds(packed):
    data = packed["clevr"].store_dir.parent
    code = (
        "import sys\n"
        "from sampler_server.catalog.registry import StoreRegistry\n"
        "from sampler_server.store.vtab_records import TfdsRecords\n"
        f"registry = StoreRegistry.from_data_dir({str(data)!r})\n"
        "for name in registry.stores: registry.spec(name)\n"
        f"print(TfdsRecords({str(packed['clevr'].store_dir)!r}).attributes([0]))\n"
        "assert 'tensorflow_datasets' not in sys.modules and 'tensorflow' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "objects_pixel_z" in result.stdout
