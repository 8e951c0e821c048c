"""A pack killed with SIGKILL halfway leaves no servable store; rerunning succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT, generate_fixture

from sampler_server.errors import NotFound
from sampler_server.store.manifest import load_manifest
from sampler_server.store.reader import StoreReader, find_stores


@pytest.mark.slow
def test_sigkill_midway_leaves_nothing_servable_and_rerun_succeeds(tmp_path):
    fixture = generate_fixture("image_folder", tmp_path, num_classes=30, images_per_class=40)
    output = tmp_path / "store"
    command = [
        sys.executable, "-m", "sampler_server", "pack", "image_folder",
        "--input", str(fixture.input_dir), "--output", str(output),
        "--max-side", "24", "--workers", "1", "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial_data = output / ".image_folder.partial" / "data.mdb"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if partial_data.exists() and partial_data.stat().st_size > 64 * 1024:
            break
        assert process.poll() is None, "pack finished before it could be killed; make the fixture larger"
        time.sleep(0.01)
    else:
        pytest.fail("the pack never started writing")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL

    assert find_stores(output) == []
    with pytest.raises(NotFound):
        load_manifest(output / "image_folder")
    assert not (output / "image_folder").exists()

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert find_stores(output) == [output / "image_folder"]
    reader = StoreReader(output / "image_folder")
    assert reader.num_records == fixture.num_images
    assert sorted(p.name for p in output.iterdir()) == ["image_folder"]
