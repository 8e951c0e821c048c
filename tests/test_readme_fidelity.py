"""Each protocol page of docs/protocols/ ends with a Fidelity table naming the tests that
check each row: every one named must exist, so a renamed or removed test cannot leave a
row claiming a check that is gone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from python_source import parse_file

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL_PAGES = {"md": "**Meta-Dataset**", "vtab": "**VTAB-1k**", "cog": "**ImageNet-CoG**",
                  "baselines": "**Control baselines**"}


def _fidelity_section(protocol: str) -> str:
    text = (ROOT / "docs" / "protocols" / f"{protocol}.md").read_text()
    assert text.count("\n## Fidelity\n") == 1, f"docs/protocols/{protocol}.md has no single '## Fidelity' section"
    section = text.split("\n## Fidelity\n", 1)[1]
    return section.split("\n## ", 1)[0]


def _test_names(path: Path) -> set[str]:
    tree = parse_file(path)
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}


def test_every_test_the_fidelity_tables_name_exists():
    named = [found for protocol in PROTOCOL_PAGES
             for found in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", _fidelity_section(protocol))]
    assert len(named) >= 15, named
    for path, name in named:
        assert (ROOT / path).is_file(), path
        if name:
            assert name in _test_names(ROOT / path), f"{path}::{name}"


@pytest.mark.parametrize("protocol", sorted(PROTOCOL_PAGES))
def test_each_protocol_page_has_its_table(protocol):
    section = _fidelity_section(protocol)
    assert PROTOCOL_PAGES[protocol] in section
    assert re.search(r"^\| what \| computed as the reference \| checked by \|$", section, re.MULTILINE), protocol
