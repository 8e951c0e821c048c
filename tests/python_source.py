"""Our Python files parsed, for the tests that read the source (layers, imports, test names).

CPython 3.11's AST constructor can fail with ``SystemError: AST constructor recursion depth
mismatch`` on a valid file (python/cpython#106905, pytest-dev/pytest#10763): it keeps its
depth count in interpreter-wide state, which other work in the same process (a test
server's threads) can disturb. It failed once so in a two-worker `make test`, on
tests/test_readme_fidelity.py; parsing the same text again succeeds."""

from __future__ import annotations

import ast
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


def framework_imports(path: Path, _seen: set[Path] | None = None) -> frozenset[str]:
    """The frameworks (TensorFlow, PyTorch and theirs) importing ``path`` imports, through our
    own modules' top-level imports too (package inits included)."""
    seen = set() if _seen is None else _seen
    seen.add(path)
    found: set[str] = set()
    for name in _top_level_imports(parse_file(path)):
        if name.split(".")[0] in FRAMEWORKS:
            found.add(name.split(".")[0])
            continue
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            module = _module_path(".".join(parts[:depth]))
            if module is not None and module not in seen:
                found |= framework_imports(module, seen)
    return frozenset(found)
