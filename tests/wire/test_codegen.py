"""The committed generated code is exactly what protos/ generates."""

from __future__ import annotations

import subprocess
import sys

from sampler_server.wire.codegen import GEN_DIR


def test_generated_code_is_not_stale(tmp_path):
    # protoc runs in its own process: in-process it crashes once TensorFlow has loaded
    # its own protobuf runtime (other tests import TensorFlow)
    subprocess.run([sys.executable, "-m", "sampler_server.wire.codegen", "--output", str(tmp_path / "gen")], check=True)
    fresh = [p for p in (tmp_path / "gen").rglob("*") if p.is_file()]
    fresh_files = {p.relative_to(tmp_path / "gen").as_posix(): p.read_bytes() for p in fresh}
    committed = {
        p.relative_to(GEN_DIR).as_posix(): p.read_bytes()
        for p in GEN_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sorted(committed) == sorted(fresh_files), "run: python -m sampler_server.wire.codegen"
    stale = [name for name in fresh_files if fresh_files[name] != committed[name]]
    assert not stale, f"stale generated files {stale}; run: python -m sampler_server.wire.codegen"


def test_proto_package_is_versioned():
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2

    assert sampler_pb2.DESCRIPTOR.package == "sampler.v1"
    service = sampler_pb2.DESCRIPTOR.services_by_name["Sampler"]
    assert {m.name for m in service.methods} >= {
        "ListSources", "DescribeSource", "StreamEpisodes", "GetEpisode", "StreamBatches", "ReportMetrics", "GetReport",
    }
    for enum in sampler_pb2.DESCRIPTOR.enum_types_by_name.values():
        assert enum.values[0].number == 0 and enum.values[0].name.endswith("_UNSPECIFIED")
