"""Record ids -> packed uint8 NHWC tensors, with decoding spread over processes.

The server process only samples and packs replies; JPEG/PNG decoding and resizing
run in a pool of worker processes (CPU-bound work the GIL would serialise in
threads). Workers start from a ``forkserver`` (never forked from a process already
running gRPC threads), open the stores themselves read-only, and write pixels
straight into shared-memory buffers the server reuses, so no pixel crosses a pipe
(a source packed in shards is re-opened there as one reader over its shards,
``store.sharded_reader``).
Work is submitted without blocking (``submit``), so a stream can keep several
episodes in flight and the workers never wait for the sender. Stores packed with
``--raw-size`` need no decode: their records are copied as stored (in this process for
small requests, as views; by the workers, into a shared buffer, for requests of at
least ``RAW_POOLED`` images when the pool has at least ``RAW_POOL_WORKERS`` workers,
so the reading, the checksums and the copy of a large episode run on several cores
and not under this process's GIL: on 16 cores with 12 workers and ``--lookahead-mb
128``, one same-host stream of 126-px MD episodes went from 29-33 to 66 episodes/s;
on 2 cores with 2 workers the extra copy and the hand-off cost more than they
spread, 65 against 37), but
only for requests at the size AND with the resize method they were packed with
(``pack_options["raw_resize"]``). Any other request is refused (FailedPrecondition):
a raw store keeps no source bytes, and serving its pixels (or resizing them again)
under another method's name would change pixels silently. Raw stores packed before
the method was recorded used a half-pixel resize that matches no method; they are
refused until repacked.

The pixels of an image depend only on its record and (size, resize method): never
on which worker decoded it or how ids were chunked.

Integrity: every path (pool workers, in-process decode, raw copies, encoded bytes)
parses each value with ``record.read_header``, which verifies the record's checksum,
so altered bytes are a ``DataLoss`` naming the store and record, never pixels; the
server logs each such record once. A decode worker that dies (killed, out of memory,
a crash in a native decoder) breaks the pool: the episodes it was decoding fail with
a ``DataLoss`` that says so (not UNAVAILABLE: clients retry that by themselves, and an
episode whose data crashes a decoder would take the pool down on every retry), the
pool is replaced at once and later requests are served as before. Workers die with
the server (``PR_SET_PDEATHSIG``), so none outlives it holding stores mapped.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import multiprocessing
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import shared_memory
from typing import TypeVar

import numpy as np

from sampler_server import procutil
from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import DataLoss, FailedPrecondition
from sampler_server.imaging import ResizeMethod
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, read_header
from sampler_server.store.sharded_reader import ReaderLocation, ShardedReader, open_reader, reader_location

Reader = StoreReader | ShardedReader  # one store, or the shards of one source read as one

T = TypeVar("T")
_MIN_CHUNK = 16
RAW_CHUNK = 32  # raw images per worker task (a copy and a checksum each: cheap next to a decode)
RAW_POOLED = 2 * RAW_CHUNK  # raw requests this large are copied by the workers ...
RAW_POOL_WORKERS = 4  # ... when there are at least this many (see the module docstring)
_WORKER_READERS: dict[str, Reader] = {}
_WORKER_STORES: dict[str, ReaderLocation] = {}
_WORKER_BUFFERS: "OrderedDict[str, shared_memory.SharedMemory]" = OrderedDict()
_WORKER_BUFFERS_KEPT = 2
log = logging.getLogger("sampler_server.assembly")


def _init_worker(stores: Mapping[str, ReaderLocation]) -> None:
    procutil.die_with_parent()  # no decode worker outlives its forkserver (see procutil)
    import cv2

    cv2.setNumThreads(1)
    _WORKER_STORES.clear()
    _WORKER_STORES.update(stores)


def _worker_reader(store: str) -> Reader:
    reader = _WORKER_READERS.get(store)
    if reader is None:
        reader = _WORKER_READERS[store] = open_reader(_WORKER_STORES[store])
    return reader


def _worker_buffer(name: str) -> shared_memory.SharedMemory:
    # The server unlinks the blocks it retires; their pages stay allocated while any
    # worker keeps them mapped, so let go of every block whose name is gone.
    for stale in [n for n in _WORKER_BUFFERS if n != name and not _shm_exists(n)]:
        _WORKER_BUFFERS.pop(stale).close()
    buffer = _WORKER_BUFFERS.get(name)
    if buffer is not None:
        _WORKER_BUFFERS.move_to_end(name)
    else:
        # Attach only: the server owns and unlinks every buffer. Workers share the
        # server's resource tracker (forkserver passes it on), whose registry is a set,
        # so attaching registers nothing new and nothing is unlinked behind our back.
        buffer = shared_memory.SharedMemory(name=name)
        _WORKER_BUFFERS[name] = buffer
        if len(_WORKER_BUFFERS) > _WORKER_BUFFERS_KEPT:
            _WORKER_BUFFERS.popitem(last=False)[1].close()
    return buffer


def _shm_exists(name: str) -> bool:
    if not os.path.isdir("/dev/shm"):
        return True  # cannot tell here: keep it (the count limit still applies)
    return os.path.exists(os.path.join("/dev/shm", name.lstrip("/")))


def decode_records(
    reader: Reader,
    record_ids: Sequence[int],
    size: int,
    method: ResizeMethod,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Decode in this process (the pool's unit of work, and the single-process path)."""
    if out is None:
        out = np.empty((len(record_ids), size, size, 3), dtype=np.uint8)
    values = reader.read_values(list(record_ids))
    for position, (record_id, value) in enumerate(zip(record_ids, values)):
        try:
            record_pixels(value, size, method, out[position])
        except DataLoss as error:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: {error}") from None
    return out


