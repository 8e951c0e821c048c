"""A reply the server sent is not kept alive while its stream waits for the next one.

gRPC's streaming loop keeps the last response it sent in a local while it asks the
handler for the next; so did the token interceptor. A stream that waits (for room in
the send budget, for its pixels, for a client that reads nothing) therefore held a
whole sent episode outside every budget: in ``bench/soak.py`` 40 stalled streams kept
146 MB of sent replies alive at once. This test holds streams waiting for room and
counts the large byte strings the server process still references."""

from __future__ import annotations

import gc
import sys
import time
import warnings

import grpc

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

LARGE = 256 << 10
STREAMS = 10


def _large_buffers() -> dict[int, int]:
    """id -> size of every bytes object of LARGE bytes or more that a gc-tracked object or
    a running thread's frame references (the replies the server still holds)."""
    found: dict[int, int] = {}
    # gc.get_objects() leaves out what tests/conftest.py froze, which could hold one too; frozen
    # again after, or every later full collection of this worker scans TensorFlow's and PyTorch's heap
    frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    try:
        with warnings.catch_warnings():  # some libraries' lazy attributes warn when merely looked at
            warnings.simplefilter("ignore")
            # every tracked object's referents in one call, their bytes picked by isinstance in C
            # (bytes.__instancecheck__): a Python loop over the referents of the 600,000 objects of a
            # worker that imported TensorFlow and PyTorch took 1.2 s of CPU a count, this 0.6 s
            referents = gc.get_referents(*gc.get_objects())
            found.update((id(value), len(value)) for value in filter(bytes.__instancecheck__, referents)
                         if len(value) >= LARGE)
            del referents
    finally:
        if frozen:
            gc.freeze()
    for frame in sys._current_frames().values():
        while frame is not None:
            for value in list(frame.f_locals.values()):
                if isinstance(value, bytes) and len(value) >= LARGE:
                    found[id(value)] = len(value)
            frame = frame.f_back
    return found


def test_streams_waiting_for_room_hold_no_sent_reply(served):
    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.limits import ServiceLimits

    # room for one reply at a time, nothing prepared ahead beyond one: most streams wait
    limits = ServiceLimits(max_streams=32, send_bytes=1, lookahead_bytes=1, stream_shed_seconds=60.0,
                           stream_idle_seconds=120.0)
    server = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=2, threads=8, limits=limits,
                                        grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    # the client keeps only each message's length: every large bytes object left is the server's
    stream = channel.unary_stream("/sampler.v1.Sampler/StreamEpisodes",
                                  request_serializer=pb.StreamEpisodesRequest.SerializeToString,
                                  response_deserializer=len)
    calls = []
    try:
        first_sizes = []
        for k in range(STREAMS):
            request = pb.StreamEpisodesRequest(
                request=pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, seed=k,
                                          images=pb.ImageOptions(image_size=84)),
                start_index=0, count=0)
            call = stream(request)
            first_sizes.append(next(call))  # read one reply, then read nothing more
            calls.append(call)
        assert min(first_sizes) >= LARGE, first_sizes
        # at most: the reply being sent with the budget's room, a reply that fit an empty
        # budget meanwhile, and one a stream packs; never one per waiting stream. Counted
        # until every stream has sent what it could and waits (for room or in a send): on a
        # loaded machine a stream may still be packing at the first count; a sent reply
        # kept alive stays held whenever it is counted
        deadline = time.monotonic() + 15.0
        time.sleep(2.0)
        while True:
            gc.collect()
            held = _large_buffers()
            if len(held) <= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(held) <= 3, f"{len(held)} large buffers held by the server: {sorted(held.values())}"
    finally:
        for call in calls:
            call.cancel()
        channel.close()
        server.stop(grace=0.5)
