"""A pack killed with SIGKILL halfway leaves no servable store; rerunning succeeds."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import process_tree
import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture

from sampler_server.errors import FailedPrecondition, NotFound
from sampler_server.fixtures.base import Fixture
from sampler_server.store.manifest import load_manifest
from sampler_server.store.reader import StoreReader, find_stores


@pytest.fixture(scope="module")
def sixty_classes(tmp_path_factory) -> Fixture:
    """60 classes of 40 images, generated once: drawing them is most of this file's CPU."""
    return generate_fixture("image_folder", tmp_path_factory.mktemp("kill"), num_classes=60, images_per_class=40)


def _first_classes(fixture: Fixture, num_classes: int, tmp_path: Path) -> Fixture:
    """The fixture of its first ``num_classes`` classes, hard-linked into ``tmp_path``: the
    generator draws each class from its name alone, so these are the files (and the folder
    layout) that generating ``num_classes`` classes writes."""
    names = sorted(fixture.class_images)[:num_classes]
    root = tmp_path / "original" / fixture.input_dir.name
    for name in names:
        (root / name).mkdir(parents=True)
        for path in (fixture.input_dir / name).iterdir():
            os.link(path, root / name / path.name)
    counts = {name: fixture.class_images[name] for name in names}
    return dataclasses.replace(fixture, input_dir=root, class_images=counts, class_splits=None, split_file=None)


def _kill_pack_midway(tmp_path: Path, fixture: Fixture, workers: int) -> tuple[list[str], dict, set[int]]:
    """Start ``pack`` of ``fixture`` in a process, SIGKILL it once it has written some data
    (and its ``workers`` pool processes are up); (command, env, worker pids seen)."""
    output = tmp_path / "store"
    command = [
        sys.executable, "-m", "sampler_server", "pack", "image_folder",
        "--input", str(fixture.input_dir), "--output", str(output),
        "--max-side", "24", "--workers", str(workers), "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial_data = output / ".image_folder.partial" / "data.mdb"
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while time.monotonic() < deadline:
        seen |= process_tree.children(process.pid)
        enough_workers = workers < 2 or len(seen) >= workers
        if partial_data.exists() and partial_data.stat().st_size > 64 * 1024 and enough_workers:
            break
        assert process.poll() is None, "pack finished before it could be killed; make the fixture larger"
        time.sleep(0.01)
    else:
        pytest.fail(f"the pack never started writing (children seen: {seen})")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    return command, env, seen


@pytest.mark.slow
def test_sigkill_midway_leaves_nothing_servable_and_rerun_succeeds(tmp_path, sixty_classes):
    fixture = _first_classes(sixty_classes, 30, tmp_path)
    command, env, _ = _kill_pack_midway(tmp_path, fixture, workers=1)
    output = tmp_path / "store"

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


@pytest.mark.slow
def test_sigkill_with_workers_leaves_no_orphans_and_rerun_succeeds_at_once(tmp_path, sixty_classes):
    """Pool workers die with a SIGKILLed pack and never hold its lock, so the rerun is not refused."""
    fixture = sixty_classes
    command, env, workers = _kill_pack_midway(tmp_path, fixture, workers=2)
    output = tmp_path / "store"

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert find_stores(output) == [output / "image_folder"]
    assert StoreReader(output / "image_folder").num_records == fixture.num_images
    left = process_tree.wait_gone(workers, timeout=5)
    assert not left, f"workers outlived the killed pack: {process_tree.describe(left)}"


def test_a_refused_rerun_leaves_the_running_packs_partial_store_alone(tmp_path):
    """While another pack holds the lock, a second one is refused in one line and removes nothing of it."""
    fixture = generate_fixture("image_folder", tmp_path, num_classes=3, images_per_class=4)
    output = tmp_path / "store"
    partial = output / ".image_folder.partial"
    partial.mkdir(parents=True)
    (partial / "data.mdb").write_bytes(b"being written")
    with open(output / ".image_folder.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running pack holds
        with pytest.raises(FailedPrecondition, match="another pack is writing this store right now"):
            pack_fixture(fixture, output, workers=2)
    assert (partial / "data.mdb").read_bytes() == b"being written"
