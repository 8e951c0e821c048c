"""All 19 VTAB-1k tasks against TFDS itself, on real prepared TFDS data of all 16 datasets.

Each dataset is written by TFDS's own writer (``tfds_builders``: subclasses of the real
builders, configs ``sun397/tfds``, ``eurosat/rgb``, ``btgraham-300`` included), several
shards per split, sized just above what the task's carving needs, then packed with
``sampler-server pack vtab``. For every task and for train800, val200, train800val200
and test, ``sampler-server vtab split`` must list exactly the examples TFDS returns for
the reference's slice specs (written out below from vtab.md, not taken from the
registry), in canonical order (TFDS read one file at a time), and each label must
equal the reference's derivation computed by TF ops over TFDS's own features. CLEVR
and KITTI depths sit on every bin edge, so the left-open, right-closed bins are tested.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import tfds_builders as tb
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.core.vtab import DATASETS, TASKS
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import decode_record

import tensorflow as tf
tfds = tb.tfds

pytestmark = pytest.mark.slow

# builder class, config, class attributes overridden: one per TFDS dataset VTAB reads.
BUILDS = {
    "caltech101": (tb.TestCaltech101, None, {}),
    "cifar100": (tb.TestCifar100, None, {"SIZES": {"train": 2010, "test": 30}}),
    "dtd": (tb.TestDtd, None, {}),
    "oxford_flowers102": (tb.TestFlowers102, None, {}),
    "oxford_iiit_pet": (tb.TestPets, None, {}),
    "sun397/tfds": (tb.TestSun397, "tfds", {}),
    "svhn_cropped": (tb.TestSvhn, None, {}),
    "patch_camelyon": (tb.TestCamelyon, None, {}),
    "eurosat/rgb": (tb.TestEurosat, "rgb", {}),
    "resisc45": (tb.TestResisc45, None, {}),
    "diabetic_retinopathy_detection/btgraham-300": (tb.TestRetinopathy, "btgraham-300", {}),
    "clevr": (tb.TestClevrEdges, None, {}),
    "dsprites": (tb.TestDsprites, None, {"SIZE": 2000}),
    "smallnorb": (tb.TestSmallnorb, None, {}),
    "dmlab": (tb.TestDmlab, None, {}),
    "kitti": (tb.TestKittiEdges, None, {}),
}


def _validation_split(sizes):
    return {"val200": "validation[:200]", "test": "test"}


def _tail(percent, test="test"):
    def carve(sizes):
        start = percent * sizes["train"] // 100
        return {"val200": f"train[{start}:{start + 200}]", "test": test}
    return carve


def _three_way(train_percent, val_percent):
    def carve(sizes):
        start = train_percent * sizes["train"] // 100
        return {"val200": f"train[{start}:{start + 200}]",
                "test": f"train[{start + val_percent * sizes['train'] // 100}:]"}
    return carve


def _half_of_test(sizes):
    return {"val200": "test[:200]", "test": "test[50%:]"}


# The reference's carving of each task (vtab.md's table), re-stated independently of the registry.
CARVINGS = {
    "caltech101": _tail(90), "cifar100": _tail(90), "dtd": _validation_split, "flowers102": _validation_split,
    "pets": _tail(80), "sun397": _validation_split, "svhn": _tail(90), "camelyon": _validation_split,
    "eurosat": _three_way(60, 20), "resisc45": _three_way(60, 20), "retinopathy": _validation_split,
    "clevr_count": _tail(90, test="validation"), "clevr_distance": _tail(90, test="validation"),
    "dsprites_location": _three_way(80, 10), "dsprites_orientation": _three_way(80, 10),
    "smallnorb_azimuth": _half_of_test, "smallnorb_elevation": _half_of_test,
    "dmlab": _validation_split, "kitti_distance": _validation_split,
}

CLEVR_THRS = np.array([0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0])
KITTI_THRS = np.array([-100.0, 8.0, 20.0, 999.0])


def _bin(thresholds, dist):
    return tf.reduce_max(tf.where((thresholds - dist) < 0))


def _coarse(attribute, num_values, num_classes=16):
    def label(ex):
        value = tf.math.floordiv(tf.cast(ex[attribute], tf.float32), float(num_values) / num_classes)
        return tf.cast(value, tf.int64)
    return label


def _kitti(ex):
    vehicles = tf.where(ex["objects"]["type"] < 3)
    vehicle_z = tf.gather(params=ex["objects"]["location"][:, 2], indices=vehicles)
    vehicle_z = tf.concat([vehicle_z, tf.constant([[1000.0]])], axis=0)
    return _bin(KITTI_THRS, tf.reduce_min(vehicle_z))


# The reference's label of each task from TFDS's features, in TF ops as task_adaptation writes them.
REFERENCE_LABELS = {
    "clevr_count": lambda ex: tf.size(ex["objects"]["size"]) - 3,
    "clevr_distance": lambda ex: _bin(CLEVR_THRS, tf.reduce_min(ex["objects"]["pixel_coords"][:, 2])),
    "dsprites_location": _coarse("label_x_position", 32),
    "dsprites_orientation": _coarse("label_orientation", 40),
    "smallnorb_azimuth": lambda ex: ex["label_azimuth"],
    "smallnorb_elevation": lambda ex: ex["label_elevation"],
    "kitti_distance": _kitti,
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """All 16 datasets prepared by TFDS and packed into one data directory."""
    root = tmp_path_factory.mktemp("tfds-all")
    data = root / "data"
    versions = {}
    for name, (builder_cls, config, attributes) in BUILDS.items():
        versions[name] = tb.prepare(builder_cls, root / "tfds", config=config, **attributes)
        assert main(["pack", "vtab", "--tfds-name", name, "--tfds-data-dir", str(root / "tfds"),
                     "--output", str(data), "--quiet", "--workers", "1"]) == 0
    return versions, data


@pytest.fixture(scope="module")
def references():
    """TFDS's examples per (dataset, slice specs), read once for every task of that dataset:
    CLEVR's, dSprites' and smallNORB's two tasks carve the same specs (filled by ``_references``)."""
    return {}


