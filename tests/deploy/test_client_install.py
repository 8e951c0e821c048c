"""A client that installs alone: ``pip install .[torch]`` into a fresh virtualenv (offline, from
wheels packed back out of this one) brings no LMDB, OpenCV or SciPy, nor any other module of the
``[server]`` extra, and its torch adapter streams from a server installed separately (this
checkout's), episode for episode what this environment's client gets.

The fresh virtualenv has no pip of its own: this environment's pip installs into it and lists it
(``pip --python``), resolving what the wheel's metadata asks for all the same, and compiles no
bytecode (``--no-compile``): what is checked is which distributions land, not their ``.pyc``."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from wheelhouse import canonical, closure, repack, wheel_requirements

from clients.core import EpisodeSpec

REPO = Path(__file__).resolve().parents[2]
SERVER_ONLY = {"lmdb", "opencv-python-headless", "scipy", "pillow", "simplejpeg", "matplotlib", "tqdm",
               "grpcio-health-checking", "grpcio-reflection"}
STREAM = """
import json, sys
import clients.torch
from clients.core import EpisodeSpec
from clients.torch import EpisodeDataset
spec = EpisodeSpec(sources=("folder",), split="train", seed=11, image_size=24)
items = list(EpisodeDataset(sys.argv[1], spec, start=2, count=3))
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("sampler_server", "lmdb", "cv2", "scipy", "PIL"))
print(json.dumps({"fingerprints": [i["fingerprint"] for i in items], "indices": [int(i["index"]) for i in items],
                  "sums": [int(i["support_images"].sum()) + int(i["query_images"].sum()) for i in items],
                  "loaded": bad, "torch": clients.torch.__file__}))
"""


def _pip(target: Path) -> list[str]:
    """This environment's pip acting on the virtualenv ``target`` as its own pip would."""
    return [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python")]


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("client-install")
    wheels, wheelhouse = root / "ours", root / "wheelhouse"
    wheelhouse.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(REPO)], check=True, capture_output=True, cwd=root)
    ours = next(wheels.glob("sampler_server-*.whl"))
    needed = closure(wheel_requirements(ours, ["torch"]))
    assert not SERVER_ONLY & set(needed), sorted(SERVER_ONLY & set(needed))  # what pip will resolve
    for distribution in needed.values():
        repack(distribution, wheelhouse)
    target = root / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    done = subprocess.run([*_pip(target), "install", "-q", "--no-compile", "--no-index",
                           "--find-links", str(wheelhouse), f"{ours}[torch]"], capture_output=True, text=True,
                          cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


@pytest.mark.slow
def test_the_torch_extra_installs_no_server_dependency(client_venv):
    listing = subprocess.run([*_pip(client_venv), "list", "--format", "json"],
                             capture_output=True, text=True, check=True).stdout
    installed = {canonical(row["name"]) for row in json.loads(listing)}
    assert {"sampler-server", "torch", "grpcio", "protobuf", "numpy"} <= installed
    assert not SERVER_ONLY & installed, sorted(SERVER_ONLY & installed)
    # the server's command is there (one set of scripts) and says in one line what it lacks
    done = subprocess.run([str(client_venv / "bin" / "sampler-server"), "serve", "--data", "x"],
                          capture_output=True, text=True, cwd=client_venv)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "sampler-server[server]" in done.stderr


@pytest.mark.slow
def test_the_alone_installed_torch_adapter_streams_from_a_separate_server(client_venv, served):
    from clients.torch import EpisodeDataset

    done = subprocess.run([str(client_venv / "bin" / "python"), "-c", STREAM, served.address],
                          capture_output=True, text=True, cwd=client_venv, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [] and Path(got["torch"]).is_relative_to(client_venv)  # the installed copy
    spec = EpisodeSpec(sources=("folder",), split="train", seed=11, image_size=24)
    here = list(EpisodeDataset(served.address, spec, start=2, count=3))
    assert got["indices"] == [2, 3, 4]
    assert got["fingerprints"] == [item["fingerprint"] for item in here]
    assert got["sums"] == [int(i["support_images"].sum()) + int(i["query_images"].sum()) for i in here]
