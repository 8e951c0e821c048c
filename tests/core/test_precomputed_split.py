"""The WordNet split computed ahead of time: equal to the one built from WordNet, and checked.

On the 1000 ILSVRC-2012 classes both variants read back from the precomputed bytes give
the spec ``imagenet_spec`` builds from the graph (equal classes, splits and nodes, equal
content hash), so episodes are the same whichever path made the spec. Every way the
bytes can be wrong is refused with one line naming the file and what is wrong.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import require_reference
from episode_checks import ilsvrc_manifest

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.hierarchy.imagenet import ImageNetVariant
from sampler_server.core.hierarchy.precomputed import SplitFileError, decode_split
from sampler_server.core.hierarchy.wordnet import derived_file_digest
from sampler_server.core.md.imagenet_spec import imagenet_spec, precompute_split, precomputed_spec, read_precomputed
from sampler_server.core.md import sample_episode
from sampler_server.core.split import Split

WHERE = "store 'x': wordnet_split.json"


@pytest.fixture(autouse=True, scope="module")
def _reference_counts() -> None:
    require_reference("md_specs/ilsvrc_2012_num_leaf_images.json")  # fails when ../shared is absent


@functools.cache
def _blob() -> bytes:
    return precompute_split(ilsvrc_manifest())


@pytest.mark.parametrize("variant", [v.value for v in ImageNetVariant])
def test_precomputed_spec_equals_the_wordnet_spec(variant: str) -> None:
    manifest = ilsvrc_manifest()
    built = imagenet_spec(manifest, variant=variant)
    read = precomputed_spec(manifest, _blob(), variant=variant, where=WHERE)
    assert read == built
    assert read.content_hash() == built.content_hash()
    assert [len(read.classes_in(s)) for s in Split] == ([712, 158, 130] if variant == "md" else [1000, 0, 0])
    for split in Split:
        if read.classes_in(split):
            for index in (0, 7):
                assert sample_episode(read, split, EpisodeConfig(), 3, index) == sample_episode(
                    built, split, EpisodeConfig(), 3, index)


def test_same_inputs_give_the_same_bytes_and_a_small_file() -> None:
    assert precompute_split(ilsvrc_manifest()) == _blob()
    assert len(_blob()) < 200_000
    header = json.loads(_blob().split(b"\n", 1)[0])
    assert header["format"] == "sampler-server-wordnet-split" and header["format_version"] == 1


def test_reading_it_does_not_load_networkx(tmp_path: Path) -> None:
    manifest = ilsvrc_manifest()
    (tmp_path / "split.bin").write_bytes(_blob())
    (tmp_path / "classes.json").write_text(json.dumps([[c.name, c.start, c.end, c.wnid] for c in manifest.classes]))
    code = (
        "import json, pathlib, sys, types\n"
        "from sampler_server.core.md.imagenet_spec import precomputed_spec\n"
        "from sampler_server.store.manifest import ClassInfo\n"
        "root = pathlib.Path(sys.argv[1])\n"
        "rows = json.loads((root / 'classes.json').read_text())\n"
        "classes = tuple(ClassInfo(id=i, name=n, start=s, end=e, wnid=w) for i, (n, s, e, w) in enumerate(rows))\n"
        "manifest = types.SimpleNamespace(source='ilsvrc_2012', fingerprint=sys.argv[2], classes=classes)\n"
        "spec = precomputed_spec(manifest, (root / 'split.bin').read_bytes(), variant='md')\n"
        "print(spec.content_hash(), 'networkx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), manifest.fingerprint],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == [imagenet_spec(manifest, variant="md").content_hash(), "False"], out.stderr


def _rewritten(blob: bytes, change) -> bytes:
    """The file with its payload changed by ``change`` and a header that matches it."""
    header, body = blob.split(b"\n", 1)
    payload = json.loads(body)
    change(payload)
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    head = json.loads(header)
    head["payload_sha256"] = hashlib.sha256(body).hexdigest()
    return json.dumps(head).encode() + b"\n" + body


def _refused(blob: bytes, manifest=None) -> str:
    with pytest.raises(SplitFileError) as caught:
        read_precomputed(manifest or ilsvrc_manifest(), blob, where=WHERE)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(WHERE)
    return message


def test_damaged_bytes_are_refused() -> None:
    blob = _blob()
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x01
    assert "damaged" in _refused(bytes(flipped))
    assert "damaged" in _refused(blob[:-10])
    assert "not a sampler-server-wordnet-split file" in _refused(b"\x00\xff" + blob)
    assert "not a sampler-server-wordnet-split file" in _refused(b"")


def test_another_version_or_format_is_refused() -> None:
    header, body = _blob().split(b"\n", 1)
    newer = json.loads(header) | {"format_version": 2}
    assert "format_version 2 is not supported" in _refused(json.dumps(newer).encode() + b"\n" + body)
    other = json.loads(header) | {"format": "something-else"}
    assert "not a sampler-server-wordnet-split file" in _refused(json.dumps(other).encode() + b"\n" + body)


def test_other_inputs_are_refused() -> None:
    manifest = ilsvrc_manifest()
    renamed = list(manifest.classes)
    renamed[0], renamed[1] = (dataclasses.replace(renamed[0], wnid=renamed[1].wnid),
                              dataclasses.replace(renamed[1], wnid=renamed[0].wnid))
    other_store = SimpleNamespace(**{**vars(manifest), "classes": tuple(renamed)})
    assert "for other classes" in _refused(_blob(), other_store)
    assert "from another WordNet file" in _refused(_rewritten(_blob(), lambda p: p.update(wordnet="sha256:0")))
    assert "by another split algorithm" in _refused(_rewritten(_blob(), lambda p: p.update(algorithm="old/0")))
    with pytest.raises(SplitFileError, match="another WordNet file"):
        decode_split(_blob(), wnids=[c.wnid for c in manifest.classes], wordnet="sha256:" + "0" * 64, where=WHERE)
    assert derived_file_digest().startswith("sha256:")


def test_inconsistent_payloads_are_refused() -> None:
    def twice(payload):
        splits = payload["variants"]["md"]["splits"]
        splits["train"].append(splits["test"][0])

    def missing(payload):
        payload["variants"]["md"]["splits"]["test"].pop()

    def foreign_leaf(payload):
        payload["variants"]["md"]["nodes"]["test"][0][1].append(payload["variants"]["md"]["splits"]["train"][0])

    def unsorted_nodes(payload):
        payload["variants"]["md"]["nodes"]["train"].reverse()

    def no_variant(payload):
        del payload["variants"]["md_v2"]

    for change, expected in ((twice, "twice or out of range"), (missing, "has no split"),
                             (foreign_leaf, "other than sorted class ids"), (unsorted_nodes, "sorted by wnid"),
                             (no_variant, "malformed payload")):
        assert expected in _refused(_rewritten(_blob(), change)), change.__name__
