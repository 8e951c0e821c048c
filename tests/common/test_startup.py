"""The collector held off while a program imports its framework (sampler_common.startup).

Each case runs in a fresh interpreter: freezing the heap is what a program's entry does, and
a test must not do it to the suite's own process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import REPO_ROOT


def _run(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_library_import_pauses_the_collector_and_leaves_it_as_it_found_it():
    _run("""
        import gc
        from sampler_common.startup import collector_held_off
        with collector_held_off():
            assert not gc.isenabled()
        assert gc.isenabled() and gc.get_freeze_count() == 0
        gc.disable()
        with collector_held_off():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a host that runs without the collector keeps running without it
        gc.enable()
        import contextlib
        with contextlib.suppress(KeyError), collector_held_off():
            raise KeyError("x")  # the block fails: the collector is restored all the same
        assert gc.isenabled()
    """)


def test_a_program_freezes_what_it_imported_and_still_collects_what_it_makes_later():
    _run("""
        import gc
        from sampler_common.startup import program_imports
        with program_imports():
            assert not gc.isenabled()
            import json, decimal
        assert gc.isenabled() and gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        class Node:
            __slots__ = ("self",)  # a cycle of one: only the cyclic collector frees it
        for _ in range(100):
            node = Node(); node.self = node
        del node
        assert gc.collect() >= 100 and gc.get_freeze_count() == frozen
    """)


def test_a_heap_frozen_already_is_left_as_it_is():
    """A host that froze its heap (the suite's workers) and then runs an entry in-process."""
    _run("""
        import gc
        from sampler_common.startup import program_imports
        gc.freeze()
        frozen = gc.get_freeze_count()
        with program_imports():
            import json
            garbage = [[] for _ in range(1000)]
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    """)
