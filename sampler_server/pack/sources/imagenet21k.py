"""ImageNet-21K (Fall 2011 release) converter, for ImageNet-CoG.

Input layout: one entry per synset directly under the input directory, either the
release's ``<wnid>.tar`` (a plain tar of the synset's JPEGs, members such as
``n01234567_123.JPEG``) or a folder ``<wnid>/`` holding the same files. Both may mix;
one synset given both ways is refused. Hidden entries and other files are ignored.

What the converter applies, and why:
- Synsets are WordNet 3.0 noun synsets: a tar or folder name (or a ``--wnids`` line)
  that is not ``n`` + 8 digits naming one is refused, as is an input with none.
- Classes in wnid order, each with its wnid and as name the synset's first WordNet
  lemma (names repeat across synsets: ``crane`` the bird and the machine; the wnid is
  the identity). No class splits: ImageNet-CoG's levels and splits select from it.
- Records of a class sorted by member (file) name, the order the CoG reference numbers
  files in; every regular member (file) is a record, an undecodable one is a bad image
  (``--on-error``); AppleDouble/hidden names (``.``-prefixed) are skipped in both
  layouts, as are tar directory entries; links and special members are refused.
- A tar is read once, streaming (``tarfile`` mode ``r|``: members in archive order,
  nothing extracted to disk). Its members arrive in archive order, not name order, so
  one class's member bytes are held in memory while its records are written: peak
  memory grows by the largest synset's tar size (about 0.1 MB per image for the
  release, e.g. ~150 MB for a 1,300-image synset). Folders are read file by file by
  the workers. A tar that ends early (mid-member, mid-header, or with no end-of-archive
  block) is an error naming it: the pack is aborted and nothing is written.
- Record origins are ``<wnid>/<member name>`` in both layouts, so a tar input and the
  same files in folders give the same store and fingerprint.
- ``--wnids FILE`` (one wnid per line, ``#`` comments) packs those synsets only; each
  must be in the input. ``--shard I/N`` packs shard I (0-based) of N: a contiguous
  chunk of the synsets to pack in wnid order (``store.shards``), into the store
  ``imagenet21k-IIIII-of-NNNNN``. Contiguous rather than round-robin so that shard I's
  classes and records directly follow shard I-1's: the merged source is the shards
  concatenated (a record id finds its shard by one bisection, a class lives in one
  shard) and each shard is exactly a slice of the unsharded store. Synset sizes vary
  (1 to ~3,000 images), but chunks of thousands of synsets even them out.
- Fingerprinted per class (``ClassDigestFingerprint``): the shards' merge has the
  fingerprint of the unsharded store.
- Images are stored as they are (original bytes).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import ClassPlan, ConverterOptions, SourceItem, SourcePlan
from sampler_server.pack.sources.common import reject_unused, require_dir, require_file
from sampler_server.store.shards import shard_note, shard_share, shard_store_name

SOURCE = "imagenet21k"
DESCRIPTION = "ImageNet-21K Fall 2011: <wnid>.tar of JPEGs (or <wnid>/ folders) per synset; --wnids, --shard I/N"
ACCEPTS = ("wnids", "shard")
SPLIT_RULE = "unsplit"
HIERARCHY = "wordnet-3.0"
_BLOCK = 512


def wordnet_names() -> dict[str, str]:
    """wnid -> first lemma, for every WordNet 3.0 noun synset."""
    from sampler_server.core.hierarchy.wordnet import load_synsets

    return {synset.wnid: synset.name for synset in load_synsets()}


def _not_a_synset(what: str) -> str:
    return f"{what} is not a WordNet 3.0 noun synset (expected 'n' + the 8-digit offset of a noun synset, e.g. n01440764)"


def _synsets(root: Path, names: dict[str, str]) -> dict[str, Path]:
    """wnid -> its tar or folder, checked."""
    found: dict[str, Path] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            wnid = entry.name
        elif entry.is_file() and entry.suffix == ".tar":
            wnid = entry.stem
        else:
            continue
        if wnid not in names:
            raise InputFormatError(entry, _not_a_synset(repr(wnid)))
        if wnid in found:
            raise InputFormatError(entry, f"synset {wnid} is given twice ({found[wnid].name} and {entry.name}); keep one")
        found[wnid] = entry
    if not found:
        raise InputFormatError(root, "holds no synsets (expected one <wnid>.tar or <wnid>/ folder per synset)")
    return found


def read_wnids_file(path: Path, names: dict[str, str]) -> list[str]:
    """The wnids a ``--wnids`` file lists (order and repeats do not matter)."""
    require_file(path, "--wnids file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputFormatError(path, f"cannot read the wnid list ({error})") from None
    wnids: set[str] = set()
    for number, line in enumerate(lines, start=1):
        wnid = line.split("#", 1)[0].strip()
        if not wnid:
            continue
        if wnid not in names:
            raise InputFormatError(path, f"line {number}: {_not_a_synset(repr(wnid))}")
        wnids.add(wnid)
    if not wnids:
        raise InputFormatError(path, "lists no wnids (one per line expected)")
    return sorted(wnids)


def _tar_items(tar_path: Path, wnid: str) -> Iterator[SourceItem]:
    """The tar's members as records, in name order; the archive is read once, streaming."""
    members: dict[str, bytes] = {}
    try:
        with open(tar_path, "rb") as handle:
            with tarfile.open(fileobj=handle, mode="r|") as archive:
                for member in archive:
                    base = member.name.rsplit("/", 1)[-1]
                    if member.isdir() or base.startswith("."):
                        continue
                    if not member.isfile():
                        raise InputFormatError(f"{tar_path}:{member.name}",
                                               "is a link or special member, not an image file")
                    if member.name in members:
                        raise InputFormatError(f"{tar_path}:{member.name}", "appears twice in the archive")
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    data = extracted.read()
                    if len(data) != member.size:
                        raise InputFormatError(tar_path, f"truncated tar: member {member.name} ends early")
                    members[member.name] = data
                end = archive.offset
            handle.seek(end)
            block = handle.read(_BLOCK)
    except (tarfile.TarError, EOFError) as error:
        raise InputFormatError(tar_path, f"truncated or corrupt tar ({error})") from None
    except OSError as error:
        raise InputFormatError(tar_path, f"cannot read ({error.strerror or error})") from None
    if block != bytes(_BLOCK):
        raise InputFormatError(tar_path, "truncated tar: it ends without the end-of-archive block")
    if not members:
        raise InputFormatError(tar_path, "holds no images")
    for name in sorted(members):
        data = members.pop(name)  # let each member's bytes go once its record is made
        yield SourceItem(origin=f"{wnid}/{name}", path=tar_path, data=data, where=f"{tar_path}:{name}")


