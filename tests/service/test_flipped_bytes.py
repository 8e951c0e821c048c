"""Flipped bytes in stored records are DATA_LOSS in every image mode, never other pixels;
``verify`` names the damaged records; each damaged record is logged once."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import grpc
import lmdb
import pytest
from conftest import generate_fixture, pack_fixture

from sampler_server.cli.main import main
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_server.store.record import record_key
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc


def flip_bytes(store_dir: Path, record_ids: list[int]) -> None:
    """Flip one byte inside the image payload of each record, through LMDB (its pages stay valid)."""
    env = lmdb.open(str(store_dir), subdir=True, lock=False)
    with env.begin(write=True) as txn:
        for record_id in record_ids:
            value = bytearray(txn.get(record_key(record_id)))
            value[len(value) - 40] ^= 0x5A  # inside the payload, away from a JPEG's end marker
            txn.put(record_key(record_id), bytes(value))
    env.close()


def _request(store: str, size: int, mode: int = pb.IMAGE_MODE_DECODED) -> pb.EpisodeRequest:
    return pb.EpisodeRequest(sources=[store], split=pb.SPLIT_TRAIN, seed=7,
                             images=pb.ImageOptions(image_size=size, mode=mode))


def _server(data: Path) -> RunningServer:
    return RunningServer(ServerConfig(data_dir=data, port=0, workers=2, threads=4, grace_seconds=0.5)).start()


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """(data dir, damaged record ids of episode 0): stores 'folder' (encoded) and 'folder_raw32'."""
    root = tmp_path_factory.mktemp("integrity")
    fixture = generate_fixture("image_folder", root, num_classes=24, images_per_class=12)
    pristine = root / "pristine"
    pack_fixture(fixture, pristine, name="folder")
    pack_fixture(fixture, pristine, name="folder_raw32", raw_size=32)
    server = _server(pristine)
    try:
        with grpc.insecure_channel(server.address) as channel:
            episode = pb_grpc.SamplerStub(channel).GetEpisode(
                pb.GetEpisodeRequest(request=_request("folder", 32, pb.IMAGE_MODE_ENCODED), index=0))
    finally:
        server.stop(grace=0.2)
    ids = list(episode.support_record_ids)
    victims = [ids[0], ids[len(ids) // 2], ids[-1]]
    data = root / "data"  # a copy: this process holds the pristine stores open
    shutil.copytree(pristine, data)
    for store in ("folder", "folder_raw32"):
        flip_bytes(data / store, victims)
    return data, victims, pristine


@pytest.mark.parametrize(
    "store, size, mode",
    [("folder", 32, pb.IMAGE_MODE_DECODED), ("folder", 32, pb.IMAGE_MODE_ENCODED),
     ("folder_raw32", 32, pb.IMAGE_MODE_DECODED), ("folder_raw32", 32, pb.IMAGE_MODE_ENCODED)],
)
def test_flipped_bytes_are_data_loss_naming_store_and_record(damaged, store, size, mode, caplog):
    data, victims, _ = damaged
    server = _server(data)
    try:
        with grpc.insecure_channel(server.address) as channel, caplog.at_level(logging.ERROR):
            stub = pb_grpc.SamplerStub(channel)
            for _ in range(2):  # a retried episode fails the same way and is not logged again
                with pytest.raises(grpc.RpcError) as caught:
                    stub.GetEpisode(pb.GetEpisodeRequest(request=_request(store, size, mode), index=0))
                assert caught.value.code() == grpc.StatusCode.DATA_LOSS, caught.value.details()
                details = caught.value.details()
                assert f"store {store!r}, record " in details and "checksum mismatch" in details
                assert any(f"record {v}:" in details for v in victims)
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(store, size, mode), count=2)))
            assert caught.value.code() == grpc.StatusCode.DATA_LOSS
            # episodes that do not touch a damaged record are served
            served = 0
            for index in range(1, 30):
                try:
                    stub.GetEpisode(pb.GetEpisodeRequest(request=_request(store, size, mode), index=index))
                    served += 1
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.DATA_LOSS
            assert served > 0
        logged = [r.getMessage() for r in caplog.records if "checksum mismatch" in r.getMessage()]
        named = [f"store {store!r}, record {v}:" for v in victims]
        for name in named:
            assert sum(name in line for line in logged) <= 1, logged
        assert any(name in line for line in logged for name in named)
    finally:
        server.stop(grace=0.2)


def test_verify_names_the_damaged_records_and_exits_1(damaged, capsys):
    data, victims, pristine = damaged
    assert main(["verify", str(pristine)]) == 0
    out = capsys.readouterr().out
    assert out.count(": OK (") == 2, out
    assert main(["verify", str(data)]) == 1
    out = capsys.readouterr().out
    listed = ", ".join(map(str, sorted(victims)))
    for store in ("folder", "folder_raw32"):
        line = next(line for line in out.splitlines() if line.startswith(f"{store}:"))
        assert "DAMAGED" in line and f"3 of 288 records damaged (records {listed}" in line, line
        assert "checksum mismatch" in line
    assert main(["verify", str(data), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {s["name"]: s["bad_record_ids"] for s in report["stores"]} == {
        "folder": sorted(victims), "folder_raw32": sorted(victims)}
    assert main(["verify", str(data / "nothing-here")]) == 2
