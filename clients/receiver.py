"""Training items received in a child process and handed over through shared memory.

Why: a small model's training step is bound by the host (the training thread spends it
in Python, launching kernels), so anything else in the process that takes the
interpreter lock slows it. Receiving in the training process does that hundreds of
times per item: gRPC's threads, the reply parser, mapping and releasing the server's
segments, the prefetch queue. Measured on one H200 (baseline conv4 at 84 px, 400 steps
alternated within one process): the step fed live from the server ran at 0.74-0.83 of
the same step over batches already staged, and at 0.79-0.95 when a thread staged them
from arrays held in memory (bench/README.md). Here a child process receives, and the
training process only reads each item from a ring of shared slots it mapped once.

``ProcessItems(source)`` starts ``python -c`` running ``source()`` (a picklable
callable returning the trainer's iterator of (index, item, images) tuples; it imports
no framework). Per item the child copies the item's arrays (pickle protocol 5's
out-of-band buffers) into a free slot of a ring of ``slots`` files in the host's
shared-memory directory and sends the rest of the pickle and the slot over a pipe; the
parent unpickles the item over views of the slot: no copy. A slot is free again when
the parent asks for the next item, so an item's arrays are valid until then: a
consumer must copy what it keeps (the trainers' ``stage`` does: into pinned memory, a
packed episode, an own copy). Where the directory cannot hold a slot (a container's small
``/dev/shm``), the item comes whole through the pipe instead, slower, and the child says
so once on stderr. Errors raised by ``source`` come in order, raised by
``next``. The child ends when the parent closes the ring or dies (it reads a pipe
only the parent holds open); ``close`` returns within seconds even while the child
waits for a stalled server.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from clients.errors import SamplerClientError

SLOTS = 4  # one read by the parent, up to three filled ahead
SLOT_PREFIX = "sampler-feed-"
_CHILD = "from clients.receiver import serve_child; serve_child()"


def slot_directory() -> Path:
    """The host's shared-memory directory where there is one (pages never written to a disk)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


# ---- the child: receive, copy into the ring, send the rest ------------------------------------


class _Ring:
    """The child's slots: files it creates (and regrows, under a new name) and maps, within
    ``limit`` bytes in all (None: what the directory holds)."""

    def __init__(self, directory: Path, slots: int, limit: int | None) -> None:
        self.directory = directory
        self.limit = limit
        self.names: list[str | None] = [None] * slots
        self.maps: list[mmap.mmap | None] = [None] * slots
        self._made = 0
        self.refusal = ""  # why the last slot that did not fit did not

    def fit(self, slot: int, size: int) -> str | None:
        """Slot ``slot`` holding at least ``size`` bytes: its file's name; None where the
        directory (or the limit) cannot hold it."""
        mapped = self.maps[slot]
        if mapped is None or len(mapped) < size:
            self.drop(slot)
            capacity = max(size, 1 << 16) + (max(size, 1 << 16) >> 3)  # room for a little variation
            others = sum(len(other) for other in self.maps if other is not None)
            if self.limit is not None and others + capacity > self.limit:
                self.refusal = f"the ring's limit is {self.limit} bytes"
                return None
            self._made += 1
            name = f"{SLOT_PREFIX}{os.getpid()}-{slot}-{self._made}"
            path = self.directory / name
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                # reserved now: a full tmpfs refuses here, not with SIGBUS when a page is first written
                allocate = getattr(os, "posix_fallocate", None)
                if allocate is not None:
                    allocate(fd, 0, capacity)
                else:
                    os.ftruncate(fd, capacity)
                self.maps[slot] = mmap.mmap(fd, capacity)
            except OSError as error:
                _unlink(path)
                self.refusal = f"{error.strerror or error}, {shutil.disk_usage(self.directory).free >> 20} MiB free"
                return None
            finally:
                os.close(fd)
            self.names[slot] = name
        return self.names[slot]

    def drop(self, slot: int) -> None:
        name, mapped = self.names[slot], self.maps[slot]
        if mapped is not None:
            mapped.close()
        if name is not None:
            _unlink(self.directory / name)  # the parent unlinks it once mapped; this is for the rest
        self.names[slot], self.maps[slot] = None, None


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _exit_with_parent(lifeline: Connection, ring: "_Ring") -> None:
    """The parent holds the other end open and never writes: its end (close or death) ends us."""
    with contextlib.suppress(EOFError, OSError):  # the end of the pipe is the message
        lifeline.recv_bytes()
    for name in ring.names:
        if name is not None:
            _unlink(ring.directory / name)
    os._exit(0)


def _tell(items: Connection, error: BaseException) -> None:
    """``error`` to the parent, or its text where it does not pickle; nothing to a parent gone."""
    try:
        message = pickle.dumps(("error", error))
    except Exception:  # noqa: BLE001  an exception that does not pickle travels as its text
        message = pickle.dumps(("error", SamplerClientError(f"{type(error).__name__}: {error}")))
    with contextlib.suppress(BrokenPipeError, OSError):
        items.send_bytes(message)


