"""``sampler-server cog levels``: the ImageNet-CoG levels of an IN-21K data directory or counts file.

The levels are computed by the pure core (``core.cog.levels``) from per-concept image
counts: ``--counts FILE`` reads them from a JSON object ``{wnid: count}``; ``--data DATA``
sums the class counts of every ``imagenet21k`` store under DATA (the shards of one
pack), reading manifests only. ``--json`` prints the canonical JSON (byte-for-byte
reproducible); otherwise a short summary: what each rule removed, the eligible count
and each level's rank and similarity range.

naver/cog's published files (``core.cog.official_files``): ``--levels-file FILE``
(``cog_levels_mapping_file.pkl``) lists the file's levels instead, checked against the
concepts of ``--data`` or ``--counts`` (with ``--concepts-split-file``, each level's
train and test sizes are the file's); ``--compare FILE`` computes our levels and prints,
per level, how many of the file's concepts ours holds and the wnids that differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sampler_server.core.cog import LEVEL_SIZE, MIN_IMAGES, RULES, SOURCE
from sampler_server.core.cog.levels import CogLevels, compute_levels, counts_from_manifests, parse_counts
from sampler_server.core.cog.official_levels import SHOWN, compare_levels
from sampler_server.errors import InputFormatError, InvalidArgument, NotFound
from sampler_server.catalog.cog_files import CogFileSet, CogFiles

FILES_FORMAT = "imagenet-cog-levels-file/1"


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``levels`` to the ``cog`` command group."""
    parser = commands.add_parser(
        "levels", help="the five concept generalization levels L1..L5",
        description="Select the eligible unseen IN-21K concepts (IN-1K and its ancestors, fewer than "
        "--min-images images, the person subtree, non-leaves and the paper's 70 listed concepts removed, "
        "in that order), rank them by Lin similarity to IN-1K in WordNet 3.0 and draw five levels of "
        "--level-size concepts spread over the ranking.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help=f"data directory holding the {SOURCE} store (or its shards)")
    source.add_argument("--counts", type=Path, help="JSON file mapping each IN-21K wnid to its image count")
    parser.add_argument("--level-size", type=int, default=LEVEL_SIZE,
                        help=f"concepts per level (default {LEVEL_SIZE})")
    parser.add_argument("--min-images", type=int, default=MIN_IMAGES,
                        help=f"images a concept needs to be eligible (default {MIN_IMAGES})")
    parser.add_argument("--json", action="store_true", help="canonical JSON: eligible, excluded, similarity, levels")
    files = parser.add_mutually_exclusive_group()
    files.add_argument("--levels-file", type=Path, help="naver/cog's cog_levels_mapping_file.pkl: list its five "
                       "levels (checked against the concepts of --data or --counts) instead of computing them")
    files.add_argument("--compare", type=Path, metavar="FILE", help="naver/cog's cog_levels_mapping_file.pkl: per "
                       "level, how many of its concepts our computed level holds and the wnids that differ")
    parser.add_argument("--concepts-split-file", type=Path, help="with --levels-file: naver/cog's "
                        "cog_concepts_split_file.pkl; each level's train and test sizes are the file's")
    parser.set_defaults(func=run_levels)


def read_counts_file(path: str | os.PathLike[str]) -> dict[str, int]:
    """The counts of a ``--counts`` file: a JSON object {wnid: image count}."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise NotFound(f"--counts: {path} does not exist") from None
    except OSError as error:
        raise InputFormatError(path, f"unreadable ({error.strerror})") from None
    return parse_counts(data, source=f"--counts {path}")


def counts_from_data(data_dir: str | os.PathLike[str]) -> dict[str, int]:
    """wnid -> image count of the ``imagenet21k`` source under ``data_dir`` as the server
    serves it (manifests only): its shards merged, a partial or clashing set refused."""
    from sampler_server.store.shards import merged_manifests

    counts = counts_from_manifests(list(merged_manifests(data_dir).values()))
    if not counts:
        raise NotFound(f"--data {data_dir}: no {SOURCE} store (pack one with `sampler-server pack {SOURCE}`)")
    return counts


def summary_lines(levels: CogLevels) -> list[str]:
    """The human summary: rules, eligible count, one line per level."""
    removed = ", ".join(f"{rule} {levels.excluded[rule]}" for rule in RULES)
    lines = [
        f"{levels.num_concepts} concepts, WordNet fragment of {levels.fragment_size}; "
        f"level size {levels.level_size}, at least {levels.min_images} images",
        f"removed: {removed}",
        f"eligible: {len(levels.eligible)}",
    ]
    for level in levels.levels:
        low, high = level.similarity_range
        start, end = level.rank_range
        lines.append(f"{level.name}: ranks [{start}, {end})  Lin similarity to IN-1K {low:.4f} .. {high:.4f}")
    lines.append(f"fingerprint {levels.fingerprint}")
    return lines


def _counts_store(counts: dict[str, int], source: str) -> Any:
    """The store-like view ``CogFiles.summaries`` reads (name, manifest.classes) of a counts mapping."""
    classes = [SimpleNamespace(wnid=wnid, count=count) for wnid, count in counts.items()]
    return SimpleNamespace(name=source, manifest=SimpleNamespace(classes=classes))


def files_json(files: CogFileSet, summaries: list[dict[str, Any]], fingerprint: str) -> dict[str, Any]:
    images = files.images
    return {"format": FILES_FORMAT, "levels_file": files.levels.source, "levels_file_sha256": files.levels.sha256,
            "concepts_split_file": images.source if images is not None else None,
            "concepts_split_file_sha256": images.sha256 if images is not None else None,
            "levels": summaries, "fingerprint": fingerprint}


def compare_lines(comparison: dict[str, Any]) -> list[str]:
    """The human form of ``--compare``: one line per level, the differing wnids shown in part."""
    def some(wnids: list[str]) -> str:
        return ", ".join(wnids[:SHOWN]) + (f" ... ({len(wnids)})" if len(wnids) > SHOWN else "") or "none"

    lines = [f"{comparison['levels_file']} against the computed levels (fingerprint "
             f"{comparison['computed_fingerprint'][:16]})"]
    for name, entry in comparison["levels"].items():
        lines.append(f"{name}: ours holds {entry['common']} of the file's {entry['file_concepts']} concepts; only the "
                     f"file's: {some(entry['only_file'])}; only ours: {some(entry['only_computed'])}")
    return lines


def run_levels(args: argparse.Namespace) -> int:
    if args.concepts_split_file is not None and args.levels_file is None:
        raise InvalidArgument("--concepts-split-file: given without --levels-file; its images are of the levels "
                              "file's concepts")
    if args.level_size < 1:
        raise InvalidArgument(f"--level-size: got {args.level_size}, expected an integer >= 1")
    if args.min_images < 0:
        raise InvalidArgument(f"--min-images: got {args.min_images}, expected an integer >= 0")
    if args.counts is not None:
        counts, source = read_counts_file(args.counts), f"--counts {args.counts}"
    else:
        counts, source = counts_from_data(args.data), f"--data {args.data}"
    if args.levels_file is not None:
        reader = CogFiles(Path.cwd(), ("--levels-file", "--concepts-split-file"))
        files = reader.load(str(args.levels_file), str(args.concepts_split_file or ""))
        assert files is not None
        summaries, fingerprint = reader.summaries(_counts_store(counts, source), files)
        if args.json:
            print(json.dumps(files_json(files, summaries, fingerprint), indent=1, sort_keys=True))
        else:
            for entry in summaries:
                print(f"{entry['level']}: {len(entry['wnids'])} concepts, train {entry['train_size']}, "
                      f"test {entry['test_size']}")
            print(f"fingerprint {fingerprint}")
        return 0
    levels = compute_levels(counts, level_size=args.level_size, min_images=args.min_images, source=source)
    if args.compare is not None:
        official = CogFiles(Path.cwd(), ("--compare", "")).load(str(args.compare), "")
        assert official is not None
        comparison = compare_levels(levels, official.levels)
        if args.json:
            print(json.dumps(comparison, indent=1, sort_keys=True))
        else:
            print("\n".join(compare_lines(comparison)))
        return 0
    if args.json:
        sys.stdout.write(levels.to_json_text())
    else:
        print("\n".join(summary_lines(levels)))
    return 0
