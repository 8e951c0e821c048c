"""The ImageNet-CoG levels' IN-21K store, written and packed once per test process.

``test_evaluate`` and ``test_cog_eval_served`` serve the same test-built IN-21K layout (the
``cog_counts`` concepts, scaled-down levels, images of sides 16..40, packed by ``pack
imagenet21k``): the first of them in a process writes and packs it (7 s of CPU) under the
session's base temporary folder, and each copies the packed stores into its own data
folder (a store is read-only once packed: its copy is the same store).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import pytest


@functools.cache
def _packed(base: Path) -> Path:
    from sampler_server.cli.main import main as server_cli
    from sampler_server.fixtures.cog_counts import cog_counts
    from sampler_server.fixtures.imagenet21k import write_imagenet21k

    root = Path(tempfile.mkdtemp(prefix="in21k-", dir=base))  # a failed attempt leaves no half-packed store behind
    write_imagenet21k(root / "in21k", cog_counts(), sides=(16, 40), workers=2)
    assert server_cli(["pack", "imagenet21k", "--input", str(root / "in21k"), "--output", str(root / "data"), "--quiet",
                       "--workers", "2"]) == 0
    return root / "data"


def copy_in21k_stores(tmp_path_factory: pytest.TempPathFactory, data: Path) -> None:
    """The packed IN-21K stores copied into ``data`` (a server's data folder)."""
    stores = [path for path in sorted(_packed(tmp_path_factory.getbasetemp()).iterdir()) if path.is_dir()]
    assert stores, "pack imagenet21k wrote no store"
    for store in stores:
        shutil.copytree(store, data / store.name)
