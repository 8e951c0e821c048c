"""The import direction that lets a client install alone: ``clients`` and ``sampler_common`` import
nothing of ``sampler_server`` (at any level of any module, function-local imports included),
``sampler_common`` nothing of ``clients``, and ``sampler_server`` nothing of ``clients``; the base
install (grpcio, protobuf, NumPy) holds every third-party module ``clients.core`` and
``sampler_common`` load; and ``pyproject.toml`` keeps the server's dependencies in ``[server]``."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from python_source import parse_file

REPO = Path(__file__).resolve().parents[1]
SERVER_ONLY = {"lmdb", "opencv-python-headless", "scipy", "networkx", "pillow", "simplejpeg", "matplotlib", "tqdm",
               "grpcio-observability", "opentelemetry-sdk", "opentelemetry-exporter-prometheus", "prometheus-client"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level dotted name) of every import statement in ``path``, nested ones included."""
    out = []
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        for line, name in _imports(path):
            if name.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    return found


@pytest.mark.parametrize(("package", "forbidden"), [
    ("clients", ("sampler_server",)),
    ("sampler_common", ("sampler_server", "clients")),
    ("sampler_server", ("clients",)),
])
def test_the_import_direction(package, forbidden):
    assert _violations(package, forbidden) == []


def test_the_checker_sees_a_nested_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from sampler_server.errors import SamplerError\n    import clients.core\n")
    assert _imports(module) == [(2, "sampler_server.errors"), (3, "clients.core")]


def test_the_client_core_loads_only_base_dependencies():
    """What ``clients.core`` and the wire load in a fresh interpreter: no module of the server
    package and none of the ``[server]`` extra (grpc itself tries grpc_health and
    grpc_reflection where they are installed, and goes on without them)."""
    code = ("import sys, clients.core, clients.reporting, sampler_common.wire.tensors, sampler_common.intervals\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('sampler_server', 'lmdb', 'cv2', 'scipy',"
            " 'networkx', 'PIL', 'simplejpeg', 'matplotlib', 'tqdm', 'grpc_observability', 'opentelemetry',"
            " 'prometheus_client'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_server_dependencies_are_an_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {r.split("==")[0].split("[")[0].strip().lower() for r in requirements}

    base = names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert base == {"grpcio", "protobuf", "numpy"}
    assert SERVER_ONLY <= names(extras["server"])
    assert not SERVER_ONLY & names(extras["torch"]) and not SERVER_ONLY & names(extras["tf"])
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert "sampler_common*" in packages["include"]
