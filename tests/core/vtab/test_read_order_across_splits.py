"""TFDS's default read of an expression over two TFDS splits keeps each example's own split
while files of both are open in the interleave (trainval1000 of a one-shard-per-split store)."""

from sampler_server.core.vtab.read_order import ShardLayout, default_read
from sampler_server.core.vtab.slicing import SliceRange


def test_interleaved_files_of_two_splits_keep_their_split_names():
    layout = ShardLayout({"train": (20,), "validation": (5,)})
    read = default_read([SliceRange("train", 0, 20), SliceRange("validation", 0, 5)], layout)
    # cycle 16, block 16: 16 of train, all 5 of validation, then the rest of train
    assert read == ([("train", i) for i in range(16)] + [("validation", i) for i in range(5)]
                    + [("train", i) for i in range(16, 20)])
