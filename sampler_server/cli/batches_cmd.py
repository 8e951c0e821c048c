"""``sampler-server batches``: print plain batches' compositions, reading no images.

The batch counterpart of ``episode``: for a store (by name) or source kind, a split,
a seed and a batch size, it prints exactly what the server's StreamBatches sends
for the same request (record ids, labels, epoch, fingerprint), one JSON object per
batch with ``--json``. ``--preset`` names the benchmark variant whose class splits
apply (md-v1, the default, or md-v2): only WordNet-split stores (ILSVRC-2012)
differ, 712 train classes under md-v1 and all 1000 under md-v2. ``--image-size``
and ``--resize`` only pick the store when a source kind is served by several (as
the server does: one packed raw at that size and method first). Only manifests
are read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sampler_common.checks import (
    MAX_BATCH_SIZE,
    MAX_INDEX,
    MAX_SEED,
    check_batch_size,
    check_image_size,
    check_index,
    check_seed,
)
from sampler_server.core.md.batches import BatchSampler, LabelledBatch
from sampler_server.core.md.imagenet_spec import spec_for_manifest
from sampler_server.core.md.plan import parse_split
from sampler_server.core.md.presets import IMAGENET_SPLIT, Benchmark
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.imaging import ResizeMethod
from sampler_server.store.manifest import load_manifest
from sampler_server.store.naming import StoreName, pick_store

MAX_COUNT = 100_000
"""Most batches one command prints."""
DEFAULT_BATCH_SIZE = 256
DEFAULT_IMAGE_SIZE = 84


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "batches",
        help="print plain batch compositions and fingerprints (no images read)",
        description="Print the composition (record ids, labels, epoch) and fingerprint of plain batch INDEX "
        "(or COUNT consecutive batches) of a split, exactly as the server's StreamBatches sends them.",
    )
    parser.add_argument("--data", required=True, type=Path, metavar="DIR", help="data directory of packed stores")
    parser.add_argument("--source", required=True, metavar="NAME", help="a store name or a source kind")
    parser.add_argument("--split", required=True, metavar="SPLIT", help="train, valid or test (val, validation: valid)")
    parser.add_argument("--seed", required=True, type=int, help=f"user seed, 0 to {MAX_SEED}")
    parser.add_argument("--index", type=int, default=0, help="batch index (default 0)")
    parser.add_argument("--count", type=int, default=1, help=f"batches from INDEX on, 1 to {MAX_COUNT} (default 1)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                        help=f"images per batch, 1 to {MAX_BATCH_SIZE} (default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--preset", default=Benchmark.MD_V1.value, choices=[b.value for b in Benchmark],
                        help="benchmark variant whose class splits apply (default md-v1)")
    parser.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE,
                        help=f"picks among stores of one source kind as the server would (default {DEFAULT_IMAGE_SIZE})")
    parser.add_argument("--resize", default=ResizeMethod.BILINEAR.value, choices=[m.value for m in ResizeMethod],
                        help="with --image-size, picks among stores as the server would (default bilinear)")
    parser.add_argument("--json", action="store_true", help="one JSON object per batch, one per line")
    parser.set_defaults(func=run)


def _check_range(args: argparse.Namespace) -> None:
    """The request's fields as the client and the server check them (``sampler_common.checks``,
    one message naming the field in all three), then what only this command bounds."""
    with field_checks():
        check_seed(args.seed)
        check_index(args.index)
        check_batch_size(args.batch_size)
        check_image_size(args.image_size)
    if not 1 <= args.count <= MAX_COUNT:
        raise InvalidArgument(f"--count: got {args.count}, expected an integer in [1, {MAX_COUNT}]")
    last = (MAX_INDEX + 1) // args.batch_size - 1  # the last batch whose positions fit an int64
    if not 0 <= args.index <= last - (args.count - 1):
        raise InvalidArgument(
            f"--index: got {args.index}, expected an integer in [0, {last - (args.count - 1)}] "
            f"(with --count {args.count} and --batch-size {args.batch_size})"
        )


def batch_json(store: str, batch: LabelledBatch, preset: str, batch_size: int) -> dict[str, object]:
    """The fields of the server's Batch message that describe the composition."""
    return {
        "source": store,
        "split": batch.split.value,
        "preset": preset,
        "seed": batch.seed,
        "index": batch.index,
        "epoch": batch.epoch,
        "batch_size": batch_size,
        "num_classes": batch.num_classes,
        "fingerprint": batch.fingerprint,
        "record_ids": list(batch.record_ids),
        "labels": list(batch.labels),
    }


def run(args: argparse.Namespace) -> int:
    from sampler_server.store.reader import find_stores  # LMDB at the edge, only to list stores

    _check_range(args)
    split = parse_split(args.split)
    benchmark = Benchmark(args.preset)
    manifests = {path.name: load_manifest(path) for path in find_stores(args.data)}
    names = [StoreName.of(name, m.source, m.pack_options) for name, m in manifests.items()]
    store = pick_store(names, args.source, args.image_size, args.resize, where=f" under {args.data}").name
    spec = spec_for_manifest(manifests[store], imagenet_variant=IMAGENET_SPLIT[benchmark])
    sampler = BatchSampler(spec, split, args.batch_size, preset=benchmark.value)
    for index in range(args.index, args.index + args.count):
        batch = sampler.sample(args.seed, index)
        if args.json:
            print(json.dumps(batch_json(store, batch, benchmark.value, args.batch_size), separators=(",", ":")))
        else:
            print(f"batch {index}  source {store}  split {split.value}  preset {benchmark.value}  seed {args.seed}  "
                  f"epoch {batch.epoch}  classes {batch.num_classes}")
            print(f"  fingerprint {batch.fingerprint}")
            print(f"  records {' '.join(map(str, batch.record_ids))}")
            print(f"  labels  {' '.join(map(str, batch.labels))}")
    return 0
