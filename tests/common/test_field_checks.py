"""One bad value, one message: the Python client, the server and the CLI check request fields
and split names through ``sampler_common.checks`` / ``sampler_common.splits``.

Each case sends the same bad value through the client (against a real server on
127.0.0.1), straight to the server (a raw request, bypassing the client's check, where the
wire can carry the value) and through ``sampler-server`` (exit 2, one line on stderr), and
asserts the very same message, which names the field, the value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients.errors import SamplerClientError
from sampler_common import checks
from sampler_common.checks import FieldError
from sampler_common.splits import COG, MD, REGIME, REGIME_STREAM, VTAB, SplitNames
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

IMAGE_SIZE = "expected an integer in [1, 1024]"
SEED = "expected an integer in [0, 18446744073709551615]"
INDEX = "expected an integer in [0, 9223372036854775807]"
WAYS = "expected an integer in [1, 2147483647]"
MD_SPLITS = "expected one of train, valid, test (or val, validation for valid)"
VTAB_SPLITS = ("expected one of train800, val200, train800val200, test, train, val, trainval, trainval1000, "
               "trainval1000-canonical (or valid, validation for val)")
COG_SPLITS = "expected one of train, val, test, search (or valid, validation for val)"
REGIME_SPLITS = "expected one of train, val (or valid, validation for val)"


# ---- the three layers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub(served) -> Iterator[pb_grpc.SamplerStub]:
    with grpc.insecure_channel(served.address) as channel:
        yield pb_grpc.SamplerStub(channel)


@pytest.fixture(scope="module")
def client(served) -> Iterator[Any]:
    from clients.core import SamplerClient

    with SamplerClient(served.address) as opened:
        yield opened


def client_says(call: Callable[[], Any]) -> str:
    """The client's refusal, raised before anything is sent."""
    with pytest.raises(FieldError) as caught:
        result = call()
        if isinstance(result, Iterator):
            next(result)
    return str(caught.value)


def server_says(call: Callable[[], Any], code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    assert caught.value.code() == code, caught.value.details()
    return caught.value.details()


def cli_says(capsys, *argv: Any) -> str:
    from sampler_server.cli.main import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2, out
    assert len(err.strip().splitlines()) == 1, err
    prefix = f"sampler-server {argv[0]}: error: "
    assert err.startswith(prefix), err
    return err.strip().removeprefix(prefix)


def spec(**fields: Any) -> Any:
    from clients.core import EpisodeSpec

    shape = {"sources": ("folder",), "ways": 2, "shots": 1, "query": 1, "image_size": 16}
    return EpisodeSpec(**{**shape, **fields})


def raw_episode(image_size: int = 16, index: int = 0, **config: Any) -> pb.GetEpisodeRequest:
    shape = {"num_ways": 2, "num_support": 1, "num_query": 1, **config}
    request = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, seed=1, config=pb.EpisodeConfig(**shape),
                                images=pb.ImageOptions(image_size=image_size))
    return pb.GetEpisodeRequest(request=request, index=index)


def episode_cli(served, *flags: Any) -> list[Any]:
    return ["episode", "--data", served.data, "--source", "folder", "--split", "train", "--seed", 1, *flags]


# ---- numeric fields --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, -5, 2000])
def test_image_size_is_refused_alike_by_client_and_cli(served, client, capsys, size):
    message = f"image_size: got {size}, {IMAGE_SIZE}"
    assert client_says(lambda: client.episode(spec(image_size=size), 0)) == message
    assert client_says(lambda: client.batches("folder", "train", 4, image_size=size)) == message
    assert client_says(lambda: client.task_batches("kitti_distance", "train800", 4, image_size=size)) == message
    assert client_says(lambda: client.stream_cog_batches("L1", "test", image_size=size)) == message
    assert cli_says(capsys, *episode_cli(served, "--image-size", size)) == message
    assert cli_says(capsys, "batches", "--data", served.data, "--source", "folder", "--split", "train",
                    "--seed", 1, "--image-size", size) == message


def test_image_size_the_server_is_sent_gets_the_clients_message(stub, client):
    assert server_says(lambda: stub.GetEpisode(raw_episode(image_size=2000))) == \
        client_says(lambda: client.episode(spec(image_size=2000), 0)) == f"image_size: got 2000, {IMAGE_SIZE}"


