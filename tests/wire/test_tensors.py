"""Hand-written tensor fields are ordinary protobuf, and read back without copies."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.tensors import TensorField, encode_with_tensors, split_tensors


@given(
    support=st.integers(0, 7), query=st.integers(0, 5), size=st.integers(1, 6), index=st.integers(0, 2**63 - 1),
    fingerprint=st.text(max_size=20),
)
def test_round_trip_through_protobuf_and_the_fast_reader(support, query, size, index, fingerprint):
    rng = np.random.RandomState(support * 31 + query)
    pixels_s = rng.randint(0, 256, size=(support, size, size, 3)).astype(np.uint8)
    pixels_q = rng.randint(0, 256, size=(query, size, size, 3)).astype(np.uint8)
    header = pb.Episode(index=index, fingerprint=fingerprint, last=True, support_record_ids=list(range(support)))
    header.classes.add(class_id=3, name="x")
    flat = pixels_s.reshape(-1)
    cut = (support // 2) * size * size * 3
    halves = [memoryview(flat[:cut]), memoryview(flat[cut:])]
    data = encode_with_tensors(header, [
        TensorField(13, pb.DTYPE_UINT8, pixels_s.shape, halves),
        TensorField(14, pb.DTYPE_UINT8, pixels_q.shape, [pixels_q.tobytes()]),
    ])
    parsed = pb.Episode.FromString(data)  # any protobuf client
    assert parsed.index == index and parsed.fingerprint == fingerprint and parsed.last
    assert list(parsed.support_images.shape) == list(pixels_s.shape)
    assert parsed.support_images.data == pixels_s.tobytes()
    assert parsed.query_images.data == pixels_q.tobytes()
    rest, tensors = split_tensors(data, frozenset({13, 14}))
    small = pb.Episode.FromString(rest)
    assert small.index == index and not small.support_images.data and small.classes[0].name == "x"
    assert tensors[13].shape == pixels_s.shape and tensors[13].dtype == pb.DTYPE_UINT8
    assert bytes(tensors[13].data) == pixels_s.tobytes()
    assert bytes(tensors[14].data) == pixels_q.tobytes()
