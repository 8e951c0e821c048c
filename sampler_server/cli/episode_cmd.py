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

``--png FILE`` also draws the episode (one, ``--count 1``): one row per class in
label order, its support images, a gap with a grey bar, then its query images, with
the class name and "S=k Q=q" in the left margin. The pixels are the served ones: the
records are decoded in this process by the assembler's single-process path
(``assembly.assembler.decode_records``) at ``--image-size`` with ``--resize``, and
pasted unscaled at fixed positions (``PngLayout``). Rows wider than
``--png-max-tiles`` support (or query) images show the first ones and say how many
more the margin leaves out. Only this option reads images.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.hierarchy import MAX_SPAN_LEAVES
from sampler_server.core.md.imagenet_spec import parse_variant, spec_for_manifest
from sampler_server.core.md import (
    Benchmark,
    Episode,
    MultiSourceSampler,
    benchmark_sources,
)
from sampler_server.core.md.plan import parse_split
from sampler_server.core.md.presets import IMAGENET_SPLIT
from sampler_common.checks import MAX_INDEX, MAX_SEED, check_image_size, check_index, check_seed
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.imaging import ResizeMethod
from sampler_server.store.manifest import Manifest, load_manifest
from sampler_server.store.naming import StoreName, pick_store

MAX_COUNT = 100_000
"""Most episodes one command prints (a larger request is a typo, not a use)."""
DEFAULT_IMAGE_SIZE = 84
DEFAULT_PNG_MAX_TILES = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "episode",
        help="print episode compositions and fingerprints (images read only to draw one with --png)",
        description="Print the composition (ways, classes, support and query record ids per class) and "
        "fingerprint of Meta-Dataset episode INDEX (or of COUNT consecutive episodes) for a seed.",
    )
    parser.add_argument("--data", required=True, type=Path, metavar="DIR", help="data directory of packed stores")
    parser.add_argument(
        "--source", required=True, metavar="S",
        help="a source, a comma-separated list of sources, or a preset: " + ", ".join(b.value for b in Benchmark),
    )
    parser.add_argument("--split", required=True, metavar="SPLIT", help="train, valid or test (val, validation: valid)")
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
    parser.add_argument("--preset", choices=[b.value for b in Benchmark],
                        help="benchmark variant whose class splits apply to the named sources (default md-v1)")
    parser.add_argument("--imagenet-split", help="WordNet split of ILSVRC stores: md (default) or md_v2 "
                        "(the same as --preset md-v1 / md-v2)")
    parser.add_argument(
        "--max-span-leaves", type=int, metavar="N",
        help=f"ILSVRC: most leaves an eligible WordNet node spans (default {MAX_SPAN_LEAVES}, the reference's; "
        "`hierarchy imagenet` prints the smallest cap that reaches every class)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per episode, one per line")
    parser.add_argument("--png", type=Path, metavar="FILE",
                        help="also write the episode as a picture (one row per class: support | query); reads images")
    parser.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE,
                        help=f"--png: side of each image in pixels, as served (default {DEFAULT_IMAGE_SIZE})")
    parser.add_argument("--resize", choices=[m.value for m in ResizeMethod], default=ResizeMethod.BILINEAR.value,
                        help="--png: resize method, as served (default bilinear, the reference's pixels)")
    parser.add_argument("--png-max-tiles", type=int, default=DEFAULT_PNG_MAX_TILES, metavar="N",
                        help=f"--png: most support (and most query) images drawn per row (default {DEFAULT_PNG_MAX_TILES})")
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
        max_span_leaves=args.max_span_leaves,
    )


def _check_range(args: argparse.Namespace) -> None:
    """The request's fields as the client and the server check them (``sampler_common.checks``,
    one message naming the field in all three), then what only this command bounds."""
    with field_checks():
        check_seed(args.seed)
        check_index(args.index)
        check_image_size(args.image_size)
    if not 1 <= args.count <= MAX_COUNT:
        raise InvalidArgument(f"--count: got {args.count}, expected an integer in [1, {MAX_COUNT}]")
    if not 0 <= args.index <= MAX_INDEX - (args.count - 1):
        raise InvalidArgument(
            f"--index: got {args.index}, expected an integer in [0, {MAX_INDEX - (args.count - 1)}] "
            f"(with --count {args.count})"
        )
    if args.png is not None:
        if args.count != 1:
            raise InvalidArgument(f"--png: got --count {args.count}, expected 1 (one episode per picture)")
        if args.png_max_tiles < 1:
            raise InvalidArgument(f"--png-max-tiles: got {args.png_max_tiles}, expected at least 1")


