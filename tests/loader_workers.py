"""The start method of the tests' DataLoader worker processes: a forkserver that imported
``clients.torch`` once per test process, so each worker is a fork of an interpreter that has
PyTorch already (a spawned worker imports it again: about 4 s of CPU, for each of the suite's
14 workers). The workers are still fresh processes, not forks of the test process: no gRPC
channel or thread of the test's crosses into them.

multiprocessing has one forkserver per process, and its preload list counts only when it
starts: the in-process servers' decode pools start it too, with their module alone. So
``start_forkserver`` runs before the first test (tests/conftest.py's ``pytest_runtestloop``),
where a collected test module uses ``loader_context``, with both lists: the decode workers'
module and ``clients.torch``."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

PRELOAD = ["sampler_server.assembly.assembler", "clients.torch"]


def loader_context() -> multiprocessing.context.BaseContext:
    """``DataLoader(..., multiprocessing_context=loader_context())``."""
    return multiprocessing.get_context("forkserver")


def start_forkserver(modules: Iterable[ModuleType | None]) -> bool:
    """Start this process's forkserver with ``PRELOAD`` if one of the test ``modules`` about to
    run uses ``loader_context`` (no other run pays for PyTorch's import): whether it did."""
    if not any(getattr(module, "loader_context", None) is loader_context for module in modules):
        return False
    multiprocessing.set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()
    return True


@contextlib.contextmanager
def loader_iterator(loader: Any) -> Iterator[Any]:
    """``iter(loader)``, its workers shut down on the way out, however the block ends. Left to
    the garbage collector (a refusal's traceback holds the iterator in a reference cycle), an
    iterator with live workers costs 5 s per worker in whichever later test the collection
    lands: the collector closes its index queues' feeder threads (weakref callbacks run before
    finalizers), so the ``None`` that tells a worker to exit is never sent and torch waits out
    each join's timeout."""
    iterator = iter(loader)
    try:
        yield iterator
    finally:
        iterator._shutdown_workers()  # what torch's own __del__ calls; here while the queues work
