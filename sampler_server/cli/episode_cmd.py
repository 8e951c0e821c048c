"""``sampler-server episode``: print episodes' compositions and fingerprints, reading no images.

``--data DIR`` is a data directory of packed stores (or one store); only manifests
are read. ``--source`` is a store (by name) or source, a comma-separated list of
them (multi-source: the source of each episode is drawn uniformly) or a benchmark
preset (``md-v1``, ``md-v2``: its sources for the split). Stores of one source
packed with other encodings give the same episodes and fingerprints. Stores whose classes carry wnids
and no split (ILSVRC-2012) are split by the WordNet hierarchy: ``--imagenet-split
md`` (carnivore/device, the default; ``md-v1`` implies it) or ``md_v2`` (all
classes train; ``md-v2`` implies it). Without ``--ways/--shots/--query`` episodes
use Meta-Dataset's variable ways and shots. The configuration is validated before
any episode is drawn; a bad one is a one-line error (exit 2).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sampler_server.core.config import EpisodeConfig
from sampler_server.core.imagenet_spec import parse_variant, spec_for_manifest
from sampler_server.core.sampling import (
    Benchmark,
    Episode,
    MultiSourceSampler,
    benchmark_sources,
)
from sampler_server.core.sampling.plan import parse_split
from sampler_server.core.sampling.presets import IMAGENET_SPLIT
from sampler_server.core.seeding import MAX_INDEX, MAX_SEED
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument, NotFound
from sampler_server.store.manifest import Manifest, load_manifest

MAX_COUNT = 100_000
"""Most episodes one command prints (a larger request is a typo, not a use)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "episode",
        help="print episode compositions and fingerprints (no images read)",
        description="Print the composition (ways, classes, support and query record ids per class) and "
        "fingerprint of Meta-Dataset episode INDEX (or of COUNT consecutive episodes) for a seed.",
    )
    parser.add_argument("--data", required=True, type=Path, metavar="DIR", help="data directory of packed stores")
    parser.add_argument(
        "--source", required=True, metavar="S",
        help="a source, a comma-separated list of sources, or a preset: " + ", ".join(b.value for b in Benchmark),
    )
    parser.add_argument("--split", required=True, metavar="SPLIT", help="train, valid or test")
    parser.add_argument("--seed", required=True, type=int, help=f"user seed, 0 to {MAX_SEED}")
    parser.add_argument("--index", type=int, default=0, help="episode index (default 0)")
    parser.add_argument("--count", type=int, default=1, help=f"episodes from INDEX on, 1 to {MAX_COUNT} (default 1)")
    parser.add_argument("--ways", type=int, help="fixed number of classes (default: uniform in [min-ways, max-ways])")
    parser.add_argument("--shots", type=int, help="fixed support images per class (default: MD's imbalanced shots)")
    parser.add_argument("--query", type=int, help="fixed query images per class (default: min(10, min_c floor(n_c/2)))")
    parser.add_argument("--all-classes", action="store_true", help="every class of the split in every episode")
    parser.add_argument("--min-ways", type=int, default=5, help="least ways of variable-way episodes (default 5)")
    parser.add_argument("--max-ways", type=int, default=50, help="most ways of variable-way episodes (default 50)")
    parser.add_argument("--max-query", type=int, default=10, help="most query images per class (default 10)")
    parser.add_argument("--max-support", type=int, default=500, help="most support images per episode (default 500)")
    parser.add_argument(
        "--max-support-per-class", type=int, default=100, help="most support images a class adds to S (default 100)"
    )
    parser.add_argument("--min-examples", type=int, default=0, help="leave out classes with fewer images (default 0)")
    parser.add_argument(
        "--ignore-hierarchy-probability", type=float, default=0.0, metavar="P",
        help="probability of sampling ImageNet/Omniglot like a flat source (default 0; 1 = never use the hierarchy)",
    )
    parser.add_argument("--imagenet-split", help="WordNet split of ILSVRC stores: md (default) or md_v2")
    parser.add_argument("--json", action="store_true", help="one JSON object per episode, one per line")
    parser.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> EpisodeConfig:
    return EpisodeConfig(
        num_ways=args.ways,
        num_support=args.shots,
        num_query=args.query,
        all_classes=args.all_classes,
        min_ways=args.min_ways,
        max_ways_upper_bound=args.max_ways,
        max_num_query=args.max_query,
        max_support_set_size=args.max_support,
        max_support_size_contrib_per_class=args.max_support_per_class,
        min_examples_in_class=args.min_examples,
        ignore_hierarchy_probability=args.ignore_hierarchy_probability,
    )


