"""The demo's two outputs: the terminal, and ``demo.log`` under its working directory.

The terminal gets what a reader follows: one progress line per leg as the leg ends, then
each leg's table, at most ``TERMINAL_BUDGET`` lines in all (the tables of today take about
170, so a table to come has room). The log gets the same lines and everything else the
demo and its processes print: the packs' summaries, the stores' inspection, the CoG
levels, every trainer's command line, progress and summary, TensorFlow's own messages.

While a ``logging_to`` block runs, this process's standard output and error (file
descriptors 1 and 2, so what C libraries, ``print`` and child processes write too) point
at the log; the terminal is a copy of the original standard output kept aside. Lines are
whole: every write is flushed, so the log keeps the order things happened in.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

TERMINAL_BUDGET = 250
"""The most lines ``sampler-server demo`` prints to the terminal (``tests/cli/test_demo_output.py``)."""


class DemoConsole:
    """Writes to the terminal and the log (``say``), or to the log alone (``note``); counts
    the terminal's lines. ``started``: the clock the progress lines' elapsed seconds read."""

    def __init__(self, terminal: TextIO, log: TextIO, log_path: Path | None = None,
                 started: float | None = None) -> None:
        self.terminal, self.log, self.log_path = terminal, log, log_path
        self.started = time.perf_counter() if started is None else started
        self.lines = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def say(self, text: str = "") -> None:
        """``text`` on the terminal and in the log."""
        self.note(text)
        self.terminal.write(text + "\n")
        self.terminal.flush()
        self.lines += text.count("\n") + 1

    def note(self, text: str = "") -> None:
        """``text`` in the log only."""
        sys.stdout.flush()  # what print() buffered goes first
        self.log.write(text + "\n")
        self.log.flush()

    def progress(self, leg: str, text: str) -> None:
        """A leg's one progress line: the seconds since the start, the leg's name, what it did."""
        self.say(f"[{self.elapsed():4.0f} s] {leg}: {text}")

    def table(self, heading: str, body: str, full: str | None = None) -> None:
        """A table under its one-line heading, a blank line before; ``full``: what the log
        gets instead of ``body`` (the terminal's is shortened)."""
        self.say(f"\n== {heading}")
        if full is None:
            self.say(body.rstrip("\n"))
            return
        self.note(full.rstrip("\n"))
        self.terminal.write(body.rstrip("\n") + "\n")
        self.terminal.flush()
        self.lines += body.rstrip("\n").count("\n") + 1


@contextmanager
def logging_to(path: Path, started: float | None = None) -> Iterator[DemoConsole]:
    """A console whose log is ``path`` (appended to), with this process's standard output
    and error pointed at the log for the block's duration and restored after it."""
    sys.stdout.flush()
    sys.stderr.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    saved, streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    with open(path, "a", encoding="utf-8") as log, os.fdopen(os.dup(saved[0]), "w", encoding="utf-8") as terminal:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        # print() and sys.stderr onto descriptors 1 and 2 even where sys.stdout was another
        # object (a test's capture); not closed after: a logging handler made meanwhile keeps
        # writing to the descriptor, the terminal again once the block ends
        sys.stdout, sys.stderr = (open(fd, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
                                  for fd in (1, 2))
        try:
            yield DemoConsole(terminal, log, path, started)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a text file (what a failed process said last)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])
