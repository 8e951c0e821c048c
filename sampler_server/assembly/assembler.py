"""Record ids -> packed uint8 NHWC tensors, with decoding spread over processes.

The server process only reads LMDB values it must copy anyway; JPEG/PNG decoding
and resizing run in a pool of worker processes (decoding is CPU-bound and the GIL
would serialise threads). Workers start from a ``forkserver`` (never forked from a
process already running gRPC threads) and open the stores themselves, read-only.
Stores packed with ``--raw-size`` equal to the requested size skip the pool: their
records are copied straight into the output.

The pixels of an image depend only on its record and (size, resize method): never
on which worker decoded it or how ids were chunked.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import DataLoss
from sampler_server.imaging import ResizeMethod
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, read_header

_MIN_CHUNK = 8
_WORKER_READERS: dict[str, StoreReader] = {}
_WORKER_STORES: dict[str, str] = {}


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


def decode_records(
    reader: StoreReader, record_ids: Sequence[int], size: int, method: ResizeMethod
) -> np.ndarray:
    """Decode in this process (the pool's unit of work, and the single-process path)."""
    out = np.empty((len(record_ids), size, size, 3), dtype=np.uint8)
    values = reader.read_values(list(record_ids))
    for position, (record_id, value) in enumerate(zip(record_ids, values)):
        try:
            out[position] = record_pixels(value, size, method)
        except DataLoss as error:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: {error}") from None
    return out


def _decode_chunk(store: str, record_ids: list[int], size: int, method: str) -> bytes:
    return decode_records(_worker_reader(store), record_ids, size, ResizeMethod(method)).tobytes()


class Assembler:
    """Shared by all requests of a server; thread-safe (the executor queues work)."""

    def __init__(self, stores: Mapping[str, StoreReader], workers: int | None = None) -> None:
        self.readers = dict(stores)
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self._pool: futures.ProcessPoolExecutor | None = None
        if self.workers > 1:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["sampler_server.assembly.assembler"])
            self._pool = futures.ProcessPoolExecutor(
                self.workers,
                mp_context=context,
                initializer=_init_worker,
                initargs=({name: str(reader.directory) for name, reader in self.readers.items()},),
            )

    def warm_up(self) -> None:
        """Start every worker now, so the first request does not pay for it."""
        if self._pool is not None:
            list(self._pool.map(_noop_wait, range(self.workers)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def raw_size(self, store: str) -> int | None:
        return self.readers[store].manifest.pack_options.get("raw_size")

    def images(
        self, store: str, record_ids: Sequence[int], size: int, method: ResizeMethod = ResizeMethod.BILINEAR
    ) -> np.ndarray:
        """len(record_ids) x size x size x 3 uint8, in the order given."""
        reader = self.readers[store]
        ids = [int(i) for i in record_ids]
        if not ids:
            return np.empty((0, size, size, 3), dtype=np.uint8)
        if self.raw_size(store) == size:
            return _copy_raw(reader, ids, size)
        if self._pool is None or len(ids) < 2 * _MIN_CHUNK:
            return decode_records(reader, ids, size, method)
        chunks = _chunks(ids, self.workers)
        pending = [self._pool.submit(_decode_chunk, store, chunk, size, method.value) for chunk in chunks]
        out = np.empty((len(ids), size, size, 3), dtype=np.uint8)
        position = 0
        for chunk, future in zip(chunks, pending):
            block = np.frombuffer(future.result(), dtype=np.uint8).reshape(len(chunk), size, size, 3)
            out[position : position + len(chunk)] = block
            position += len(chunk)
        return out

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


def _noop_wait(_: int) -> int:
    import time

    time.sleep(0.05)  # long enough that each task lands on a different worker
    return os.getpid()


def _chunks(ids: list[int], workers: int) -> list[list[int]]:
    pieces = max(1, min(2 * workers, len(ids) // _MIN_CHUNK))
    step = -(-len(ids) // pieces)
    return [ids[i : i + step] for i in range(0, len(ids), step)]


def _copy_raw(reader: StoreReader, ids: list[int], size: int) -> np.ndarray:
    out = np.empty((len(ids), size, size, 3), dtype=np.uint8)
    flat = out.reshape(len(ids), -1)
    expected = size * size * 3
    for position, (record_id, value) in enumerate(zip(ids, reader.read_values(ids))):
        try:
            encoding, width, height, channels, offset = read_header(value)
        except DataLoss as error:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: {error}") from None
        if encoding is not Encoding.RAW or len(value) - offset != expected:
            raise DataLoss(f"store {reader.manifest.name!r}, record {record_id}: not a {size}x{size}x3 raw record")
        flat[position] = np.frombuffer(value, dtype=np.uint8, count=expected, offset=offset)
    return out


def stores_from_dir(data_dir: Path) -> dict[str, StoreReader]:
    from sampler_server.store.reader import find_stores

    return {path.name: StoreReader(path) for path in find_stores(data_dir)}