def _decode_chunk(store: str, record_ids: list[int], size: int, method: str, buffer: str, offset: int) -> float:
    """Decode a chunk into the shared buffer; the seconds it took (this worker's)."""
    started = time.perf_counter()
    shm = _worker_buffer(buffer)
    out = np.ndarray((len(record_ids), size, size, 3), dtype=np.uint8, buffer=shm.buf, offset=offset)
    decode_records(_worker_reader(store), record_ids, size, ResizeMethod(method), out)
    return time.perf_counter() - started


def _copy_raw_chunk(store: str, record_ids: list[int], size: int, buffer: str, offset: int) -> float:
    """Copy a chunk of raw records into the shared buffer; the seconds it took."""
    started = time.perf_counter()
    shm = _worker_buffer(buffer)
    out = np.ndarray((len(record_ids), size * size * 3), dtype=np.uint8, buffer=shm.buf, offset=offset)
    for position, payload in enumerate(_raw_payloads(_worker_reader(store), record_ids, size)):
        out[position] = np.frombuffer(payload, dtype=np.uint8)
    return time.perf_counter() - started


def _sleep_and_pid(_: int) -> int:
    time.sleep(0.05)  # long enough that each warm-up task lands on a different worker
    return os.getpid()


_RECORD_NAMED = re.compile(r"store '(?P<store>[^']*)', record (?P<record>\d+)")


class _DataLossLog:
    """Logs each damaged record once per server (a client retrying it must not flood the log)."""

    def __init__(self, keep: int = 100_000) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._keep = keep

    def report(self, error: DataLoss) -> None:
        message = str(error)
        match = _RECORD_NAMED.search(message)
        key = f"{match['store']}/{match['record']}" if match else message
        with self._lock:
            if key in self._seen:
                return
            if len(self._seen) < self._keep:
                self._seen.add(key)
        log.error("data loss: %s", message)


class _BufferPool:
    """Reusable shared-memory blocks (fresh ones would page-fault on every episode)."""

    def __init__(self, keep: int = 8, keep_bytes: int = 8 << 20) -> None:
        self._free: list[shared_memory.SharedMemory] = []
        self._lock = threading.Lock()
        self._keep = keep
        self._keep_bytes = keep_bytes  # free blocks kept, in all: a burst of big episodes must not stay resident

    def take(self, nbytes: int) -> shared_memory.SharedMemory:
        with self._lock:
            fitting = [b for b in self._free if b.size >= nbytes]
            if fitting:
                best = min(fitting, key=lambda b: b.size)
                self._free.remove(best)
                return best
        return shared_memory.SharedMemory(create=True, size=max(nbytes, 1 << 20))

    def give(self, buffer: shared_memory.SharedMemory) -> None:
        with self._lock:
            self._free.append(buffer)
            while len(self._free) > self._keep or (
                len(self._free) > 1 and sum(b.size for b in self._free) > self._keep_bytes
            ):
                # beyond the count, drop the smallest (least useful); beyond the bytes, the largest
                over_count = len(self._free) > self._keep
                victim = (min if over_count else max)(self._free, key=lambda b: b.size)
                self._free.remove(victim)
                _release(victim)

    def close(self) -> None:
        with self._lock:
            for buffer in self._free:
                _release(buffer)
            self._free.clear()


