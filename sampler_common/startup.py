"""Start-up cost of the frameworks: Python's cyclic collector held off while they import.

Importing PyTorch or TensorFlow creates hundreds of thousands of long-lived objects. While
they are being created, Python's cyclic collector keeps scanning them, and it scans them all
once more when the interpreter exits. Neither scan can free anything: a measured import of
TensorFlow, PyTorch and ``clients.tf`` left 10,397 collectable objects.

- ``collector_held_off`` is for a library's own imports (``clients.torch``, ``clients.tf``):
  the collector is paused and then restored as it was.
- ``program_imports`` is for a program's entry (``python -m clients.torch|tf``) once it has
  imported what it runs. It also freezes the heap built so far out of every later pass,
  including the one at exit (``gc.freeze``). Objects the program creates afterwards are
  collected as usual. A process whose heap was frozen already keeps it as it is: its host
  froze it on its own terms (the suite's workers do, tests/conftest.py, and some tests run
  an entry in-process).

Measured here, start and exit of ``python -c "import clients.tf.md_train"`` took 7.6-9.0 s of
wall clock, and 5.5-5.7 s with the imports held off and frozen. A library must not freeze its
host's heap, so only entry points call ``program_imports``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_held_off() -> Iterator[None]:
    """No cyclic collection while the block runs; the collector is left as it was found."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def program_imports() -> Iterator[None]:
    """``collector_held_off`` for the block, then everything alive is exempt from later
    collections (unless the heap was frozen before): for a program's entry, around the
    import of what it runs."""
    first = gc.get_freeze_count() == 0
    try:
        with collector_held_off():
            yield
    finally:
        if first:
            gc.freeze()
