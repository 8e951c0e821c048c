"""``sampler-server hierarchy imagenet|omniglot``: the class splits the samplers use.

ImageNet's split is computed from WordNet 3.0 and the store's wnids (or a wnid list
the user passes), never read from a file; Omniglot's from the store's alphabets.

ImageNet also reports coverage, for every variant (MD-v1's three splits and MD-v2's
train) whatever ``--variant`` says: the leaves no eligible node spans at the span cap
(``--max-span-leaves``, default the reference's 392), which hierarchical episodes
never show, with wnid and WordNet name, and the smallest cap that covers every leaf
(a request's ``EpisodeConfig.max_span_leaves`` opts into it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.hierarchy import MAX_SPAN_LEAVES
from sampler_server.core.hierarchy.imagenet import (
    ImageNetSplit,
    ImageNetVariant,
    SplitHierarchy,
    build_imagenet_split,
    smallest_covering_max_span,
)
from sampler_server.core.split import Split
from sampler_server.errors import InputFormatError, InvalidArgument, NotFound
from sampler_server.store.manifest import Manifest, load_manifest
from sampler_server.store.reader import find_stores


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hierarchy",
        help="print the ImageNet (WordNet) or Omniglot class split and hierarchy",
        description="ImageNet: split sizes, each split's wnids, node counts and eligible internal nodes, "
        "computed from WordNet 3.0. Omniglot: alphabets per split.",
    )
    parser.add_argument("which", choices=("imagenet", "omniglot"))
    parser.add_argument("--data", type=Path, help="data directory holding a packed ilsvrc_2012 / omniglot store")
    parser.add_argument("--source", help="store name inside --data (default: ilsvrc_2012 or omniglot)")
    parser.add_argument("--wnids", type=Path, help="imagenet without a store: a file of wnids (one per line, or a JSON list/object)")
    parser.add_argument("--variant", choices=[v.value for v in ImageNetVariant], default=ImageNetVariant.MD.value,
                        help="md: carnivore/device split; md_v2: every class in train (VTAB+MD)")
    parser.add_argument("--max-span-leaves", type=int, metavar="N",
                        help=f"imagenet: most leaves an eligible node spans (default {MAX_SPAN_LEAVES}, the reference's)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def _store_manifest(data: Path, name: str) -> Manifest:
    for store in find_stores(data):
        manifest = load_manifest(store)
        if store.name == name or (manifest.source == name and store.name == manifest.name):
            return manifest
    raise NotFound(f"{data}: no store named {name!r}")


def _read_wnids(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputFormatError(path, f"cannot read wnid list ({error.strerror})") from None
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise InputFormatError(path, f"not valid JSON ({error})") from None
        return [str(w) for w in data]
    return [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]


def imagenet_report(split: ImageNetSplit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "variant": split.variant.value,
        "classes": len(split.all_classes.leaves),
        "graph_nodes": split.all_classes.graph.number_of_nodes(),
        "graph_internal_nodes": len(split.all_classes.internal_nodes),
        "splits": {},
    }
    for which in Split:
        hierarchy = split.for_split(which)
        out["splits"][which.value] = {
            "classes": len(hierarchy.leaves),
            "root": hierarchy.root,
            "nodes": hierarchy.graph.number_of_nodes(),
            "internal_nodes": len(hierarchy.internal_nodes),
            "eligible_nodes": len(hierarchy.eligible),
            "eligible_nodes_over_50_leaves": sum(1 for node in hierarchy.eligible if len(node.leaves) > 50),
            "uncovered_leaves": list(hierarchy.uncovered_leaves()),
            "smallest_covering_max_span": smallest_covering_max_span(hierarchy) if hierarchy.leaves else None,
            "wnids": list(hierarchy.leaves),
        }
    return out


def _coverage(hierarchy: SplitHierarchy) -> dict[str, Any]:
    return {
        "classes": len(hierarchy.leaves),
        "uncovered_leaves": [{"wnid": w, "name": hierarchy.name_of(w)} for w in hierarchy.uncovered_leaves()],
        "smallest_covering_max_span": smallest_covering_max_span(hierarchy),
    }


def coverage_report(splits: dict[ImageNetVariant, ImageNetSplit]) -> dict[str, Any]:
    """Per variant and non-empty split: the leaves in no eligible node, and the smallest covering cap."""
    return {
        variant.value: {s.value: _coverage(split.for_split(s)) for s in Split if split.for_split(s).leaves}
        for variant, split in splits.items()
    }


def run(args: argparse.Namespace) -> int:
    if args.which == "omniglot":
        return _run_omniglot(args)
    if (args.data is None) == (args.wnids is None):
        raise InvalidArgument("hierarchy imagenet needs exactly one of --data DIR (a packed ilsvrc_2012 store) or --wnids FILE")
    if args.data is not None:
        manifest = _store_manifest(args.data, args.source or "ilsvrc_2012")
        wnids = [c.wnid for c in manifest.classes if c.wnid]
        if len(wnids) != len(manifest.classes):
            raise InvalidArgument(f"store {manifest.name!r} has classes without a wnid; it is not an ImageNet store")
    else:
        wnids = _read_wnids(args.wnids)
    try:
        cap = EpisodeConfig(max_span_leaves=args.max_span_leaves).span_cap  # validated as a request's is
    except InvalidArgument as error:
        raise InvalidArgument(f"--{error}".replace("max_span_leaves:", "max-span-leaves:", 1)) from None
    splits = {v: build_imagenet_split(wnids, variant=v, max_span=cap) for v in ImageNetVariant}
    report = imagenet_report(splits[ImageNetVariant(args.variant)])
    report["max_span_leaves"] = cap
    report["coverage"] = coverage_report(splits)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"ImageNet ({report['variant']}): {report['classes']} classes; graph {report['graph_nodes']} nodes "
          f"({report['graph_internal_nodes']} internal)")
    for name, info in report["splits"].items():
        print(f"  {name:5}  {info['classes']:4} classes  root {info['root'] or '-':10}  {info['nodes']:5} nodes "
              f"({info['internal_nodes']} internal)  {info['eligible_nodes']} eligible "
              f"({info['eligible_nodes_over_50_leaves']} over 50 leaves)"
              + (f"  {len(info['uncovered_leaves'])} leaves under no eligible node" if info["uncovered_leaves"] else ""))
    for name, info in report["splits"].items():
        print(f"{name} wnids: " + " ".join(info["wnids"]))
    print(f"Coverage at max_span_leaves={cap}" + (" (the reference's cap, the default)" if cap == MAX_SPAN_LEAVES else "")
          + ": leaves under no eligible node never appear in hierarchical episodes")
    for variant, per_split in report["coverage"].items():
        for name, info in per_split.items():
            missing = info["uncovered_leaves"]
            state = f"{len(missing)} under no eligible node" if missing else "all under an eligible node"
            print(f"  {variant:6} {name:5} {info['classes']:4} leaves: {state}; "
                  f"smallest covering max_span_leaves {info['smallest_covering_max_span']}")
            for leaf in missing:
                print(f"      {leaf['wnid']} {leaf['name']}")
    return 0


def _run_omniglot(args: argparse.Namespace) -> int:
    if args.data is None:
        raise InvalidArgument("hierarchy omniglot needs --data DIR holding a packed omniglot store")
    manifest = _store_manifest(args.data, args.source or "omniglot")
    alphabets: dict[str, dict[str, Any]] = {}
    for info in manifest.classes:
        if info.group is None or info.split is None:
            raise InvalidArgument(f"store {manifest.name!r} has classes without an alphabet; it is not an Omniglot store")
        entry = alphabets.setdefault(info.group, {"split": info.split.value, "characters": 0})
        entry["characters"] += 1
    report = {
        split.value: {
            "alphabets": sorted(name for name, a in alphabets.items() if a["split"] == split.value),
            "characters": sum(a["characters"] for a in alphabets.values() if a["split"] == split.value),
        }
        for split in Split
    }
    if args.json:
        print(json.dumps({"splits": report, "alphabets": alphabets}, indent=1))
        return 0
    for name, info in report.items():
        print(f"  {name:5}  {len(info['alphabets']):3} alphabets  {info['characters']:5} characters: "
              + ", ".join(info["alphabets"]))
    return 0