def _folder_items(folder: Path, wnid: str) -> list[SourceItem]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise InputFormatError(folder, "holds no images")
    return [SourceItem(origin=f"{wnid}/{p.name}", path=p) for p in files]


def _class_plan(wnid: str, entry: Path, name: str) -> ClassPlan:
    if entry.is_dir():
        return ClassPlan(name=name, items=lambda: _folder_items(entry, wnid), wnid=wnid)
    return ClassPlan(name=name, items=lambda: _tar_items(entry, wnid), wnid=wnid)


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    names = wordnet_names()
    found = _synsets(root, names)
    wanted = sorted(found)
    if options.wnids is not None:
        wanted = read_wnids_file(Path(options.wnids), names)
        absent = [w for w in wanted if w not in found]
        if absent:
            shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
            raise InputFormatError(
                options.wnids, f"{len(absent)} listed synset(s) have no <wnid>.tar or <wnid>/ in {root}: {shown}"
            )
    notes: dict[str, object] = {
        "wnids_file": Path(options.wnids).name if options.wnids is not None else None,
        "layout": {"tar": sum(1 for w in wanted if not found[w].is_dir()),
                   "folder": sum(1 for w in wanted if found[w].is_dir())},
    }
    share = wanted
    default_name = SOURCE
    if options.shard is not None:
        index, count = options.shard
        share = shard_share(wanted, index, count)
        notes["shard"] = shard_note(index, count, wanted)
        default_name = shard_store_name(SOURCE, index, count)
        if not share:
            raise InputFormatError(
                root, f"shard {index}/{count} is empty: {len(wanted)} synsets to pack make at most {len(wanted)} "
                "non-empty shards; use a smaller N",
            )
    classes = tuple(_class_plan(wnid, found[wnid], names[wnid]) for wnid in share)
    return SourcePlan(
        source=SOURCE,
        classes=classes,
        split_rule=SPLIT_RULE,
        hierarchy=HIERARCHY,
        notes=notes,
        reference_encoding=False,
        default_name=default_name,
        class_digests=True,
    )
