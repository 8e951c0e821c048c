"""``sampler-server fixtures SOURCE... --output DIR``: small original-layout datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sampler_server import fixtures
from sampler_server.errors import FailedPrecondition


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fixtures",
        help="generate small datasets in each source's original layout",
        description="Write OUTPUT/<source>/ in the layout the official download unpacks to, plus "
        "OUTPUT/<source>_splits.json where the source takes a split file.",
    )
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help="source names, or 'all'")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--classes", type=int, help="classes per source (default: the fixture's own)")
    parser.add_argument("--images-per-class", type=int, help="images per class (default: the fixture's own)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = fixtures.available() if args.sources == ["all"] else args.sources
    generated = []
    for name in names:
        generator = fixtures.get_generator(name)
        root = args.output / name
        if root.exists() and any(root.iterdir()):
            raise FailedPrecondition(f"{root}: already exists and is not empty")
        fixture = generator.generate(
            root, seed=args.seed, num_classes=args.classes, images_per_class=args.images_per_class
        )
        generated.append(fixture)
        if not args.json:
            print(f"{name}: {len(fixture.class_images)} classes, {fixture.num_images} images -> {fixture.input_dir}")
    if args.json:
        print(json.dumps([
            {"source": f.source, "input": str(f.input_dir), "classes": len(f.class_images), "images": f.num_images,
             "split_file": str(f.split_file) if f.split_file else None}
            for f in generated
        ], indent=1))
    return 0
