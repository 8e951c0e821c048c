"""The README's two installs, from a clone of this checkout (its tracked and unignored files):
``python -m build`` then ``pip install 'dist/sampler_server-*.whl[torch]'`` (a client-only wheel),
and ``pip install -e '.[torch]'``. The wheel goes into a fresh virtualenv, offline (from wheels
packed back out of this one); once it is checked, the editable install replaces it there (one
copy of PyTorch written, not two: 750 MB). Each brings no LMDB, OpenCV or SciPy, nor any other
module of the ``[server]`` extra (the wheelhouse holds none: pip would fail to find one asked
for), and its torch adapter streams from a server installed separately (this checkout's),
episode for episode what this environment's client gets. The wheel without extras asks for the
client's dependencies only (grpcio, protobuf, NumPy).

Nothing is downloaded: ``python -m build --no-isolation`` builds with this environment's
setuptools (the ``build`` package is in the ``dev`` extra), and the editable install builds in
the fresh virtualenv with ``--no-build-isolation`` from the setuptools and wheel installed there
first, from the same local wheels.

The fresh virtualenv has no pip of its own: this environment's pip installs into it and lists it
(``pip --python``), resolving what the wheel's metadata asks for all the same, and compiles no
bytecode (``--no-compile``): what is checked is which distributions land, not their ``.pyc``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from wheelhouse import canonical, closure, repack, wheel_requirements

from clients.core import EpisodeSpec

REPO = Path(__file__).resolve().parents[2]
SERVER_ONLY = {"lmdb", "opencv-python-headless", "scipy", "pillow", "simplejpeg", "matplotlib", "tqdm",
               "grpcio-health-checking", "grpcio-reflection", "grpcio-observability", "opentelemetry-sdk",
               "opentelemetry-exporter-prometheus", "prometheus-client"}
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


CLIENT_ONLY = {"grpcio", "protobuf", "numpy"}
BUILD_BACKEND = ("setuptools", "wheel")  # pyproject.toml's [build-system] requires


def _pip(target: Path) -> list[str]:
    """This environment's pip acting on the virtualenv ``target`` as its own pip would, with
    no configuration of this machine's (``--isolated``): a find-links folder set there would
    otherwise serve torch from its own compressed wheel, not the wheelhouse's."""
    return [sys.executable, "-m", "pip", "--isolated", "--python", str(target / "bin" / "python")]


def _install(target: Path, wheelhouse: Path, *arguments: str) -> None:
    """``pip install ARGUMENTS`` into ``target``, offline from ``wheelhouse``."""
    done = subprocess.run([*_pip(target), "install", "-q", "--no-compile", "--no-index", "--find-links",
                           str(wheelhouse), *arguments], capture_output=True, text=True, cwd=target.parent)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The checkout as a clone of it has it: tracked and unignored files, no build leftovers."""
    target = tmp_path_factory.mktemp("clone") / "sampler-server"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for relative in filter(None, listed):
        source = REPO / relative
        if source.is_file():  # a tracked file deleted in the work tree is not in a clone of it
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
    return target


@pytest.fixture(scope="module")
def built_wheel(clone, tmp_path_factory) -> Path:
    """``python -m build`` in the clone (an sdist, then the wheel built from the sdist)."""
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(clone)],
                          capture_output=True, text=True, cwd=clone)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert len(list(dist.glob("sampler_server-*.tar.gz"))) == 1
    (wheel,) = dist.glob("sampler_server-*-py3-none-any.whl")
    return wheel


@pytest.fixture(scope="module")
def wheelhouse(built_wheel, tmp_path_factory) -> Path:
    """This environment's copies of what ``[torch]`` and the build backend need, as wheels."""
    house = tmp_path_factory.mktemp("wheelhouse")
    needed = closure([*wheel_requirements(built_wheel, ["torch"]), *map(Requirement, BUILD_BACKEND)])
    assert not SERVER_ONLY & set(needed), sorted(SERVER_ONLY & set(needed))  # what pip will resolve
    for distribution in needed.values():
        repack(distribution, house)
    return house


