"""Shared-memory segments on the wire: references round-trip, segments hold exactly what
was written, mapping releases them, and a reply can name nothing but a segment."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from prerequisites import require_shared_memory

from sampler_common.wire import segments
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.segments import SegmentLost, SegmentMaps, SegmentRef
from sampler_common.wire.tensors import TensorField, encode_with_tensors, split_tensors

NAME = "sampler-0123456789abcdef-s1f"
SUPPORT = pb.Episode.DESCRIPTOR.fields_by_name["support_images"].number
QUERY = pb.Episode.DESCRIPTOR.fields_by_name["query_images"].number


def test_segment_references_round_trip_through_our_parser_and_protobuf():
    header = pb.Episode(source="folder", index=7, image_size=4)
    tensors = [
        TensorField(SUPPORT, pb.DTYPE_UINT8, (2, 4, 4, 3), (), SegmentRef(NAME, 0, 96)),
        TensorField(QUERY, pb.DTYPE_UINT8, (3, 4, 4, 3), (), SegmentRef(NAME, 96, 144)),
    ]
    data = encode_with_tensors(header, tensors)
    rest, raw = split_tensors(data, frozenset({SUPPORT, QUERY}))
    assert pb.Episode.FromString(rest) == header
    assert raw[SUPPORT].segment == SegmentRef(NAME, 0, 96) and raw[QUERY].segment == SegmentRef(NAME, 96, 144)
    assert raw[QUERY].shape == (3, 4, 4, 3) and len(raw[QUERY].data) == 0
    message = pb.Episode.FromString(data)  # any protobuf parser reads the same reply
    assert (message.query_images.segment.name, message.query_images.segment.offset,
            message.query_images.segment.size) == (NAME, 96, 144)
    assert message.query_images.data == b"" and list(message.query_images.shape) == [3, 4, 4, 3]
    plain = encode_with_tensors(header, [TensorField(SUPPORT, pb.DTYPE_UINT8, (1, 2), [b"\x01\x02"])])
    assert split_tensors(plain, frozenset({SUPPORT}))[1][SUPPORT].segment is None


def test_a_segment_holds_what_was_written_and_mapping_releases_it(tmp_path):
    rng = np.random.RandomState(3)
    buffers = [rng.randint(0, 256, size=int(rng.randint(1, 40)), dtype=np.uint8).tobytes() for _ in range(2500)]
    views = [memoryview(b) for b in buffers[:1000]] + buffers[1000:]  # more than one writev's worth
    size = segments.write_segment(NAME, views, tmp_path)
    assert size == sum(map(len, buffers)) == (tmp_path / NAME).stat().st_size
    assert (tmp_path / NAME).stat().st_mode & 0o777 == 0o600  # this user only
    with pytest.raises(FileExistsError):  # never overwrites
        segments.write_segment(NAME, [b"y"], tmp_path)
    maps = SegmentMaps(tmp_path)
    whole = maps.view(SegmentRef(NAME, 0, size))
    assert not (tmp_path / NAME).exists() and (tmp_path / (NAME + segments.HELD)).exists()  # taken: held
    tail = maps.view(SegmentRef(NAME, size - len(buffers[-1]), len(buffers[-1])))  # the same mapping again
    assert bytes(whole) == b"".join(buffers) and bytes(tail) == buffers[-1]
    assert whole.readonly
    with pytest.raises(ValueError, match="asked of"):
        maps.view(SegmentRef(NAME, size - 1, 2))
    with pytest.raises(SegmentLost, match="is gone"):
        SegmentMaps(tmp_path).view(SegmentRef(NAME, 0, 1))
    del maps, whole, tail  # the last views: unmapped, then released for the server to reuse
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME + segments.RELEASED]
    reused = "sampler-0123456789abcdef-s20"
    assert segments.rewrite_segment(NAME + segments.RELEASED, reused, [b"new pixels"], tmp_path)
    assert bytes(SegmentMaps(tmp_path).view(SegmentRef(reused, 0, 10))) == b"new pixels"
    assert (tmp_path / (reused + segments.RELEASED)).stat().st_size == size  # the same pages, its size kept
    assert not segments.rewrite_segment(NAME + segments.RELEASED, reused, [b"x"], tmp_path)  # gone: nothing written


def test_real_shared_memory_round_trip():
    require_shared_memory()
    name = f"sampler-{os.getpid():08x}feed-t{os.urandom(3).hex()}"
    payload = np.arange(3 * 5 * 5 * 3, dtype=np.uint8).reshape(3, 5, 5, 3)
    segments.write_segment(name, [payload[:1].tobytes(), memoryview(payload[1:].reshape(-1))])
    view = SegmentMaps().view(SegmentRef(name, 0, payload.nbytes))
    assert not segments.segment_exists(name)
    assert np.array_equal(np.frombuffer(view, np.uint8).reshape(payload.shape), payload)
    del view
    assert segments.unlink_segment(name + segments.RELEASED)


@pytest.mark.parametrize("name", ["../../etc/passwd", "sampler-0123456789abcdef/../x", "psm_1234", "sampler-xyz-1",
                                  "sampler-0123456789abcdef-", "", "sampler-0123456789abcdef-a.b"])
def test_a_reply_cannot_name_anything_but_a_segment(tmp_path, name):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    with pytest.raises(ValueError, match="segment name"):
        SegmentMaps(tmp_path).view(SegmentRef(name, 0, 1))
    assert segments.read_probe(name, tmp_path) is None
    assert victim.read_bytes() == b"keep"


def test_reading_a_probe_takes_its_token_and_unlinks_it(tmp_path):
    segments.write_segment(NAME, [b"0f1e2d3c4b5a69788796a5b4c3d2e1f0"], tmp_path)
    assert segments.read_probe(NAME, tmp_path) == "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    assert not (tmp_path / NAME).exists()
    assert segments.read_probe(NAME, tmp_path) is None  # gone: another host's, or taken
    segments.write_segment(NAME, [b"not a token\n"], tmp_path)
    assert segments.read_probe(NAME, tmp_path) is None


def _descriptors_onto(folder) -> list[str]:
    """This process's open descriptors onto files in ``folder`` (not a count of all of them:
    threads an earlier test left, a server's among them, open and close their own meanwhile)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


