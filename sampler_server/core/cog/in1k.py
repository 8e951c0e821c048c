"""The 1000 ILSVRC-2012 (IN-1K) wnids: the seen concepts of ImageNet-CoG.

Shipped as ``sampler_server/data/ilsvrc2012_wnids.txt``: one wnid per line, sorted,
ASCII, a final newline, nothing else. ``build_in1k`` rebuilds it from the label list
the ``tensorflow_datasets`` package ships for ``imagenet2012`` and a test checks the
shipped file equals a fresh build and the keys of Meta-Dataset's ILSVRC-2012 spec.

Teddy bear (n04399382) is an IN-1K concept but not an IN-21K Fall 2011 synset, so with
real IN-21K counts it lies outside the WordNet fragment and takes no part in the
similarity; its ancestors are still removed from the eligible concepts.
"""

from __future__ import annotations

import functools
import importlib.resources

from sampler_server.core.hierarchy.wordnet import is_wnid
from sampler_server.errors import InputFormatError

IN1K_FILE_NAME = "ilsvrc2012_wnids.txt"
NUM_IN1K = 1000
TEDDY_BEAR_WNID = "n04399382"


def parse_in1k(text: str, *, source: str = IN1K_FILE_NAME) -> tuple[str, ...]:
    """The wnids of an IN-1K list, checked: 1000 distinct noun wnids, sorted, one a line."""
    if not text.endswith("\n"):
        raise InputFormatError(source, "expected one wnid per line and a final newline")
    wnids = tuple(text[:-1].split("\n"))
    bad = [w for w in wnids if not is_wnid(w)]
    if bad:
        raise InputFormatError(source, f"{bad[0]!r} is not a noun wnid ('n' + 8 digits)")
    if len(set(wnids)) != NUM_IN1K or len(wnids) != NUM_IN1K:
        raise InputFormatError(source, f"{len(wnids)} lines, {len(set(wnids))} distinct; expected {NUM_IN1K}")
    if list(wnids) != sorted(wnids):
        raise InputFormatError(source, "wnids are not sorted")
    return wnids


@functools.lru_cache(maxsize=1)
def in1k_wnids() -> tuple[str, ...]:
    """The 1000 IN-1K wnids, sorted (read once from the shipped file)."""
    resource = importlib.resources.files("sampler_server") / "data" / IN1K_FILE_NAME
    return parse_in1k(resource.read_text(encoding="ascii"), source=f"sampler_server/data/{IN1K_FILE_NAME}")
