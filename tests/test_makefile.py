"""`make test` runs the tests marked ``timing`` alone, after the parallel part, from the files
its TIMING_TESTS names: a timing test in a file left off that list would run in neither part.
`make check` collects no file that imports a framework, and both tiers fit their budgets as
tests/durations.json last measured them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import durations
from python_source import framework_imports, parse_file

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
    assert "$(PARALLEL)" in parallel and '-m "not timing"' in parallel
    assert "$(PARALLEL)" not in alone and "-n " not in alone and "-m timing" in alone and "$(TIMING_TESTS)" in alone


def _make_variable(name: str) -> list[str]:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith(f"{name} :="))
    return line.split(":=", 1)[1].split()


def test_both_parts_of_make_test_and_make_check_run_in_the_workers_a_file_at_a_time():
    assert _make_variable("PARALLEL") == ["-q", "-n", "$(TEST_WORKERS)", "--dist", "loadfile",
                                          "--no-loadscope-reorder"]
    check = (REPO / "Makefile").read_text().split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    assert "HYPOTHESIS_PROFILE=check $(PYTEST) $(PARALLEL) $(CHECK_MARKS)" in check and "$(CHECK_TESTS)" in check
    assert _make_variable("CHECK_MARKS") == ["-m", '"not', "slow", "and", "not", 'timing"']


# ---- the fast tier and the measured durations ---------------------------------------------------


def check_tier_files() -> list[str]:
    """The test files `make check` collects: CHECK_TESTS (files and folders) less CHECK_IGNORE."""
    ignored = set(_make_variable("CHECK_IGNORE"))
    files: set[Path] = set()
    for entry in _make_variable("CHECK_TESTS"):
        for path in REPO.glob(entry):
            files.update(path.rglob("test_*.py") if path.is_dir() else [path])
    return sorted(name for name in (str(p.relative_to(REPO)) for p in files) if name not in ignored)


def test_make_check_collects_no_file_that_imports_a_framework():
    """The tier is cheap because no file it collects imports TensorFlow or PyTorch when it is
    imported (directly or through the modules it imports at the top): a test that needs one
    imports it where it runs, or lives outside the tier."""
    heavy = {name: sorted(found) for name in check_tier_files() if (found := framework_imports(REPO / name))}
    assert heavy == {}, "move these out of CHECK_TESTS (CHECK_IGNORE) or import the framework inside the tests"


# ---- the tiers' budgets ------------------------------------------------------------------------

TEST_BUDGET, CHECK_BUDGET = 12 * 60, 3 * 60
"""Seconds of pytest on this project's 2-core machine: `make test` (both parts), `make check`."""


def _test_files() -> set[str]:
    return {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py") if "__pycache__" not in p.parts}


def _runs_in_check(path: Path) -> bool:
    """Whether a file has a test that CHECK_MARKS selects (one not marked slow or timing, by
    itself or by the file's ``pytestmark``): a file whose tests are all deselected is never
    measured in the check tier."""
    tree = parse_file(path)
    marked = re.compile(r"\bmark\.(slow|timing)\b")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            if marked.search(ast.unparse(node.value)):
                return False
    tests = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.name.startswith("test_")]
    return any(not any(marked.search(ast.unparse(d)) for d in test.decorator_list) for test in tests)


def test_every_test_file_has_its_measured_seconds():
    """A new test file is measured (``make durations FILES=...``) before it lands, so the
    budgets below see it; a removed one leaves the record."""
    record = durations.load()
    parts = record["parts"]
    measured = set(parts["test-parallel"]["files"]) | set(parts["test-timing"]["files"])
    assert _test_files() - measured == set(), "measure them: make durations FILES='...'"
    unmeasured = {name for name in set(check_tier_files()) - set(parts["check"]["files"])
                  if _runs_in_check(REPO / name)}
    assert unmeasured == set(), "measure the check tier: make durations"
    stale = {part: sorted(set(entry["files"]) - _test_files()) for part, entry in parts.items()}
    assert all(not names for names in stale.values()), f"removed files still in tests/durations.json: {stale}"


def test_make_test_fits_in_its_budget():
    """Both parts as last measured whole, with what the files' measured seconds added since."""
    record = durations.load()
    parallel, timing = durations.projected(record, "test-parallel"), durations.projected(record, "test-timing")
    assert parallel + timing <= TEST_BUDGET, {"test-parallel": parallel, "test-timing": timing}


def test_make_check_fits_in_its_budget():
    check = durations.projected(durations.load(), "check")
    assert check <= CHECK_BUDGET, check


def test_a_part_grows_by_its_new_seconds_shared_among_its_workers():
    record = durations.merge({"parts": {}}, "test-parallel", {"tests/a.py": 100.0, "tests/b.py": 60.0}, 90.0)
    assert durations.projected(record, "test-parallel") == 90.0
    grown = durations.merge(record, "test-parallel", {"tests/c.py": 30.0}, None)
    assert durations.projected(grown, "test-parallel") == 105.0  # two workers share the new 30 s
    timing = durations.merge({"parts": {}}, "test-timing", {"tests/a.py": 10.0}, 20.0)
    regrown = durations.merge(timing, "test-timing", {"tests/a.py": 16.0}, None)
    assert durations.projected(regrown, "test-timing") == 26.0


def test_the_record_shares_each_part_among_the_workers_the_makefile_starts():
    text = (REPO / "Makefile").read_text()
    workers = int(next(line for line in text.splitlines() if line.startswith("TEST_WORKERS ?=")).split("?=")[1])
    assert durations.WORKERS == {"test-parallel": workers, "test-timing": 1, "check": workers}
