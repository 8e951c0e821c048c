"""Compositions per second of MD-v2 multi-source sampling (no images).

Specs carry the real per-class image counts of each Meta-Dataset source (read from
../shared/reference/md_specs, the reference's dataset specs, when present; else
synthetic counts of the same shape), ImageNet with its WordNet hierarchy (MD-v2:
all 1000 classes in train) and Omniglot with its alphabets. Prints compositions/s
for the MD-v2 train and test source sets, measured in one process.
Run: ``.venv/bin/python bench/sampler_bench.py [--episodes N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampler_server.core.md.config import EpisodeConfig  # noqa: E402
from sampler_server.core.md.imagenet_spec import imagenet_spec  # noqa: E402
from sampler_server.core.md.multisource import MultiSourceSampler  # noqa: E402
from sampler_server.core.md.presets import benchmark_sources  # noqa: E402
from sampler_server.core.spec import DatasetSpec  # noqa: E402
from sampler_server.core.split import Split  # noqa: E402

SPECS = REPO.parent / "shared" / "reference" / "md_specs"
FILES = {
    "aircraft": "aircraft", "cu_birds": "cu_birds", "dtd": "dtd", "fungi": "fungi", "mscoco": "mscoco",
    "quickdraw": "quickdraw", "traffic_sign": "traffic_sign", "vgg_flower": "vgg_flower",
}
ORDER = (Split.TRAIN, Split.VALID, Split.TEST)


def flat_spec(source: str) -> DatasetSpec:
    path = SPECS / f"{FILES[source]}_dataset_spec.json"
    if path.is_file():
        data = json.loads(path.read_text())
        counts = [int(data["images_per_class"][str(i)]) for i in range(len(data["images_per_class"]))]
        per_split = [int(data["classes_per_split"][s.name]) for s in ORDER]
    else:  # synthetic stand-in: 100 classes of 100 images, 70/15/15
        counts, per_split = [100] * 100, [70, 15, 15]
    splits = [s for s, n in zip(ORDER, per_split) for _ in range(n)]
    return DatasetSpec.from_counts(source, counts, splits)


def omniglot_spec() -> DatasetSpec:
    path = SPECS / "omniglot_dataset_spec.json"
    if path.is_file():
        data = json.loads(path.read_text())
        sizes = [int(data["classes_per_superclass"][str(i)]) for i in range(len(data["classes_per_superclass"]))]
        per_split = [int(data["superclasses_per_split"][s.name]) for s in ORDER]
    else:
        sizes, per_split = [30] * 50, [25, 5, 20]
    alphabet_splits = [s for s, n in zip(ORDER, per_split) for _ in range(n)]
    counts, splits, groups = [], [], []
    for alphabet, (size, split) in enumerate(zip(sizes, alphabet_splits)):
        counts += [20] * size
        splits += [split] * size
        groups += [f"alphabet_{alphabet:02d}"] * size
    return DatasetSpec.from_counts("omniglot", counts, splits, groups=groups)


def imagenet_v2_spec() -> DatasetSpec:
    path = SPECS / "ilsvrc_2012_num_leaf_images.json"
    counts = json.loads(path.read_text())
    classes, start = [], 0
    for class_id, wnid in enumerate(sorted(counts)):
        classes.append(SimpleNamespace(id=class_id, name=wnid, start=start, end=start + counts[wnid], wnid=wnid,
                                       split=None, group=None))
        start += counts[wnid]
    manifest = SimpleNamespace(source="ilsvrc_2012", fingerprint="bench", classes=classes)
    return imagenet_spec(manifest, variant="md_v2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3000)
    args = parser.parse_args()
    specs = {name: flat_spec(name) for name in FILES}
    specs["omniglot"] = omniglot_spec()
    if (SPECS / "ilsvrc_2012_num_leaf_images.json").is_file():
        specs["ilsvrc_2012"] = imagenet_v2_spec()
    print(f"specs from {'the reference dataset specs' if SPECS.is_dir() else 'synthetic counts'}")
    for split in (Split.TRAIN, Split.TEST):
        sources = [s for s in benchmark_sources("md-v2", split) if s in specs]
        sampler = MultiSourceSampler(specs, sources, split, EpisodeConfig())
        sampler.sample(0, 0)  # warm caches
        started = time.perf_counter()
        images = 0
        for index in range(args.episodes):
            episode = sampler.sample(0, index)
            images += episode.support_size + episode.query_size
        seconds = time.perf_counter() - started
        print(f"MD-v2 {split.value:5} ({len(sources)} sources: {', '.join(sources)}): "
              f"{args.episodes / seconds:,.0f} compositions/s ({images / args.episodes:.0f} images per episode)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
