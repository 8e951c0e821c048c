"""Time from starting ``sampler-server serve`` to the first episode of a source.

Packs, in one data directory, a 1000-class ILSVRC-2012 store (the real IN-1K wnids,
``--per-class`` small JPEGs each, the fixture's class-dependent content, packed by the
``ilsvrc_2012`` converter, so its split comes from WordNet) and a small Omniglot
fixture store (60 characters x 5 drawers). For each source kind it then starts a fresh ``serve`` process
``--runs`` times and measures:
- listen: from launching the process to its "listening on" line,
- first episode: from that line to the first test-split episode received (MD
  variable-way, variable-shot, 84 px) by a client connecting then,
- total: both together,
and prints the best run (least total) of each kind, last line
``startup: ilsvrc_2012 listen X s, first episode Y s, total Z s; omniglot ...``.
Before it, the same for a copy of the ILSVRC store without its precomputed WordNet
split (``wordnet_split.json``), as a store packed before it existed is served: the
split is then built from WordNet on the first request.

Every fresh process sees a warm page cache (the stores are read once by the pack),
as a server restarted on a machine that has served before does.

Run: ``.venv/bin/python bench/startup_bench.py [--runs 5] [--per-class 2] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from sampler_server import fixtures  # noqa: E402
from sampler_server.core.cog.in1k import in1k_wnids  # noqa: E402
from sampler_server.fixtures.base import class_image, rng_for  # noqa: E402
from sampler_server.pack import sources  # noqa: E402
from sampler_server.pack.pipeline import PackOptions, run_pack  # noqa: E402
from sampler_server.pack.plan import ConverterOptions  # noqa: E402
from sampler_server.store.wordnet_split import SPLIT_FILE_NAME  # noqa: E402

IMAGE_SIZE = 84


def make_ilsvrc_layout(root: Path, per_class: int) -> None:
    """ILSVRC2012_img_train/<wnid>/<wnid>_<n>.JPEG for the 1000 IN-1K wnids, 48 px images."""
    for index, wnid in enumerate(in1k_wnids()):
        directory = root / wnid
        directory.mkdir(parents=True)
        rng = rng_for("bench-startup", 0, wnid)
        for number in range(per_class):
            class_image(index, rng, (48, 48)).save(directory / f"{wnid}_{number + 1}.JPEG", quality=90)


def pack_stores(work: Path, per_class: int) -> Path:
    """The data directory: ilsvrc_2012 (1000 classes) and omniglot (the fixture)."""
    data = work / "data"
    layout = work / "original" / "ILSVRC2012_img_train"
    make_ilsvrc_layout(layout, per_class)
    plan = sources.get_converter("ilsvrc_2012").plan(layout, ConverterOptions())
    run_pack(plan, data, PackOptions(progress=False))
    omniglot = fixtures.get_generator("omniglot").generate(
        work / "original" / "omniglot", num_classes=60, images_per_class=5)
    plan = sources.get_converter("omniglot").plan(omniglot.input_dir, ConverterOptions(**omniglot.pack_args))
    run_pack(plan, data, PackOptions(progress=False))
    return data


def one_start(data: Path, source: str, log: Path) -> tuple[float, float]:
    """(seconds to the listening line, seconds from it to the first episode) of a fresh server."""
    started = time.perf_counter()
    with open(log, "a") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0"],
            stdout=subprocess.PIPE, stderr=errors, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    try:
        line = process.stdout.readline()
        listening = time.perf_counter()
        if "listening on" not in line:
            raise RuntimeError(f"serve did not start (see {log}): {line!r}")
        spec = EpisodeSpec(sources=(source,), split="test", seed=0, image_size=IMAGE_SIZE)
        with SamplerClient(line.split()[2]) as client:
            next(iter(client.episodes(spec, count=1)))
            received = time.perf_counter()  # closing the client is not part of it
        return listening - started, received - listening
    finally:
        process.terminate()
        process.wait()


def best(data: Path, source: str, runs: int, work: Path) -> str:
    """Every run printed, and the best one (least total) as the summary's part."""
    times = [one_start(data, source, work / "server.log") for _ in range(runs)]
    for listen, first in times:
        print(f"  {source}: listen {listen:.3f} s, first episode {first:.3f} s, total {listen + first:.3f} s")
    listen, first = min(times, key=sum)
    return f"{source} listen {listen:.2f} s, first episode {first:.2f} s, total {listen + first:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh servers per source kind (best one printed)")
    parser.add_argument("--per-class", type=int, default=2, help="images per ILSVRC class (default 2)")
    parser.add_argument("--keep", type=Path, help="work directory to keep (and reuse its stores when present)")
    args = parser.parse_args()
    if args.runs < 1 or args.per_class < 1:
        parser.error("--runs and --per-class must be >= 1")
    work = args.keep or Path(tempfile.mkdtemp(prefix="startup-bench-"))
    try:
        data = work / "data"
        if not all((data / name / "manifest.json").is_file() for name in ("ilsvrc_2012", "omniglot")):
            shutil.rmtree(work / "data", ignore_errors=True)
            shutil.rmtree(work / "original", ignore_errors=True)
            shutil.rmtree(work / "data_without_split", ignore_errors=True)
            began = time.perf_counter()
            data = pack_stores(work, args.per_class)
            print(f"packed 1000-class ilsvrc_2012 and omniglot in {time.perf_counter() - began:.1f} s", flush=True)
        old = work / "data_without_split"
        if not (old / "ilsvrc_2012" / "manifest.json").is_file():
            shutil.copytree(data / "ilsvrc_2012", old / "ilsvrc_2012")
            (old / "ilsvrc_2012" / SPLIT_FILE_NAME).unlink(missing_ok=True)
        print("without its precomputed split: " + best(old, "ilsvrc_2012", args.runs, work), flush=True)
        parts = [best(data, source, args.runs, work) for source in ("ilsvrc_2012", "omniglot")]
        print("startup: " + "; ".join(parts), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
