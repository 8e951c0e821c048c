"""``sampler-server pack SOURCE --input DIR --output DIR`` (``pack vtab --tfds-name NAME --tfds-data-dir DIR``,
``pack imagenet21k --input DIR --output DATA [--wnids FILE] [--shard I/N]``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sampler_server.errors import InvalidArgument
from sampler_server.imaging import ResizeMethod
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, PackSummary, run_pack, split_counts
from sampler_server.pack.plan import ConverterOptions, empty_split_warnings, small_split_warnings
from sampler_server.pack.reference_notes import reference_warnings
from sampler_server.store.manifest import Manifest
from sampler_server.store.shards import parse_shard, shard_store_name


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pack",
        help="convert an original dataset download into a packed store",
        description="Convert a source's original download into OUTPUT/<name> (LMDB + manifest.json). "
        "Sources: " + ", ".join(f"{name}" for name in sources.CONVERTERS),
    )
    parser.add_argument("source", metavar="SOURCE", help="one of: " + ", ".join(sources.CONVERTERS))
    parser.add_argument("--input", type=Path, help="the source's root as the download unpacks (all but vtab)")
    parser.add_argument(
        "--tfds-name", help="vtab: the TFDS dataset, name[/config][:version], e.g. clevr, eurosat/rgb, kitti:3.1.0",
    )
    parser.add_argument(
        "--tfds-data-dir", type=Path, help="vtab: the TFDS data directory holding it prepared (needs the vtab extra)",
    )
    parser.add_argument("--output", required=True, type=Path, help="data directory; the store goes to OUTPUT/<name>")
    parser.add_argument("--name", help="store directory name (default: the source name)")
    parser.add_argument("--class-splits", type=Path, help="which split each class is in: Meta-Dataset's class-split "
                        "JSON ({\"train\": [...], \"valid\": [...], \"test\": [...]}; docs/packing.md)")
    parser.add_argument("--split-fractions", type=float, nargs=3, metavar=("TRAIN", "VALID", "TEST"),
                        help="image_folder: the shares of the classes in train, valid and test, cut from the "
                        "default rule's permutation (without it: 70/15/15)")
    parser.add_argument(
        "--duplicates", type=Path, action="append", default=[],
        help="ILSVRC: a Meta-Dataset duplicates list; its files are left out (repeatable)",
    )
    parser.add_argument(
        "--validation", type=Path, metavar="VAL_DIR",
        help="ILSVRC: the official validation images, packed as the store's held-out validation partition "
        "(ImageNet-CoG's IN-1K test set; Meta-Dataset never reads it): wnid folders (VAL_DIR/n01440764/*.JPEG) "
        "or the flat download with --validation-labels",
    )
    parser.add_argument(
        "--validation-labels", type=Path, metavar="FILE",
        help="ILSVRC, flat --validation: LOC_val_solution.csv (ImageId,PredictionString, the wnid first) or the "
        "devkit's ILSVRC2012_validation_ground_truth.txt (with --devkit-meta)",
    )
    parser.add_argument(
        "--devkit-meta", type=Path, metavar="FILE",
        help="ILSVRC: the devkit's data/meta.mat, mapping the ground truth's ILSVRC2012_IDs to wnids",
    )
    parser.add_argument("--labels", type=Path, help="VGG Flower / Traffic Signs: class names, one per line")
    parser.add_argument("--wnids", type=Path, help="imagenet21k: pack only these synsets (one wnid per line)")
    parser.add_argument(
        "--shard", metavar="I/N",
        help="imagenet21k: pack shard I (0-based) of N, a contiguous chunk of the synsets in wnid order, into "
        "<name>-IIIII-of-NNNNN; pack every I into one --output and the server serves them as one source <name>",
    )
    parser.add_argument("--max-side", type=int, help="downscale so the longer side is at most N (re-encodes)")
    parser.add_argument("--raw-size", type=int, help="store every image decoded and resized to S x S raw uint8 RGB")
    parser.add_argument(
        "--raw-resize", choices=[m.value for m in ResizeMethod],
        help="how --raw-size resizes (the store then serves only that method): default bilinear (the MD "
        "reference's pixels), legacy_bilinear for vtab (tf.compat.v1.image.resize, the VTAB reference's)",
    )
    parser.add_argument(
        "--lossless-derived", action="store_true",
        help="store derived images (crops, inverted Omniglot, Quick Draw bitmaps) and non-JPEG originals losslessly "
        "(PNG / as they are) instead of as the MD reference's quality-75 JPEGs",
    )
    parser.add_argument("--on-error", choices=("fail", "skip"), default="fail", help="bad image files: fail (default) or skip and count")
    parser.add_argument("--workers", type=int, default=0, help="worker processes (default: one per CPU core)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing different store")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    shard = parse_shard(args.shard) if args.shard is not None else None
    name = args.name
    if shard is not None and name is not None:
        if not name or name.startswith(".") or "/" in name:
            raise InvalidArgument(f"--name must be a plain directory name, got {name!r}")
        name = shard_store_name(name, *shard)  # every shard its own store, served together as --name
    options = PackOptions(
        max_side=args.max_side,
        raw_size=args.raw_size,
        raw_resize=ResizeMethod(args.raw_resize or _default_raw_resize(args.source)),
        lossless_derived=args.lossless_derived,
        on_error=args.on_error,
        workers=args.workers,
        name=name,
        overwrite=args.overwrite,
        progress=not args.quiet and not args.json,
    )
    converter = sources.get_converter(args.source)
    converter_options = ConverterOptions(
        class_splits=args.class_splits, duplicates=tuple(args.duplicates), labels=args.labels,
        tfds_name=args.tfds_name, wnids=args.wnids, shard=shard,
        validation=args.validation, validation_labels=args.validation_labels, devkit_meta=args.devkit_meta,
        split_fractions=tuple(args.split_fractions) if args.split_fractions is not None else None,
    )
    plan = converter.plan(_input_dir(args), converter_options)
    warnings = (reference_warnings(args.source, converter_options) + empty_split_warnings(plan)
                + small_split_warnings(plan))
    for line in warnings:
        print(line, file=sys.stderr)
    summary = run_pack(plan, args.output, options)
    if args.json:
        print(json.dumps({**summary_json(summary), "warnings": warnings}, indent=1))
    else:
        print(format_summary(summary))
    return 0


def _default_raw_resize(source: str) -> str:
    """Each protocol's reference resize: VTAB's legacy grid, MD's align-corners bilinear."""
    return (ResizeMethod.LEGACY_BILINEAR if source == "vtab" else ResizeMethod.BILINEAR).value


