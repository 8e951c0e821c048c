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
from tensorflow_datasets.image_classification import cifar  # noqa: E402

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
            z = [round(7.55 + 0.05 * number + 0.5 * j + (0.0125 if offset else 0.0), 4) for j in range(k)][::-1]
            objects = {
                "color": [j % 8 for j in range(k)], "material": [0] * k, "shape": [j % 3 for j in range(k)],
                "size": [1] * k, "rotation": [0.0] * k, "3d_coords": [[0.0, 0.0, 0.0]] * k,
                "pixel_coords": [[1.0, 2.0, value] for value in z],
            }
            yield f"{split}-{number}", {
                "image": png(offset + number), "file_name": f"{split}_{number}.png", "objects": objects,
                "question_answer": {"question": [], "answer": []},
            }


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
            k = 0 if number % 5 == 0 else 1 + number % 4
            objects = {
                "type": [(number + j) % _KITTI_TYPES for j in range(k)],
                "truncated": [0.0] * k, "occluded": [0] * k, "alpha": [0.0] * k,
                "bbox": [tfds.features.BBox(0.1, 0.1, 0.5, 0.5)] * k,
                "dimensions": [[1.0, 1.0, 1.0]] * k,
                "location": [[0.0, 0.0, float(number % 30) + 2.5 * j] for j in range(k)],
                "rotation_y": [0.0] * k,
            }
            yield f"{split}-{number}", {"image": png(offset + number), "image/file_name": f"{number:06d}.png",
                                        "objects": objects}


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


def prepare(builder_cls: type, data_dir: Path, shards: int = SHARDS, **attributes: Any) -> Path:
    """Write ``builder_cls``'s dataset under ``data_dir`` (class attributes overridden by
    ``attributes``, e.g. ``SIZES``); returns the version directory."""
    if attributes:  # TFDS names a subclass after itself unless told
        namespace = {"name": builder_cls.name, "pkg_dir_path": builder_cls.pkg_dir_path, **attributes}
        cls = type(builder_cls.__name__, (builder_cls,), namespace, skip_registration=True)
    else:
        cls = builder_cls
    builder = cls(data_dir=os.fspath(data_dir))
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