def serve_child() -> None:
    """The child's main: argv holds the fds of the lifeline, control and items pipes; control
    brings the source, the slot count and directory first, then the slots freed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle: it closes us
    lifeline = Connection(int(sys.argv[1]), writable=False)
    control = Connection(int(sys.argv[2]), writable=False)
    items = Connection(int(sys.argv[3]), readable=False)
    source, slots, directory, limit = pickle.loads(control.recv_bytes())
    ring = _Ring(Path(directory), slots, limit)
    ending = threading.Thread(target=_exit_with_parent, args=(lifeline, ring), daemon=True)
    ending.start()
    free = list(range(slots))
    warned = False
    try:
        for index, item, images in source():
            buffers: list[pickle.PickleBuffer] = []
            payload = pickle.dumps(item, protocol=5, buffer_callback=buffers.append)
            raws = [buffer.raw() for buffer in buffers]
            while not free:
                free.append(control.recv())
            size = sum(len(raw) for raw in raws)
            name = ring.fit(free[0], size)
            if name is None:  # the item travels whole through the pipe: slower, but the run goes on
                if not warned:
                    print(f"clients.receiver: {ring.directory} cannot hold a slot of {size >> 20} MiB "
                          f"({ring.refusal}); items that do not fit come through a pipe, which is slower: "
                          "give it more room (docker run --shm-size=2g) or train with --receive thread",
                          file=sys.stderr, flush=True)
                    warned = True
                del raws, buffers
                items.send_bytes(pickle.dumps(("inline", index, images, pickle.dumps(item, protocol=5)), protocol=5))
            else:
                slot = free.pop(0)
                mapped = ring.maps[slot]
                assert mapped is not None
                spans, at = [], 0
                for raw in raws:
                    mapped[at:at + len(raw)] = raw
                    spans.append((at, len(raw)))
                    at += len(raw)
                del raws, buffers
                items.send_bytes(pickle.dumps(("item", index, images, slot, name, spans, payload), protocol=5))
            del item  # the server's segment goes back as soon as it is copied
            while control.poll():
                free.append(control.recv())
        items.send_bytes(pickle.dumps(("done",)))
    except BaseException as error:  # noqa: BLE001  raised by the parent's next, in order
        if not isinstance(error, (EOFError, BrokenPipeError)):  # those: the parent stopped reading
            _tell(items, error)
    # the parent may not have mapped every slot sent yet: the names go when it closes its end
    ending.join()


# ---- the parent: an iterator over the child's items -------------------------------------------


class ProcessItems:
    """(index, item, images) tuples of ``source()``, received by a child process (see the
    module docstring); an item's arrays are views valid until the next ``next``."""

    def __init__(self, source: Callable[[], Iterator[tuple[int, Any, int]]], slots: int = SLOTS,
                 limit: int | None = None) -> None:
        self._directory = slot_directory()
        lifeline_read, self._lifeline = os.pipe()
        control_read, control_write = os.pipe()
        items_read, items_write = os.pipe()
        child_fds = (lifeline_read, control_read, items_write)
        path = os.pathsep.join([p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")])
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, *map(str, child_fds)], pass_fds=child_fds, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path.rstrip(os.pathsep)})
        finally:
            for fd in child_fds:
                os.close(fd)
        self._control = Connection(control_write, readable=False)
        self._items = Connection(items_read, writable=False)
        self._control.send_bytes(pickle.dumps((source, slots, str(self._directory), limit)))
        self._maps: dict[int, tuple[str, mmap.mmap]] = {}
        self._reading: int | None = None  # the slot whose item the consumer holds
        self._ended = False

    def __iter__(self) -> "ProcessItems":
        return self

    def _view(self, slot: int, name: str) -> memoryview:
        known = self._maps.get(slot)
        if known is None or known[0] != name:
            path = self._directory / name
            fd = os.open(path, os.O_RDWR)
            try:
                mapped = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            _unlink(path)  # mapped on both sides: the name is no longer needed
            self._maps[slot] = (name, mapped)
        return memoryview(self._maps[slot][1])

    def __next__(self) -> tuple[int, Any, int]:
        if self._ended:
            raise StopIteration
        if self._reading is not None:  # the consumer is done with the last item's arrays
            self._control.send(self._reading)
            self._reading = None
        try:
            message = pickle.loads(self._items.recv_bytes())
        except (EOFError, OSError):
            self._ended = True
            self.close()
            code = self._process.returncode
            raise SamplerClientError(f"the process receiving the training items ended (exit status {code}); "
                                     "its error is above") from None
        if message[0] == "done":
            self._ended = True
            self.close()
            raise StopIteration
        if message[0] == "error":
            self._ended = True
            self.close()
            raise message[1]
        if message[0] == "inline":
            _, index, images, payload = message
            return index, pickle.loads(payload), images
        _, index, images, slot, name, spans, payload = message
        view = self._view(slot, name)
        item = pickle.loads(payload, buffers=[view[at:at + size] for at, size in spans])
        self._reading = slot
        return index, item, images

    def close(self) -> None:
        """End the child (at once, even while it waits for the server) and free the ring."""
        if self._lifeline is None:
            return
        os.close(self._lifeline)
        self._lifeline = None
        for end in (self._control, self._items):
            end.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._maps.clear()  # a mapping goes when the last array viewing it does

    def __del__(self) -> None:
        if getattr(self, "_lifeline", None) is not None:
            self.close()
