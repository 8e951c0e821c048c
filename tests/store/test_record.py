"""Record layout: round trip, and every corruption is a DataLoss naming the problem."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sampler_server.errors import DataLoss
from sampler_server.store.record import (
    HEADER_SIZE,
    Encoding,
    Record,
    decode_record,
    encode_record,
    read_header,
    record_key,
)

metadata_values = st.one_of(st.integers(-10**6, 10**6), st.text(max_size=20), st.lists(st.integers(0, 1000), max_size=4))


@given(
    encoding=st.sampled_from([e for e in Encoding if e is not Encoding.RAW]),
    width=st.integers(1, 5000),
    height=st.integers(1, 5000),
    channels=st.sampled_from([1, 3]),
    payload=st.binary(max_size=300),
    metadata=st.dictionaries(st.text(min_size=1, max_size=10), metadata_values, max_size=4),
)
def test_encoded_record_round_trips(encoding, width, height, channels, payload, metadata):
    record = Record(encoding, width, height, channels, payload, metadata)
    assert decode_record(encode_record(record)) == record


def test_raw_record_round_trips_and_header_slices_payload():
    pixels = bytes(range(256)) * 3
    record = Record(Encoding.RAW, 16, 16, 3, pixels, {"origin": "a/b.png"})
    value = encode_record(record)
    encoding, width, height, channels, offset = read_header(value)
    assert (encoding, width, height, channels) == (Encoding.RAW, 16, 16, 3)
    assert value[offset:] == pixels
    assert decode_record(value).origin == "a/b.png"


def test_raw_record_with_wrong_pixel_count_is_data_loss():
    value = encode_record(Record(Encoding.RAW, 4, 4, 3, b"\0" * 47))
    with pytest.raises(DataLoss, match="expected 4x4x3"):
        read_header(value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda v: v[:5], "shorter than"),
        (lambda v: b"XX" + v[2:], "magic"),
        (lambda v: v[:2] + b"\x09" + v[3:], "layout version 9"),
        (lambda v: v[:3] + b"\x63" + v[4:], "unknown encoding"),
        (lambda v: v[:13] + (10**6).to_bytes(4, "big") + v[17:], "runs past the end"),
    ],
)
def test_corrupt_values_raise_data_loss(mutate, message):
    value = encode_record(Record(Encoding.PNG, 2, 2, 1, b"payload", {"k": 1}))
    with pytest.raises(DataLoss, match=message):
        decode_record(mutate(value))


def test_keys_sort_like_ids():
    ids = [0, 1, 255, 256, 65535, 2**40]
    assert sorted(record_key(i) for i in ids) == [record_key(i) for i in ids]
    assert all(len(record_key(i)) == 8 for i in ids)
    assert HEADER_SIZE == 17
