"""The server's inner layers, held to the code: no import circle, no private name taken from
another module, and each layer importing only the ones below it.

The layers, bottom up: ``core`` (pure: no storage, no gRPC), ``store``, ``assembly`` and
``catalog`` (stores and replays, no gRPC), ``metrics``, ``service`` (gRPC), ``cli`` (the
console). Imports are read from the source (function-local ones included), so a circle
dodged by an import inside a function is still a circle.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest
from python_source import parse_file

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sampler_server", "clients", "sampler_common")
GENERATED = "sampler_common/wire/gen"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    names: tuple[str, ...]  # what ``from target import ...`` takes; () for ``import target``


def _modules(root: Path = REPO) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if GENERATED in path.relative_to(root).as_posix():
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import names: itself, or the nearest package above it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _edges(modules: dict[str, Path]) -> list[Edge]:
    edges = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (target := _known(alias.name, modules)) and target != module:
                        edges.append(Edge(module, target, node.lineno, ()))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule in modules:  # ``from package import module``
                        if submodule != module:
                            edges.append(Edge(module, submodule, node.lineno, ()))
                    elif (target := _known(base, modules)) and target != module:
                        edges.append(Edge(module, target, node.lineno, (alias.name,)))
    return edges


def _private_uses(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    """``from m import _x`` and ``m._x`` (m an imported project module) in another module."""
    found = []
    for module, path in modules.items():
        tree = parse_file(path)
        bound: dict[str, str] = {}  # local name -> project module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        bound[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif private and _known(node.module, modules):
                        found.append(f"{path.relative_to(root)}:{node.lineno} imports {alias.name} from {node.module}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and bound[node.value.id] != module):
                found.append(f"{path.relative_to(root)}:{node.lineno} reads {bound[node.value.id]}.{node.attr}")
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "sampler_server" and len(parts) > 1 else parts[0]


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return _modules()


@pytest.fixture(scope="module")
def edges(modules) -> list[Edge]:
    return _edges(modules)


def test_no_import_circle(modules, edges):
    graph = nx.DiGraph((e.source, e.target) for e in edges)
    circles = sorted(" -> ".join(c) for c in nx.simple_cycles(graph))
    assert circles == []


def test_no_module_takes_another_modules_private_names(modules):
    assert _private_uses(modules) == []


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("core", ("store", "assembly", "catalog", "metrics", "service", "cli", "pack", "grpc", "lmdb")),
    ("store", ("assembly", "catalog", "metrics", "service", "cli", "grpc")),
    ("assembly", ("catalog", "metrics", "service", "cli", "grpc")),
    ("catalog", ("metrics", "service", "cli", "grpc")),
    ("metrics", ("service", "cli", "grpc")),
    ("pack", ("service", "cli", "grpc")),
])
def test_a_layer_imports_nothing_above_it(layer, forbidden):
    found = []
    for path in sorted((REPO / "sampler_server" / layer).rglob("*.py")):
        for node in ast.walk(parse_file(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            for name in names:
                parts = name.split(".")
                hit = parts[1] if parts[0] == "sampler_server" and len(parts) > 1 else parts[0]
                if hit in forbidden:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert found == []


def test_only_the_console_imports_the_cli(modules, edges):
    outside = [f"{e.source} imports {e.target}" for e in edges
               if _layer(e.target) == "cli" and _layer(e.source) != "cli" and e.source != "sampler_server.__main__"]
    assert outside == []


def test_the_checkers_see_what_they_look_for(tmp_path):
    package = tmp_path / "sampler_server"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "__init__.py").write_text("")
    (package / "core" / "a.py").write_text("def f():\n    from sampler_server.core.b import _hidden\n")
    (package / "core" / "b.py").write_text("import sampler_server.core.a as a\nx = a._other\n")
    found = _modules(tmp_path)
    assert sorted(found) == ["sampler_server", "sampler_server.core", "sampler_server.core.a", "sampler_server.core.b"]
    graph = nx.DiGraph((e.source, e.target) for e in _edges(found))
    assert list(nx.simple_cycles(graph)) != []  # a -> b (inside a function) -> a
    assert _private_uses(found, tmp_path) == [
        "sampler_server/core/a.py:2 imports _hidden from sampler_server.core.b",
        "sampler_server/core/b.py:2 reads sampler_server.core.a._other",
    ]
