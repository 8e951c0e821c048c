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
