"""naver/cog's level and split files through a real gRPC server on 127.0.0.1 over a real
IN-21K fixture store (packed as 2 shards): ListCogLevels, GetCogSplit, StreamCogBatches
and ``sampler-server cog split`` serve exactly the files' concepts and images, in the
reference's order (concepts by wnid, each concept's names sorted); a wnid or an image
the store lacks is FAILED_PRECONDITION naming the first ones and how many."""

from __future__ import annotations

import json
import os
import pickle
import re

import grpc
import numpy as np
import pytest

from clients.core import SamplerClient, SamplerClientError
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.cli.main import main
from sampler_server.core.cog import LEVEL_NAMES
from sampler_server.fixtures.imagenet21k import WNIDS, write_imagenet21k
from sampler_server.service.server import RunningServer, ServerConfig

IMAGES = 9
LEVELS = [[WNIDS[i], WNIDS[i + 5]] for i in range(5)]  # 2 concepts per level, file order not sorted
TEST, TRAIN = 2, 5  # of each concept's 9 images: the file lists 7, leaves 2 out


def _file_images(members: dict[str, list[str]]) -> dict[str, dict[str, np.ndarray]]:
    """The reference's split file over the fixture's members: names relative to the images
    root, listed out of order, some with the leading "/" the reference strips."""
    out = {}
    for i, wnid in enumerate(w for level in LEVELS for w in level):
        names = [f"{wnid}/{m}" for m in members[wnid]]
        chosen = [names[j] for j in (8, 0, 5, 3, 1, 7, 4)]  # 2 and 6 are in the store, not the file
        test = np.array(["/" + n for n in chosen[:TEST]])
        train = np.array(chosen[TEST:], dtype=object if i % 2 else str)
        out[wnid] = {"train": train, "test": test}
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("cog-files")
    fixture = write_imagenet21k(root / "fall11", {w: IMAGES for w in WNIDS}, sides=(16, 24))
    data = root / "data"
    for shard in ("0/2", "1/2"):
        assert main(["pack", "imagenet21k", "--input", str(fixture.input_dir), "--output", str(data), "--shard", shard,
                     "--quiet", "--workers", "1"]) == 0
    images = _file_images(fixture.expected["members"])
    (data / "files").mkdir()
    (data / "files" / "levels.pkl").write_bytes(pickle.dumps(LEVELS))
    (data / "files" / "split.pkl").write_bytes(pickle.dumps(images))
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    client = SamplerClient(server.address)
    try:
        yield data, client, images
    finally:
        client.close()
        server.stop(grace=0.2)


FILES = {"levels_file": "files/levels.pkl", "concepts_split_file": "files/split.pkl"}


def _origins(data, record_ids) -> list[str]:
    """Each record's original file, read with the ordinary record decoder."""
    reader = StoreRegistry.from_data_dir(data).get("imagenet21k").reader
    return [reader.read(int(r)).origin for r in record_ids]


def _expected(images, level: str, split: str) -> list[str]:
    wnids = sorted(LEVELS[LEVEL_NAMES.index(level)])
    return [str(n).lstrip("/") for w in wnids for n in sorted(images[w][split].tolist())]


def test_levels_are_the_files_concepts_with_the_files_sizes(served) -> None:
    _, client, _ = served
    reply = client.cog_levels_response(**FILES)
    assert [s.level for s in reply.levels] == list(LEVEL_NAMES)
    for summary, level in zip(reply.levels, LEVELS):
        assert list(summary.wnids) == sorted(level)
        assert (summary.train_size, summary.test_size) == (2 * TRAIN, 2 * TEST)
    levels_only = client.cog_levels_response(levels_file=FILES["levels_file"])
    assert [list(s.wnids) for s in levels_only.levels] == [sorted(level) for level in LEVELS]
    assert levels_only.levels_fingerprint != reply.levels_fingerprint


