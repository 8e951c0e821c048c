"""The image's install and entry point, run here without a container daemon.

The Dockerfile's build stage is replayed in a temp dir: its COPY lines copy the same
files, its RUN commands run with /src, /wheels and /opt/venv mapped into the temp dir
and two offline changes (``--no-build-isolation`` for the wheel, ``--no-index`` plus a
wheelhouse packed from this virtualenv for the install, see ``wheelhouse``) and one
that saves time only (``--no-compile``: what is checked is which distributions land and
what they run, not their ``.pyc``; the image runs with PYTHONDONTWRITEBYTECODE). Then the
runtime stage's ENV and ENTRYPOINT start ``serve`` from that fresh venv over a tiny
store mounted read-only (a read-only bind mount in a private mount namespace when run
as root, as ``docker run -v STORES:/data:ro`` does; file modes otherwise), with the
HEALTHCHECK command asking it for health, an episode streamed from it, and SIGTERM.

What the image installs is ``sampler-server[server]``. Until pyproject.toml defines the
``server`` extra, pip installs the base dependencies (today the server's) with a
warning; the test reads pyproject.toml and checks whichever applies.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import generate_fixture, pack_fixture
from deploy_files import REPO, copy_arguments, dockerfile_stages
from packaging.requirements import Requirement
from wheelhouse import canonical, closure, repack, wheel_requirements

from clients.core import EpisodeSpec, SamplerClient

pytestmark = pytest.mark.slow

FRAMEWORKS = {"torch", "torchvision", "tensorflow", "tensorflow-cpu", "tensorflow-datasets"}


class Image:
    """Image paths mapped into a temp dir: /opt/venv is ROOT/opt/venv, and so on."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def word(self, word: str) -> str:
        """A command word with any absolute image path mapped."""
        return str(self.path(word)) if word.startswith("/") else word


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    # not pytest's tmp_path: the server runs in its own mount namespace, and a temp dir
    # of its own is simpler to bind read-only
    root = Path(tempfile.mkdtemp(prefix="sampler-image-"))
    os.chmod(root, 0o755)
    try:
        yield Image(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _offline(argv: list[str], wheelhouse: Path) -> list[str]:
    """The RUN command with what only an index would give replaced by local files (the
    wheelhouse only: ``--isolated`` from this machine's pip configuration), and no bytecode
    compiled at install."""
    if argv[:4] == [sys.executable, "-m", "pip", "wheel"]:
        return argv + ["--no-build-isolation"]  # setuptools and wheel from this venv
    if argv[0].endswith("/pip") and argv[1] == "install":
        return argv + ["--isolated", "--no-compile", "--no-index", "--find-links", str(wheelhouse)]
    return argv


@pytest.fixture(scope="module")
def installed(image: Image) -> Path:
    """The build stage replayed; returns the fresh venv (the image's /opt/venv)."""
    stage = dockerfile_stages()["build"]
    env = {**os.environ, **stage.env()}
    env.pop("PYTHONPATH", None)
    workdir: Path | None = None
    wheelhouse = image.path("/wheelhouse")
    wheelhouse.mkdir()
    for name, arguments in stage.instructions:
        if name == "WORKDIR":
            workdir = image.path(arguments)
            workdir.mkdir(parents=True, exist_ok=True)
        elif name == "COPY":
            _, sources, destination = copy_arguments(arguments)
            target = workdir / destination
            for source in sources:
                origin = REPO / source
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(origin, target / origin.name)
        elif name == "RUN":
            for command in arguments.split("&&"):
                argv = [image.word(w) for w in shlex.split(command)]
                if argv[0] == "python":
                    argv[0] = sys.executable
                if argv[0].endswith("/pip") and argv[1] == "install":
                    _fill_wheelhouse(image.path("/wheels"), wheelhouse)
                argv = _offline(argv, wheelhouse)
                done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
                assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return image.path("/opt/venv")


def _fill_wheelhouse(wheels: Path, wheelhouse: Path) -> None:
    """Wheels of every distribution our wheel needs with [server], from this venv."""
    ours = next(wheels.glob("sampler_server-*.whl"))
    for distribution in closure(wheel_requirements(ours, ["server"])).values():
        repack(distribution, wheelhouse)


def _expected_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extra = project.get("optional-dependencies", {}).get("server", [])
    return [Requirement(text) for text in [*project["dependencies"], *extra]]


def test_the_image_installs_the_server_extra_and_no_framework(installed: Path) -> None:
    listing = subprocess.run([str(installed / "bin" / "python"), "-m", "pip", "list", "--format", "freeze"],
                             capture_output=True, text=True, check=True).stdout
    versions = {canonical(line.split("==")[0]): line.split("==")[1] for line in listing.splitlines() if "==" in line}
    for requirement in _expected_requirements():
        assert canonical(requirement.name) in versions, f"{requirement} is not installed"
        assert requirement.specifier.contains(versions[canonical(requirement.name)]), requirement
    assert not FRAMEWORKS & set(versions), sorted(FRAMEWORKS & set(versions))
    # the package itself comes from the wheel, not from this checkout
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import sampler_server; print(sampler_server.__file__)"],
                           capture_output=True, text=True, check=True, cwd=installed).stdout.strip()
    assert Path(where).is_relative_to(installed), where