def _release(buffer: shared_memory.SharedMemory) -> None:
    try:
        buffer.close()
    except BufferError:
        pass  # a view is still alive somewhere; the mapping goes when it does
    try:
        buffer.unlink()
    except FileNotFoundError:
        pass


class PendingImages:
    """Pixels being decoded (or already at hand).

    ``result()`` waits and returns a private N x S x S x 3 array. ``pieces(counts)``
    waits and returns the pixels as buffers grouped by consecutive image counts
    (e.g. support, query) WITHOUT copying them: views of the shared-memory buffer or
    of the stored raw records, valid until ``release()``. The service encodes those
    views straight into the reply, the only copy the pixels see on the server.

    ``decode_seconds``: once the pixels are at hand, the seconds spent decoding them (or
    reading raw records), summed over the workers' chunks (for the server's metrics).
    """

    def __init__(self, shape: tuple[int, ...], array: np.ndarray | None = None,
                 chunks: list[futures.Future] | None = None, buffer: shared_memory.SharedMemory | None = None,
                 pool: _BufferPool | None = None, records: list[memoryview] | None = None,
                 on_error: Callable[[BaseException], BaseException] | None = None,
                 decode_seconds: float = 0.0) -> None:
        self.shape = shape
        self.decode_seconds = decode_seconds
        self._on_error = on_error
        self._array = array
        self._chunks = chunks or []
        self._buffer = buffer
        self._pool = pool
        self._records = records
        self._views: list[memoryview] = []

    @property
    def image_bytes(self) -> int:
        return int(np.prod(self.shape[1:]))

    def _wait(self) -> None:
        try:
            for chunk in self._chunks:
                self.decode_seconds += chunk.result() or 0.0
        except BaseException as error:
            self.release()
            replacement = self._on_error(error) if self._on_error is not None else error
            if replacement is error:
                raise
            raise replacement from None
        self._chunks = []

    def result(self) -> np.ndarray:
        if self._array is None:
            self._wait()
            if self._records is not None:
                self._array = np.frombuffer(b"".join(self._records), dtype=np.uint8).reshape(self.shape).copy()
            else:
                assert self._buffer is not None
                count = int(np.prod(self.shape))
                self._array = np.frombuffer(self._buffer.buf, dtype=np.uint8, count=count).reshape(self.shape).copy()
            self.release()
        return self._array

    def pieces(self, counts: Sequence[int]) -> list[list[memoryview]]:
        assert sum(counts) == self.shape[0], "counts must cover every image"
        self._wait()
        if self._records is not None:
            groups, start = [], 0
            for count in counts:
                groups.append(self._records[start : start + count])
                start += count
            return groups
        if self._array is not None:
            flat = memoryview(self._array.reshape(-1))
        else:
            assert self._buffer is not None
            flat = self._buffer.buf[: int(np.prod(self.shape))]
        self._views.append(flat)
        groups, start = [], 0
        for count in counts:
            end = start + count * self.image_bytes
            piece = flat[start:end]
            self._views.append(piece)
            groups.append([piece])
            start = end
        return groups

    def release(self) -> None:
        """Give the shared buffer back (after ``pieces`` were consumed, or unread); the
        views ``pieces`` returned are invalid from here on."""
        for view in reversed(self._views):
            view.release()
        self._views.clear()
        self._records = None  # a raw store's values, read ahead: a stalled stream must not keep them
        if self._buffer is not None and self._pool is not None:
            for chunk in self._chunks:
                chunk.cancel()
            futures.wait(self._chunks)
            self._pool.give(self._buffer)
            self._buffer = None

    def discard(self) -> None:
        """Drop everything held, pixels already at hand included (a shed lookahead)."""
        self.release()
        self._array = None