def _payload_key(payload: bytes, scale: int | None) -> bytes:
    """What identifies an image: its bytes, or for dSprites (stored x255) its pixels."""
    if scale is None:
        return payload
    pixels = np.asarray(Image.open(io.BytesIO(payload)), dtype=np.uint8)
    return pixels.tobytes() if scale == 1 else (pixels * scale).astype(np.uint8).tobytes()


def _references(references, builder, tfds_name: str, specs: dict[str, str],
                scale: int | None) -> dict[str, tuple[list[bytes], dict]]:
    """split -> (image keys, {task: labels}) of TFDS's read of that split's spec in canonical order
    (one file at a time), each label by the reference's derivation, for every task that reads
    ``tfds_name``. The specs are read as one TFDS spec, joined by ``+`` (TFDS reads the parts one
    after another), and cut where TFDS's split info says each part ends: one read pipeline per
    dataset instead of one per spec (building one costs more than reading these examples)."""
    key = (tfds_name, *specs.values())
    if key not in references:
        tasks = [name for name, task in TASKS.items() if task.tfds_name == tfds_name]
        label_of = {name: REFERENCE_LABELS.get(name, lambda ex: ex["label"]) for name in tasks}
        # Images stay encoded: the reference's are compared by bytes, and the other image
        # features (smallNORB's image2, Pets' mask) enter no label.
        undecoded = {name: tfds.decode.SkipDecoding() for name, feature in builder.info.features.items()
                     if isinstance(feature, tfds.features.Image)}
        dataset = builder.as_dataset(split="+".join(specs.values()), shuffle_files=False,
                                     read_config=tfds.ReadConfig(interleave_cycle_length=1), decoders=undecoded)
        dataset = dataset.map(lambda ex: (ex["image"], {name: tf.cast(label(ex), tf.int64)
                                                        for name, label in label_of.items()}))
        images, labels = [], {name: [] for name in tasks}
        for batch_images, batch_labels in tfds.as_numpy(dataset.batch(4096)):  # in order; one step per batch
            images += [_payload_key(bytes(image), scale) for image in batch_images]
            for name in tasks:
                labels[name] += [int(label) for label in batch_labels[name]]
        sizes = [builder.info.splits[spec].num_examples for spec in specs.values()]
        assert len(images) == sum(sizes), (specs, len(images), sizes)
        references[key] = {}
        for split, size, end in zip(specs, sizes, np.cumsum(sizes).tolist()):
            part = slice(end - size, end)
            references[key][split] = images[part], {name: values[part] for name, values in labels.items()}
    return references[key]


def test_every_vtab_dataset_is_built_with_several_interleaved_shards(prepared):
    versions, _ = prepared
    assert set(versions) == set(DATASETS)
    for version_dir in versions.values():
        info = tfds.builder_from_directory(str(version_dir)).info
        shards = info.splits["train"].shard_lengths
        assert len(shards) == tb.SHARDS and min(shards) > 16  # default interleaving would reorder


@pytest.mark.parametrize("task_name", list(TASKS))
def test_vtab_split_equals_tfds_slicing_and_labels_equal_the_reference(task_name, prepared, references, capsys):
    versions, data = prepared
    task = TASKS[task_name]
    builder = tfds.builder_from_directory(str(versions[task.tfds_name]))
    sizes = {name: split.num_examples for name, split in builder.info.splits.items()}
    carved = CARVINGS[task_name](sizes)
    specs = {"train800": "train[:800]", "val200": carved["val200"], "test": carved["test"]}
    specs["train800val200"] = f"{specs['train800']}+{specs['val200']}"
    scale = 255 if task.tfds_name == "dsprites" else None
    seen_labels = set()
    reference = _references(references, builder, task.tfds_name, specs, scale)
    for split, spec in specs.items():
        assert main(["vtab", "split", "--data", str(data), "--task", task_name, "--split", split, "--json"]) == 0
        listing = json.loads(capsys.readouterr().out)
        expected, reference_labels = reference[split]
        reader = StoreReader(data / listing["store"])
        values = reader.read_values([entry["record_id"] for entry in listing["records"]])  # one transaction
        stored = [_payload_key(decode_record(value).payload, 1 if scale else None) for value in values]
        assert len(stored) == len(expected) == listing["count"], (split, spec)
        assert stored == expected, (split, spec)
        labels = [entry["label"] for entry in listing["records"]]
        assert labels == reference_labels[task_name], (split, spec)
        seen_labels.update(labels)
    if task_name in ("clevr_distance", "kitti_distance", "clevr_count"):
        assert seen_labels == set(range(task.num_classes))  # every bin, edges included
