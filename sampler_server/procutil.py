"""Helper processes die with the process they serve.

A worker pool's processes must not outlive their parent: an orphaned pack worker
keeps the store's lock (flock locks belong to the open file, which a forked child
shares) and refuses the rerun; an orphaned decode worker keeps shared memory, the
forkserver and multiprocessing's resource tracker alive. ``die_with_parent`` is
called first thing in a child (a pool initializer or an at-fork hook): on Linux the
kernel then sends SIGKILL when the parent dies, whatever killed it (SIGKILL
included); elsewhere a daemon thread polls the parent pid.

Decode workers are children of multiprocessing's forkserver, which itself stays up
while any worker holds its "alive" pipe, so a watchdog in the worker alone would
watch the wrong parent. ``start_forkserver`` (called by ``serve`` before its pool
starts) starts the forkserver from the main thread with this module preloaded; the
import, in that forkserver only, makes the forkserver die with the server and every
process it forks die with the forkserver. The server's death therefore ends the
forkserver, then the workers, and the resource tracker exits once no process holds
its pipe (unlinking the shared memory the server left).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
_WATCHDOG_SECONDS = 0.5
_FORKSERVER_PARENT_ENV = "SAMPLER_SERVER_FORKSERVER_PARENT"
"""Set by ``start_forkserver`` to the server's pid; only a child of that pid that imports
this module (the forkserver, through its preload list) acts on it."""


def die_with_parent(parent: int | None = None) -> None:
    """Make this process end when its parent process does.

    Args:
        parent: the pid the caller expects as parent (default: the parent now). If the
            parent is already another process (the expected one died before this call),
            this process exits at once.

    PR_SET_PDEATHSIG fires when the parent *thread* that forked us ends, so call it
    only in children forked by a thread that lives as long as its process (a main
    thread, or a single-threaded forkserver).
    """
    expected = os.getppid() if parent is None else parent
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        _start_watchdog(expected)
    if os.getppid() != expected:  # the parent died before the death signal was armed
        os._exit(1)


def _start_watchdog(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCHDOG_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def start_forkserver(preload: Sequence[str]) -> None:
    """Start multiprocessing's forkserver now, from the calling (main) thread, so that it
    and every process it forks die with this process.

    Args:
        preload: the modules the forkserver imports once for all its children (this
            module is added). A later ``set_forkserver_preload`` does not restart it.
    """
    os.environ[_FORKSERVER_PARENT_ENV] = str(os.getpid())
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*preload, __name__])
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _guard_forkserver() -> None:
    """At import in the forkserver that ``start_forkserver`` started: die with the server,
    and have every forked child die with the forkserver."""
    server = os.environ.get(_FORKSERVER_PARENT_ENV)
    if server is None or server != str(os.getppid()) or "multiprocessing.forkserver" not in sys.modules:
        return
    del os.environ[_FORKSERVER_PARENT_ENV]  # the workers' own children are not forkservers
    die_with_parent(int(server))
    forkserver_pid = os.getpid()
    os.register_at_fork(after_in_child=lambda: die_with_parent(forkserver_pid))


_guard_forkserver()


_M_MMAP_THRESHOLD = -3  # glibc mallopt parameters
_M_ARENA_MAX = -8


def return_large_blocks_to_os(threshold: int = 1 << 20, arenas: int = 2) -> bool:
    """Serve every allocation of ``threshold`` bytes or more with its own mapping, and
    let all threads share ``arenas`` heap arenas.

    glibc raises its mmap threshold each time a mapped block is freed, after which
    multi-megabyte replies (and gRPC's copies of them) come from heap arenas that
    seldom shrink, so a server's RSS ratchets up with every burst of large episodes.
    A fixed threshold (which turns that adjustment off) returns each one at ``free``.
    A server thread per stream would otherwise spread small allocations over up to
    eight arenas per core, each keeping its own free memory. False where the C
    library is not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(mallopt(_M_ARENA_MAX, arenas))
