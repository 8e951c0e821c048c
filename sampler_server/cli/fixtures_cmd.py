"""``sampler-server fixtures SOURCE... --output DIR``: small original-layout datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sampler_server import fixtures
from sampler_server.errors import FailedPrecondition, InvalidArgument


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
    parser.add_argument(
        "--counts", help="imagenet21k: 'cog' (the ImageNet-CoG demo's real wnids and counts) or a JSON file "
        "mapping wnid -> image count; replaces --classes and --images-per-class",
    )
    parser.add_argument("--layout", choices=("tar", "folder"), default="tar",
                        help="imagenet21k: one <wnid>.tar per synset (default) or one folder per synset")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def _imagenet21k(root: Path, args: argparse.Namespace) -> fixtures.Fixture:
    """IN-21K layout for --counts (cog or a JSON file) and --layout."""
    from sampler_server.fixtures.imagenet21k import WNIDS, DEFAULT_IMAGES, write_imagenet21k

    if args.counts is not None and (args.classes is not None or args.images_per_class is not None):
        raise InvalidArgument("--counts replaces --classes and --images-per-class; give one or the other")
    if args.counts == "cog":
        from sampler_server.fixtures.cog_counts import cog_counts

        counts = cog_counts()
    elif args.counts is not None:
        try:
            counts = json.loads(Path(args.counts).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InvalidArgument(f"--counts {args.counts}: not a readable JSON file ({error})") from None
        if not isinstance(counts, dict) or not all(isinstance(v, int) for v in counts.values()):
            raise InvalidArgument(f"--counts {args.counts}: expected a JSON object mapping wnid -> image count")
    else:
        pool = WNIDS[: args.classes or len(WNIDS)]
        counts = {wnid: args.images_per_class or DEFAULT_IMAGES for wnid in pool}
    return write_imagenet21k(root, counts, seed=args.seed, layout=args.layout)


def run(args: argparse.Namespace) -> int:
    if (args.counts is not None or args.layout != "tar") and not {"imagenet21k", "all"} & set(args.sources):
        raise InvalidArgument("--counts and --layout apply to imagenet21k only")
    names = fixtures.available() if args.sources == ["all"] else args.sources
    generated = []
    for name in names:
        generator = fixtures.get_generator(name)
        root = args.output / name
        if root.exists() and any(root.iterdir()):
            raise FailedPrecondition(f"{root}: already exists and is not empty")
        if name == "imagenet21k" and (args.counts is not None or args.layout != "tar"):
            fixture = _imagenet21k(root, args)
        else:
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
