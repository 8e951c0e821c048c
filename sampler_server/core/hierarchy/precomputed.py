"""A store's WordNet class split, computed at pack time and read back at serve time.

Building the Meta-Dataset split of an ILSVRC store (``hierarchy.imagenet``) needs the
WordNet graph: networkx, the 82,115-synset file and the collapse take most of a second
for 1000 classes. A server needs only the result: per benchmark variant, each class's
split and each split's candidate nodes (wnid, sorted class ids). ``encode_split``
writes that result; ``decode_split`` reads it back (77 KB and a few milliseconds for
ILSVRC-2012), without networkx.

Layout (bytes; UTF-8 JSON throughout):
- line 1, the header: ``{"format": "sampler-server-wordnet-split", "format_version": 1,
  "payload_sha256": "<hex>"}``;
- the rest, the payload: ``{"algorithm", "wordnet", "classes", "variants"}``, where
  ``algorithm`` is ``imagenet.SPLIT_ALGORITHM``, ``wordnet`` the digest of the WordNet
  file the split came from, ``classes`` the digest of the class list (id -> wnid) it
  was built for (``classes_digest``), and ``variants`` maps each variant (``md``,
  ``md_v2``) to ``{"splits": {split: [class ids]}, "nodes": {split: [[wnid, [class
  ids]], ...]}}``.

Verification (``decode_split`` raises ``SplitFileError`` with one line saying what is
wrong): the format and version are this build's; the payload's SHA-256 is the
header's (a damaged file); the payload was built by this algorithm, from this WordNet
file, for these classes (a file of another store or of an older build does not
apply); every class has exactly one split and every node lists sorted, distinct class
ids of its split. A verified file gives exactly the splits and nodes it was written
from, so a spec built from it equals the one built from WordNet (same content hash,
bit-identical episodes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sampler_server.core.hashing import FieldHasher
from sampler_server.core.hierarchy.imagenet import SPLIT_ALGORITHM, ImageNetVariant
from sampler_server.core.split import Split
from sampler_server.errors import DataLoss

FORMAT_NAME = "sampler-server-wordnet-split"
FORMAT_VERSION = 1


class SplitFileError(DataLoss):
    """A precomputed split that cannot be used (damaged, another format, other inputs)."""


@dataclasses.dataclass(frozen=True)
class VariantSplit:
    """One variant's result: the split of class i (``splits[i]``) and each split's nodes
    as (wnid, sorted class ids), sorted by wnid."""

    splits: tuple[Split, ...]
    nodes: Mapping[Split, tuple[tuple[str, tuple[int, ...]], ...]]


def classes_digest(wnids: Sequence[str]) -> str:
    """Digest of the class list a split is computed for: ``wnids[i]`` is class i's wnid."""
    hasher = FieldHasher("sampler-server/wordnet-split-classes/v1").integer(len(wnids))
    for wnid in wnids:
        hasher.text(wnid)
    return "sha256:" + hasher.hexdigest()


def encode_split(variants: Mapping[ImageNetVariant, VariantSplit], *, wnids: Sequence[str], wordnet: str) -> bytes:
    """The file's bytes for the results of ``variants`` over classes ``wnids`` (in id order),
    computed from the WordNet file of digest ``wordnet``. The same inputs give the same bytes."""
    payload = {
        "algorithm": SPLIT_ALGORITHM,
        "wordnet": wordnet,
        "classes": classes_digest(wnids),
        "variants": {variant.value: _variant_json(variants[variant], len(wnids)) for variant in sorted(
            variants, key=lambda v: v.value)},
    }
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
              "payload_sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header, sort_keys=True).encode("utf-8") + b"\n" + body


def _variant_json(result: VariantSplit, num_classes: int) -> dict[str, Any]:
    assert len(result.splits) == num_classes, "one split per class"
    return {
        "splits": {split.value: [i for i, s in enumerate(result.splits) if s is split] for split in Split},
        "nodes": {split.value: [[wnid, list(leaves)] for wnid, leaves in result.nodes.get(split, ())]
                  for split in Split},
    }


def decode_split(
    blob: bytes, *, wnids: Sequence[str], wordnet: str, where: str = "WordNet split file"
) -> dict[ImageNetVariant, VariantSplit]:
    """The verified results in ``blob`` for classes ``wnids`` (in id order) and the WordNet
    file of digest ``wordnet``.

    Raises:
        SplitFileError: one line naming ``where`` and what is wrong (see the module
            docstring); the caller builds the split from WordNet instead.
    """
    header_line, _, body = blob.partition(b"\n")
    try:
        header = json.loads(header_line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SplitFileError(f"{where}: not a {FORMAT_NAME} file (its first line is not a JSON header)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise SplitFileError(f"{where}: not a {FORMAT_NAME} file")
    if header.get("format_version") != FORMAT_VERSION:
        raise SplitFileError(f"{where}: format_version {header.get('format_version')!r} is not supported "
                             f"(this build reads {FORMAT_VERSION})")
    if hashlib.sha256(body).hexdigest() != header.get("payload_sha256"):
        raise SplitFileError(f"{where}: damaged (its payload's SHA-256 is not the one its header records)")
    try:
        payload = json.loads(body)
        inputs = {key: payload[key] for key in ("algorithm", "wordnet", "classes")}
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise SplitFileError(f"{where}: malformed payload") from None
    expected = {"algorithm": SPLIT_ALGORITHM, "wordnet": wordnet, "classes": classes_digest(wnids)}
    for key, value in expected.items():
        if inputs[key] != value:
            what = {"algorithm": "by another split algorithm", "wordnet": "from another WordNet file",
                    "classes": "for other classes (another store's, or this store before a repack)"}[key]
            raise SplitFileError(f"{where}: computed {what}: {key} {str(inputs[key])[:40]!r}, expected "
                                 f"{value[:40]!r}")
    try:
        return {variant: _variant_from_json(payload["variants"][variant.value], len(wnids))
                for variant in ImageNetVariant}
    except (KeyError, TypeError, ValueError) as error:
        raise SplitFileError(f"{where}: malformed payload ({error})") from None


def _variant_from_json(data: Mapping[str, Any], num_classes: int) -> VariantSplit:
    split_of: list[Split | None] = [None] * num_classes
    for split in Split:
        for class_id in data["splits"][split.value]:
            if not isinstance(class_id, int) or not 0 <= class_id < num_classes or split_of[class_id] is not None:
                raise ValueError(f"split {split.value!r} lists class {class_id!r} twice or out of range")
            split_of[class_id] = split
    if None in split_of:
        raise ValueError(f"class {split_of.index(None)} has no split")
    splits = tuple(s for s in split_of if s is not None)
    nodes: dict[Split, tuple[tuple[str, tuple[int, ...]], ...]] = {}
    for split in Split:
        listed = []
        for wnid, leaves in data["nodes"][split.value]:
            leaves = tuple(leaves)
            if not isinstance(wnid, str) or not leaves or list(leaves) != sorted(set(leaves)) or any(
                    not isinstance(leaf, int) or not 0 <= leaf < num_classes or splits[leaf] is not split
                    for leaf in leaves):
                raise ValueError(f"node {wnid!r} of split {split.value!r} lists other than sorted class ids of "
                                 "that split")
            listed.append((wnid, leaves))
        if [wnid for wnid, _ in listed] != sorted({wnid for wnid, _ in listed}):
            raise ValueError(f"nodes of split {split.value!r} are not unique and sorted by wnid")
        nodes[split] = tuple(listed)
    return VariantSplit(splits=splits, nodes=nodes)