def _runtime_env(image: Image, **overrides: str) -> dict[str, str]:
    """The runtime stage's ENV with image paths mapped, as the container would see it."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    for key, value in dockerfile_stages()["runtime"].env().items():
        if key == "PATH":
            env[key] = ":".join(env["PATH"] if part == "$PATH" else image.word(part) for part in value.split(":"))
        else:
            env[key] = image.word(value)
    env.update(overrides)
    return env


def _exec_form(arguments: str) -> list[str]:
    import json

    return json.loads(arguments.removeprefix("CMD").strip())


def _read_only(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` with ``directory`` bound read-only in a private mount namespace (root), or as is."""
    if os.geteuid() != 0:
        for path in [directory, *directory.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        return argv
    probe = subprocess.run(["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0"',
                            str(directory)], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"cannot bind {directory} read-only in a mount namespace: {probe.stderr.strip()}")
    return ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"',
            str(directory), *argv]


def test_the_entry_point_serves_read_only_stores_from_the_environment(image: Image, installed: Path) -> None:
    runtime = dockerfile_stages()["runtime"]
    for flags, sources, destination in map(copy_arguments, runtime.all("COPY")):
        if "from" not in flags:  # the venv itself is already in place
            image.path(destination).mkdir(parents=True, exist_ok=True)
            for source in sources:
                shutil.copy(REPO / source, image.path(destination))
    env = _runtime_env(image, SAMPLER_HOST="127.0.0.1", SAMPLER_PORT="0", SAMPLER_WORKERS="1")
    data, metrics = Path(env["SAMPLER_DATA"]), Path(env["SAMPLER_METRICS"])
    fixture = generate_fixture("image_folder", image.path("/fixture"), num_classes=24, images_per_class=6)
    pack_fixture(fixture, data, name="folder")
    metrics.parent.mkdir(parents=True, exist_ok=True)
    before = sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in data.rglob("*"))

    entrypoint = [shutil.which(w, path=env["PATH"]) if i == 0 else image.word(w)
                  for i, w in enumerate(_exec_form(runtime.all("ENTRYPOINT")[0]))]
    assert entrypoint[0] and Path(entrypoint[0]).is_relative_to(installed), entrypoint
    health = [shutil.which(w, path=env["PATH"]) if i == 0 else image.word(w)
              for i, w in enumerate(_exec_form(runtime.all("HEALTHCHECK")[0].split("CMD", 1)[1]))]
    process = subprocess.Popen(_read_only(data, entrypoint), env=env, cwd=image.root,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), f"{line}{process.stderr.read() if process.poll() is not None else ''}"
        address = line.split()[2]
        port = address.rsplit(":", 1)[1]

        checked = subprocess.run(health, env={**env, "SAMPLER_PORT": port}, capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0 and "SERVING" in checked.stdout, checked

        spec = EpisodeSpec(sources=("folder",), split="train", seed=3, image_size=32)
        with SamplerClient(address) as client:
            episode = next(iter(client.episodes(spec, count=1)))
        assert episode.support_images.shape[1:] == (32, 32, 3) and len(episode.query_images) > 0
        assert metrics.exists(), "SAMPLER_METRICS names where metric reports go"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, errors = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors = process.communicate()
    assert process.returncode == 0, errors[-3000:]
    assert "entrypoint: serve --data" in errors and "--workers 1" in errors
    assert sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in data.rglob("*")) == before
    after = subprocess.run(health, env={**env, "SAMPLER_PORT": port}, capture_output=True, text=True, timeout=30)
    assert after.returncode == 1 and "UNAVAILABLE" in after.stderr, after


def test_a_bad_variable_stops_the_entry_point_with_one_line(image: Image, installed: Path) -> None:
    runtime = dockerfile_stages()["runtime"]
    script = image.path("/opt/sampler/entrypoint.py")
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "deploy" / "entrypoint.py", script)
    env = _runtime_env(image, SAMPLER_WORKERS="many")
    done = subprocess.run([str(installed / "bin" / "python"), str(script)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sampler-server entrypoint: error: SAMPLER_WORKERS: got 'many', expected an integer (serve --workers)"]
    assert runtime.all("USER") and runtime.all("USER")[-1].split(":")[0] not in ("0", "root")
