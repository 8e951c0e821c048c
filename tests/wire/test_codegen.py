"""The committed generated code is exactly what protos/ generates (tools/codegen.py)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import setuptools

import sampler_common.wire.gen

REPO_ROOT = Path(__file__).resolve().parents[2]
CODEGEN = REPO_ROOT / "tools" / "codegen.py"
GEN_DIR = Path(sampler_common.wire.gen.__file__).parent
REGENERATE = "run: make proto (python tools/codegen.py)"


def test_generated_code_is_not_stale(tmp_path):
    # protoc runs in its own process: in-process it crashes once TensorFlow has loaded
    # its own protobuf runtime (other tests import TensorFlow)
    subprocess.run([sys.executable, str(CODEGEN), "--output", str(tmp_path / "gen")], check=True)
    fresh = [p for p in (tmp_path / "gen").rglob("*") if p.is_file()]
    fresh_files = {p.relative_to(tmp_path / "gen").as_posix(): p.read_bytes() for p in fresh}
    committed = {
        p.relative_to(GEN_DIR).as_posix(): p.read_bytes()
        for p in GEN_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sorted(committed) == sorted(fresh_files), REGENERATE
    stale = [name for name in fresh_files if fresh_files[name] != committed[name]]
    assert not stale, f"stale generated files {stale}; {REGENERATE}"


def test_codegen_ships_in_no_package():
    """The generator is a developer's tool: no package the wheel installs holds it."""
    find = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    finder = setuptools.find_namespace_packages if find.get("namespaces", True) else setuptools.find_packages
    shipped = finder(str(REPO_ROOT), include=find.get("include", ["*"]), exclude=find.get("exclude", ()))
    assert "sampler_server" in shipped and "sampler_common.wire.gen" in shipped
    assert [name for name in shipped if name.startswith("tools") or name == "sampler_server.wire"] == []


def test_proto_package_is_versioned():
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2

    assert sampler_pb2.DESCRIPTOR.package == "sampler.v1"
    service = sampler_pb2.DESCRIPTOR.services_by_name["Sampler"]
    assert {m.name for m in service.methods} >= {
        "ListSources", "DescribeSource", "StreamEpisodes", "GetEpisode", "StreamBatches", "ReportMetrics", "GetReport",
    }
    for enum in sampler_pb2.DESCRIPTOR.enum_types_by_name.values():
        assert enum.values[0].number == 0 and enum.values[0].name.endswith("_UNSPECIFIED")
