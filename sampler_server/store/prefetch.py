"""Ask the kernel for many values' pages at once before any of them is copied.

A store larger than the page cache (network storage, a cold start) is read at random,
and LMDB is mapped with read-ahead off (``reader``: ``readahead=False``, so one small
record does not pull its neighbours in). A value larger than a page (an image of a
few tens of KB lives in LMDB overflow pages) would then be faulted in one page at a
time, one synchronous read per 4 KB, and the values of a request one after another.
Looking every value up first (the lookup touches only the B-tree pages) and advising
``MADV_WILLNEED`` over each value's pages lets the kernel issue all of a request's
reads together, whole values at once, before the first copy waits on them. Values
within one page were read by their lookup already and are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable

import numpy as np

PAGE = mmap.PAGESIZE
_WILLNEED = getattr(mmap, "MADV_WILLNEED", 3)


def _libc_madvise():
    if not hasattr(os, "posix_fadvise"):  # not Linux or another POSIX with madvise: nothing to ask
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    function = libc.madvise
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


_MADVISE = _libc_madvise()


def will_need(views: Iterable[memoryview | None]) -> int:
    """Advise ``MADV_WILLNEED`` over the pages of each value larger than a page; how many
    values the kernel took the advice for. Advice only: refused, it changes nothing."""
    if _MADVISE is None:
        return 0
    advised = 0
    for view in views:
        if view is None or len(view) <= PAGE:
            continue
        address = np.frombuffer(view, dtype=np.uint8).ctypes.data
        start = address - address % PAGE
        advised += _MADVISE(start, address + len(view) - start, _WILLNEED) == 0
    return advised
