"""The CoG fixture's IN-21K layout (the ``cog_counts`` concepts as tars of small JPEGs), written
once per test run by the first file that asks and read, never written, by every file that packs
it (conftest's ``built_once``): its 3,665 generated JPEGs cost 5 CPU-s, the packing of them is
what those files test."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import built_once

from sampler_server.fixtures.cog_counts import cog_counts
from sampler_server.fixtures.imagenet21k import write_imagenet21k


def _write(folder: Path) -> None:
    assert write_imagenet21k(folder, cog_counts(), sides=(16, 40), workers=1).input_dir == folder


def cog_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout's folder (INPUT/<wnid>.tar), shared: pack it, do not change it."""
    return built_once(tmp_path_factory.getbasetemp(), "cog-in21k", _write)
