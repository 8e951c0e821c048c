"""`make test` runs the tests marked ``timing`` alone, after the parallel part, from the files
its TIMING_TESTS names: a timing test in a file left off that list would run in neither part."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"pytest\.mark\.timing\b")


def _timing_tests_in_makefile() -> set[str]:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("TIMING_TESTS"))
    return set(line.split(":=", 1)[1].split())


def test_every_file_with_a_timing_test_is_in_timing_tests():
    marked = {str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
              if path.name != Path(__file__).name and MARK.search(path.read_text())}
    listed = _timing_tests_in_makefile()
    assert marked, "no test is marked timing"
    assert marked == listed, {"marked, not listed": sorted(marked - listed), "listed, not marked": sorted(listed - marked)}


def test_the_parallel_part_leaves_the_timing_tests_out_and_the_second_part_runs_them():
    recipe = (REPO / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    parallel, alone = [line.strip() for line in recipe.splitlines()[1:3]]
    assert '-n $(TEST_WORKERS)' in parallel and '-m "not timing"' in parallel
    assert "-n " not in alone and "-m timing" in alone and "$(TIMING_TESTS)" in alone
