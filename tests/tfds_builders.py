"""Test helpers over the prepared TFDS datasets of ``sampler_server.fixtures.tfds`` (the
builders live there, shared with the demo): reading examples back the way VTAB slices
them, breaking a dataset's metadata, and one shared data directory per test process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sampler_server.fixtures.tfds import (  # noqa: F401  (re-exported: tests use tb.<name>)
    SHARDS, TestCaltech101, TestCamelyon, TestCifar100, TestClevr, TestClevrEdges, TestDmlab, TestDsprites,
    TestDtd, TestEurosat, TestFlowers102, TestKitti, TestKittiEdges, TestPets, TestResisc45, TestRetinopathy,
    TestSmallnorb, TestSun397, TestSvhn, png, prepare, tfds,
)


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
