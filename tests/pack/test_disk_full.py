"""A pack that fills its disk ends with one line naming the output and the space it needs, and leaves nothing.

The disk is a real 1 MiB tmpfs (the tests run as root in CI); where mounting is not
permitted the test is skipped rather than faked, since what matters is LMDB's own
behaviour on a full disk (a short write reported as ``Input/output error``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, generate_fixture


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_disk_full_gives_one_line_and_leaves_nothing(tmp_path, small_disk, workers):
    fixture = generate_fixture("image_folder", tmp_path, num_classes=10, images_per_class=30)  # ~2.3 MB
    output = small_disk / "data"
    result = subprocess.run(
        [sys.executable, "-m", "sampler_server", "pack", "image_folder", "--input", str(fixture.input_dir),
         "--output", str(output), "--workers", str(workers), "--quiet"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert str(output / "image_folder") in line
    assert "disk full" in line and "free" in line and "needs about" in line, line
    assert list(output.iterdir()) == [], "a failed pack leaves nothing behind"
    assert not any(small_disk.rglob("*.partial"))