@pytest.mark.parametrize("level", ["L1", "L4"])
def test_test_and_train_are_the_files_images_in_the_reference_order(served, level: str, capsys) -> None:
    data, client, images = served
    for split in ("test", "train"):
        served_split = client.cog_split(level, split, **FILES)
        assert list(served_split.wnids) == sorted(LEVELS[LEVEL_NAMES.index(level)])
        assert _origins(data, served_split.record_ids) == _expected(images, level, split)
        per_concept = TEST if split == "test" else TRAIN
        assert list(served_split.labels) == [0] * per_concept + [1] * per_concept
        capsys.readouterr()
        assert main(["cog", "split", "--data", str(data), "--level", level, "--split", split, "--levels-file",
                     str(data / FILES["levels_file"]), "--concepts-split-file",
                     str(data / FILES["concepts_split_file"]), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert [r["record_id"] for r in printed["records"]] == list(served_split.record_ids)
        assert printed["fingerprint"] == served_split.fingerprint


def test_subsets_are_drawn_from_the_files_train_images(served) -> None:
    _, client, _ = served
    train = set(client.cog_split("L2", "train", **FILES).record_ids)
    val = client.cog_split("L2", "val", seed=1, **FILES)
    search = client.cog_split("L2", "search", shots=2, seed=1, **FILES)
    few = client.cog_split("L2", "train", shots=2, seed=3, **FILES)
    assert len(val.record_ids) == 2 * 1 and len(search.record_ids) == 2 * 2 and len(few.record_ids) == 2 * 2
    for subset in (val, search, few):
        assert set(subset.record_ids) <= train
    assert not set(val.record_ids) & set(search.record_ids)
    assert client.cog_split("L2", "val", seed=1, **FILES) == val  # a pure function of the request


def test_batches_stream_the_files_split_and_fingerprints_name_the_files(served) -> None:
    _, client, _ = served
    split = client.cog_split("L3", "train", **FILES)
    batches = list(client.stream_cog_batches("L3", "train", batch_size=4, image_size=16, **FILES))
    assert [r for b in batches for r in b.record_ids] == list(split.record_ids)
    assert {b.split_fingerprint for b in batches} == {split.fingerprint}
    assert batches[0].images.shape[1:] == (16, 16, 3)
    store_partition = client.cog_split("L3", "train", levels_file=FILES["levels_file"])
    assert store_partition.fingerprint != split.fingerprint
    assert len(store_partition.record_ids) == 0  # 9 images: all 50-image test, none train (the store's rule)


@pytest.mark.parametrize("what", ["wnid", "image"])
def test_a_wnid_or_an_image_the_store_lacks_is_failed_precondition(served, what: str) -> None:
    data, client, images = served
    if what == "wnid":
        levels = [list(level) for level in LEVELS]
        levels[1] = levels[1] + ["n01440765", "n01440766", "n01440767", "n01440768"]  # not in the store
        (data / "files" / "missing-wnids.pkl").write_bytes(pickle.dumps(levels))
        request = {"levels_file": "files/missing-wnids.pkl"}
        expected = r"4 of its 6 concepts are not in store imagenet21k: n01440765, n01440766, n01440767 \(and 1 more\)"
    else:
        broken = {w: dict(entry) for w, entry in images.items()}
        wnid = sorted(LEVELS[1])[0]
        broken[wnid]["test"] = np.array([f"{wnid}/{wnid}_0.JPEG", f"{wnid}/{wnid}_00.JPEG"])
        (data / "files" / "missing-images.pkl").write_bytes(pickle.dumps(broken))
        request = {"levels_file": FILES["levels_file"], "concepts_split_file": "files/missing-images.pkl"}
        expected = rf"2 of its images of these concepts are not in store imagenet21k: {wnid}: {wnid}/{wnid}_0.JPEG"
    with pytest.raises(SamplerClientError) as error:
        client.cog_split("L2", "test", **request)
    assert error.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "\n" not in str(error.value)
    assert re.search(expected, str(error.value)), str(error.value)


@pytest.mark.parametrize("request_fields, code, text", [
    ({"levels_file": "files/nothing.pkl"}, grpc.StatusCode.NOT_FOUND, "levels_file: 'files/nothing.pkl' is not a file"),
    ({"concepts_split_file": "files/split.pkl"}, grpc.StatusCode.INVALID_ARGUMENT,
     "concepts_split_file: given without levels_file"),
    ({"levels_file": "files/split.pkl"}, grpc.StatusCode.DATA_LOSS,
     "levels_file files/split.pkl: got a dict, expected a list of 5 lists of wnids"),
])
def test_bad_file_requests_are_one_line_naming_the_field(served, request_fields, code, text: str) -> None:
    _, client, _ = served
    with pytest.raises(SamplerClientError) as error:
        client.cog_split("L1", "test", **request_fields)
    assert error.value.code == code and text in str(error.value)


def test_a_parsed_file_is_cached_by_path_size_and_mtime(served) -> None:
    data, client, _ = served
    path = data / "files" / "cached.pkl"
    path.write_bytes(pickle.dumps(LEVELS))
    before = path.stat()
    first = client.cog_levels_response(levels_file="files/cached.pkl")
    swapped = [LEVELS[1], LEVELS[0], *LEVELS[2:]]
    path.write_bytes(pickle.dumps(swapped))  # same size, new content
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # same key: the parsed file is served, not re-read
    assert client.cog_levels_response(levels_file="files/cached.pkl") == first
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # the mtime moved: read again
    second = client.cog_levels_response(levels_file="files/cached.pkl")
    assert list(second.levels[0].wnids) == list(first.levels[1].wnids)


@pytest.mark.slow
def test_the_torch_cog_command_evaluates_the_files_levels(served, tmp_path) -> None:
    from clients.torch.cog_eval import main as torch_cog

    data, client, _ = served
    summary_path = tmp_path / "summary.json"
    argv = ["--server", client.address, "--run", "cog-files", "--levels", "L2",
            "--shots", "2", "--seeds", "1", "--levels-file", FILES["levels_file"], "--concepts-split-file",
            FILES["concepts_split_file"], "--image-size", "16", "--extract-batch-size", "8", "--epochs", "1",
            "--batch-size", "8", "--grid", "1x1", "--backbone", "tiny", "--device", "cpu", "--feature-cache",
            str(tmp_path / "cache"), "--json-summary", str(summary_path)]
    assert torch_cog(argv) == 0
    level = json.loads(summary_path.read_text())["levels"]["L2"]
    assert (level["num_classes"], level["train_size"], level["test_size"]) == (2, 2 * TRAIN, 2 * TEST)
    assert level["results"][0]["train_examples"] == 2 * 2


def test_the_tf_cog_command_line_takes_the_files() -> None:
    from clients.trainer_args import build_cog_parser

    parser = build_cog_parser("tf")
    base = ["--server", "127.0.0.1:1", "--run", "r", "--backbone", "tiny", "--feature-cache", "c"]
    args = parser.parse_args([*base, "--levels-file", "/f/levels.pkl", "--concepts-split-file", "split.pkl"])
    assert (args.levels_file, args.concepts_split_file) == ("/f/levels.pkl", "split.pkl")
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--concepts-split-file", "split.pkl"])
