"""Reading the process tree from /proc, for tests that kill real processes (Linux)."""

from __future__ import annotations

import time
from pathlib import Path


def children(pid: int) -> set[int]:
    """Live (non-zombie) processes whose parent is ``pid``."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(child) for child in (task / "children").read_text().split())
        except OSError:
            pass
    return {child for child in found if alive(child)}


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        for child in children(frontier.pop()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def describe(pids: set[int]) -> str:
    lines = []
    for pid in sorted(pids):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = "?"
        lines.append(f"{pid}: {command.strip()[:160]}")
    return "; ".join(lines)


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """The pids still alive after ``timeout`` seconds (empty once all are gone)."""
    deadline = time.monotonic() + timeout
    left = {pid for pid in pids if alive(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {pid for pid in left if alive(pid)}
    return left
