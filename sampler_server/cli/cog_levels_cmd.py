"""``sampler-server cog levels``: the ImageNet-CoG levels of an IN-21K data directory or counts file.

The levels are computed by the pure core (``core.cog.levels``) from per-concept image
counts: ``--counts FILE`` reads them from a JSON object ``{wnid: count}``; ``--data DATA``
sums the class counts of every ``imagenet21k`` store under DATA (the shards of one
pack), reading manifests only. ``--json`` prints the canonical JSON (byte-for-byte
reproducible); otherwise a short summary: what each rule removed, the eligible count
and each level's rank and similarity range.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sampler_server.core.cog import LEVEL_SIZE, MIN_IMAGES, RULES, SOURCE
from sampler_server.core.cog.levels import CogLevels, compute_levels, counts_from_manifests, parse_counts
from sampler_server.errors import InputFormatError, InvalidArgument, NotFound


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


def run_levels(args: argparse.Namespace) -> int:
    if args.level_size < 1:
        raise InvalidArgument(f"--level-size: got {args.level_size}, expected an integer >= 1")
    if args.min_images < 0:
        raise InvalidArgument(f"--min-images: got {args.min_images}, expected an integer >= 0")
    if args.counts is not None:
        counts, source = read_counts_file(args.counts), f"--counts {args.counts}"
    else:
        counts, source = counts_from_data(args.data), f"--data {args.data}"
    levels = compute_levels(counts, level_size=args.level_size, min_images=args.min_images, source=source)
    if args.json:
        sys.stdout.write(levels.to_json_text())
    else:
        print("\n".join(summary_lines(levels)))
    return 0
