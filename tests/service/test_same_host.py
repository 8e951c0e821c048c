"""The same-host transport through a real server: the same arrays as the messages on
every pixel stream, only for clients that opened and released the probe, bounded
server memory, and nothing left in /dev/shm by a killed client or a stopped server."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture, start_serve
from prerequisites import require_shared_memory
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from clients.core import EpisodeSpec, SamplerClient
from sampler_server.cli.main import main
from sampler_server.service.shared_memory import SameHostTransport
from sampler_common.wire import segments
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc
from sampler_common.wire.segments import SegmentMaps, SegmentRef



@pytest.fixture(autouse=True)
def _shared_memory() -> None:
    require_shared_memory()


ENCODED = EpisodeSpec(sources=("folder",), split="train", seed=4, image_size=32)  # decoded by the worker pool
RAW = EpisodeSpec(sources=("folder_raw32",), split="train", seed=4, image_size=32)
COG = {"level_size": 4, "min_images": 1}


@pytest.fixture(scope="module")
def mixed(tfds_dir, tmp_path_factory):
    """One server over an encoded and a raw image-folder store, a VTAB (clevr) store and an ILSVRC store."""
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("same-host")
    data = root / "data"
    folder = generate_fixture("image_folder", root, num_classes=12, images_per_class=10)
    pack_fixture(folder, data, name="folder")
    pack_fixture(folder, data, name="folder_raw32", raw_size=32)
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(tfds_dir), "--output", str(data),
                 "--quiet", "--workers", "1"]) == 0
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=4, images_per_class=56), data, name="ilsvrc_2012")
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=2, threads=8, grace_seconds=0.5)).start()
    yield server
    server.stop(grace=0.5)
    assert server.servicer.same_host.owned() == []


def _same(a, b) -> None:
    """Equal as delivered: every array bit for bit (same dtype and shape), every other field."""
    assert type(a) is type(b)
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), field.name
            assert x.flags.writeable == y.flags.writeable, field.name  # views are read-only either way
        else:
            assert x == y, field.name


def test_every_pixel_stream_is_bit_identical_through_shared_memory(mixed):
    transport = mixed.servicer.same_host
    with SamplerClient(mixed.address) as shm, SamplerClient(mixed.address, same_host=False) as plain:
        assert shm.transport == "same-host" and plain.transport == "grpc"
        calls = [
            lambda c: list(c.episodes(ENCODED, start=3, count=4)),
            lambda c: list(c.episodes(RAW, start=0, count=4, step=3)),
            lambda c: [c.episode(ENCODED, 11), c.episode(RAW, 2)],
            lambda c: list(c.batches("folder", "train", 20, seed=1, count=3, image_size=32)),
            lambda c: list(c.batches("folder_raw32", "train", 20, seed=1, count=3, image_size=32)),
            lambda c: list(c.eval_batches("clevr_count", "test", 16, image_size=12)),
            lambda c: list(c.task_batches("clevr_count", "train", 10, seed=3, count=3, image_size=12)),
            lambda c: [c.task_episode("clevr_count", image_size=12, chunk_size=9, support_split="val",
                                      query_split="test")],
            lambda c: list(c.stream_cog_batches("IN-1K", "train", 4, 1, batch_size=3, image_size=16, **COG)),
        ]
        for call in calls:
            before = transport.written
            through_memory, in_messages = call(shm), call(plain)
            assert transport.written > before  # the same-host client's pixels did come in segments
            assert len(through_memory) == len(in_messages) > 0
            for a, b in zip(through_memory, in_messages):
                _same(a, b)
        episode = shm.episode(ENCODED, 5)
        assert episode.request.images.same_host_token == ""  # reports never carry it
        assert shm.report_episode("same-host-run", episode, episode.query_labels.tolist()).stored == 1
    assert transport.reused > 0  # released pages carried later replies
    del through_memory, in_messages, a, b, episode
    gc.collect()  # the arrays are gone: every segment is released, none held or waiting
    deadline = time.monotonic() + 5
    while any(not name.endswith(segments.RELEASED) for name in transport.owned()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert transport.owned() and all(name.endswith(segments.RELEASED) for name in transport.owned())


def _offer(stub) -> tuple[str, str]:
    """(probe name, the token in it), without unlinking the probe."""
    name = stub.OfferSameHost(pb.SameHostRequest()).probe_segment
    with open(segments.segment_path(name), encoding="ascii") as handle:
        return name, handle.read()


def _first(stub, token: str) -> pb.Episode:
    request = pb.StreamEpisodesRequest(request=RAW.to_request(), count=1)
    request.request.images.same_host_token = token
    (only,) = stub.StreamEpisodes(request)  # read to its end: a call dropped early is a cancel, which reclaims
    return only


def test_only_a_client_that_opened_and_released_the_probe_gets_segments(mixed):
    with grpc.insecure_channel(mixed.address) as channel:
        stub = pb_grpc.SamplerStub(channel)
        plain = _first(stub, "")
        assert plain.support_images.data and not plain.support_images.HasField("segment")
        assert not _first(stub, "0" * 32).support_images.HasField("segment")  # a token never offered
        name, token = _offer(stub)
        assert not _first(stub, token).support_images.HasField("segment")  # the probe was read, not released
        os.unlink(segments.segment_path(name))
        reply = _first(stub, token)
        ref = reply.support_images.segment
        assert ref.name.startswith(mixed.servicer.same_host.prefix) and not reply.support_images.data
        data = SegmentMaps().view(SegmentRef(ref.name, ref.offset, ref.size))
        assert bytes(data) == plain.support_images.data and not segments.segment_exists(ref.name)
        assert _first(stub, token).support_images.HasField("segment")  # the token stays good


def test_the_plain_transport_where_the_server_shared_memory_is_not_ours(served, tmp_path):
    """A server whose segments this client cannot open (another host, or a container with
    its own /dev/shm: here, another directory) and one with the transport off."""
    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.limits import ServiceLimits

    private = tmp_path / "their-shm"
    private.mkdir()
    for limits, directory in ((ServiceLimits(), private), (ServiceLimits(shm_bytes=0), None)):
        server = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, threads=4, limits=limits,
                                            metrics_path=tmp_path / "metrics.sqlite")).start()
        try:
            if directory is not None:
                server.servicer.same_host = SameHostTransport(64 << 20, directory=directory)
            with SamplerClient(server.address) as client, SamplerClient(served.address, same_host=False) as reference:
                assert client.transport == "grpc"
                for a, b in zip(client.episodes(RAW, count=2), reference.episodes(RAW, count=2)):
                    _same(a, b)
            offer = pb_grpc.SamplerStub(grpc.insecure_channel(server.address)).OfferSameHost(pb.SameHostRequest())
            if directory is None:
                assert offer.probe_segment == "" and "--shm-mb 0" in offer.reason
            else:
                assert (directory / offer.probe_segment).exists()  # it exists, just not where this client looks
            assert server.servicer.same_host.written == 0
        finally:
            server.stop(grace=0.5)
        if directory is not None:
            assert list(directory.iterdir()) == []


def test_opting_out(served, monkeypatch):
    monkeypatch.setenv("SAMPLER_SAME_HOST", "0")
    assert SamplerClient(served.address).transport == "grpc"
    assert SamplerClient(served.address, same_host=True).transport == "same-host"
    monkeypatch.setenv("SAMPLER_SAME_HOST", "sometimes")
    with pytest.raises(ValueError, match="SAMPLER_SAME_HOST: got 'sometimes'"):
        SamplerClient(served.address)
    monkeypatch.delenv("SAMPLER_SAME_HOST")
    assert SamplerClient(served.address).transport == "same-host"


def _server(served, tmp_path, **limits):
    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.limits import ServiceLimits

    return RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, threads=4,
                                      limits=ServiceLimits(**limits), metrics_path=tmp_path / "metrics.sqlite")).start()


def test_a_stream_nobody_reads_holds_few_segments_and_its_cancel_frees_them(served, tmp_path):
    server = _server(served, tmp_path, shm_bytes=1 << 30)
    transport = server.servicer.same_host
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.SamplerStub(channel)
            name, token = _offer(stub)
            os.unlink(segments.segment_path(name))
            request = pb.StreamEpisodesRequest(request=RAW.to_request())  # unbounded
            request.request.images.same_host_token = token
            stream = stub.StreamEpisodes(request)
            next(stream)  # then read nothing: the small replies pile up in gRPC, the segments must not
            time.sleep(1.0)
            held = transport.owned()
            assert 1 <= len(held) <= transport.ahead + 1, held
            page = 4096
            assert transport.used == sum(-(-(segments.SEGMENT_DIR / n).stat().st_size // page) * page for n in held)
            stream.cancel()
            deadline = time.monotonic() + 5
            while transport.owned() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert transport.owned() == [] and transport.used == 0
    finally:
        server.stop(grace=0.5)


def test_the_budget_bounds_segments_and_what_does_not_fit_comes_in_messages(served, tmp_path):
    budget = 3 * 32 * 32 * 3 * 40  # about two of these episodes
    server = _server(served, tmp_path, shm_bytes=budget)
    transport = server.servicer.same_host
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], transport.used)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with SamplerClient(server.address) as a, SamplerClient(server.address) as b, \
                SamplerClient(served.address, same_host=False) as plain:
            streams = [a.episodes(RAW, count=12), b.episodes(ENCODED, count=12)]
            got = [[], []]
            for _ in range(12):
                for stream, out in zip(streams, got):
                    out.append(next(stream))
            for out, spec in zip(got, (RAW, ENCODED)):
                for x, y in zip(out, plain.episodes(spec, count=12)):
                    _same(x, y)
    finally:
        stop.set()
        watcher.join()
        server.stop(grace=0.5)
    assert 0 < transport.written < 24  # some replies in segments, the rest in messages
    assert 0 < peak[0] <= budget


def test_arrays_a_client_keeps_never_change_while_pages_are_reused(served, tmp_path):
    """Released pages carry later replies, held ones never; a budget that runs short
    unlinks held segments (their mappings stay the client's) rather than touch them."""
    server = _server(served, tmp_path, shm_bytes=4 * 32 * 32 * 3 * 40)
    transport = server.servicer.same_host
    # one shape (5 ways x (2 + 2) = 20 images): every released segment fits every later
    # reply, so whether pages are reused does not depend on the sizes MD's episodes draw
    fixed = dataclasses.replace(RAW, ways=5, shots=2, query=2)
    try:
        with SamplerClient(server.address) as client, SamplerClient(served.address, same_host=False) as plain:
            kept, copies = [], []
            for n, episode in enumerate(client.episodes(fixed, count=40)):
                if n % 4 == 0:  # keep every fourth episode (held), drop the others (released, reused)
                    kept.append(episode)
                    copies.append(episode.support_images.copy())
            assert transport.reused > 0
            assert any(name.endswith(segments.HELD) for name in transport.owned())
            assert len(kept) * 32 * 32 * 3 * 20 > transport.budget_bytes  # more than the budget stays held
            assert all(len(episode.support_images) + len(episode.query_images) == 20 for episode in kept)
            for episode, copy, reference in zip(kept, copies, plain.episodes(fixed, count=10, step=4), strict=True):
                assert np.array_equal(episode.support_images, copy)
                _same(episode, reference)
    finally:
        server.stop(grace=0.5)
    assert transport.owned() == []


def test_a_reply_reclaimed_before_its_client_read_it_is_sent_again(served, tmp_path):
    server = _server(served, tmp_path, shm_release_seconds=0.3)
    try:
        with SamplerClient(server.address, prefetch=1) as slow, SamplerClient(served.address, same_host=False) as plain:
            stream = slow.episodes(RAW, count=8)
            got = [next(stream)]
            time.sleep(1.5)  # the replies gRPC holds for us meanwhile lose their segments
            got.extend(stream)
            assert server.servicer.same_host.reclaimed > 0
            assert slow.channel.same_host  # a reclaimed reply now and then does not turn the transport off
            for x, y in zip(got, plain.episodes(RAW, count=8), strict=True):
                _same(x, y)
    finally:
        server.stop(grace=0.5)


_SLOW_READER = """
import sys, time
from clients.core import EpisodeSpec, SamplerClient
client = SamplerClient(sys.argv[1], prefetch=1)
assert client.transport == "same-host"
for n, episode in enumerate(client.episodes(EpisodeSpec(sources=("folder_raw32",), split="train", image_size=32))):
    if n == 0:
        print("reading", flush=True)
    time.sleep(0.2)
"""


def _ours(pid: int) -> list[str]:
    prefix = f"{segments.NAME_PREFIX}{pid & 0xFFFFFFFF:08x}"
    return sorted(n for n in os.listdir(segments.SEGMENT_DIR) if n.startswith(prefix))


def _until_none(pid: int, seconds: float = 10.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while _ours(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _ours(pid)


def _slow_reader(address: str) -> subprocess.Popen:
    reader = subprocess.Popen([sys.executable, "-c", _SLOW_READER, address], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert reader.stdout.readline() == "reading\n"
    return reader


@pytest.mark.parametrize("ending", ["client SIGKILL", "server SIGTERM", "server SIGKILL"])
def test_nothing_is_left_in_shared_memory(served, ending):
    server, address = start_serve(served.data, "--workers", "1", stderr=subprocess.DEVNULL)
    reader = None
    try:
        reader = _slow_reader(address)
        deadline = time.monotonic() + 5
        while not _ours(server.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _ours(server.pid)  # the slow reader's replies wait in segments
        if ending == "client SIGKILL":
            reader.send_signal(signal.SIGKILL)
            reader.wait(timeout=10)
            assert _until_none(server.pid) == []
            assert server.poll() is None
        elif ending == "server SIGTERM":
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=30) == 0
            assert _ours(server.pid) == []
        else:  # the resource tracker unlinks what a killed server registered
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=10)
            assert _until_none(server.pid) == []
    finally:
        for process in (reader, server):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)


@pytest.mark.parametrize("flags, message", [
    (["--shm-mb", "-1"], "--shm-mb: got -1, expected 0 (off) or more MiB"),
    (["--shm-release-seconds", "0"], "--shm-release-seconds: got 0, expected more than 0"),
])
def test_serve_refuses_bad_same_host_options_in_one_line(served, capsys, flags, message):
    assert main(["serve", "--data", str(served.data), "--port", "0", *flags]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(message)


def test_the_budget_counts_whole_pages_and_segments(tmp_path, monkeypatch):
    """Tiny replies a client keeps cannot pile up files: each takes at least a page of the
    budget, and the count of segments is bounded too (held ones go to their client)."""
    from clients.core import to_array
    from sampler_server.service import shared_memory
    from sampler_common.wire.tensors import TensorField

    monkeypatch.setattr(shared_memory, "MAX_SEGMENTS", 5)
    transport = SameHostTransport(1 << 20, directory=tmp_path)
    stream = shared_memory.StreamSegments(transport)
    field = pb.Batch.DESCRIPTOR.fields_by_name["images"].number
    kept = []
    for k in range(12):
        pixels = bytes([k]) * 300
        reply = stream.reply(pb.Batch(index=k), [TensorField(field, pb.DTYPE_UINT8, (1, 10, 10, 3), [pixels])])
        kept.append((to_array(pb.Batch.FromString(reply).images, SegmentMaps(tmp_path)), pixels))  # mapped, held
        transport.refresh()
        assert len(list(tmp_path.iterdir())) <= 5 and transport.used <= 5 * shared_memory.PAGE
    assert transport.used == 5 * shared_memory.PAGE  # 300 bytes take a page each
    assert all(array.tobytes() == pixels for array, pixels in kept)  # unlinked held segments stay readable
    transport.close()
    assert list(tmp_path.iterdir()) == []


def test_a_same_host_stream_its_client_reads_slowly_neither_blocks_nor_loses_its_stream(served, tmp_path, caplog):
    """A same-host reply's pixels are bounded by the shared-memory budget; gRPC holds only its
    message, so that is all it takes of the send budget. Charged its pixels instead, a stream
    whose client had not mapped its replies held the whole send budget (a 224 px batch of 128
    is 19 MB, the default --send-mb 16): every other stream waited, and after ``STALL_SECONDS``
    the slow one was cancelled as a client that does not read (three CoG streams open at once
    delivered a quarter of two on one H200)."""
    from sampler_server.service.admission import STALL_SECONDS

    nominal = 32 * 32 * 3 * 20  # far less than an episode's pixels, far more than a same-host reply's message
    server = _server(served, tmp_path, shm_bytes=1 << 30, send_bytes=nominal)
    try:
        with SamplerClient(server.address, prefetch=1) as slow_client, SamplerClient(server.address) as reading:
            assert slow_client.transport == reading.transport == "same-host"
            slow = slow_client.episodes(RAW, count=16)
            first = next(slow)  # then not read for a while: its later replies wait unmapped
            time.sleep(0.3)
            started = time.monotonic()
            assert len(list(reading.episodes(RAW, count=8))) == 8
            waited = time.monotonic() - started
            time.sleep(STALL_SECONDS + 0.2)  # past the stall limit
            rest = list(slow)
        assert waited < STALL_SECONDS, waited
        assert [first.index, *(episode.index for episode in rest)] == list(range(16))
        assert not [r.getMessage() for r in caplog.records if "cancelled" in r.getMessage()]  # resumed, the client hides it
    finally:
        server.stop(grace=0.5)
