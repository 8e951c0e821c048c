"""``sampler-server demo``: the main job on the embedded demo data.

Generates every source's fixture in its original layout, packs each one with the
same code path as ``pack`` (official-format split files where the fixture writes
one), and prints what ``inspect`` prints.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from sampler_server import fixtures
from sampler_server.cli.inspect_cmd import run as inspect_run
from sampler_server.cli.pack_cmd import format_summary
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, run_pack
from sampler_server.pack.plan import ConverterOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="generate the demo data, pack it and inspect it",
        description="Generate every source's fixture under WORKDIR/original, pack them into WORKDIR/store, inspect.",
    )
    parser.add_argument("--workdir", type=Path, default=Path("demo-data"))
    parser.add_argument("--classes", type=int, default=None, help="classes per source (default: each fixture's own)")
    parser.add_argument("--images-per-class", type=int, default=None)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    original = args.workdir / "original"
    store = args.workdir / "store"
    for name in fixtures.available():
        if name not in sources.CONVERTERS:
            continue
        fixture = fixtures.get_generator(name).generate(
            original / name, seed=0, num_classes=args.classes, images_per_class=args.images_per_class
        )
        converter_options = ConverterOptions(**{"class_splits": fixture.split_file, **dict(fixture.pack_args)})
        plan = sources.get_converter(name).plan(fixture.input_dir, converter_options)
        summary = run_pack(plan, store, PackOptions(workers=args.workers, progress=not args.quiet))
        print(format_summary(summary))
    print()
    inspect_run(argparse.Namespace(data=store, json=False, classes=False))
    print(f"\ndemo finished in {time.perf_counter() - started:.1f} s; stores under {store}")
    return 0
