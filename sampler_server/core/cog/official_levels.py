"""ImageNet-CoG levels and splits as naver/cog's published files define them, over a store.

With a levels file (``official_files.OfficialLevels``) a level's concepts are the file's,
in sorted wnid order (label i = i-th wnid), whatever our computed levels hold. With a
concepts split file too (``official_files.ConceptImages``), a concept's ``test`` split is
the file's "test" names and its full ``train`` split the file's "train" names, each in
name order (the reference sorts them); the subsets are drawn from the file's train list
by the rules of ``core.cog.splits`` (val: 20% held out for the seed; search: train minus
val, then N per concept; train with N shots: N per concept), over positions in that
name order, so the subsets keep name order too. Without a split file the file's
concepts get ``core.cog.splits``' own partition of their store records.

A name finds its record through the store's record origins (``<wnid>/<file>``,
``official_files.image_key``), looked up among the records of the concept it is listed
under. A wnid or an image the store lacks is ``FailedPrecondition`` naming the first
missing ones and how many: a split is never served with a hole.

Fingerprints: ``files_identity`` hashes the store's content fingerprint with both
files' SHA-256, and split fingerprints are built on it (level_size and min_images 0),
so a split from the files never shares a fingerprint with a computed level's; the
subsets' random draws stay keyed on the store fingerprint (``core.cog.splits``).

``compare_levels`` lines our computed levels up against a levels file. Everything is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sampler_server.core.cog import LEVEL_NAMES
from sampler_server.core.cog.levels import CogLevels
from sampler_server.core.cog.official_files import ConceptImages, OfficialLevels, image_key
from sampler_server.core.cog.splits import (
    CogSplit,
    SplitRequest,
    concept_records,
    few_shot,
    search_train,
    split_fingerprint,
    validation,
)
from sampler_server.core.hashing import FieldHasher
from sampler_server.errors import FailedPrecondition, InvalidArgument

_IDENTITY_DOMAIN = "sampler/cog-official-files/v1"
_LEVELS_DOMAIN = "sampler/cog-official-levels/v1"
SHOWN = 3  # missing wnids or images named in an error


def _first(items: Sequence[str], total: int) -> str:
    shown = ", ".join(items[:SHOWN])
    more = f" (and {total - SHOWN} more)" if total > SHOWN else ""
    return f"{shown}{more}"


def files_identity(store_fingerprint: str, levels: OfficialLevels, images: ConceptImages | None) -> str:
    """What a split from the files is a function of, beside the request: store content and both files."""
    hasher = FieldHasher(_IDENTITY_DOMAIN).text(store_fingerprint).text(levels.sha256)
    return hasher.text(images.sha256 if images is not None else "").hexdigest()


def levels_fingerprint(levels: OfficialLevels, images: ConceptImages | None) -> str:
    """The served levels' fingerprint with files: their names and sorted wnids, and the files' hashes."""
    hasher = FieldHasher(_LEVELS_DOMAIN).text(levels.sha256).text(images.sha256 if images is not None else "")
    for name, wnids in levels.by_name.items():
        hasher.text(name).text(",".join(wnids))
    return hasher.hexdigest()


def check_files(levels: OfficialLevels, images: ConceptImages | None, store_wnids: Sequence[str] | set[str],
                store: str, level_names: Sequence[str] = LEVEL_NAMES) -> None:
    """Every concept of ``level_names`` is in the store and (with a split file) in the split
    file; else ``FailedPrecondition`` naming the first missing ones and how many."""
    present = set(store_wnids)
    wanted = sorted({w for name in level_names for w in levels.concepts(name)})
    missing = [w for w in wanted if w not in present]
    if missing:
        raise FailedPrecondition(f"{levels.source}: {len(missing)} of its {len(wanted)} concepts are not in store "
                                 f"{store}: {_first(missing, len(missing))}")
    if images is not None:
        unlisted = [w for w in wanted if w not in images.images]
        if unlisted:
            raise FailedPrecondition(f"{images.source}: {len(unlisted)} of the {len(wanted)} concepts of "
                                     f"{levels.source} have no entry: {_first(unlisted, len(unlisted))}")


def level_sizes(levels: OfficialLevels, images: ConceptImages | None, name: str,
                default_sizes: Callable[[str], tuple[int, int]]) -> tuple[int, int]:
    """(full train, test) images of a level: the split file's counts, else ``default_sizes(wnid)``."""
    train = test = 0
    for wnid in levels.concepts(name):
        if images is not None:
            listed = images.of(wnid)
            t, s = len(listed[0]), len(listed[1])
        else:
            t, s = default_sizes(wnid)
        train, test = train + t, test + s
    return train, test


