"""Real prepared TFDS datasets for the VTAB tests, written by TFDS's own writer.

Each builder subclasses the real TFDS builder (its ``_info``: the real features),
registered under no name (``skip_registration``), and replaces only where examples
come from: small images made here, with attributes that identify each example.
``prepare`` writes them with ``download_and_prepare`` into a data directory, forced
into several shards per split of more than 16 examples each, so TFDS's default
interleaved read (cycle 16, block 16) differs from canonical order.

Every example's image bytes are unique (its PNG encodes a distinct pixel value), so
a test can match a store record to a TFDS example by bytes.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402
from etils import epath  # noqa: E402
from PIL import Image  # noqa: E402
from tensorflow_datasets.datasets.clevr import clevr_dataset_builder as clevr  # noqa: E402
from tensorflow_datasets.datasets.dsprites import dsprites_dataset_builder as dsprites  # noqa: E402
from tensorflow_datasets.datasets.kitti import kitti_dataset_builder as kitti  # noqa: E402
from tensorflow_datasets.datasets.caltech101 import caltech101_dataset_builder as caltech101  # noqa: E402
from tensorflow_datasets.datasets.oxford_flowers102 import oxford_flowers102_dataset_builder as flowers  # noqa: E402
from tensorflow_datasets.datasets.oxford_iiit_pet import oxford_iiit_pet_dataset_builder as pets  # noqa: E402
from tensorflow_datasets.datasets.patch_camelyon import patch_camelyon_dataset_builder as camelyon  # noqa: E402
from tensorflow_datasets.datasets.resisc45 import resisc45_dataset_builder as resisc45  # noqa: E402
from tensorflow_datasets.datasets.smallnorb import smallnorb_dataset_builder as smallnorb  # noqa: E402
from tensorflow_datasets.datasets.sun397 import sun397_dataset_builder as sun397  # noqa: E402
from tensorflow_datasets.datasets.svhn_cropped import svhn_cropped_dataset_builder as svhn  # noqa: E402
from tensorflow_datasets.image_classification import cifar  # noqa: E402
from tensorflow_datasets.image_classification import diabetic_retinopathy_detection as retinopathy  # noqa: E402
from tensorflow_datasets.image_classification import dmlab, dtd, eurosat  # noqa: E402

SHARDS = 3
tfds.disable_progress_bar()


def png(seed: int, size: int = 8, channels: int = 3, mask: bool = False) -> bytes:
    """A small PNG whose pixels encode ``seed`` (unique bytes per example)."""
    rng = np.random.RandomState(seed)
    if mask:
        pixels = (rng.rand(size, size) > 0.5).astype(np.uint8)  # dSprites: 0/1
    else:
        pixels = rng.randint(0, 256, size=(size, size, channels)).astype(np.uint8)
        pixels[0, 0, 0], pixels[0, 0, 1 % channels] = seed % 256, (seed // 256) % 256
    buffer = io.BytesIO()
    Image.fromarray(pixels if channels > 1 else pixels.reshape(size, size)).save(buffer, format="PNG")
    return buffer.getvalue()


def _package(module: Any) -> epath.Path:
    return epath.Path(module.__file__).parent


class TestClevr(clevr.Builder, skip_registration=True):
    """CLEVR 3.1.0: ``objects`` of 3..10 objects; closest pixel z from 7.55 up by 0.05 per example
    (every distance bin but the last), listed farthest first."""

    name = "clevr"
    pkg_dir_path = _package(clevr)
    SIZES = {"train": 70, "validation": 40}
    OBJECTS: dict[tuple[str, int], int] = {}  # (split, number) -> object count override

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}

    def _generate_examples(self, split, n):
        offset = 0 if split == "train" else 1000
        for number in range(n):
            k = self.OBJECTS.get((split, number), 3 + number % 8)
            z = [round(self._closest(split, number) + 0.5 * j, 4) for j in range(k)][::-1]
            objects = {
                "color": [j % 8 for j in range(k)], "material": [0] * k, "shape": [j % 3 for j in range(k)],
                "size": [1] * k, "rotation": [0.0] * k, "3d_coords": [[0.0, 0.0, 0.0]] * k,
                "pixel_coords": [[1.0, 2.0, value] for value in z],
            }
            yield f"{split}-{number}", {
                "image": png(offset + number), "file_name": f"{split}_{number}.png", "objects": objects,
                "question_answer": {"question": [], "answer": []},
            }

    def _closest(self, split: str, number: int) -> float:
        return 7.55 + 0.05 * number + (0.0 if split == "train" else 0.0125)


class TestDsprites(dsprites.Builder, skip_registration=True):
    """dSprites 2.0.0: 64x64x1 0/1 masks; x position and orientation cycle through their classes."""

    name = "dsprites"
    pkg_dir_path = _package(dsprites)
    SIZE = 60

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for number in range(self.SIZE):
            yield number, {
                "image": png(number, size=64, channels=1, mask=True),
                "label_shape": number % 3, "label_scale": number % 6,
                "label_orientation": (number * 7) % 40, "label_x_position": (number * 5) % 32,
                "label_y_position": number % 32, "value_shape": 0.0, "value_scale": 0.0,
                "value_orientation": 0.0, "value_x_position": 0.0, "value_y_position": 0.0,
            }


_KITTI_TYPES = 8


class TestKitti(kitti.Builder, skip_registration=True):
    """KITTI 3.1.0 (VTAB's exact version); every fifth example has no objects."""

    name = "kitti"
    pkg_dir_path = _package(kitti)
    VERSION = tfds.core.Version("3.1.0")  # TFDS 4.9 generates only 3.3.0 otherwise; same features
    SUPPORTED_VERSIONS: list = []
    RELEASE_NOTES: dict = {}
    SIZES = {"train": 50, "validation": 20, "test": 20}

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}

    def _generate_examples(self, split, n):
        offset = {"train": 2000, "validation": 3000, "test": 4000}[split]
        for number in range(n):
            types, depths = zip(*self._objects(number)) if self._objects(number) else ((), ())
            k = len(types)
            objects = {
                "type": list(types),
                "truncated": [0.0] * k, "occluded": [0] * k, "alpha": [0.0] * k,
                "bbox": [tfds.features.BBox(0.1, 0.1, 0.5, 0.5)] * k,
                "dimensions": [[1.0, 1.0, 1.0]] * k,
                "location": [[0.0, 0.0, z] for z in depths],
                "rotation_y": [0.0] * k,
            }
            yield f"{split}-{number}", {"image": png(offset + number), "image/file_name": f"{number:06d}.png",
                                        "objects": objects}

    def _objects(self, number: int) -> list[tuple[int, float]]:
        """(type, location z) of each object of example ``number``."""
        k = 0 if number % 5 == 0 else 1 + number % 4
        return [((number + j) % _KITTI_TYPES, float(number % 30) + 2.5 * j) for j in range(k)]


