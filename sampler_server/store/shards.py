"""Stores packed in shards (``pack imagenet21k --shard I/N``) and their merge into one source.

A shard is an ordinary store (its own LMDB, manifest and checksums: ``verify`` checks
it alone) whose directory is ``<base>-IIIII-of-NNNNN`` and whose manifest's
``pack_options["shard"]`` says which share of the input it holds::

    {"index": I, "count": N, "wnids": [the synsets assigned to it, in order],
     "input_synsets": W, "input_wnids_sha256": "sha256:..."}

``input_*`` describe the whole input (every synset to pack, after ``--wnids``), the
same in every shard of one pack. Shards are contiguous chunks of that list in wnid
order, so shard I's classes come right after shard I-1's: the merged source lists
classes in wnid order with global record ids contiguous (shard I's records are one
range of them), and a class's records live in one shard.

``merge_shards`` builds the merged manifest of one base name and refuses (one line,
``FailedPrecondition``), never guessing: a missing shard, shards of different counts
(overlapping shares), of different inputs (their input lists differ) or packed with
different encoding options, a shard holding a class outside its share, or shares that
do not add up to the input list. Its fingerprint comes from the per-class digests
(``store.fingerprint.fingerprint_of_classes``), so it equals the fingerprint of the
same input packed unsharded. What the check cannot see: two copies of an input with
the same synsets but different images inside (only the wnid lists are compared).

Pure: manifests in, a manifest out. ``store.sharded_reader`` reads records across the
shards; the service registry serves each merged group under its base name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.store.fingerprint import fingerprint_of_classes
from sampler_server.store.manifest import ClassInfo, Manifest

SHARD_KEY = "shard"
MERGED_KEY = "shards"
_SHARD_NAME = re.compile(r"(?P<base>.+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})")
_ENCODING_KEYS = ("max_side", "raw_size", "raw_resize", "lossless_derived")
MAX_SHARDS = 99_999


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (0 <= I < N) from the command line."""
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", text)
    if match is None:
        raise InvalidArgument(f"--shard: got {text!r}, expected I/N with 0 <= I < N (e.g. 0/3, 1/3, 2/3)")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= count <= MAX_SHARDS or not 0 <= index < count:
        raise InvalidArgument(f"--shard: got {index}/{count}, expected I/N with 1 <= N <= {MAX_SHARDS} and 0 <= I < N")
    return index, count


def shard_store_name(base: str, index: int, count: int) -> str:
    """The store directory of shard ``index`` of ``count`` (different for every shard)."""
    return f"{base}-{index:05d}-of-{count:05d}"


