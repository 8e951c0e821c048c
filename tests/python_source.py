"""Our Python files parsed, for the tests that read the source (layers, imports, test names).

CPython 3.11's AST constructor can fail with ``SystemError: AST constructor recursion depth
mismatch`` on a valid file (python/cpython#106905, pytest-dev/pytest#10763): it keeps its
depth count in interpreter-wide state, which other work in the same process (a test
server's threads) can disturb. It failed once so in a two-worker `make test`, on
tests/test_readme_fidelity.py; parsing the same text again succeeds."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ATTEMPTS = 3


def parse_file(path: Path) -> ast.Module:
    source = path.read_text(encoding="utf-8")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return ast.parse(source, str(path))
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


FRAMEWORKS = frozenset({"tensorflow", "tensorflow_datasets", "keras", "torch", "torchvision"})
_REPO = Path(__file__).resolve().parents[1]


def _module_path(name: str) -> Path | None:
    """Our file for a module name: the project's packages, or a helper module beside the tests."""
    parts = name.split(".")
    for base in (_REPO, _REPO / "tests"):
        path = base.joinpath(*parts)
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
    return None


def _top_level_imports(tree: ast.Module) -> list[str]:
    """The modules a file imports when it is imported (its top level, ifs and trys included)."""
    names: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.append(node.module)
                names.extend(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", []))):
                    visit(block)

    visit(tree.body)
    return names


@functools.cache
def _direct_imports(path: Path) -> tuple[frozenset[str], tuple[Path, ...]]:
    """(the frameworks ``path`` imports at its top level, our modules it imports there)."""
    frameworks: set[str] = set()
    modules: list[Path] = []
    for name in _top_level_imports(parse_file(path)):
        parts = name.split(".")
        if parts[0] in FRAMEWORKS:
            frameworks.add(parts[0])
            continue
        modules += [module for depth in range(1, len(parts) + 1)
                    if (module := _module_path(".".join(parts[:depth]))) is not None]
    return frozenset(frameworks), tuple(modules)


def framework_imports(path: Path) -> frozenset[str]:
    """The frameworks (TensorFlow, PyTorch and theirs) importing ``path`` imports, through our
    own modules' top-level imports too (package inits included)."""
    found: set[str] = set()
    seen, pending = {path}, [path]
    while pending:
        frameworks, modules = _direct_imports(pending.pop())
        found |= frameworks
        for module in modules:
            if module not in seen:
                seen.add(module)
                pending.append(module)
    return frozenset(found)