def _check_range(args: argparse.Namespace) -> None:
    if not 1 <= args.count <= MAX_COUNT:
        raise InvalidArgument(f"--count: got {args.count}, expected an integer in [1, {MAX_COUNT}]")
    if not 0 <= args.seed <= MAX_SEED:
        raise InvalidArgument(f"--seed: got {args.seed}, expected an integer in [0, {MAX_SEED}]")
    if not 0 <= args.index <= MAX_INDEX - (args.count - 1):
        raise InvalidArgument(
            f"--index: got {args.index}, expected an integer in [0, {MAX_INDEX - (args.count - 1)}] "
            f"(with --count {args.count})"
        )


def _requested_sources(source: str, split: Split) -> tuple[tuple[str, ...], str | None]:
    """(source names, benchmark preset or None) for a --source value."""
    if source in {b.value for b in Benchmark}:
        return benchmark_sources(source, split), source
    names = tuple(name.strip() for name in source.split(","))
    if not all(names):
        raise InvalidArgument(f"--source: got {source!r}, expected a source, a comma-separated list or a preset")
    return names, None


def _manifests(data: Path, wanted: tuple[str, ...]) -> dict[str, Manifest]:
    """The manifests selected by ``wanted`` (store names first, else source names), keyed by source."""
    # The reader pulls in LMDB: import it here, at the edge, and only to list stores.
    from sampler_server.store.reader import find_stores

    stores = [(path, load_manifest(path)) for path in find_stores(data)]
    out: dict[str, Manifest] = {}
    missing = []
    for name in wanted:
        matches = [(p, m) for p, m in stores if name in (m.name, p.name)]
        matches = matches or [(p, m) for p, m in stores if m.source == name]
        if not matches:
            missing.append(name)
            continue
        if len(matches) > 1:
            where = ", ".join(p.name for p, _ in matches)
            raise InvalidArgument(f"--source: {name!r} matches {len(matches)} stores ({where}); expected one: name a store")
        manifest = matches[0][1]
        if manifest.source in out:
            raise InvalidArgument(f"--source: source {manifest.source!r} is selected more than once")
        out[manifest.source] = manifest
    if missing:
        available = ", ".join(sorted({m.name for _, m in stores} | {m.source for _, m in stores})) or "none"
        raise NotFound(
            f"--source: no packed store named or of source {', '.join(repr(m) for m in missing)} under {data}; "
            f"available: {available}"
        )
    return out


def run(args: argparse.Namespace) -> int:
    _check_range(args)
    split = parse_split(args.split)
    config = config_from_args(args)
    names, preset = _requested_sources(args.source, split)
    variant = parse_variant(args.imagenet_split or (IMAGENET_SPLIT[Benchmark(preset)] if preset else "md"))
    manifests = _manifests(args.data, names)
    specs: dict[str, DatasetSpec] = {
        source: spec_for_manifest(manifest, imagenet_variant=variant) for source, manifest in manifests.items()
    }
    sampler = MultiSourceSampler(specs, list(specs), split, config)
    class_names = {name: [c.name for c in spec.classes] for name, spec in specs.items()}
    for index in range(args.index, args.index + args.count):
        episode = sampler.sample(args.seed, index)
        if args.json:
            record = episode.to_json(class_names[episode.source])
            record["config"] = config.to_json()
            print(json.dumps(record, separators=(",", ":")))
        else:
            if index > args.index:
                print()
            print(format_episode(episode, class_names[episode.source]))
    return 0


def format_episode(episode: Episode, class_names: list[str]) -> str:
    """Human-readable composition of one episode."""
    lines = [
        f"episode {episode.index}  source {episode.source}  split {episode.split.value}  seed {episode.seed}",
        f"  ways {episode.ways}  support {episode.support_size}  query {episode.query_per_class} per class "
        f"({episode.query_size})" + (f"  from {episode.group}" if episode.group else ""),
        f"  fingerprint {episode.fingerprint}",
    ]
    for label, class_id in enumerate(episode.class_ids):
        lines.append(f"  [{label}] class {class_id} {class_names[class_id]}: {len(episode.support[label])} shots")
        lines.append(f"      support {_ids(episode.support[label])}")
        lines.append(f"      query   {_ids(episode.query[label])}")
    return "\n".join(lines)


def _ids(ids: Any) -> str:
    return " ".join(str(i) for i in ids)