def test_a_wire_image_size_of_0_is_the_field_left_unset(stub):
    """The wire cannot tell 0 from unset: the server serves the protocol's default for it,
    which is why the client refuses a user's 0 instead of sending it."""
    reply = stub.GetEpisode(raw_episode(image_size=0))
    assert reply.image_size == 84


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_seed_is_refused_alike_by_client_and_cli(served, client, capsys, seed):
    message = f"seed: got {seed}, {SEED}"
    assert client_says(lambda: client.episode(spec(seed=seed), 0)) == message
    assert client_says(lambda: client.batches("folder", "train", 4, seed=seed)) == message
    assert client_says(lambda: client.cog_split("L1", "val", seed=seed)) == message
    assert client_says(lambda: client.get_regime("clevr_count", 10, seed)) == message
    assert cli_says(capsys, "episode", "--data", served.data, "--source", "folder", "--split", "train",
                    "--seed", seed) == message
    assert cli_says(capsys, "cog", "split", "--data", served.data, "--level", "L1", "--split", "val",
                    "--seed", seed) == message
    assert cli_says(capsys, "regime", "--data", served.data, "--task", "clevr_count", "--n", 5,
                    "--seed", seed) == message


@pytest.mark.parametrize("index", [-1, 2**63])
def test_index_is_refused_alike_by_client_and_cli(served, client, capsys, index):
    message = f"index: got {index}, {INDEX}"
    assert client_says(lambda: client.episode(spec(), index)) == message
    assert cli_says(capsys, *episode_cli(served, "--index", index)) == message
    assert cli_says(capsys, "batches", "--data", served.data, "--source", "folder", "--split", "train",
                    "--seed", 1, "--index", index) == message


def test_index_the_server_is_sent_gets_the_clients_message(stub, client):
    assert server_says(lambda: stub.GetEpisode(raw_episode(index=2**63))) == \
        client_says(lambda: client.episode(spec(), 2**63)) == f"index: got {2**63}, {INDEX}"


@pytest.mark.parametrize("batch_size", [0, -3, 70000])
def test_batch_size_is_refused_alike_by_client_server_and_cli(served, stub, client, capsys, batch_size):
    message = f"batch_size: got {batch_size}, expected an integer in [1, 65536]"
    assert client_says(lambda: client.batches("folder", "train", batch_size)) == message
    assert client_says(lambda: client.task_batches("kitti_distance", "train800", batch_size)) == message
    assert cli_says(capsys, "batches", "--data", served.data, "--source", "folder", "--split", "train",
                    "--seed", 1, "--batch-size", batch_size) == message
    if batch_size >= 0:  # a uint32 on the wire
        request = pb.StreamBatchesRequest(source="folder", split=pb.SPLIT_TRAIN, batch_size=batch_size, count=1)
        assert server_says(lambda: stub.StreamBatches(request)) == message


def test_cog_batch_size_has_cogs_bound_in_client_and_server(stub, client):
    message = "batch_size: got 5000, expected an integer in [1, 4096]"
    assert client_says(lambda: client.stream_cog_batches("L1", "test", batch_size=5000)) == message
    raw = pb.StreamCogBatchesRequest(split=pb.CogSplitRequest(level="L1", split="test"), batch_size=5000)
    assert server_says(lambda: stub.StreamCogBatches(raw)) == message
    assert client_says(lambda: client.stream_cog_batches("L1", "test", batch_size=0)) == \
        "batch_size: got 0, expected an integer in [1, 4096]"
    assert checks.check_batch_size(4096, upper=checks.MAX_COG_BATCH_SIZE) == 4096


@pytest.mark.parametrize(("name", "flag", "field"), [
    ("ways", "--ways", "num_ways"), ("shots", "--shots", "num_support"), ("query", "--query", "num_query")])
@pytest.mark.parametrize("value", [0, -2])
def test_ways_shots_query_are_refused_alike_by_client_server_and_cli(served, stub, client, capsys, name, flag,
                                                                      field, value):
    message = f"{field}: got {value}, {WAYS}"
    assert client_says(lambda: client.episode(spec(**{name: value}), 0)) == message
    assert cli_says(capsys, *episode_cli(served, flag, value)) == message
    if value >= 0:
        assert server_says(lambda: stub.GetEpisode(raw_episode(**{field: value}))) == message


