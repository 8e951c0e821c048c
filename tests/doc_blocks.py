"""The code blocks and links of README.md and docs/, read the way a user reads them.

A fenced block names its language (```` ```python ````, ```` ```sh ````, ```` ```text ````).
A Python block a test runs names itself (```` ```python title="vtab-client" ````); the test
fetches it with ``python_block(page, title)`` (string literals, so that
``tests/docs/test_doc_pages.py`` can find every call and hold every unmarked block to
being run). A block that cannot run in the suite says why in an HTML comment on the line
before it: ``<!-- not run: needs a GPU -->``. Examples set what a reader changes as
top-level constants (``SERVER = "127.0.0.1:50051"``); ``with_constants`` points them at
the test's server and fixture stores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r'^```(?P<language>[\w-]*)(?:\s+title="(?P<title>[\w-]+)")?\s*$')
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.+?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and title, and why it is not run."""

    page: str  # relative to the repository, e.g. "docs/clients.md"
    line: int  # of the opening fence, 1-based
    language: str
    title: str | None
    not_run: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[str]:
    """README.md, every page under docs/ and bench/README.md, relative to the repository."""
    pages = ["README.md", *sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "docs").rglob("*.md"))]
    return [*pages, "bench/README.md"]


def blocks(page: str) -> list[Block]:
    """Every fenced block of a page, in order."""
    lines = (REPO_ROOT / page).read_text().split("\n")
    found: list[Block] = []
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        end = next((i for i in range(number + 1, len(lines)) if lines[i].rstrip() == "```"), None)
        assert end is not None, f"{page}:{number + 1}: a code block that is never closed"
        before = next((lines[i].strip() for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        marker = NOT_RUN.match(before)
        found.append(Block(page, number + 1, opening["language"], opening["title"],
                           marker["reason"] if marker else None, "\n".join(lines[number + 1:end]) + "\n"))
        number = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in doc_pages() for block in blocks(page)]


def python_block(page: str, title: str) -> str:
    """The code of the one Python block of ``page`` titled ``title``."""
    matching = [b for b in blocks(page) if b.language == "python" and b.title == title]
    assert len(matching) == 1, f"{page} has {len(matching)} python blocks titled {title!r}, expected 1"
    return matching[0].code


def with_constants(code: str, **values: Any) -> str:
    """The code with each top-level ``NAME = ...`` line (set exactly once) set to ``repr(value)``."""
    for name, value in values.items():
        code, replaced = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", code, flags=re.MULTILINE)
        assert replaced == 1, f"the example sets {name} once at the top level, found {replaced}"
    return code


def run_python(code: str, *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run an example in a fresh interpreter from the repository root, as a user would."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done
