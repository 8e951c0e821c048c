"""The skips of a `make test` run, printed and held to tests/allowed_skips.txt (``.ci/run``).

The suite's conftest appends one line per skipped test, ``node id<TAB>reason``, to the file
``$SAMPLER_TESTS_SKIP_LOG`` names; this script prints them and exits 1 when a reason matches
none of the allowed patterns, so a skip that hides a failure cannot pass CI unseen.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

ALLOWED = Path(__file__).with_name("allowed_skips.txt")


def allowed_patterns(text: str) -> list[re.Pattern[str]]:
    return [re.compile(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def read_skips(text: str) -> list[tuple[str, str]]:
    """(node id, reason) of each line the conftest wrote."""
    return [tuple(line.split("\t", 1)) for line in text.splitlines() if "\t" in line]  # type: ignore[misc]


def disallowed(skips: Iterable[tuple[str, str]], patterns: list[re.Pattern[str]]) -> list[tuple[str, str]]:
    return [(node, reason) for node, reason in skips if not any(p.fullmatch(reason) for p in patterns)]


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: skip_gate.py SKIP_LOG [ALLOWED_FILE]", file=sys.stderr)
        return 2
    log = Path(argv[0])
    skips = read_skips(log.read_text()) if log.exists() else []
    patterns = allowed_patterns(Path(argv[1] if len(argv) == 2 else ALLOWED).read_text())
    print(f"skipped tests: {len(skips)}")
    for node, reason in skips:
        print(f"  {node}: {reason}")
    refused = disallowed(skips, patterns)
    if refused:
        print(f"{len(refused)} skip(s) with a reason tests/allowed_skips.txt does not allow "
              "(skip only through tests/prerequisites.py, naming an opt-out variable or a missing device):",
              file=sys.stderr)
        for node, reason in refused:
            print(f"  {node}: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