def test_stream_count_is_refused_alike_by_client_and_server(stub, client):
    too_many = checks.MAX_STREAM_COUNT + 1
    message = f"count: got {too_many}, expected an integer in [0, 10000000] (0 = unbounded)"
    assert client_says(lambda: client.episodes(spec(), 0, too_many)) == message
    assert client_says(lambda: client.episodes(spec(), 0, -1)) == \
        "count: got -1, expected an integer in [0, 10000000] (0 = unbounded)"
    raw = pb.StreamEpisodesRequest(request=raw_episode().request, count=too_many)
    assert server_says(lambda: stub.StreamEpisodes(raw)) == message
    assert client_says(lambda: client.episodes(spec(), -1, 1)) == f"start_index: got -1, {INDEX}"
    assert client_says(lambda: client.episodes(spec(), 0, 1, step=0)) == \
        "index_step: got 0, expected an integer in [1, 9223372036854775807]"


# ---- split names ---------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ["valid", "val", "validation"])
def test_md_validation_split_is_one_name_in_client_and_cli(served, client, capsys, alias):
    """The folder store's validation classes are reached by every spelling, in every layer."""
    from sampler_server.cli.main import main
    from sampler_server.core.split import Split

    episode = client.episode(spec(split=alias), 0)
    assert episode.split == "valid"
    assert Split.parse(alias) is Split.VALID
    assert main(["episode", "--data", str(served.data), "--source", "folder", "--split", alias, "--seed", "1",
                 "--ways", "2", "--shots", "1", "--query", "1", "--json"]) == 0
    assert '"split":"valid"' in capsys.readouterr().out.replace(" ", "")


def test_md_split_refusal_lists_the_names_in_client_server_and_cli(served, client, capsys):
    from sampler_server.core.md.plan import parse_split
    from sampler_server.errors import InvalidArgument

    message = f"split: got 'dev', {MD_SPLITS}"
    assert client_says(lambda: client.episode(spec(split="dev"), 0)) == message
    assert client_says(lambda: client.batches("folder", "dev", 4)) == message
    with pytest.raises(InvalidArgument) as caught:  # the wire carries an enum: the server's reading of a name
        parse_split("dev")
    assert str(caught.value) == message
    assert cli_says(capsys, "episode", "--data", served.data, "--source", "folder", "--split", "dev",
                    "--seed", 1) == message
    assert cli_says(capsys, "batches", "--data", served.data, "--source", "folder", "--split", "dev",
                    "--seed", 1) == message


def test_vtab_split_names_alike_in_client_server_and_cli(served, stub, client, capsys):
    message = f"split: got 'dev', {VTAB_SPLITS}"
    assert client_says(lambda: client.task_batches("kitti_distance", "dev", 4)) == message
    raw = pb.StreamTaskBatchesRequest(task="kitti_distance", split="dev", batch_size=4, count=1)
    assert server_says(lambda: stub.StreamTaskBatches(raw)) == message
    assert cli_says(capsys, "vtab", "split", "--data", served.data, "--task", "kitti_distance",
                    "--split", "dev") == message
    assert client_says(lambda: client.task_episode("kitti_distance", query_split="dev")) == \
        f"query_split: got 'dev', {VTAB_SPLITS}"
    # an alias passes the split check in every layer: what stops it is the store this server lacks
    for alias in ("validation", "valid"):
        raw = pb.StreamTaskBatchesRequest(task="kitti_distance", split=alias, batch_size=4, count=1)
        assert "split" not in server_says(lambda: stub.StreamTaskBatches(raw), grpc.StatusCode.NOT_FOUND)
        with pytest.raises(SamplerClientError) as caught:
            list(client.task_batches("kitti_distance", alias, 4, count=1))
        assert caught.value.code == grpc.StatusCode.NOT_FOUND
        assert "holds TFDS dataset 'kitti'" in cli_says(capsys, "vtab", "split", "--data", served.data, "--task",
                                                         "kitti_distance", "--split", alias)


def test_vtab_val200_and_val_stay_two_splits():
    assert VTAB.canonical("val200") == "val200" and VTAB.canonical("validation") == "val"
    with pytest.raises(FieldError):
        VTAB.canonical("validation200")


