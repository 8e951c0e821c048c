"""The suite's measured durations (tests/durations.json): seconds per test file and the wall
clock of each part of `make test` and `make check`, as one run on a 2-core machine measured
them. ``tests/test_makefile.py`` holds the tiers to their budgets with this record, so a
test file that makes a tier outgrow its budget, or one never measured, fails the suite.

``make durations`` rewrites the record from a whole run of each part (``make durations
FILES=...`` measures only those files, as the parallel part runs them, and merges them in):
the conftest adds each test's setup, call and teardown to its file when
``$SAMPLER_TESTS_DURATIONS`` names the record, under the part ``$SAMPLER_TESTS_PART``
names, and the session's wall clock when ``$SAMPLER_TESTS_WALL=1`` says it ran the whole part.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

RECORD = Path(__file__).with_name("durations.json")
PARTS = ("test-parallel", "test-timing", "check")
"""`make test`'s two parts (the parallel one, then the timing tests alone) and `make check`."""
WORKERS = {"test-parallel": 2, "test-timing": 1, "check": 2}
"""The processes that share each part's files (the Makefile's TEST_WORKERS; timing tests run alone)."""


def load(path: Path = RECORD) -> dict:
    """``{"parts": {part: {"wall": seconds or None, "files_at_wall": the files' seconds then,
    "files": {test file: seconds}}}}``."""
    if not path.exists():
        return {"parts": {}}
    return json.loads(path.read_text())


def merge(record: Mapping, part: str, files: Mapping[str, float], wall: float | None) -> dict:
    """``record`` with ``part``'s seconds of ``files`` replaced, and its wall clock when the run
    was the whole part (``wall`` None: some files only; the part's clock is kept)."""
    if part not in PARTS:
        raise ValueError(f"$SAMPLER_TESTS_PART: got {part!r}, expected one of {', '.join(PARTS)}")
    parts = {name: {"wall": value.get("wall"), "files_at_wall": value.get("files_at_wall"),
                    "files": dict(value.get("files", {}))}
             for name, value in record.get("parts", {}).items()}
    entry = parts.setdefault(part, {"wall": None, "files_at_wall": None, "files": {}})
    if wall is not None:  # a whole run: its files are the part's files
        entry["files"] = {}
    entry["files"].update({name: round(seconds, 1) for name, seconds in files.items()})
    entry["files"] = dict(sorted(entry["files"].items()))
    if wall is not None:
        entry["wall"], entry["files_at_wall"] = round(wall, 1), round(sum(entry["files"].values()), 1)
    return {"parts": {name: parts[name] for name in PARTS if name in parts}}


def save(record: Mapping, path: Path = RECORD) -> None:
    path.write_text(json.dumps(record, indent=1) + "\n")


def projected(record: Mapping, part: str) -> float:
    """The part's wall clock now: as last measured whole, plus the change in its files'
    measured seconds since, shared among the part's workers."""
    entry = record["parts"][part]
    change = sum(entry["files"].values()) - entry["files_at_wall"]
    return round(entry["wall"] + change / WORKERS[part], 1)