def _requested_sources(source: str, split: Split) -> tuple[tuple[str, ...], str | None]:
    """(source names, benchmark preset or None) for a --source value."""
    if source in {b.value for b in Benchmark}:
        return benchmark_sources(source, split), source
    names = tuple(name.strip() for name in source.split(","))
    if not all(names):
        raise InvalidArgument(f"--source: got {source!r}, expected a source, a comma-separated list or a preset")
    return names, None


def _manifests(
    data: Path, wanted: tuple[str, ...], image_size: int | None, resize: str | None
) -> dict[str, tuple[Path, Manifest]]:
    """The stores ``wanted`` names (store names or source kinds, resolved as the server
    resolves them: ``store.naming``), as (path, manifest) by source kind."""
    # The reader pulls in LMDB: import it here, at the edge, and only to list stores.
    from sampler_server.store.reader import find_stores

    stores = {path.name: (path, load_manifest(path)) for path in find_stores(data)}
    names = [StoreName.of(name, manifest.source, manifest.pack_options) for name, (_, manifest) in stores.items()]
    out: dict[str, tuple[Path, Manifest]] = {}
    for name in wanted:
        path, manifest = stores[pick_store(names, name, image_size, resize, where=f" under {data}").name]
        if manifest.source in out:
            raise InvalidArgument(f"--source: source {manifest.source!r} is selected more than once")
        out[manifest.source] = (path, manifest)
    return out


def run(args: argparse.Namespace) -> int:
    _check_range(args)
    split = parse_split(args.split)
    config = config_from_args(args)
    names, preset = _requested_sources(args.source, split)
    if preset and args.preset and args.preset != preset:
        raise InvalidArgument(f"--preset: got {args.preset!r} with --source {preset!r}, expected the same or none")
    preset = preset or args.preset
    variant = parse_variant(args.imagenet_split or (IMAGENET_SPLIT[Benchmark(preset)] if preset else "md"))
    stores = _manifests(args.data, names, args.image_size, args.resize)
    specs: dict[str, DatasetSpec] = {
        source: spec_for_manifest(manifest, imagenet_variant=variant) for source, (_, manifest) in stores.items()
    }
    sampler = MultiSourceSampler(specs, list(specs), split, config,
                                 {source: path.name for source, (path, _) in stores.items()})
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
        if args.png is not None:
            path, _ = stores[episode.source]
            write_png(args.png, episode, path, class_names[episode.source], args.image_size,
                      ResizeMethod(args.resize), args.png_max_tiles)
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


# ---- --png: the episode as a picture -------------------------------------------------


@dataclass(frozen=True)
class PngLayout:
    """Where everything goes in an episode picture: fixed geometry from (ways, columns, image size).

    Rows are classes in label order; in each, ``support_columns`` tiles from
    ``support_x``, a gap holding a grey bar, then ``query_columns`` tiles from
    ``query_x``. Tiles are pasted unscaled, so a tile's pixels are the served pixels.
    """

    ways: int
    support_columns: int
    query_columns: int
    size: int

    PAD: ClassVar[int] = 8
    MARGIN: ClassVar[int] = 200  # left margin for the class name and shot counts
    HEADER: ClassVar[int] = 56  # three text lines: episode, fingerprint, column titles
    GAP: ClassVar[int] = 2  # between tiles
    SEPARATOR: ClassVar[int] = 16  # between the support and the query block
    ROW_GAP: ClassVar[int] = 6
    TEXT_HEIGHT: ClassVar[int] = 46  # three margin lines: a row is never shorter

    @property
    def pitch(self) -> int:
        return max(self.size, self.TEXT_HEIGHT) + self.ROW_GAP

    @property
    def support_x(self) -> int:
        return self.MARGIN

    @property
    def query_x(self) -> int:
        return self.support_x + self.support_columns * (self.size + self.GAP) - self.GAP + self.SEPARATOR

    @property
    def width(self) -> int:
        return self.query_x + self.query_columns * (self.size + self.GAP) - self.GAP + self.PAD

    @property
    def height(self) -> int:
        return self.HEADER + self.ways * self.pitch - self.ROW_GAP + self.PAD

    def row_y(self, row: int) -> int:
        return self.HEADER + row * self.pitch

    def tile(self, row: int, column: int, query: bool = False) -> tuple[int, int]:
        """(x, y) of the top-left pixel of a support (or query) tile."""
        x0 = self.query_x if query else self.support_x
        return x0 + column * (self.size + self.GAP), self.row_y(row)

    @classmethod
    def for_episode(cls, episode: Episode, size: int, max_tiles: int) -> PngLayout:
        return cls(
            ways=episode.ways,
            support_columns=min(max(episode.shots), max_tiles),
            query_columns=min(episode.query_per_class, max_tiles),
            size=size,
        )