def test_regime_split_names_alike_in_client_server_and_cli(served, stub, client, capsys):
    from sampler_server.core.baselines import check_regime_split

    message = f"split: got 'dev', {REGIME_SPLITS}"
    assert client_says(lambda: client.get_regime("clevr_count", 10, 1, "dev")) == message
    assert str(pytest.raises(ValueError, check_regime_split, "dev").value) == message
    assert check_regime_split("validation") == "val"
    assert cli_says(capsys, "regime", "--data", served.data, "--task", "clevr_count", "--n", 5, "--seed", 1,
                    "--split", "dev") == message
    stream = "split: got 'test' with regime 10, expected one of train, val, trainval (or valid, validation for val)"
    assert client_says(lambda: client.task_batches("clevr_count", "test", 4, regime=10)) == stream
    raw = pb.StreamTaskBatchesRequest(task="clevr_count", split="test", batch_size=4, regime=10, count=1)
    assert server_says(lambda: stub.StreamTaskBatches(raw)) == stream


def test_cog_split_names_alike_in_client_server_and_cli(served, stub, client, capsys):
    message = f"split: got 'dev', {COG_SPLITS}"
    assert client_says(lambda: client.cog_split("L1", "dev", seed=1)) == message
    assert server_says(lambda: stub.GetCogSplit(pb.CogSplitRequest(level="L1", split="dev", seed=1))) == message
    assert cli_says(capsys, "cog", "split", "--data", served.data, "--level", "L1", "--split", "dev",
                    "--seed", 1) == message
    for alias in ("validation", "valid"):  # past the split check: this server has no ImageNet-21K store
        details = server_says(lambda: stub.GetCogSplit(pb.CogSplitRequest(level="L1", split=alias, seed=1)),
                              grpc.StatusCode.NOT_FOUND)
        assert "split:" not in details
        assert "split:" not in cli_says(capsys, "cog", "split", "--data", served.data, "--level", "L1",
                                        "--split", alias, "--seed", 1)


# ---- the checks themselves ---------------------------------------------------------------------


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_each_range_check_accepts_exactly_its_range_and_says_so(value):
    for check, field, low, high, note in [
        (checks.check_image_size, "image_size", 1, 1024, ""),
        (checks.check_seed, "seed", 0, 2**64 - 1, ""),
        (checks.check_index, "index", 0, 2**63 - 1, ""),
        (checks.check_batch_size, "batch_size", 1, 65536, ""),
        (checks.check_stream_count, "count", 0, 10_000_000, " (0 = unbounded)"),
        (lambda v: checks.check_count("num_ways", v), "num_ways", 1, 2**31 - 1, ""),
    ]:
        if low <= value <= high:
            assert check(value) == value
        else:
            with pytest.raises(FieldError) as caught:
                check(value)
            assert str(caught.value) == f"{field}: got {value}, expected an integer in [{low}, {high}]{note}"
            assert caught.value.field == field and caught.value.value == value


@pytest.mark.parametrize("value", [True, 1.0, "84", None])
def test_only_integers_pass(value):
    with pytest.raises(FieldError, match=re.escape(f"image_size: got {value!r}, {IMAGE_SIZE}")):
        checks.check_image_size(value)


def test_numpy_integers_are_integers():
    import numpy as np
    assert checks.check_image_size(np.int64(84)) == 84
    assert str(pytest.raises(FieldError, checks.check_seed, np.int64(-1)).value) == f"seed: got -1, {SEED}"


EVERY_NAME = sorted({*MD.names, *VTAB.names, *COG.names, *REGIME_STREAM.names, "valid", "validation", "Val", ""})


@pytest.mark.parametrize("names", [MD, VTAB, COG, REGIME, REGIME_STREAM])
@given(name=st.one_of(st.sampled_from(EVERY_NAME), st.text(max_size=12)))
def test_every_protocol_accepts_its_names_and_the_validation_aliases_only(names: SplitNames, name):
    if name in names.names:
        assert names.canonical(name) == name
    elif name in ("valid", "val", "validation"):
        assert names.canonical(name) == names.validation
    else:
        with pytest.raises(FieldError) as caught:
            names.canonical(name)
        for accepted in (*names.names, *names.aliases):
            assert accepted in str(caught.value)
