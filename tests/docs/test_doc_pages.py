"""README.md and docs/ stay walkable: a short front page, every page reachable from it,
every relative link (and #anchor) resolving, every code block naming its language, and
every Python block run by some test unless a comment before it says why not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from doc_blocks import REPO_ROOT, all_blocks, doc_pages
from python_source import parse_file

README_MAX_LINES = 200
LANGUAGES = {"python", "sh", "text"}
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*$")


def _prose_lines(page: str) -> list[tuple[int, str]]:
    """(line number, text) of a page outside its fenced code blocks."""
    inside = False
    kept = []
    for number, line in enumerate((REPO_ROOT / page).read_text().split("\n"), 1):
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            kept.append((number, line))
    return kept


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    page = path.relative_to(REPO_ROOT).as_posix()
    return {_anchor(match["text"]) for _, line in _prose_lines(page) if (match := HEADING.match(line))}


def _links(page: str) -> list[tuple[int, str]]:
    return [(number, match["target"]) for number, line in _prose_lines(page) for match in LINK.finditer(line)
            if not re.match(r"^[a-z]+:", match["target"])]


def _python_blocks_run_by_tests() -> set[tuple[str, str]]:
    """(page, title) of every ``python_block("page", "title")`` call in the tests."""
    called = set()
    for path in (REPO_ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(parse_file(path)):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "python_block"
                    and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args)):
                called.add((node.args[0].value, node.args[1].value))
    return called


def test_the_readme_is_a_front_page_of_at_most_200_lines():
    lines = (REPO_ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index():
    linked = set()
    for page in ("README.md", "docs/README.md"):
        for _, target in _links(page):
            path = ((REPO_ROOT / page).parent / target.split("#")[0]).resolve()
            linked.add(path)
    pages = {(REPO_ROOT / page).resolve() for page in doc_pages() if page.startswith("docs/")} - {
        (REPO_ROOT / "docs" / "README.md").resolve()}
    assert not pages - linked, sorted(str(p.relative_to(REPO_ROOT)) for p in pages - linked)
    assert (REPO_ROOT / "docs" / "README.md").resolve() in linked


def test_every_relative_link_resolves_to_a_file_and_its_anchor():
    broken = []
    for page in doc_pages():
        for number, target in _links(page):
            file_part, _, anchor = target.partition("#")
            path = (REPO_ROOT / page).parent / file_part if file_part else REPO_ROOT / page
            if not path.exists():
                broken.append(f"{page}:{number}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path.resolve()):
                broken.append(f"{page}:{number}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_every_code_block_names_its_language():
    unnamed = [f"{b.where} ({b.language or 'no language'})" for b in all_blocks() if b.language not in LANGUAGES]
    assert not unnamed, f"name each block's language, one of {sorted(LANGUAGES)}: {unnamed}"


def test_every_python_block_is_run_by_a_test_or_says_why_not():
    python = [b for b in all_blocks() if b.language == "python"]
    assert len(python) >= 7
    titles = [(b.page, b.title) for b in python if b.title]
    assert len(titles) == len(set(titles)), "two python blocks of one page share a title"
    run = _python_blocks_run_by_tests()
    orphans = [b.where for b in python if b.not_run is None and (b.page, b.title) not in run]
    assert not orphans, f"python blocks no test runs (title one and run it with python_block, or mark it "\
                        f"<!-- not run: why -->): {orphans}"
    assert run <= {(b.page, b.title) for b in python}, "a test runs a block that no page has"


def test_the_layout_map_names_folders_that_exist():
    (layout,) = [b for b in all_blocks() if b.page == "docs/README.md" and b.language == "text"]
    named, parent = [], ""
    for line in layout.code.splitlines():
        match = re.match(r"^(?P<indent> *)(?P<folders>[\w.-]+/(?:, [\w.-]+/)*)\s", line)
        if match is None:
            continue
        folders = [folder.rstrip("/") for folder in match["folders"].split(", ")]
        if not match["indent"]:
            parent = folders[0]
            named.append(parent)
        else:
            named.extend(f"{parent}/{folder}" for folder in folders)
    assert len(named) >= 20, named
    missing = [folder for folder in named if not (REPO_ROOT / folder).is_dir()]
    assert not missing, f"docs/README.md's layout names folders that do not exist: {missing}"