def shard_share(items: Sequence[str], index: int, count: int) -> list[str]:
    """Shard ``index``'s contiguous chunk of ``items``: [floor(i W / N), floor((i + 1) W / N))."""
    total = len(items)
    return list(items[index * total // count : (index + 1) * total // count])


def wnids_digest(wnids: Iterable[str]) -> str:
    """Identity of an input's synset list (length-prefixed, so no two lists collide)."""
    hasher = hashlib.sha256()
    for wnid in wnids:
        data = wnid.encode("utf-8")
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return "sha256:" + hasher.hexdigest()


def shard_note(index: int, count: int, input_wnids: Sequence[str]) -> dict[str, Any]:
    """What a shard's manifest records (``pack_options["shard"]``)."""
    return {
        "index": index,
        "count": count,
        "wnids": shard_share(input_wnids, index, count),
        "input_synsets": len(input_wnids),
        "input_wnids_sha256": wnids_digest(input_wnids),
    }


def shard_info(manifest: Manifest) -> Mapping[str, Any] | None:
    info = manifest.pack_options.get(SHARD_KEY)
    return info if isinstance(info, Mapping) else None


@dataclass(frozen=True)
class Grouped:
    """Stores under a data directory sorted into single stores and shard groups."""

    single: dict[str, Manifest]  # directory name -> manifest
    groups: dict[str, dict[str, Manifest]]  # base name -> {shard directory name -> manifest}
    refused: dict[str, str]  # directory name -> why it is neither


def group_stores(stores: Mapping[str, Manifest]) -> Grouped:
    """Single stores, shard groups by base name, and shards whose directory name does not
    say what their manifest does (renamed: never guessed into a group)."""
    single: dict[str, Manifest] = {}
    groups: dict[str, dict[str, Manifest]] = {}
    refused: dict[str, str] = {}
    for name in sorted(stores):
        manifest = stores[name]
        info = shard_info(manifest)
        if info is None:
            single[name] = manifest
            continue
        match = _SHARD_NAME.fullmatch(name)
        try:
            index, count = int(info["index"]), int(info["count"])
        except (KeyError, TypeError, ValueError):
            refused[name] = f"store {name!r}: malformed shard description in its manifest; repack it"
            continue
        if match is None or (int(match["index"]), int(match["count"])) != (index, count):
            refused[name] = (
                f"store {name!r} holds shard {index}/{count} of source {manifest.source!r} but its directory "
                f"is not named <base>-{index:05d}-of-{count:05d}; rename it back (its shards are served together)"
            )
            continue
        groups.setdefault(match["base"], {})[name] = manifest
    return Grouped(single, groups, refused)


def merge_shards(base: str, shards: Mapping[str, Manifest], missing_reasons: Mapping[str, str] | None = None) -> Manifest:
    """The manifest of one source from all its shards (see the module docstring).

    ``missing_reasons``: why a shard directory that exists could not be read, to say
    so when that shard is missing.

    Raises:
        FailedPrecondition: the shards do not make exactly one input, once (one line).
    """
    where = f"sharded store {base!r}"
    infos = {name: shard_info(manifest) or {} for name, manifest in shards.items()}
    counts = sorted({int(info["count"]) for info in infos.values()})
    if len(counts) != 1:
        listed = ", ".join(sorted(shards))
        raise FailedPrecondition(
            f"{where}: its shards come from packs of different shard counts {counts} ({listed}), whose shares "
            f"overlap; keep the shards of one pack (same N) and remove the others"
        )
    count = counts[0]
    by_index = {int(info["index"]): name for name, info in infos.items()}
    missing = [index for index in range(count) if index not in by_index]
    if missing:
        names = [shard_store_name(base, index, count) for index in missing]
        reasons = [f"{name}: {missing_reasons[name]}" for name in names if missing_reasons and name in missing_reasons]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise FailedPrecondition(
            f"{where}: {len(missing)} of its {count} shards missing or unreadable ({shown})"
            + (f" ({'; '.join(reasons[:3])})" if reasons else "")
            + f"; pack them (pack imagenet21k --shard I/{count}) into the same data directory"
        )
    ordered = [(by_index[index], shards[by_index[index]], infos[by_index[index]]) for index in range(count)]
    first_name, first, first_info = ordered[0]
    for name, manifest, info in ordered[1:]:
        if manifest.source != first.source:
            raise FailedPrecondition(f"{where}: shard {name!r} is of source {manifest.source!r}, "
                                     f"{first_name!r} of {first.source!r}")
        if (info.get("input_wnids_sha256"), info.get("input_synsets")) != (
            first_info.get("input_wnids_sha256"), first_info.get("input_synsets")
        ):
            raise FailedPrecondition(
                f"{where}: shards {first_name!r} and {name!r} were packed from different inputs "
                f"({first_info.get('input_synsets')} and {info.get('input_synsets')} synsets, different wnid lists); "
                f"repack every shard from the same --input and --wnids"
            )
        held = {key: manifest.pack_options.get(key) for key in _ENCODING_KEYS}
        wanted = {key: first.pack_options.get(key) for key in _ENCODING_KEYS}
        if held != wanted:
            described = lambda values: ", ".join(f"{k}={v}" for k, v in values.items())  # noqa: E731
            raise FailedPrecondition(
                f"{where}: shard {name!r} was packed with {described(held)}, {first_name!r} with "
                f"{described(wanted)}; repack the shards with the same options"
            )
    shares: list[str] = []
    for name, manifest, info in ordered:
        share = [str(w) for w in info.get("wnids") or ()]
        _check_shard_classes(where, name, manifest, share)
        shares += share
    if len(shares) != first_info.get("input_synsets") or wnids_digest(shares) != first_info.get("input_wnids_sha256"):
        raise FailedPrecondition(
            f"{where}: the shares of its {count} shards do not add up to the input they name "
            f"({len(shares)} synsets listed, the input has {first_info.get('input_synsets')}); repack the shards"
        )
    return _merged_manifest(base, ordered)


def _check_shard_classes(where: str, name: str, manifest: Manifest, share: Sequence[str]) -> None:
    wnids = [c.wnid for c in manifest.classes]
    position = {wnid: i for i, wnid in enumerate(share)}
    last = -1
    for info in manifest.classes:
        at = position.get(info.wnid or "")
        if at is None or at <= last:
            raise FailedPrecondition(
                f"{where}: shard {name!r} holds class {info.wnid or info.name!r} outside its share "
                f"(or out of wnid order); repack it"
            )
        last = at
        if info.digest is None:
            raise FailedPrecondition(f"{where}: shard {name!r} has no digest for class {info.name!r}; repack it")
    if fingerprint_of_classes(manifest.source, [c.digest or "" for c in manifest.classes]) != manifest.fingerprint:
        raise FailedPrecondition(
            f"{where}: shard {name!r}'s fingerprint does not match its class digests ({len(wnids)} classes); "
            "its manifest was changed: repack it"
        )


def _merged_manifest(base: str, ordered: Sequence[tuple[str, Manifest, Mapping[str, Any]]]) -> Manifest:
    classes: list[ClassInfo] = []
    offset = 0
    skipped: list[dict[str, str]] = []
    for _, manifest, _ in ordered:
        for info in manifest.classes:
            # built directly: dataclasses.replace costs 20 us a class, 0.4 s of start-up for IN-21K's 21,841
            classes.append(ClassInfo(len(classes), info.name, info.start + offset, info.end + offset, info.split,
                                     info.wnid, info.group, info.digest))
        offset += manifest.num_records
        skipped += list(manifest.skipped)
    _, first, first_info = ordered[0]
    options = {key: value for key, value in first.pack_options.items() if key != SHARD_KEY}
    options[MERGED_KEY] = {
        "count": len(ordered),
        "stores": [name for name, _, _ in ordered],
        "input_synsets": first_info.get("input_synsets"),
        "input_wnids_sha256": first_info.get("input_wnids_sha256"),
    }
    return Manifest(
        source=first.source,
        name=base,
        classes=tuple(classes),
        split_rule=first.split_rule,
        fingerprint=fingerprint_of_classes(first.source, [c.digest or "" for c in classes]),
        pack_options=options,
        hierarchy=first.hierarchy,
        num_skipped=sum(m.num_skipped for _, m, _ in ordered),
        skipped=tuple(skipped[:1000]),
        created_by=first.created_by,
        record_layout=min(m.record_layout for _, m, _ in ordered),
    )


def merged_manifests(data_dir: str | Path) -> dict[str, Manifest]:
    """Every source under a data directory as served (shard groups merged), from manifests
    only (no LMDB): a command that lists a source's classes sees what the server serves.

    Raises:
        FailedPrecondition: a shard group does not merge (one line).
    """
    from sampler_server.store.manifest import load_manifest
    from sampler_server.store.reader import find_stores

    grouped = group_stores({path.name: load_manifest(path) for path in find_stores(data_dir)})
    if grouped.refused:
        raise FailedPrecondition(next(iter(grouped.refused.values())))
    out = dict(grouped.single)
    for base, shards in grouped.groups.items():
        if base in out:
            raise FailedPrecondition(
                f"{data_dir}: store {base!r} and the shards {', '.join(sorted(shards))} would both be served as "
                f"{base!r}; remove one of them"
            )
        out[base] = merge_shards(base, shards)
    return out
