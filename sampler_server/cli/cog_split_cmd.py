"""``sampler-server cog split``: one ImageNet-CoG level split's records in order, without a server.

Reads manifests only (no image): the split is resolved by ``catalog.cog`` over the stores
of ``--data``, exactly as the server's GetCogSplit resolves it over the stores it serves, so
both give the same records and fingerprint for the same request.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sampler_server.core.cog import LEVEL_SIZE, MIN_IMAGES, SHOTS
from sampler_server.core.cog.splits import LEVELS, SPLITS, CogSplit, SplitRequest, level_config, missing_store
from sampler_server.errors import NotFound


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``split`` to the ``cog`` command group."""
    parser = commands.add_parser(
        "split", help="one level split's records in order, with labels (no images read)",
        description="The records of SPLIT of LEVEL in order (concepts in sorted wnid order, each concept's "
        "files in name order): record id, label and wnid, with the split's fingerprint.",
    )
    parser.add_argument("--data", required=True, type=Path, help="data directory holding the packed IN-21K "
                        "(all shards) and, for IN-1K, ILSVRC-2012 stores")
    parser.add_argument("--level", required=True, help="level: " + ", ".join(LEVELS))
    parser.add_argument("--split", required=True, help="split: " + ", ".join(SPLITS) + " (valid, validation: val; "
                        "val: 20%% of the full train set for --seed; search: train minus val, then --shots per concept)")
    parser.add_argument("--shots", type=int, default=0,
                        help=f"images per concept of a few-shot train or search set: {', '.join(map(str, SHOTS))}; "
                        "0 = all (default)")
    parser.add_argument("--seed", type=int, default=0, help="seed of a few-shot subset, val or search split (>= 1; the "
                        "paper uses 1 to 5); the test and full train splits take none")
    parser.add_argument("--level-size", type=int, default=LEVEL_SIZE,
                        help=f"concepts per level L1..L5 (default {LEVEL_SIZE}, which 0 also asks for)")
    parser.add_argument("--min-images", type=int, default=MIN_IMAGES,
                        help=f"images an eligible concept has at least (default {MIN_IMAGES}, which 0 also asks for)")
    parser.add_argument("--levels-file", type=Path, help="naver/cog's cog_levels_mapping_file.pkl: L1..L5 are its "
                        "concepts (--level-size and --min-images unused)")
    parser.add_argument("--concepts-split-file", type=Path, help="with --levels-file: naver/cog's "
                        "cog_concepts_split_file.pkl: test and train are its images (val, search and few-shot "
                        "subsets drawn from its train images)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run_split)


def split_in_data_dir(request: SplitRequest, data: Path, level_size: int, min_images: int,
                      levels_file: Path | None = None, concepts_split_file: Path | None = None) -> tuple[CogSplit, str]:
    """The split a request names over the stores under ``data`` (read through the registry, so a
    sharded IN-21K pack is one store), as the server resolves it (``catalog.cog``), and the name
    of the store serving it. Relative file paths are relative to the working directory."""
    from sampler_server.catalog.cog import CogCatalog
    from sampler_server.catalog.cog_files import CogFiles
    from sampler_server.catalog.registry import StoreRegistry

    where = f"--data {data}"
    try:
        registry = StoreRegistry.from_data_dir(data)
    except NotFound:
        raise missing_store(request.level, where) from None
    catalog = CogCatalog(registry, CogFiles(Path.cwd(), ("--levels-file", "--concepts-split-file")), where)
    split, store = catalog.split(request, level_size, min_images, str(levels_file or ""),
                                 str(concepts_split_file or ""))
    return split, store.name


def run_split(args: argparse.Namespace) -> int:
    level_size, min_images = level_config(args.level_size, args.min_images)
    request = SplitRequest.parse(args.level, args.split, args.shots, args.seed)
    split, store = split_in_data_dir(request, args.data, level_size, min_images, args.levels_file,
                                     args.concepts_split_file)
    if args.json:
        print(json.dumps({"store": store, **split.to_json()}, indent=1))
        return 0
    print(f"{request.label}: {split.size} records, {split.num_classes} concepts, store {store}, "
          f"fingerprint {split.fingerprint}")
    for record_id, label in zip(split.record_ids.tolist(), split.labels.tolist()):
        print(f"{record_id:>10}  {label:>5}  {split.wnids[label]}")
    return 0
