"""The `transfer` command's refusals, as a user sees them: exit 2 and one `error:` line.

The first case runs the command as a user does (`python -m clients.<framework> transfer`);
the others call the same entry point in this process, so the framework is imported once.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterable, Sequence


def refusal_lines(framework: str, base: Sequence[str], cases: Iterable[Sequence[str]], capfd) -> list[str]:
    """The one stderr line of each refused case (base + case), after checking exit 2 and one line."""
    main = importlib.import_module(f"clients.{framework}.vtab_transfer").main
    found = []
    for number, extra in enumerate(cases):
        if number == 0:
            done = subprocess.run([sys.executable, "-m", f"clients.{framework}", "transfer", *base, *extra],
                                  capture_output=True, text=True, timeout=120)
            code, stderr = done.returncode, done.stderr
        else:
            capfd.readouterr()
            code, stderr = main([*base, *extra]), capfd.readouterr().err
        assert code == 2, (extra, stderr[-1500:])
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0], stderr
        found.append(lines[0])
    return found
