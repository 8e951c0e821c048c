"""The Episode value and its fingerprint.

An episode is a composition: ordered class ids (position = label) and, per class,
the support and query record ids (disjoint, each sorted). Its fingerprint is
SHA-256 over a length-prefixed encoding of the protocol, the source, the split, the
store's content fingerprint, the config hash, the ordered class ids and every
record id, so it identifies exactly what a trainer sees and which data and config
it came from; the seed and index that produced it do not enter it (two requests
that produce the same composition share a fingerprint).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sampler_server.core.hashing import FieldHasher
from sampler_server.core.seeding import Protocol
from sampler_server.core.split import Split


@dataclasses.dataclass(frozen=True)
class Episode:
    """One sampled episode (no images): ``support[i]`` and ``query[i]`` belong to ``class_ids[i]``."""

    source: str
    split: Split
    seed: int
    index: int
    class_ids: tuple[int, ...]
    support: tuple[tuple[int, ...], ...]
    query: tuple[tuple[int, ...], ...]
    group: str | None
    store_fingerprint: str
    config_hash: str
    fingerprint: str
    protocol: Protocol = Protocol.META_DATASET

    @property
    def ways(self) -> int:
        return len(self.class_ids)

    @property
    def shots(self) -> tuple[int, ...]:
        """Support images per class, in class order."""
        return tuple(len(ids) for ids in self.support)

    @property
    def query_per_class(self) -> int:
        """Query images per class (the same for every class)."""
        return len(self.query[0]) if self.query else 0

    @property
    def support_size(self) -> int:
        return sum(self.shots)

    @property
    def query_size(self) -> int:
        return sum(len(ids) for ids in self.query)

    def to_json(self, class_names: Sequence[str] | None = None) -> dict[str, Any]:
        """A JSON-ready dict; ``class_names`` (indexed by class id) adds each class's name."""
        classes = []
        for label, class_id in enumerate(self.class_ids):
            entry: dict[str, Any] = {"label": label, "id": class_id}
            if class_names is not None:
                entry["name"] = class_names[class_id]
            entry["support"] = list(self.support[label])
            entry["query"] = list(self.query[label])
            classes.append(entry)
        return {
            "protocol": self.protocol.value,
            "source": self.source,
            "split": self.split.value,
            "seed": self.seed,
            "index": self.index,
            "ways": self.ways,
            "shots": list(self.shots),
            "support_size": self.support_size,
            "query_per_class": self.query_per_class,
            "group": self.group,
            "classes": classes,
            "store_fingerprint": self.store_fingerprint,
            "config_hash": self.config_hash,
            "fingerprint": self.fingerprint,
        }


def episode_fingerprint(
    *,
    protocol: Protocol,
    source: str,
    split: Split,
    store_fingerprint: str,
    config_hash: str,
    class_ids: Sequence[int],
    support: Sequence[Sequence[int]],
    query: Sequence[Sequence[int]],
) -> str:
    """SHA-256 (hex) of the composition and its provenance (see the module docstring)."""
    hasher = FieldHasher("sampler-server/episode/v1")
    hasher.text(protocol.value).text(source).text(split.value).text(store_fingerprint).text(config_hash)
    hasher.integers(class_ids)
    # One field: per class, the support count and ids, then the query count and ids.
    words: list[int] = []
    for class_support, class_query in zip(support, query, strict=True):
        words.append(len(class_support))
        words.extend(class_support)
        words.append(len(class_query))
        words.extend(class_query)
    hasher.integers(words)
    return hasher.hexdigest()
