"""Shards of one IN-21K pack served as ONE source: same manifest, fingerprint, records and
pixels as the unsharded pack (registry, decode worker processes, a real gRPC server), and
every way a shard group can be wrong refused with one line, never served in part."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sampler_server.assembly.assembler import Assembler
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.errors import FailedPrecondition
from sampler_server.fixtures.imagenet21k import write_imagenet21k
from sampler_server.imaging import ResizeMethod
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, PackSummary, run_pack
from sampler_server.pack.plan import ConverterOptions
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_server.store.reader import StoreReader, StoreUnreadable
from sampler_server.store.sharded_reader import ShardedReader
from sampler_server.store.shards import merged_manifests
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

COUNTS = {"n01440764": 9, "n01443537": 4, "n02084071": 7, "n02085620": 5, "n03000134": 8, "n07739125": 3,
          "n09246464": 6, "n12998815": 5, "n13044778": 7}


def _pack(input_dir: Path, output: Path, *, workers: int = 1, **converter: object) -> PackSummary:
    plan = sources.get_converter("imagenet21k").plan(input_dir, ConverterOptions(**converter))  # type: ignore[arg-type]
    return run_pack(plan, output, PackOptions(workers=workers, progress=False))


class Packs:
    def __init__(self, root: Path) -> None:
        self.input = write_imagenet21k(root / "fall11", COUNTS, seed=5).input_dir
        self.whole = root / "whole"
        self.unsharded = _pack(self.input, self.whole)
        self.sharded = root / "sharded"
        self.shards = [_pack(self.input, self.sharded, shard=(index, 3), workers=2 if index == 1 else 1)
                       for index in range(3)]


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> Packs:
    return Packs(tmp_path_factory.mktemp("sharded"))


def test_three_shards_are_one_store_with_the_unsharded_manifest_and_fingerprint(packs: Packs) -> None:
    whole = StoreRegistry.from_data_dir(packs.whole).get("imagenet21k")
    registry = StoreRegistry.from_data_dir(packs.sharded)
    assert list(registry.stores) == ["imagenet21k"] and not registry.quarantined
    merged = registry.get("imagenet21k")
    assert isinstance(merged.reader, ShardedReader) and merged.source == "imagenet21k"
    assert merged.manifest.fingerprint == whole.manifest.fingerprint
    assert merged.manifest.classes == whole.manifest.classes  # wnid order, global ids contiguous, same digests
    assert [c.wnid for c in merged.manifest.classes] == sorted(COUNTS)
    assert merged.manifest.num_records == sum(COUNTS.values())
    assert merged.manifest.pack_options["shards"]["stores"] == [s.store_dir.name for s in packs.shards]
    assert len({s.manifest.fingerprint for s in packs.shards} | {whole.manifest.fingerprint}) == 4
    assert merged_manifests(packs.sharded)["imagenet21k"] == merged.manifest
    assert registry.spec("imagenet21k").fingerprint == whole.manifest.fingerprint  # unsplit: no MD WordNet split


def test_records_and_bytes_are_those_of_the_unsharded_store(packs: Packs) -> None:
    whole = StoreReader(packs.whole / "imagenet21k")
    merged = StoreRegistry.from_data_dir(packs.sharded).get("imagenet21k").reader
    ids = [int(i) for i in np.random.RandomState(0).permutation(whole.num_records)]
    assert merged.read_values(ids) == whole.read_values(ids)
    assert [(i, r.origin, r.payload) for i, r in merged.iter_records()] == [
        (i, r.origin, r.payload) for i, r in whole.iter_records()
    ]
    assert merged.read(30).origin == whole.read(30).origin
    assert merged.data_bytes() == sum((s.store_dir / "data.mdb").stat().st_size for s in packs.shards)
    with pytest.raises(Exception, match=r"record id 54 is out of range for store 'imagenet21k'; allowed: 0 to 53"):
        merged.read_values([54])


def test_decode_worker_processes_read_across_shards(packs: Packs) -> None:
    whole = StoreRegistry.from_data_dir(packs.whole).get("imagenet21k").reader
    merged = StoreRegistry.from_data_dir(packs.sharded).get("imagenet21k").reader
    ids = [int(i) for i in np.random.RandomState(1).permutation(whole.num_records)[:40]]
    reference = Assembler({"imagenet21k": whole}, workers=1)
    pooled = Assembler({"imagenet21k": merged}, workers=2)
    try:
        pooled.warm_up()
        assert len(pooled.worker_pids()) == 2  # 40 ids: chunks go to forkserver workers that re-open the shards
        for method in (ResizeMethod.BILINEAR, ResizeMethod.SHORTER_BICUBIC_CENTER_CROP):
            expected = reference.images("imagenet21k", ids, 32, method)
            assert np.array_equal(pooled.images("imagenet21k", ids, 32, method), expected)
        assert pooled.encoded("imagenet21k", ids) == reference.encoded("imagenet21k", ids)
    finally:
        pooled.close()
        reference.close()


def test_a_real_server_lists_the_shards_once(packs: Packs) -> None:
    servers = {name: RunningServer(ServerConfig(data_dir=data, port=0, workers=1, grace_seconds=0.5)).start()
               for name, data in (("whole", packs.whole), ("sharded", packs.sharded))}
    try:
        listed, described = {}, {}
        for name, server in servers.items():
            with grpc.insecure_channel(server.address) as channel:
                stub = pb_grpc.SamplerStub(channel)
                listed[name] = list(stub.ListSources(pb.ListSourcesRequest()).sources)
                described[name] = stub.DescribeSource(pb.DescribeSourceRequest(name="imagenet21k"))
                health = health_pb2_grpc.HealthStub(channel)
                check = health.Check(health_pb2.HealthCheckRequest(service="sampler.v1.Sampler/imagenet21k"))
                assert check.status == health_pb2.HealthCheckResponse.SERVING
        assert [s.name for s in listed["sharded"]] == ["imagenet21k"]
        assert listed["sharded"] == listed["whole"]
        assert described["sharded"] == described["whole"]
        assert [(c.wnid, c.num_records) for c in described["sharded"].classes] == sorted(COUNTS.items())
    finally:
        for server in servers.values():
            server.stop(grace=0.2)


def _copy_shards(packs: Packs, target: Path, indices: tuple[int, ...] = (0, 1, 2)) -> Path:
    target.mkdir()
    for index in indices:
        shard = packs.shards[index].store_dir
        shutil.copytree(shard, target / shard.name)
    return target


def _refused(data: Path, *expected: str) -> str:
    registry = StoreRegistry.from_data_dir(data) if any(data.iterdir()) else None
    assert registry is not None and "imagenet21k" not in registry.stores
    with pytest.raises(FailedPrecondition) as caught:
        registry.get("imagenet21k")
    message = str(caught.value)
    assert "\n" not in message and all(text in message for text in expected), message
    return message


def _with_other_store(data: Path, packs: Packs) -> None:
    shutil.copytree(packs.whole / "imagenet21k", data / "tench_only")  # something still serves


def test_a_missing_shard_quarantines_the_source(packs: Packs, tmp_path: Path) -> None:
    data = _copy_shards(packs, tmp_path / "data", (0, 2))
    _with_other_store(data, packs)
    _refused(data, "sharded store 'imagenet21k': 1 of its 3 shards missing or unreadable (imagenet21k-00001-of-00003)",
             "pack imagenet21k --shard I/3")
    with pytest.raises(FailedPrecondition, match="1 of its 3 shards missing"):
        merged_manifests(data)


def test_shards_of_different_counts_overlap_and_are_refused(packs: Packs, tmp_path: Path) -> None:
    data = _copy_shards(packs, tmp_path / "data")
    _pack(packs.input, data, shard=(1, 2))
    _with_other_store(data, packs)
    _refused(data, "its shards come from packs of different shard counts [2, 3]", "whose shares overlap")


def test_shards_of_different_inputs_are_refused(packs: Packs, tmp_path: Path) -> None:
    data = _copy_shards(packs, tmp_path / "data", (0, 2))
    subset = tmp_path / "wnids.txt"
    subset.write_text("\n".join(sorted(COUNTS)[:-1]) + "\n")
    _pack(packs.input, data, shard=(1, 3), wnids=subset)
    _with_other_store(data, packs)
    _refused(data, "were packed from different inputs (9 and 8 synsets, different wnid lists)")


def test_a_renamed_shard_and_a_name_clash_are_refused(packs: Packs, tmp_path: Path) -> None:
    data = _copy_shards(packs, tmp_path / "data")
    os.rename(data / "imagenet21k-00002-of-00003", data / "imagenet21k-2")
    _with_other_store(data, packs)
    registry = StoreRegistry.from_data_dir(data)
    assert "is not named <base>-00002-of-00003" in registry.quarantined["imagenet21k-2"].reason
    assert "1 of its 3 shards missing" in registry.quarantined["imagenet21k"].reason
    clash = _copy_shards(packs, tmp_path / "clash")
    shutil.copytree(packs.whole / "imagenet21k", clash / "imagenet21k")
    registry = StoreRegistry.from_data_dir(clash)
    assert list(registry.stores) == ["imagenet21k"] and isinstance(registry.get("imagenet21k").reader, StoreReader)
    assert sorted(registry.quarantined) == [s.store_dir.name for s in packs.shards]
    assert "also the name of a single store" in registry.quarantined["imagenet21k-00000-of-00003"].reason


def test_an_unreadable_shard_quarantines_the_source_at_start_and_while_served(packs: Packs, tmp_path: Path) -> None:
    data = _copy_shards(packs, tmp_path / "data")
    _with_other_store(data, packs)
    victim = data / "imagenet21k-00001-of-00003" / "data.mdb"
    intact = victim.read_bytes()
    victim.write_bytes(intact[: len(intact) // 2])
    _refused(data, "shard 'imagenet21k-00001-of-00003' cannot be read", "truncated",
             "its other shards are not served either")
    victim.write_bytes(intact)
    registry = StoreRegistry.from_data_dir(data)
    reader = registry.get("imagenet21k").reader
    reader.check_data()
    with open(victim, "r+b") as handle:
        handle.truncate(len(intact) // 2)
    with pytest.raises(StoreUnreadable) as caught:
        reader.read_values(list(range(reader.num_records)))
    assert caught.value.store == "imagenet21k"  # the servicer quarantines the merged source, not a shard
    assert "a shard of 'imagenet21k', which is served only whole" in str(caught.value)
    assert registry.quarantine(caught.value.store, str(caught.value))
    with pytest.raises(FailedPrecondition, match="store 'imagenet21k' is quarantined"):
        registry.get("imagenet21k")


def test_cog_levels_counts_what_the_server_serves_and_refuses_a_partial_shard_set(packs: Packs, tmp_path: Path) -> None:
    from sampler_server.cli.cog_levels_cmd import counts_from_data

    assert counts_from_data(packs.sharded) == counts_from_data(packs.whole) == dict(sorted(COUNTS.items()))
    data = _copy_shards(packs, tmp_path / "partial", (0, 2))
    with pytest.raises(FailedPrecondition, match="1 of its 3 shards missing"):
        counts_from_data(data)