class TestCifar100(cifar.Cifar100, skip_registration=True):
    """CIFAR-100 3.0.2: ``label`` = example number mod 100; one test image can be made corrupt."""

    name = "cifar100"
    pkg_dir_path = _package(cifar)
    SIZES = {"train": 80, "test": 30}
    CORRUPT: tuple[str, int] | None = None

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}

    def _generate_examples(self, split, n):
        offset = 5000 if split == "train" else 6000
        for number in range(n):
            image = png(offset + number, size=32)
            if self.CORRUPT == (split, number):
                image = image[:40]  # a truncated PNG
            yield f"{split}-{number}", {"id": f"{split}_{number}", "image": image,
                                        "label": (number * 3) % 100, "coarse_label": number % 20}


# The sets below back the test of all 19 VTAB tasks: sizes just above what each task's
# carving needs (train800, val200 and the test inside the splits), tiny images.

_SPLIT_OFFSET = {"train": 0, "validation": 20000, "test": 40000, "extra": 60000}


class _Generated:
    """Examples from ``_example(split, number)`` for each split of ``SIZES``; the image seed
    is the split's offset plus the number, so bytes differ across splits too."""

    SIZES: dict[str, int] = {}

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}

    def _generate_examples(self, split, n):
        for number in range(n):
            yield f"{split}-{number}", self._example(split, number, _SPLIT_OFFSET[split] + number)


class _Labelled(_Generated):
    """A classification set: ``image``, ``label`` (cycling over the classes, shifted per split)
    and the one text feature ``TEXT`` the real builder names its file by."""

    TEXT = "file_name"
    IMAGE_SIZE = 4

    def _example(self, split, number, seed):
        num_classes = self.info.features["label"].num_classes
        return {"image": png(seed, size=self.IMAGE_SIZE), self.TEXT: f"{split}_{number}",
                "label": (number * 7 + len(split)) % num_classes}