def _input_dir(args: argparse.Namespace) -> Path:
    """--input for the original layouts, --tfds-data-dir for vtab; the other is refused."""
    tfds = args.source == "vtab"
    given, other = (args.tfds_data_dir, args.input) if tfds else (args.input, args.tfds_data_dir)
    flag, other_flag = ("--tfds-data-dir", "--input") if tfds else ("--input", "--tfds-data-dir")
    if other is not None:
        raise InvalidArgument(f"{other_flag} does not apply to source {args.source!r} (it reads {flag})")
    if given is None:
        raise InvalidArgument(f"pack {args.source} needs {flag}")
    return given


def summary_json(summary: PackSummary) -> dict[str, object]:
    manifest = summary.manifest
    counts = [c.count for c in manifest.classes]
    return {
        "source": summary.source,
        "store": str(summary.store_dir),
        "classes": len(manifest.classes),
        "split_counts": split_counts(manifest),
        "split_rule": manifest.split_rule,
        "images": manifest.num_records,
        "images_per_class": {"min": min(counts), "max": max(counts)},
        "skipped": summary.num_skipped,
        "empty_classes_dropped": summary.empty_classes,
        "bytes": summary.num_bytes,
        "seconds": round(summary.seconds, 3),
        "images_per_second": round(summary.images_per_second, 1),
        "peak_rss_mb": round(summary.peak_rss_mb, 1),
        "workers_peak_rss_mb": round(summary.workers_peak_rss_mb, 1),
        "anon_rss_mb_at_end": None if summary.anon_rss_mb is None else round(summary.anon_rss_mb, 1),
        "fingerprint": manifest.fingerprint,
        "unchanged": summary.unchanged,
        **({"tfds": _tfds_summary(manifest)} if manifest.tfds is not None else {}),
        **({"validation": manifest.validation.summary()} if manifest.validation is not None else {}),
    }


def _tfds_summary(manifest: Manifest) -> dict[str, object]:
    tfds = manifest.tfds or {}
    return {
        "name": tfds.get("name"),
        "version": tfds.get("version"),
        "split_sizes": {name: split["num_examples"] for name, split in tfds.get("splits", {}).items()},
        "records": {c.name: c.count for c in manifest.classes},
        "attributes": [a["name"] for a in tfds.get("attributes", [])],
    }


def format_summary(summary: PackSummary) -> str:
    data = summary_json(summary)
    counts = data["split_counts"]
    assert isinstance(counts, dict)
    per_class = data["images_per_class"]
    assert isinstance(per_class, dict)
    tfds = data.get("tfds")
    classes = (
        f"  classes  {data['classes']}  (train {counts['train']}, valid {counts['valid']}, test {counts['test']}; rule {data['split_rule']})"
        if not isinstance(tfds, dict) else
        f"  tfds     {tfds['name']} {tfds['version']}: " + ", ".join(f"{k} {v}" for k, v in tfds["records"].items())
        + f" records; attributes {', '.join(tfds['attributes'])}"
    )
    lines = [
        f"packed {data['source']} -> {data['store']}" + ("  (unchanged: same content as before)" if summary.unchanged else ""),
        classes,
        f"  images   {data['images']}  (per class {per_class['min']}..{per_class['max']}; skipped {data['skipped']})",
        f"  size     {summary.num_bytes / 1e6:.1f} MB in {summary.seconds:.1f} s ({summary.images_per_second:.0f} images/s, peak RSS {summary.peak_rss_mb:.0f} MB)",
        f"  fingerprint {data['fingerprint']}",
    ]
    validation = data.get("validation")
    if isinstance(validation, dict):
        lines.insert(3, f"  validation {validation['images']} images (per class {validation['images_per_class']['min']}"
                     f"..{validation['images_per_class']['max']}; labels {validation['labels']}; "
                     f"fingerprint {validation['fingerprint']}): a held-out partition, never in Meta-Dataset")
    if summary.empty_classes:
        lines.insert(3, f"  dropped  {len(summary.empty_classes)} classes left without images: {summary.empty_classes[:5]}")
    return "\n".join(lines)
