"""``sampler-server inspect DIR``: what a data directory (or one store) holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sampler_server.store.manifest import Manifest, Split, load_manifest
from sampler_server.store.reader import find_stores


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="summarise packed stores",
        description="Sources, classes per split, images, min/max per class, pack options and fingerprint "
        "of every store under DIR (or of the store DIR).",
    )
    parser.add_argument("data", metavar="DIR", type=Path, help="a data directory or one store directory")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--classes", action="store_true", help="also list every class")
    parser.set_defaults(func=run)


def describe(manifest: Manifest, with_classes: bool = False) -> dict[str, Any]:
    counts = [c.count for c in manifest.classes]
    per_split: dict[str, Any] = {}
    for split in Split:
        members = manifest.classes_in(split)
        per_split[split.value] = {"classes": len(members), "images": sum(c.count for c in members)}
    unsplit = [c for c in manifest.classes if c.split is None]
    out: dict[str, Any] = {
        "name": manifest.name,
        "source": manifest.source,
        "classes": len(manifest.classes),
        "images": manifest.num_records,
        "splits": per_split,
        "unsplit_classes": len(unsplit),
        "split_rule": manifest.split_rule,
        "hierarchy": manifest.hierarchy,
        "images_per_class": {"min": min(counts), "max": max(counts)},
        "pack_options": manifest.pack_options,
        "skipped": manifest.num_skipped,
        "fingerprint": manifest.fingerprint,
    }
    if manifest.tfds is not None:
        out["tfds"] = {
            "name": manifest.tfds.get("name"), "version": manifest.tfds.get("version"),
            "split_sizes": {k: v.get("num_examples") for k, v in manifest.tfds.get("splits", {}).items()},
            "records": {c.name: c.count for c in manifest.classes},
            "attributes": [a.get("name") for a in manifest.tfds.get("attributes", [])],
        }
    if manifest.validation is not None:
        out["validation"] = manifest.validation.summary()
    if with_classes:
        out["class_list"] = [c.to_json() for c in manifest.classes]
        if manifest.validation is not None:
            for entry, (start, end) in zip(out["class_list"], manifest.validation.ranges):
                entry["validation"] = {"start": start, "end": end, "count": end - start}
    return out


def run(args: argparse.Namespace) -> int:
    stores = find_stores(args.data)
    described = [describe(load_manifest(store), args.classes) for store in stores]
    if args.json:
        print(json.dumps({"data": str(args.data), "stores": described}, indent=1))
        return 0
    if not described:
        print(f"{args.data}: no packed stores")
        return 0
    for info in described:
        splits = info["splits"]
        print(f"{info['name']}  (source {info['source']})")
        tfds = info.get("tfds")
        if tfds is not None:  # a VTAB store: its "classes" are TFDS splits, no Meta-Dataset classes
            print(f"  tfds         {tfds['name']} {tfds['version']}: " + ", ".join(
                f"{name} {count} records" for name, count in tfds["records"].items()
            ) + f"; attributes {', '.join(tfds['attributes'])}")
        else:
            print(f"  classes      {info['classes']}: " + ", ".join(
                f"{name} {value['classes']} ({value['images']} images)" for name, value in splits.items()
            ) + (f", unsplit {info['unsplit_classes']} (split by {info['hierarchy']})" if info["unsplit_classes"] else ""))
        unit = "split" if tfds is not None else "class"  # a VTAB store's "classes" are its TFDS splits
        sizes = info["images_per_class"]
        print(f"  images       {info['images']}  (per {unit} min {sizes['min']}, max {sizes['max']}; "
              f"skipped {info['skipped']})")
        validation = info.get("validation")
        if validation is not None:
            print(f"  validation   {validation['images']} images, a held-out partition Meta-Dataset never reads (per "
                  f"class min {validation['images_per_class']['min']}, max {validation['images_per_class']['max']}; "
                  f"labels {validation['labels']}; fingerprint {validation['fingerprint']})")
        print(f"  split rule   {info['split_rule']}")
        options = ", ".join(f"{k}={v}" for k, v in info["pack_options"].items() if v is not None)
        print(f"  pack options {options or 'none'}")
        print(f"  fingerprint  {info['fingerprint']}")
        for entry in info.get("class_list", []):
            held_out = f"  (validation {entry['validation']['count']})" if "validation" in entry else ""
            print(f"    {entry['id']:>5}  {entry['split'] or '-':5}  {entry['count']:>7}  {entry['name']}{held_out}")
    return 0
