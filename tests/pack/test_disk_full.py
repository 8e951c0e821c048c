"""A pack that fills its disk ends with one line naming the output and the space it needs, and leaves nothing.

The disk is a real 1 MiB tmpfs where the tests may mount one (as root in CI): what
matters most is LMDB's own behaviour on a full disk (a short write reported as
``Input/output error``). Where mounting is not permitted, the same pack runs with a
fault injected under it instead: its LMDB write transactions fail with ENOSPC once
about 1 MB was put, as LMDB reports a full disk when the error comes at commit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, generate_fixture


# Run as `python -c`: LMDB write transactions fail as on a full disk once ~1 MB was put.
_FULL_AFTER_1MB = """
import errno, os, runpy, sys
import lmdb

LIMIT, put = 1 << 20, [0]

class Txn:
    def __init__(self, txn):
        self._txn = txn
    def put(self, key, value, *args, **kwargs):
        put[0] += len(value)
        if put[0] > LIMIT:
            raise lmdb.Error("mdb_put: " + os.strerror(errno.ENOSPC))
        return self._txn.put(key, value, *args, **kwargs)
    def commit(self):
        if put[0] > LIMIT:
            raise lmdb.Error("mdb_txn_commit: " + os.strerror(errno.ENOSPC))
        return self._txn.commit()
    def __getattr__(self, name):
        return getattr(self._txn, name)

class Env:
    def __init__(self, env):
        self._env = env
    def begin(self, *args, **kwargs):
        txn = self._env.begin(*args, **kwargs)
        return Txn(txn) if kwargs.get("write") else txn
    def __getattr__(self, name):
        return getattr(self._env, name)

real_open = lmdb.open
lmdb.open = lambda *args, **kwargs: Env(real_open(*args, **kwargs))
sys.argv = ["sampler-server", *sys.argv[1:]]
runpy.run_module("sampler_server", run_name="__main__")
"""


@pytest.fixture
def small_disk(tmp_path):
    """(directory, command prefix): a 1 MiB tmpfs and plain python, or else a temp dir
    and python with the fault injected."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    mounted = subprocess.run(  # SAMPLER_TESTS_NO_TMPFS=1 takes the fault-injected path where mounting works
        ["true" if os.environ.get("SAMPLER_TESTS_NO_TMPFS") else "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
         str(mount_point)], capture_output=True, text=True,
    )
    if mounted.returncode != 0 or os.environ.get("SAMPLER_TESTS_NO_TMPFS"):
        yield mount_point, [sys.executable, "-c", _FULL_AFTER_1MB]
        return
    try:
        yield mount_point, [sys.executable, "-m", "sampler_server"]
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_disk_full_gives_one_line_and_leaves_nothing(tmp_path, small_disk, workers):
    fixture = generate_fixture("image_folder", tmp_path, num_classes=10, images_per_class=30)  # ~2.3 MB
    disk, command = small_disk
    output = disk / "data"
    result = subprocess.run(
        [*command, "pack", "image_folder", "--input", str(fixture.input_dir),
         "--output", str(output), "--workers", str(workers), "--quiet"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning: ")]  # the plan's
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert str(output / "image_folder") in line
    assert "disk full" in line and "free" in line and "needs about" in line, line
    assert list(output.iterdir()) == [], "a failed pack leaves nothing behind"
    assert not any(disk.rglob("*.partial"))