def _font(size: int = 12) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow's bundled TrueType font (needs FreeType)
    except (TypeError, ValueError, OSError):
        return ImageFont.load_default()


def _fit(draw: Any, text: str, font: Any, width: int) -> str:
    """``text``, shortened with an ellipsis to fit ``width`` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def render_png(
    episode: Episode,
    pixels: dict[int, np.ndarray],
    class_names: list[str],
    size: int,
    method: ResizeMethod,
    max_tiles: int,
) -> Any:
    """The episode picture (a PIL image); ``pixels`` maps each shown record id to its size x size x 3 tile."""
    from PIL import Image, ImageDraw

    layout = PngLayout.for_episode(episode, size, max_tiles)
    image = Image.new("RGB", (layout.width, layout.height), "white")
    draw = ImageDraw.Draw(image)
    font = _font()
    text_width = layout.MARGIN - 2 * layout.PAD
    title = (f"{episode.source} {episode.split.value}  seed {episode.seed}  episode {episode.index}  "
             f"{episode.ways} ways  {size}px {method.value}")
    draw.text((layout.PAD, 4), _fit(draw, title, font, layout.width - 2 * layout.PAD), fill="black", font=font)
    capped = max_tiles < max(max(episode.shots), episode.query_per_class)
    subtitle = f"fingerprint {episode.fingerprint[:32]}…" + (f"  (at most {max_tiles} images per block)" if capped else "")
    draw.text((layout.PAD, 20), _fit(draw, subtitle, font, layout.width - 2 * layout.PAD), fill="dimgray", font=font)
    draw.text((layout.support_x, 38), "support", fill="black", font=font)
    draw.text((layout.query_x, 38), "query", fill="black", font=font)
    bar_x = layout.query_x - layout.SEPARATOR // 2 - 1
    draw.rectangle((bar_x, layout.HEADER, bar_x + 1, layout.height - layout.PAD), fill="gray")
    for row, class_id in enumerate(episode.class_ids):
        y = layout.row_y(row)
        support, query = episode.support[row], episode.query[row]
        name = f"[{row}] {class_names[class_id]}"
        draw.text((layout.PAD, y), _fit(draw, name, font, text_width), fill="black", font=font)
        draw.text((layout.PAD, y + 15), f"S={len(support)} Q={len(query)}", fill="black", font=font)
        hidden_s, hidden_q = max(0, len(support) - max_tiles), max(0, len(query) - max_tiles)
        if hidden_s or hidden_q:
            more = ", ".join(f"+{n} more {part}" for n, part in ((hidden_s, "S"), (hidden_q, "Q")) if n)
            draw.text((layout.PAD, y + 30), _fit(draw, more, font, text_width), fill="firebrick", font=font)
        for column, record_id in enumerate(support[:max_tiles]):
            image.paste(Image.fromarray(pixels[record_id]), layout.tile(row, column))
        for column, record_id in enumerate(query[:max_tiles]):
            image.paste(Image.fromarray(pixels[record_id]), layout.tile(row, column, query=True))
    return image


def write_png(
    target: Path,
    episode: Episode,
    store: Path,
    class_names: list[str],
    size: int,
    method: ResizeMethod,
    max_tiles: int,
) -> None:
    """Decode the shown records of ``episode`` from ``store`` as the server would and write the picture."""
    # Image reading and decoding belong at the edge: import them only when a picture is asked for.
    from sampler_server.assembly.assembler import decode_records
    from sampler_server.store.reader import StoreReader

    reader = StoreReader(store)
    raw_size = reader.manifest.pack_options.get("raw_size")
    if raw_size and int(raw_size) != size:
        raise InvalidArgument(
            f"--image-size: got {size}, but store {store.name!r} holds raw {raw_size}x{raw_size} pixels; "
            f"use --image-size {raw_size} or an encoded store of the same source"
        )
    shown = sorted({r for ids in (*episode.support, *episode.query) for r in ids[:max_tiles]})
    tiles = decode_records(reader, shown, size, method)
    picture = render_png(episode, dict(zip(shown, tiles)), class_names, size, method, max_tiles)
    try:
        picture.save(target, format="PNG")
    except OSError as error:
        raise InvalidArgument(f"--png: cannot write {target} ({error.strerror or error})") from None
    print(f"wrote {target} ({picture.width}x{picture.height})", file=sys.stderr)