class Assembler:
    """Shared by all requests of a server; thread-safe (the executor queues work)."""

    def __init__(self, stores: Mapping[str, Reader], workers: int | None = None) -> None:
        self.readers = dict(stores)
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self._pool: futures.ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._buffers = _BufferPool(keep=4 * self.workers + 4)
        self._data_loss = _DataLossLog()
        self.pools_replaced = 0
        if self.workers > 1:
            self._pool = self._new_pool()

    def _new_pool(self) -> futures.ProcessPoolExecutor:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["sampler_server.assembly.assembler"])
        return futures.ProcessPoolExecutor(
            self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=({name: reader_location(reader) for name, reader in self.readers.items()},),
        )

    def _replace_pool(self, broken: futures.ProcessPoolExecutor) -> None:
        """Swap a broken pool for a new one (once, however many requests saw it break)."""
        with self._pool_lock:
            if self._pool is not broken:
                return
            self._pool = self._new_pool()
            self.pools_replaced += 1
        log.error("a decode worker process died; replaced the pool of %d workers", self.workers)
        broken.shutdown(wait=False, cancel_futures=True)
        self.warm_up(wait=False)

    def worker_pids(self) -> list[int]:
        """Process ids of the current decode workers (for diagnostics and tests)."""
        pool = self._pool
        processes = getattr(pool, "_processes", None) or {}
        return sorted(processes)

    def warm_up(self, wait: bool = True) -> None:
        """Start every worker now, so the first request does not pay for it. With
        ``wait=False`` the workers start while the caller goes on (a server opens its
        port meanwhile): even the submits run on a thread of their own, since each
        waits for the forkserver, which may still be importing the workers' modules;
        requests that arrive first queue behind the start-up."""
        if not wait:
            threading.Thread(target=self._start_workers, name="decode-warm-up", daemon=True).start()
            return
        futures.wait(self._start_workers())

    def _start_workers(self) -> list[futures.Future]:
        pool = self._pool
        if pool is None:
            return []
        try:
            return [pool.submit(_sleep_and_pid, worker) for worker in range(self.workers)]
        except BrokenProcessPool:
            self._replace_pool(pool)
        except RuntimeError:  # closed meanwhile (a server stopped at once): nothing to start
            pass
        return []

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._buffers.close()

    def _checked(self, error: BaseException) -> BaseException:
        """Log a data loss once; turn a broken pool into a DataLoss saying what happened."""
        if isinstance(error, DataLoss):
            self._data_loss.report(error)
        return error

    def raw_size(self, store: str) -> int | None:
        value = self.readers[store].manifest.pack_options.get("raw_size")
        return int(value) if value else None

    def check_raw(self, store: str, size: int, method: ResizeMethod) -> bool:
        """True when ``store`` is a raw store that can serve (size, method) as stored;
        False for encoded stores; FailedPrecondition for any other request to a raw store."""
        raw_size = self.raw_size(store)
        if raw_size is None:
            return False
        recorded = self.readers[store].manifest.pack_options.get("raw_resize")
        if not recorded:
            raise FailedPrecondition(
                f"store {store!r} holds raw {raw_size}x{raw_size} pixels resized by an older sampler-server on a "
                f"half-pixel grid that matches no resize method; repack it (pack --raw-size {raw_size} "
                f"[--raw-resize METHOD]) or serve an encoded store of the same source"
            )
        if size != raw_size:
            raise FailedPrecondition(
                f"store {store!r} holds raw {raw_size}x{raw_size} pixels (packed with --raw-resize {recorded}) and "
                f"keeps no source images; images.image_size {size} cannot be made from it: request {raw_size} "
                f"or serve an encoded store of the same source"
            )
        if method.value != recorded:
            raise FailedPrecondition(
                f"store {store!r} holds raw pixels resized with {recorded!r} at pack time; resize method "
                f"{method.value!r} was requested: request {recorded!r}, repack with --raw-resize {method.value}, "
                f"or serve an encoded store of the same source"
            )
        return True

    def submit(
        self, store: str, record_ids: Sequence[int], size: int, method: ResizeMethod = ResizeMethod.BILINEAR
    ) -> PendingImages:
        """Start decoding; returns at once. Small or raw requests are done right here.

        Raises:
            FailedPrecondition: ``store`` is a raw store and (size, method) is not what
                it was packed with (see the module docstring).
        """
        reader = self.readers[store]
        ids = [int(i) for i in record_ids]
        shape = (len(ids), size, size, 3)
        if not ids:
            self.check_raw(store, size, method)
            return PendingImages(shape, np.empty(shape, dtype=np.uint8))
        started = time.perf_counter()
        if self.check_raw(store, size, method):
            if self._pool is None or self.workers < RAW_POOL_WORKERS or len(ids) < RAW_POOLED:
                records = self._logged(_raw_payloads, reader, ids, size)
                return PendingImages(shape, records=records, decode_seconds=time.perf_counter() - started)
            task, extra, chunk = _copy_raw_chunk, (size,), RAW_CHUNK
        elif self._pool is None or len(ids) < _MIN_CHUNK:
            array = self._logged(decode_records, reader, ids, size, method)
            return PendingImages(shape, array, decode_seconds=time.perf_counter() - started)
        else:
            task, extra, chunk = _decode_chunk, (size, method.value), _MIN_CHUNK
        buffer = self._buffers.take(int(np.prod(shape)))
        try:
            pool, chunks = self._submit_chunks(store, ids, size * size * 3, task, extra, chunk, buffer.name)
        except BaseException:
            self._buffers.give(buffer)
            raise

        def on_error(error: BaseException) -> BaseException:
            if isinstance(error, BrokenProcessPool):
                self._replace_pool(pool)
                return DataLoss(
                    f"store {store!r}: a decode worker process died while decoding this request's "
                    f"{len(ids)} images (records {min(ids)} to {max(ids)}); the decode workers were restarted "
                    "and other requests are served; retry the request"
                )
            return self._checked(error)

        return PendingImages(shape, chunks=chunks, buffer=buffer, pool=self._buffers, on_error=on_error)

    def _submit_chunks(
        self, store: str, ids: list[int], per_image: int, task: Callable[..., None], extra: tuple,
        min_chunk: int, buffer: str
    ) -> tuple[futures.ProcessPoolExecutor, list[futures.Future]]:
        """Queue ``task(store, ids, *extra, buffer, offset)`` over chunks of at least
        ``min_chunk`` ids on the current pool; a pool found broken before this request ran
        is replaced and the request queued on the new one."""
        pieces = max(1, min(self.workers, len(ids) // min_chunk))
        step = -(-len(ids) // pieces)
        for attempt in range(2):
            pool = self._pool
            if pool is None:
                raise DataLoss("the decode workers are shut down (the server is stopping)")
            chunks: list[futures.Future] = []
            try:
                for i in range(0, len(ids), step):
                    chunks.append(
                        pool.submit(task, store, ids[i : i + step], *extra, buffer, i * per_image)
                    )
                return pool, chunks
            except BrokenProcessPool:
                for chunk in chunks:
                    chunk.cancel()
                futures.wait(chunks)
                self._replace_pool(pool)
        raise DataLoss(f"store {store!r}: decode workers keep dying at start-up; see the server log")

    def _logged(self, function: Callable[..., T], *args: object) -> T:
        try:
            return function(*args)
        except DataLoss as error:
            self._data_loss.report(error)
            raise

    def images(
        self, store: str, record_ids: Sequence[int], size: int, method: ResizeMethod = ResizeMethod.BILINEAR
    ) -> np.ndarray:
        """len(record_ids) x size x size x 3 uint8, in the order given."""
        return self.submit(store, record_ids, size, method).result()

    def encoded(self, store: str, record_ids: Sequence[int]) -> list[tuple[bytes, Encoding, int, int, int]]:
        """The stored payloads (no decode): (bytes, encoding, width, height, channels)."""
        return self._logged(_encoded_payloads, self.readers[store], [int(i) for i in record_ids])


def _encoded_payloads(reader: Reader, ids: list[int]) -> list[tuple[bytes, Encoding, int, int, int]]:
    out = []
    for record_id, value in zip(ids, reader.read_values(ids)):
        try:
            encoding, width, height, channels, offset = read_header(value)
        except DataLoss as error:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: {error}") from None
        out.append((value[offset:], encoding, width, height, channels))
    return out


def _raw_payloads(reader: Reader, ids: list[int], size: int) -> list[memoryview]:
    """The pixel payload of each raw record, as views of the values read (no copy)."""
    out = []
    expected = size * size * 3
    for record_id, value in zip(ids, reader.read_values(ids)):
        try:
            encoding, width, height, channels, offset = read_header(value)
        except DataLoss as error:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: {error}") from None
        if encoding is not Encoding.RAW or len(value) - offset != expected:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: not a {size}x{size}x3 raw record")
        out.append(memoryview(value)[offset:])
    return out
