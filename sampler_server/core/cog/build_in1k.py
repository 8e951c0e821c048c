"""Regenerate the shipped IN-1K wnid list from the ``tensorflow_datasets`` package.

Run as ``python -m sampler_server.core.cog.build_in1k [--labels FILE] [--output PATH]``.
The source is ``tensorflow_datasets/datasets/imagenet2012/labels.txt`` of the installed
package (located without importing it: importing TFDS loads TensorFlow). The output
is a pure function of that file (its wnids, sorted, one a line), so a test can compare
a fresh build with the shipped bytes. The write is atomic (temp file, rename).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from sampler_server.core.cog.in1k import IN1K_FILE_NAME, NUM_IN1K, parse_in1k
from sampler_server.core.hierarchy.build_wordnet import write_atomic
from sampler_server.core.hierarchy.wordnet import load_wordnet_graph
from sampler_server.errors import InputFormatError, NotFound, SamplerError

SHIPPED_PATH = Path(__file__).resolve().parents[2] / "data" / IN1K_FILE_NAME
TFDS_LABELS = Path("datasets") / "imagenet2012" / "labels.txt"


def tfds_labels_path() -> Path:
    """Where the installed ``tensorflow_datasets`` keeps its ImageNet-2012 label list."""
    spec = importlib.util.find_spec("tensorflow_datasets")
    if spec is None or not spec.submodule_search_locations:
        raise NotFound("tensorflow_datasets is not installed; pass --labels FILE (one ILSVRC-2012 wnid a line)")
    return Path(list(spec.submodule_search_locations)[0]) / TFDS_LABELS


def build_in1k_bytes(labels: str | Path | None = None) -> bytes:
    """The shipped file's bytes, from ``labels`` (default: the TFDS package file)."""
    path = Path(labels) if labels is not None else tfds_labels_path()
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise NotFound(f"{path} does not exist") from None
    except UnicodeDecodeError:
        raise InputFormatError(path, "not an ASCII file") from None
    wnids = sorted(line.strip() for line in text.splitlines() if line.strip())
    payload = "".join(f"{w}\n" for w in wnids)
    parse_in1k(payload, source=str(path))  # 1000 distinct wnids
    graph = load_wordnet_graph()
    unknown = [w for w in wnids if w not in graph]
    if unknown:
        raise InputFormatError(path, f"{unknown[0]} is not a WordNet 3.0 noun synset ({len(unknown) - 1} more)")
    return payload.encode("ascii")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m sampler_server.core.cog.build_in1k",
        description="Regenerate the IN-1K (ILSVRC-2012) wnid list shipped in the package.",
    )
    parser.add_argument("--labels", type=Path, help="a list of the 1000 wnids (default: the TFDS package's)")
    parser.add_argument("--output", type=Path, default=SHIPPED_PATH, help="file to write (default: the shipped one)")
    args = parser.parse_args(argv)
    try:
        data = build_in1k_bytes(args.labels)
    except SamplerError as exc:
        print(f"build_in1k: {exc}", file=sys.stderr)
        return 1
    write_atomic(args.output, data)
    print(f"wrote {args.output} ({NUM_IN1K} wnids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
