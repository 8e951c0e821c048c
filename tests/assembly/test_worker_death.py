"""A decode worker that dies fails only the episodes it was decoding, with a DataLoss
saying so; the pool is replaced and the next requests are served."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from conftest import generate_fixture, pack_fixture

from sampler_server.assembly.assembler import Assembler, decode_records
from sampler_server.errors import DataLoss
from sampler_server.imaging import ResizeMethod
from sampler_server.store.reader import StoreReader


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    root = tmp_path_factory.mktemp("worker_death")
    fixture = generate_fixture("image_folder", root, num_classes=4, images_per_class=12)
    return StoreReader(pack_fixture(fixture, root / "data", name="folder").store_dir)


def test_killed_worker_fails_its_episode_and_the_pool_is_replaced(reader):
    ids = list(range(reader.num_records)) * 40  # long enough to be mid-decode when killed
    assembler = Assembler({"folder": reader}, workers=2)
    try:
        assembler.warm_up()
        for _ in range(5):
            pending = assembler.submit("folder", ids, 96)
            for pid in assembler.worker_pids():
                os.kill(pid, signal.SIGKILL)
            try:
                pending.result()
            except DataLoss as error:
                message = str(error)
                break
        else:
            pytest.fail("the workers finished before they could be killed")
        assert "store 'folder': a decode worker process died while decoding" in message
        assert "retry" in message
        assert assembler.pools_replaced == 1
        expected = decode_records(reader, ids[:64], 40, ResizeMethod.BILINEAR)
        for _ in range(3):  # the next episodes are served by the new pool
            assert np.array_equal(assembler.images("folder", ids[:64], 40), expected)
    finally:
        assembler.close()


def test_worker_killed_while_idle_costs_no_request(reader):
    ids = list(range(reader.num_records))
    assembler = Assembler({"folder": reader}, workers=2)
    try:
        assembler.warm_up()
        os.kill(assembler.worker_pids()[0], signal.SIGKILL)
        time.sleep(0.5)  # the executor notices the dead worker and marks the pool broken
        expected = decode_records(reader, ids, 24, ResizeMethod.BILINEAR)
        assert np.array_equal(assembler.images("folder", ids, 24), expected)
        assert assembler.pools_replaced == 1
    finally:
        assembler.close()