def _listed(target: Path) -> set[str]:
    listing = subprocess.run([*_pip(target), "list", "--format", "json"],
                             capture_output=True, text=True, check=True).stdout
    return {canonical(row["name"]) for row in json.loads(listing)}


@pytest.fixture(scope="module")
def installs(built_wheel, clone, wheelhouse, served, tmp_path_factory) -> dict[str, dict]:
    """What each install gives, in one virtualenv: the wheel's (its distributions, its
    ``sampler-server serve``, its stream), then the editable install's over it."""
    target = tmp_path_factory.mktemp("client-install") / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    _install(target, wheelhouse, f"{built_wheel}[torch]")
    serve = subprocess.run([str(target / "bin" / "sampler-server"), "serve", "--data", "x"],
                           capture_output=True, text=True, cwd=target)
    wheel = {"installed": _listed(target), "serve": serve, "stream": _stream_in(target, served.address),
             "venv": target}
    _install(target, wheelhouse, *BUILD_BACKEND)
    _install(target, wheelhouse, "--no-build-isolation", "-e", f"{clone}[torch]")
    editable = {"installed": _listed(target), "stream": _stream_in(target, served.address)}
    return {"wheel": wheel, "editable": editable}


def _stream_in(target: Path, address: str) -> dict:
    """What ``STREAM`` prints when run by ``target``'s Python (with only its own packages:
    no PYTHONPATH of this process's)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([str(target / "bin" / "python"), "-c", STREAM, address],
                          capture_output=True, text=True, cwd=target, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _here(address: str) -> dict:
    """What this environment's client gets for ``STREAM``'s request."""
    from clients.torch import EpisodeDataset

    spec = EpisodeSpec(sources=("folder",), split="train", seed=11, image_size=24)
    items = list(EpisodeDataset(address, spec, start=2, count=3))
    return {"fingerprints": [item["fingerprint"] for item in items], "indices": [2, 3, 4],
            "sums": [int(i["support_images"].sum()) + int(i["query_images"].sum()) for i in items]}


def test_the_wheel_without_extras_asks_for_the_client_dependencies_only(built_wheel):
    asked = {canonical(requirement.name) for requirement in wheel_requirements(built_wheel, [])}
    assert asked == CLIENT_ONLY, sorted(asked)


@pytest.mark.slow
def test_the_torch_extra_installs_no_server_dependency(installs):
    installed = installs["wheel"]["installed"]
    assert {"sampler-server", "torch", "grpcio", "protobuf", "numpy"} <= installed
    assert not SERVER_ONLY & installed, sorted(SERVER_ONLY & installed)
    # the server's command is there (one set of scripts) and says in one line what it lacks
    done = installs["wheel"]["serve"]
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "sampler-server[server]" in done.stderr


@pytest.mark.slow
def test_the_alone_installed_torch_adapter_streams_from_a_separate_server(installs, served):
    got = installs["wheel"]["stream"]
    assert got["loaded"] == [] and Path(got["torch"]).is_relative_to(installs["wheel"]["venv"])  # the installed copy
    assert {key: got[key] for key in ("fingerprints", "indices", "sums")} == _here(served.address)


@pytest.mark.slow
def test_the_editable_install_from_a_clone_streams_from_a_separate_server(installs, clone, served):
    installed = installs["editable"]["installed"]
    assert {"sampler-server", "torch"} | CLIENT_ONLY <= installed
    assert not SERVER_ONLY & installed, sorted(SERVER_ONLY & installed)
    got = installs["editable"]["stream"]
    assert got["loaded"] == [] and Path(got["torch"]).is_relative_to(clone)  # the clone's files, editable
    assert {key: got[key] for key in ("fingerprints", "indices", "sums")} == _here(served.address)