def resolve_concepts(images: ConceptImages, wnids: Sequence[str], records: Mapping[str, Sequence[int]],
                     origins: Callable[[Sequence[int]], Sequence[str]], store: str
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """wnid -> (train record ids, test record ids), each in the file's name order.

    ``records[wnid]`` are the concept's record ids in the store and ``origins(ids)`` their
    origins. ``FailedPrecondition`` naming the first images the store lacks, and how many."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    missing: list[str] = []
    count = 0
    for wnid in wnids:
        ids = list(records[wnid])
        where = {origin: record_id for origin, record_id in zip(origins(ids), ids)}
        parts = []
        for names in images.of(wnid):
            found = []
            for name in names.tolist():
                record_id = where.get(image_key(wnid, name))
                if record_id is None:
                    count += 1
                    if len(missing) < SHOWN:
                        missing.append(f"{wnid}: {name}")
                else:
                    found.append(record_id)
            parts.append(np.asarray(found, np.int64))
        out[wnid] = (parts[0], parts[1])
    if count:
        raise FailedPrecondition(f"{images.source}: {count} of its images of these concepts are not in store {store}: "
                                 f"{_first(missing, count)}")
    return out


def concept_split(store_fingerprint: str, wnid: str, train: np.ndarray, test: np.ndarray,
                  request: SplitRequest) -> np.ndarray:
    """One concept's record ids in ``request``'s split, from the file's train and test ids
    (name order); the subsets are drawn over positions, so they keep name order."""
    if request.split == "test":
        return test
    if request.split == "train" and not request.shots:
        return train
    positions = np.arange(len(train), dtype=np.int64)
    if request.split == "val":
        chosen = validation(store_fingerprint, wnid, positions, request.seed)
    elif request.split == "search":
        chosen = search_train(store_fingerprint, wnid, positions, request.shots, request.seed)
    else:
        chosen = few_shot(store_fingerprint, wnid, positions, request.shots, request.seed)
    return train[chosen]


def build_official_split(store_fingerprint: str, levels: OfficialLevels, images: ConceptImages | None,
                         request: SplitRequest, records: Mapping[str, Sequence[int]],
                         resolved: Mapping[str, tuple[np.ndarray, np.ndarray]] | None,
                         make_split: Callable[..., CogSplit] = CogSplit) -> CogSplit:
    """The split of ``request`` (a level L1..L5) with the files' concepts and images.

    ``resolved`` is ``resolve_concepts``' result for the level's concepts when there is a
    split file (None without one: the store's own partition of each concept's records)."""
    if request.level not in LEVEL_NAMES:
        raise InvalidArgument(f"level: got {request.level}, the levels file names {', '.join(LEVEL_NAMES)} "
                              "(IN-1K takes no levels file)")
    wnids = levels.concepts(request.level)
    parts = []
    for wnid in wnids:
        if images is None:
            parts.append(np.asarray(concept_records(store_fingerprint, wnid, list(records[wnid]), request), np.int64))
        else:
            assert resolved is not None
            train, test = resolved[wnid]
            parts.append(concept_split(store_fingerprint, wnid, train, test, request))
    record_ids = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    labels = np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for p in parts])
    identity = files_identity(store_fingerprint, levels, images)
    fingerprint = split_fingerprint(identity, 0, 0, request, wnids, record_ids, labels)
    return make_split(request.level, request.split, request.shots, request.seed, 0, 0, store_fingerprint, wnids,
                      record_ids, labels, fingerprint)


def compare_levels(computed: CogLevels, official: OfficialLevels) -> dict[str, Any]:
    """Per level: how many of the file's concepts our level holds, and the wnids that
    differ both ways (``only_file``: in the file's level, not ours; ``only_computed``:
    the reverse); with, for each file-only concept, which of our levels holds it, if any."""
    ours = {level.name: set(level.concepts) for level in computed.levels}
    where = {wnid: name for name, wnids in ours.items() for wnid in wnids}
    eligible = set(computed.eligible)
    out: dict[str, Any] = {}
    for name in LEVEL_NAMES:
        theirs = set(official.concepts(name))
        only_file = sorted(theirs - ours[name])
        out[name] = {
            "file_concepts": len(theirs),
            "computed_concepts": len(ours[name]),
            "common": len(theirs & ours[name]),
            "only_file": only_file,
            "only_computed": sorted(ours[name] - theirs),
            "only_file_in_computed_level": {w: where[w] for w in only_file if w in where},
            "only_file_not_eligible": sorted(w for w in only_file if w not in eligible),
        }
    return {"levels_file": official.source, "levels_file_sha256": official.sha256,
            "computed_fingerprint": computed.fingerprint, "levels": out}
