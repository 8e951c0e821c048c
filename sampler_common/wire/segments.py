"""Shared-memory segments of the same-host transport: names, writing, mapping, release.

A segment is a file in the host's POSIX shared-memory directory (``/dev/shm`` on
Linux) that the server writes for one reply and names in its ``Tensor.segment``
fields. Its name says where it is in its life, and the client moves it along by
renaming it (the server creates, reuses and unlinks segments; a client unlinks only a
probe, and a segment a forked child may still read, below):

- ``<name>``: written for a reply, not yet taken;
- ``<name>h`` (held): the client mapped it, read-only; its arrays are views of it;
- ``<name>r`` (released): the last of those arrays is gone and the mapping with it:
  the server may write the next reply into the same pages (no page is allocated or
  freed per reply, on either side) under a new name.

A process that forks while it holds mappings shares their pages with its child, whose
arrays the server must never overwrite: from the fork on, those segments are unlinked
rather than released (the pages then live as long as either process maps them).

The pixels are written once, by the server, and never copied again. A client that
dies holding segments leaves them held: the server unlinks those when their stream
is cancelled or after a timeout (unlinking a held segment is always safe: a mapping
outlives its name, and the server never writes into a segment it unlinked).

A mapping holds no file descriptor (Python's ``mmap`` keeps one per mapping, so a
client holding a thousand episodes would run out of them): it is made with the C
library's ``mmap`` and unmapped when the last view of it is gone.

Names are checked before any file is touched: a reply can only make a client open,
rename or unlink a file called ``sampler-<hex>-<tag>`` (or that name with its suffix)
in that directory, never another path, so a broken or hostile server cannot make a client read or delete anything
else. The same-host probe (``SameHostOffer.probe_segment``) is such a segment too.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SEGMENT_DIR = Path("/dev/shm")
NAME_PREFIX = "sampler-"
_NAME = re.compile(r"sampler-[0-9a-f]{8,32}-[0-9a-z]{1,20}")
_IOV_MAX = 1024  # buffers per writev call (Linux's IOV_MAX)
MAX_PROBE_BYTES = 256
HELD = "h"  # name suffixes: the client holds it mapped ...
RELEASED = "r"  # ... or let go of it (tags themselves are "s" + hex digits)


class SegmentLost(Exception):
    """A segment a reply names is not there (already reclaimed by the server, or the
    reply came to another host): the reply must be asked for again."""


@dataclass(frozen=True)
class SegmentRef:
    """``size`` bytes at ``offset`` in segment ``name``."""

    name: str
    offset: int
    size: int


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"segment name: got {name[:80]!r}, expected sampler-<hex>-<tag> (letters, digits)")
    return name


def segment_path(name: str, directory: Path = SEGMENT_DIR) -> Path:
    return directory / check_name(name)


def available(directory: Path = SEGMENT_DIR) -> str:
    """Empty when segments can be made here; else why not (one line)."""
    if not directory.is_dir():
        return f"{directory} does not exist on this host"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable by this user"
    return ""


def _write_all(fd: int, buffers: Sequence[bytes | memoryview]) -> int:
    """Write ``buffers`` in order from offset 0; the bytes written."""
    views = [memoryview(b).cast("B") for b in buffers]
    total = sum(v.nbytes for v in views)
    written = start = 0
    while start < len(views):
        batch = views[start : start + _IOV_MAX]
        wanted = sum(v.nbytes for v in batch)
        done = os.pwritev(fd, batch, written)
        written += done
        if done == wanted:
            start += len(batch)
            continue
        skip = done  # a short write (rare on tmpfs): drop what went out and go on from there
        while skip >= views[start].nbytes:
            skip -= views[start].nbytes
            start += 1
        views[start] = views[start][skip:]
    return total


def write_segment(name: str, buffers: Sequence[bytes | memoryview], directory: Path = SEGMENT_DIR) -> int:
    """Create segment ``name`` (readable by this user only) holding ``buffers`` in order;
    its size. The kernel copies each buffer straight into the segment's pages (no
    mapping here, no page faults in this process). A failure leaves no file behind."""
    path = segment_path(name, directory)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    try:
        return _write_all(fd, buffers)
    except BaseException:
        os.close(fd)
        fd = -1
        unlink_segment(name, directory)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def rewrite_segment(released: str, name: str, buffers: Sequence[bytes | memoryview],
                    directory: Path = SEGMENT_DIR) -> bool:
    """Write ``buffers`` into the pages of a released segment, which becomes segment
    ``name`` (its size unchanged, at least what is written). False when ``released``
    is not there (nothing is written then)."""
    try:
        os.rename(segment_path(released, directory), segment_path(name, directory))
    except FileNotFoundError:
        return False
    fd = os.open(segment_path(name, directory), os.O_WRONLY | os.O_CLOEXEC)
    try:
        _write_all(fd, buffers)
        return True
    except BaseException:
        unlink_segment(name, directory)
        raise
    finally:
        os.close(fd)


def unlink_segment(name: str, directory: Path = SEGMENT_DIR) -> bool:
    """Unlink ``name``; False when it was already gone."""
    try:
        os.unlink(segment_path(name, directory))
        return True
    except FileNotFoundError:
        return False


def segment_exists(name: str, directory: Path = SEGMENT_DIR) -> bool:
    return os.path.exists(segment_path(name, directory))


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC = libc
    return _LIBC


class _Mapping:
    """One mapping of a held segment: how to let go of it, and by which process."""

    def __init__(self, held: Path, released: Path) -> None:
        self.held = held
        self.released = released
        self.pid = os.getpid()
        self.shared = False  # a child forked while it was mapped may still read its pages


_LIVE: "weakref.WeakSet[_Mapping]" = weakref.WeakSet()


def _before_fork() -> None:
    for mapping in list(_LIVE):
        mapping.shared = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)


def _unmap_and_release(address: int, size: int, mapping: _Mapping | None) -> None:
    _libc().munmap(address, size)
    if mapping is None or os.getpid() != mapping.pid:
        return  # not ours to let go of (a forked child's copy): the process that mapped it does
    try:
        if mapping.shared:
            os.unlink(mapping.held)  # never to be rewritten: the pages go with the child's mapping
        else:
            os.rename(mapping.held, mapping.released)  # unmapped first: the server may rewrite these pages
    except OSError:
        pass  # the server unlinked it meanwhile (its timeout, or the stream's cancel)


def _map_readonly(fd: int, size: int, mapping: _Mapping | None) -> memoryview:
    """A read-only view of ``size`` bytes of ``fd``, unmapped (then let go of, as
    ``mapping`` says) when the last view of it is gone."""
    libc = _libc()
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == ctypes.c_void_p(-1).value:
        error = ctypes.get_errno()
        raise OSError(error, f"mmap of a {size}-byte segment failed: {os.strerror(error)}")
    buffer = (ctypes.c_ubyte * size).from_address(address)
    if mapping is not None:
        _LIVE.add(mapping)
    done = weakref.finalize(buffer, _unmap_and_release, address, size, mapping)
    done.atexit = False  # at exit arrays may still point here: the OS unmaps, the server reclaims
    return memoryview(buffer).cast("B").toreadonly()


def map_segment(name: str, directory: Path = SEGMENT_DIR) -> memoryview:
    """Map segment ``name`` read-only and take it (rename it held); it is released
    when the last view of the mapping (an array over it) is gone.

    Raises:
        SegmentLost: no such segment on this host (reclaimed, or another host's).
        ValueError: a name that is not a segment's.
    """
    path = segment_path(name, directory)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SegmentLost(f"shared-memory segment {name} is gone (reclaimed by the server, or another host's)") from None
    try:
        held: Path | None = directory / (name + HELD)
        try:
            os.rename(path, held)  # taken: the server sees the name gone
        except FileNotFoundError:
            held = None  # the server reclaimed it just now: our descriptor still reads it, and it is ours
        size = os.fstat(fd).st_size
        if size == 0:
            return memoryview(b"")
        return _map_readonly(fd, size, _Mapping(held, directory / (name + RELEASED)) if held is not None else None)
    finally:
        os.close(fd)


def read_probe(name: str, directory: Path = SEGMENT_DIR) -> str | None:
    """The token in probe segment ``name``, unlinking it (which proves this process can
    release segments); None when it cannot be opened or unlinked from here."""
    try:
        path = segment_path(name, directory)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        token = os.read(fd, MAX_PROBE_BYTES)
        os.unlink(path)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        text = token.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if text.isalnum() else None


class SegmentMaps:
    """The segments of one reply, each mapped (and released) once however many of its
    tensors lie in it."""

    def __init__(self, directory: Path = SEGMENT_DIR) -> None:
        self.directory = directory
        self._maps: dict[str, memoryview] = {}

    def view(self, ref: SegmentRef) -> memoryview:
        """The bytes ``ref`` names, as a read-only view of the mapping.

        Raises:
            SegmentLost: the segment is gone.
            ValueError: ``ref`` reaches past the segment's end, or names no segment.
        """
        mapping = self._maps.get(ref.name)
        if mapping is None:
            mapping = self._maps[ref.name] = map_segment(ref.name, self.directory)
        if ref.offset + ref.size > len(mapping):
            raise ValueError(f"segment {ref.name}: bytes {ref.offset} to {ref.offset + ref.size} asked of "
                             f"{len(mapping)}")
        return mapping[ref.offset : ref.offset + ref.size]
