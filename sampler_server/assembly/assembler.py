"""Record ids -> packed uint8 NHWC tensors, with decoding spread over processes.

The server process only samples and packs replies; JPEG/PNG decoding and resizing
run in a pool of worker processes (CPU-bound work the GIL would serialise in
threads). Workers start from a ``forkserver`` (never forked from a process already
running gRPC threads), open the stores themselves read-only, and write pixels
straight into shared-memory buffers the server reuses, so no pixel crosses a pipe.
Work is submitted without blocking (``submit``), so a stream can keep several
episodes in flight and the workers never wait for the sender. Stores packed with
``--raw-size`` skip the pool: their records are copied straight into the output, but
only for requests at the size AND with the resize method they were packed with
(``pack_options["raw_resize"]``). Any other request is refused (FailedPrecondition):
a raw store keeps no source bytes, and serving its pixels (or resizing them again)
under another method's name would change pixels silently. Raw stores packed before
the method was recorded used a half-pixel resize that matches no method; they are
refused until repacked.

The pixels of an image depend only on its record and (size, resize method): never
on which worker decoded it or how ids were chunked.
"""

from __future__ import annotations

import concurrent.futures as futures
from collections import OrderedDict
import multiprocessing
import os
import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import DataLoss, FailedPrecondition
from sampler_server.imaging import ResizeMethod
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, read_header

_MIN_CHUNK = 16
_WORKER_READERS: dict[str, StoreReader] = {}
_WORKER_STORES: dict[str, str] = {}
_WORKER_BUFFERS: "OrderedDict[str, shared_memory.SharedMemory]" = OrderedDict()
_WORKER_BUFFERS_KEPT = 64


def _init_worker(stores: Mapping[str, str]) -> None:
    import cv2

    cv2.setNumThreads(1)
    _WORKER_STORES.clear()
    _WORKER_STORES.update(stores)


def _worker_reader(store: str) -> StoreReader:
    reader = _WORKER_READERS.get(store)
    if reader is None:
        reader = _WORKER_READERS[store] = StoreReader(_WORKER_STORES[store])
    return reader


def _worker_buffer(name: str) -> shared_memory.SharedMemory:
    buffer = _WORKER_BUFFERS.get(name)
    if buffer is not None:
        _WORKER_BUFFERS.move_to_end(name)
    else:
        # Attach only: the server owns and unlinks every buffer. Workers share the
        # server's resource tracker (forkserver passes it on), whose registry is a set,
        # so attaching registers nothing new and nothing is unlinked behind our back.
        buffer = shared_memory.SharedMemory(name=name)
        _WORKER_BUFFERS[name] = buffer
        if len(_WORKER_BUFFERS) > _WORKER_BUFFERS_KEPT:  # the server retires buffers now and then
            _WORKER_BUFFERS.popitem(last=False)[1].close()
    return buffer


def decode_records(
    reader: StoreReader,
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


def _decode_chunk(store: str, record_ids: list[int], size: int, method: str, buffer: str, offset: int) -> None:
    shm = _worker_buffer(buffer)
    out = np.ndarray((len(record_ids), size, size, 3), dtype=np.uint8, buffer=shm.buf, offset=offset)
    decode_records(_worker_reader(store), record_ids, size, ResizeMethod(method), out)


def _sleep_and_pid(_: int) -> int:
    time.sleep(0.05)  # long enough that each warm-up task lands on a different worker
    return os.getpid()


class _BufferPool:
    """Reusable shared-memory blocks (fresh ones would page-fault on every episode)."""

    def __init__(self, keep: int = 8) -> None:
        self._free: list[shared_memory.SharedMemory] = []
        self._lock = threading.Lock()
        self._keep = keep

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
            if len(self._free) > self._keep:
                smallest = min(self._free, key=lambda b: b.size)
                self._free.remove(smallest)
                _release(smallest)

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
    """

    def __init__(self, shape: tuple[int, ...], array: np.ndarray | None = None,
                 chunks: list[futures.Future] | None = None, buffer: shared_memory.SharedMemory | None = None,
                 pool: _BufferPool | None = None, records: list[memoryview] | None = None) -> None:
        self.shape = shape
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
                chunk.result()
        except BaseException:
            self.release()
            raise
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
        if self._buffer is not None and self._pool is not None:
            for chunk in self._chunks:
                chunk.cancel()
            futures.wait(self._chunks)
            self._pool.give(self._buffer)
            self._buffer = None

    discard = release


class Assembler:
    """Shared by all requests of a server; thread-safe (the executor queues work)."""

    def __init__(self, stores: Mapping[str, StoreReader], workers: int | None = None) -> None:
        self.readers = dict(stores)
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self._pool: futures.ProcessPoolExecutor | None = None
        self._buffers = _BufferPool(keep=4 * self.workers + 4)
        if self.workers > 1:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["sampler_server.assembly.assembler"])
            self._pool = futures.ProcessPoolExecutor(
                self.workers,
                mp_context=context,
                initializer=_init_worker,
                initargs=({name: str(reader.directory) for name, reader in self.readers.items()},),
            )

    def warm_up(self, wait: bool = True) -> None:
        """Start every worker now, so the first request does not pay for it. With
        ``wait=False`` the workers start while the caller goes on (a server opens its
        port meanwhile); requests that arrive first queue behind the start-up."""
        if self._pool is not None:
            started = [self._pool.submit(_sleep_and_pid, worker) for worker in range(self.workers)]
            if wait:
                futures.wait(started)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._buffers.close()

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
        if self.check_raw(store, size, method):
            if not ids:
                return PendingImages(shape, np.empty(shape, dtype=np.uint8))
            return PendingImages(shape, records=_raw_payloads(reader, ids, size))
        if not ids:
            return PendingImages(shape, np.empty(shape, dtype=np.uint8))
        if self._pool is None or len(ids) < _MIN_CHUNK:
            return PendingImages(shape, decode_records(reader, ids, size, method))
        buffer = self._buffers.take(int(np.prod(shape)))
        per_image = size * size * 3
        pieces = max(1, min(self.workers, len(ids) // _MIN_CHUNK))
        step = -(-len(ids) // pieces)
        chunks = [
            self._pool.submit(_decode_chunk, store, ids[i : i + step], size, method.value, buffer.name, i * per_image)
            for i in range(0, len(ids), step)
        ]
        return PendingImages(shape, chunks=chunks, buffer=buffer, pool=self._buffers)

    def images(
        self, store: str, record_ids: Sequence[int], size: int, method: ResizeMethod = ResizeMethod.BILINEAR
    ) -> np.ndarray:
        """len(record_ids) x size x size x 3 uint8, in the order given."""
        return self.submit(store, record_ids, size, method).result()

    def encoded(self, store: str, record_ids: Sequence[int]) -> list[tuple[bytes, Encoding, int, int, int]]:
        """The stored payloads (no decode): (bytes, encoding, width, height, channels)."""
        out = []
        reader = self.readers[store]
        for record_id, value in zip(record_ids, reader.read_values([int(i) for i in record_ids])):
            try:
                encoding, width, height, channels, offset = read_header(value)
            except DataLoss as error:
                raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: {error}") from None
            out.append((value[offset:], encoding, width, height, channels))
        return out


def _raw_payloads(reader: StoreReader, ids: list[int], size: int) -> list[memoryview]:
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


def stores_from_dir(data_dir: Path) -> dict[str, StoreReader]:
    from sampler_server.store.reader import find_stores

    return {path.name: StoreReader(path) for path in find_stores(data_dir)}
