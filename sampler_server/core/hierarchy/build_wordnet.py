"""Regenerate the shipped WordNet file from Debian's ``wordnet-base`` database.

Run as ``python -m sampler_server.core.hierarchy.build_wordnet [--wordnet-dir DIR]
[--output PATH]``. The output is a pure function of ``DIR/data.noun``: running it
twice, or on another machine with the same zlib, writes the same bytes, and a test
compares a fresh build with the shipped file. The write is atomic (temp file, rename).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sampler_server.core.hierarchy.wordnet import (
    DERIVED_FILE_NAME,
    NUM_NOUN_SYNSETS,
    encode_derived,
    parse_data_noun,
)
from sampler_server.errors import InputFormatError, NotFound, SamplerError

DEFAULT_WORDNET_DIR = Path("/usr/share/wordnet")
SHIPPED_PATH = Path(__file__).resolve().parents[2] / "data" / DERIVED_FILE_NAME


def build_derived_bytes(wordnet_dir: str | Path = DEFAULT_WORDNET_DIR) -> bytes:
    """Parse ``wordnet_dir/data.noun`` and return the derived file's bytes."""
    data_noun = Path(wordnet_dir) / "data.noun"
    try:
        data = data_noun.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"{data_noun} does not exist (apt-get install wordnet-base)") from None
    synsets = parse_data_noun(data, source=str(data_noun))
    if len(synsets) != NUM_NOUN_SYNSETS:
        raise InputFormatError(data_noun, f"{len(synsets)} noun synsets, expected {NUM_NOUN_SYNSETS} (WordNet 3.0)")
    return encode_derived(synsets)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m sampler_server.core.hierarchy.build_wordnet",
        description="Regenerate the WordNet 3.0 noun file shipped in the package.",
    )
    parser.add_argument("--wordnet-dir", type=Path, default=DEFAULT_WORDNET_DIR, help="directory holding data.noun")
    parser.add_argument("--output", type=Path, default=SHIPPED_PATH, help="file to write (default: the shipped one)")
    args = parser.parse_args(argv)
    try:
        data = build_derived_bytes(args.wordnet_dir)
    except SamplerError as exc:
        print(f"build_wordnet: {exc}", file=sys.stderr)
        return 1
    write_atomic(args.output, data)
    print(f"wrote {args.output} ({len(data):,} bytes, {NUM_NOUN_SYNSETS:,} synsets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
