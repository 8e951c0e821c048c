"""``python_source.parse_file`` parses again after CPython 3.11's spurious recursion-depth
SystemError, and lets every other error through."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import python_source

REAL_PARSE = ast.parse


def _failing(times: int, message: str):
    calls = []

    def parse(source: str, filename: str = "<unknown>") -> ast.Module:
        calls.append(filename)
        if len(calls) <= times:
            raise SystemError(message)
        return REAL_PARSE(source, filename)

    return parse, calls


def test_a_recursion_depth_mismatch_is_parsed_again(tmp_path: Path, monkeypatch):
    path = tmp_path / "module.py"
    path.write_text("def test_x():\n    pass\n")
    parse, calls = _failing(2, "AST constructor recursion depth mismatch (before=141, after=162)")
    monkeypatch.setattr(python_source.ast, "parse", parse)
    tree = python_source.parse_file(path)
    assert [node.name for node in tree.body] == ["test_x"] and len(calls) == 3


def test_a_mismatch_every_time_and_other_errors_are_raised(tmp_path: Path, monkeypatch):
    path = tmp_path / "module.py"
    path.write_text("x = 1\n")
    parse, calls = _failing(python_source.ATTEMPTS, "AST constructor recursion depth mismatch (before=1, after=2)")
    monkeypatch.setattr(python_source.ast, "parse", parse)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        python_source.parse_file(path)
    assert len(calls) == python_source.ATTEMPTS
    parse, calls = _failing(1, "some other fault")
    monkeypatch.setattr(python_source.ast, "parse", parse)
    with pytest.raises(SystemError, match="some other fault"):
        python_source.parse_file(path)
    assert len(calls) == 1
    path.write_text("def broken(:\n")
    monkeypatch.setattr(python_source.ast, "parse", REAL_PARSE)
    with pytest.raises(SyntaxError):
        python_source.parse_file(path)
