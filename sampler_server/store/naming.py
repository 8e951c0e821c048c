"""Which store a name means: the one rule the server and the CLI share.

A request (over gRPC, from the Python clients, or on the command line) may name a
store by its directory name or name a source kind (``omniglot``). A store name
wins; a source kind served by several stores picks, in this order, one packed raw
at the requested image size with the requested resize method (its pixels are then
exactly those asked for, with no decode), an encoded one, then the first by name.
Pure: it sees only names, kinds and raw-pack options, never LMDB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sampler_common.suggest import did_you_mean
from sampler_server.errors import NotFound
from sampler_server.quoting import quoted


@dataclass(frozen=True)
class StoreName:
    name: str
    source: str
    raw_size: int | None = None
    raw_resize: str | None = None  # the ResizeMethod value a raw store was packed with

    @classmethod
    def of(cls, name: str, source: str, pack_options: Mapping[str, Any]) -> StoreName:
        size = pack_options.get("raw_size")
        return cls(name, source, int(size) if size else None, pack_options.get("raw_resize") if size else None)


def pick_store(
    stores: Sequence[StoreName], wanted: str, image_size: int | None = None, resize: str | None = None,
    where: str = "",
) -> StoreName:
    """The store ``wanted`` names (see the module docstring); NotFound lists what is served."""
    for store in stores:
        if store.name == wanted:
            return store
    candidates = sorted((s for s in stores if s.source == wanted), key=lambda s: s.name)
    if not candidates:
        names = ", ".join(sorted(s.name for s in stores)) or "none"
        kinds = ", ".join(sorted({s.source for s in stores})) or "none"
        hint = did_you_mean(wanted, [*(s.name for s in stores), *(s.source for s in stores)])
        raise NotFound(f"source {quoted(wanted)} is not served{where}{hint}; stores: {names}; source kinds: {kinds}")
    exact = [s for s in candidates if image_size is not None and s.raw_size == image_size and s.raw_resize == resize]
    encoded = [s for s in candidates if s.raw_size is None]
    return (exact or encoded or candidates)[0]
