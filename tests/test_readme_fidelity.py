"""The README's Fidelity tables name the tests that check each row: every one named must
exist, so a renamed or removed test cannot leave a row claiming a check that is gone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fidelity_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Fidelity\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}


def test_every_test_the_fidelity_tables_name_exists():
    section = _fidelity_section()
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", section)
    assert len(named) >= 15, section
    for path, name in named:
        assert (ROOT / path).is_file(), path
        if name:
            assert name in _test_names(ROOT / path), f"{path}::{name}"


def test_each_protocol_has_its_table():
    section = _fidelity_section()
    for protocol in ("**Meta-Dataset**", "**VTAB-1k**", "**ImageNet-CoG**", "**Control baselines**"):
        assert protocol in section