class TestCaltech101(_Labelled, caltech101.Builder, skip_registration=True):
    name, pkg_dir_path, TEXT = "caltech101", _package(caltech101), "image/file_name"
    SIZES = {"train": 2010, "test": 30}


class TestDtd(_Labelled, dtd.Dtd, skip_registration=True):
    name, pkg_dir_path = "dtd", _package(dtd)
    SIZES = {"train": 810, "validation": 210, "test": 30}


class TestFlowers102(_Labelled, flowers.Builder, skip_registration=True):
    name, pkg_dir_path = "oxford_flowers102", _package(flowers)
    SIZES = {"train": 810, "validation": 210, "test": 30}


class TestPets(_Labelled, pets.Builder, skip_registration=True):
    """Oxford-IIIT Pet at VTAB's 3.x (TFDS 4.9 generates 4.0.0 only; VTAB reads none of
    the features 4.0.0 added)."""

    name, pkg_dir_path = "oxford_iiit_pet", _package(pets)
    VERSION = tfds.core.Version("3.2.0")
    SUPPORTED_VERSIONS: list = []
    RELEASE_NOTES: dict = {}
    SIZES = {"train": 1010, "test": 30}

    def _example(self, split, number, seed):
        example = super()._example(split, number, seed)
        return {**example, "species": number % 2, "segmentation_mask": png(seed, size=4, channels=1),
                "head_bbox": tfds.features.BBox(0.1, 0.1, 0.5, 0.5)}


class TestSun397(_Labelled, sun397.Builder, skip_registration=True):
    """SUN397 in its ``tfds`` config (``prepare(..., config="tfds")``)."""

    name, pkg_dir_path = "sun397", _package(sun397)
    SIZES = {"train": 810, "validation": 210, "test": 30}


class TestSvhn(_Labelled, svhn.Builder, skip_registration=True):
    name, pkg_dir_path, TEXT = "svhn_cropped", _package(svhn), "id"
    SIZES = {"train": 2010, "test": 30, "extra": 20}


class TestCamelyon(_Labelled, camelyon.Builder, skip_registration=True):
    name, pkg_dir_path, TEXT = "patch_camelyon", _package(camelyon), "id"
    SIZES = {"train": 810, "validation": 210, "test": 30}


class TestEurosat(_Labelled, eurosat.Eurosat, skip_registration=True):
    """EuroSAT in its ``rgb`` config: one TFDS split, carved 60/20/20 by VTAB."""

    name, pkg_dir_path, TEXT = "eurosat", _package(eurosat), "filename"
    SIZES = {"train": 1340}


class TestResisc45(_Labelled, resisc45.Builder, skip_registration=True):
    name, pkg_dir_path, TEXT = "resisc45", _package(resisc45), "filename"
    SIZES = {"train": 1340}


class TestRetinopathy(_Labelled, retinopathy.DiabeticRetinopathyDetection, skip_registration=True):
    """Diabetic retinopathy in its ``btgraham-300`` config (the real builder would preprocess
    the raw fundus images; these are written as they would come out)."""

    name, pkg_dir_path, TEXT = "diabetic_retinopathy_detection", _package(retinopathy), "name"
    SIZES = {"train": 810, "validation": 210, "test": 30}


class TestDmlab(_Labelled, dmlab.Dmlab, skip_registration=True):
    name, pkg_dir_path, TEXT = "dmlab", _package(dmlab), "filename"
    SIZES = {"train": 810, "validation": 210, "test": 30}


class TestSmallnorb(_Generated, smallnorb.Builder, skip_registration=True):
    """smallNORB 2.0.0: grey pairs; azimuth and elevation cycle through their classes."""

    name, pkg_dir_path = "smallnorb", _package(smallnorb)
    SIZES = {"train": 810, "test": 420}

    def _example(self, split, number, seed):
        return {"image": png(seed, size=4, channels=1), "image2": png(seed + 1, size=4, channels=1),
                "instance": number % 10, "label_category": number % 5, "label_lighting": number % 6,
                "label_azimuth": (number * 5 + len(split)) % 18, "label_elevation": (number * 2) % 9}


class TestClevrEdges(TestClevr, skip_registration=True):
    """CLEVR whose closest depths cycle over every distance bin edge and points between."""

    name, pkg_dir_path = "clevr", _package(clevr)
    SIZES = {"train": 2010, "validation": 40}
    CLOSEST = (0.5, 7.9, 8.0, 8.25, 8.5, 8.75, 9.0, 9.25, 9.5, 9.75, 10.0, 12.0, 100.0)

    def _closest(self, split, number):
        return self.CLOSEST[(number + len(split)) % len(self.CLOSEST)]


