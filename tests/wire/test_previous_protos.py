"""A client generated from the previous .proto files still streams episodes from this server.

``previous_protos/`` is a snapshot of ``protos/`` as released (commit 179f4ca). Field
numbers and message shapes must not change under a released package name (DESIGN.md,
Wire): this test holds the server to it by generating Python code from the snapshot
under another top-level package, talking to a real server with that stub alone, and
comparing every episode with what the current client receives. When a .proto changes
compatibly this keeps passing; the snapshot moves only with a new release.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

from clients.core import EpisodeSpec, SamplerClient

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
PREVIOUS_PROTOS = HERE / "previous_protos"
PACKAGE = "previous_sampler_wire"


def test_a_client_generated_from_the_previous_protos_streams_the_same_episodes(served, tmp_path: Path) -> None:
    assert sorted(p.relative_to(PREVIOUS_PROTOS).as_posix() for p in PREVIOUS_PROTOS.rglob("*.proto")) == [
        "sampler/v1/sampler.proto"]
    gen = tmp_path / "gen"
    subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "codegen.py"), "--protos", str(PREVIOUS_PROTOS),
                    "--package", PACKAGE, "--output", str(gen / PACKAGE)], check=True, capture_output=True)
    assert "from previous_sampler_wire.sampler.v1 import" in (gen / PACKAGE / "sampler" / "v1" /
                                                             "sampler_pb2_grpc.py").read_text()
    out = tmp_path / "received.pickle"
    done = subprocess.run([sys.executable, str(HERE / "previous_client.py"), str(gen), PACKAGE, served.address,
                           str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out, "rb") as handle:
        old = pickle.load(handle)
    assert old["modules"] == []  # the old client ran on its own generated code alone

    spec = EpisodeSpec(sources=("folder",), split="train", seed=7, image_size=32, resize="bilinear",
                       ways=5, shots=2, query=3)
    with SamplerClient(served.address) as client:
        sources = sorted((s.name, s.fingerprint, s.num_records) for s in client.list_sources())
        current = list(client.episodes(spec, start=0, count=3))
        by_index = client.episode(spec, 4)
    assert old["sources"] == sources and "folder" in {name for name, _, _ in sources}
    assert [e["index"] for e in old["streamed"]] == [0, 1, 2]
    assert [e["last"] for e in old["streamed"]] == [False, False, True]
    for received, expected in zip([*old["streamed"], old["got"]], [*current, by_index], strict=True):
        assert received["index"] == expected.index
        assert received["fingerprint"] == expected.fingerprint and len(expected.fingerprint) >= 16
        assert received["class_ids"] == expected.class_ids and len(expected.class_ids) == 5
        assert received["class_names"] == expected.class_names
        assert received["support_record_ids"] == expected.support_record_ids
        assert received["query_record_ids"] == expected.query_record_ids
        for name in ("support_images", "support_labels", "query_images", "query_labels"):
            assert received[name].dtype == getattr(expected, name).dtype, name
            np.testing.assert_array_equal(received[name], getattr(expected, name), err_msg=name)
        assert received["support_images"].shape == (10, 32, 32, 3) and received["query_images"].shape == (15, 32, 32, 3)
    assert len({e["fingerprint"] for e in [*old["streamed"], old["got"]]}) == 4