def test_a_mapping_holds_no_descriptor_and_goes_with_its_last_view(tmp_path):
    """A client keeping many episodes must not run out of file descriptors."""
    arrays = []
    for k in range(50):
        name = f"sampler-0123456789abcdef-k{k}"
        segments.write_segment(name, [bytes([k]) * 8192], tmp_path)
        arrays.append(np.frombuffer(SegmentMaps(tmp_path).view(SegmentRef(name, 4096, 4096)), np.uint8))
    assert _descriptors_onto(tmp_path) == []
    assert all(int(a[0]) == k and int(a[-1]) == k and not a.flags.writeable for k, a in enumerate(arrays))
    with pytest.raises(ValueError):
        arrays[0].flags.writeable = True  # the pages are mapped read-only
    maps = [line for line in open("/proc/self/maps") if str(tmp_path) in line]
    assert len(maps) == 50
    del arrays
    assert [line for line in open("/proc/self/maps") if str(tmp_path) in line] == []  # unmapped with the views


_FORK_WHILE_MAPPED = """
import gc, multiprocessing, sys
from pathlib import Path
from sampler_common.wire import segments
from sampler_common.wire.segments import SegmentMaps, SegmentRef

def drop_in_child(views, done):
    views.clear()  # the child's copies of the parent's arrays die here
    gc.collect()
    done.set()

folder = Path(sys.argv[1])
names = [f"sampler-0123456789abcdef-f{k}" for k in range(2)]
for name in names:
    segments.write_segment(name, [b"pixels" * 100], folder)
before = [SegmentMaps(folder).view(SegmentRef(names[0], 0, 600))]
context = multiprocessing.get_context("fork")
done = context.Event()
child = context.Process(target=drop_in_child, args=(before, done))
child.start()
child.join(timeout=30)
assert child.exitcode == 0 and done.is_set(), child.exitcode
assert (folder / (names[0] + segments.HELD)).exists()  # a child's copy dying lets go of nothing
after = SegmentMaps(folder).view(SegmentRef(names[1], 0, 600))  # mapped after the fork: as usual
before.clear()
del after
assert sorted(p.name for p in folder.iterdir()) == [names[1] + segments.RELEASED], sorted(folder.iterdir())
"""


def test_a_fork_while_mapped_keeps_the_pages_from_ever_being_rewritten(tmp_path):
    """In a fresh interpreter: forking this test process, whose earlier tests may have left
    gRPC's threads running, can leave the child waiting forever on a lock one of them held."""
    result = subprocess.run([sys.executable, "-c", _FORK_WHILE_MAPPED, str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sampler-0123456789abcdef-f1" + segments.RELEASED]