class TestKittiEdges(TestKitti, skip_registration=True):
    """KITTI whose closest vehicle sits on every bin edge and between, behind a nearer
    non-vehicle; every tenth frame has no object, every tenth only non-vehicles."""

    name, pkg_dir_path = "kitti", _package(kitti)
    SIZES = {"train": 810, "validation": 210, "test": 30}
    DEPTHS = (1.0, 8.0, 8.5, 20.0, 30.0, 999.0, 1000.0, 1500.0)

    def _objects(self, number):
        cycle = number % 10
        if cycle == 8:
            return []
        if cycle == 9:
            return [(3, 0.5), (7, 2.0)]
        z = self.DEPTHS[cycle]
        return [(4, 0.5), (cycle % 3, z), ((cycle + 1) % 3, z + 3.0)]


def prepare(builder_cls: type, data_dir: Path, shards: int = SHARDS, config: str | None = None,
            **attributes: Any) -> Path:
    """Write ``builder_cls``'s dataset under ``data_dir`` (in builder config ``config``; class
    attributes overridden by ``attributes``, e.g. ``SIZES``); returns the version directory."""
    if attributes:  # TFDS names a subclass after itself unless told
        namespace = {"name": builder_cls.name, "pkg_dir_path": builder_cls.pkg_dir_path, **attributes}
        cls = type(builder_cls.__name__, (builder_cls,), namespace, skip_registration=True)
    else:
        cls = builder_cls
    builder = cls(data_dir=os.fspath(data_dir), **({"config": config} if config else {}))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=shards))
    return Path(builder.data_dir)


def set_num_classes(version_dir: Path, feature: str, num_classes: int) -> None:
    """Rewrite the class count of a top-level ClassLabel in ``features.json`` (to make labels
    fall outside it without TFDS's writer refusing them)."""
    path = version_dir / "features.json"
    data = json.loads(path.read_text())
    spec = data["featuresDict"]["features"][feature]["classLabel"]
    spec["numClasses"] = str(num_classes)
    path.write_text(json.dumps(data))
    labels = version_dir / f"{feature}.labels.txt"
    if labels.exists():
        labels.unlink()


def _builder(version_dir: Path) -> Any:
    return tfds.builder_from_directory(os.fspath(version_dir))


def slice_example(version_dir: Path, split: str, index: int) -> dict[str, Any]:
    """Example ``index`` of ``split`` read the way VTAB reads it: a one-example TFDS slice."""
    return slice_examples(version_dir, split, [index])[0]


def slice_examples(version_dir: Path, split: str, indices: list[int]) -> list[dict[str, Any]]:
    """One-example slices ``split[i:i+1]`` for each index, joined with ``+`` into one TFDS spec
    (TFDS resolves each part to its shard file and offset; one read pipeline for all)."""
    spec = "+".join(f"{split}[{i}:{i + 1}]" for i in indices)
    dataset = _builder(version_dir).as_dataset(split=spec, decoders={"image": tfds.decode.SkipDecoding()})
    examples = list(tfds.as_numpy(dataset))
    assert len(examples) == len(indices)
    return examples


def default_order(version_dir: Path, split: str) -> list[bytes]:
    """Image bytes of ``split`` in TFDS's default read order (interleaved shards)."""
    dataset = _builder(version_dir).as_dataset(split=split, shuffle_files=False,
                                               decoders={"image": tfds.decode.SkipDecoding()})
    return [bytes(example["image"]) for example in tfds.as_numpy(dataset)]


_PREPARED: dict[str, Path] = {}


def shared_tfds_dir(tmp_path_factory: Any) -> Path:
    """One TFDS data directory per test process holding clevr, dsprites, kitti and cifar100
    (prepared once: the pack and CLI tests share it and must not modify it)."""
    if "shared" not in _PREPARED:
        root = tmp_path_factory.mktemp("tfds")
        for builder_cls in (TestClevr, TestDsprites, TestKitti, TestCifar100):
            prepare(builder_cls, root)
        _PREPARED["shared"] = root
    return _PREPARED["shared"]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory: Any) -> Path:
    """The shared TFDS data directory (import this fixture into a test module to use it)."""
    return shared_tfds_dir(tmp_path_factory)
