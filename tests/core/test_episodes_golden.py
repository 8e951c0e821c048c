"""Golden episodes: fingerprints of known episodes pinned in golden_episodes.json.

Any drift (NumPy's legacy streams, the seed derivation, the order of draws, the
formulas, the fingerprint encoding, the ImageNet split) fails here. The file was
generated once by running this module as a script (``python
tests/core/test_episodes_golden.py``); regenerate it only for a deliberate,
documented change of the sampling algorithm.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from episode_checks import ilsvrc_manifest, spec_with_split

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.imagenet_spec import imagenet_spec
from sampler_server.core.md import Episode, MultiSourceSampler, sample_episode
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split

GOLDEN = Path(__file__).resolve().parent / "golden_episodes.json"


def _flat() -> DatasetSpec:
    return spec_with_split("flat", [20 + 7 * i for i in range(40)], others=[33, 44, 55])


def _large() -> DatasetSpec:
    return spec_with_split("large", [113_613 + 1_000 * i for i in range(12)])


def _alphabets() -> DatasetSpec:
    groups = [f"alphabet_{i % 5}" for i in range(60)]
    return spec_with_split("omniglot_like", [20] * 60, groups=sorted(groups))


def _nodes() -> DatasetSpec:
    nodes = [("n00000010", range(60)), ("n00000020", range(50, 58)), ("n00000030", range(10, 80, 3))]
    return spec_with_split("imagenet_like", [700 + i for i in range(80)], nodes=nodes)


@functools.cache
def _ilsvrc() -> DatasetSpec:
    return imagenet_spec(ilsvrc_manifest())


def _single(spec: Callable[[], DatasetSpec | None], split: Split, config: EpisodeConfig) -> Callable[[int, int], Episode | None]:
    def run(seed: int, index: int) -> Episode | None:
        built = spec()
        return None if built is None else sample_episode(built, split, config, seed, index)

    return run


def _multi(seed: int, index: int) -> Episode:
    specs = {"flat": _flat(), "omniglot_like": _alphabets(), "imagenet_like": _nodes()}
    return MultiSourceSampler(specs, sorted(specs), Split.TEST, EpisodeConfig()).sample(seed, index)


CASES: dict[str, tuple[Callable[[int, int], Episode | None], list[tuple[int, int]]]] = {
    "flat_variable": (_single(_flat, Split.TEST, EpisodeConfig()), [(7, 42), (0, 0), (2**64 - 1, 2**63 - 1)]),
    "flat_fixed_5w5s15q": (_single(_flat, Split.TEST, EpisodeConfig.fixed(5, 5, 15)), [(7, 42), (1, 2)]),
    "flat_all_classes": (_single(_flat, Split.TEST, EpisodeConfig.all_of_split()), [(3, 9)]),
    "large_classes": (_single(_large, Split.TEST, EpisodeConfig()), [(5, 123_456)]),
    "alphabets_variable": (_single(_alphabets, Split.TEST, EpisodeConfig()), [(7, 42), (8, 0)]),
    "nodes_half_ignored": (
        _single(_nodes, Split.TEST, EpisodeConfig(ignore_hierarchy_probability=0.5)),
        [(7, i) for i in range(4)],
    ),
    "multisource": (_multi, [(7, i) for i in range(4)]),
    "ilsvrc_md_test": (_single(_ilsvrc, Split.TEST, EpisodeConfig()), [(7, 42), (0, 1)]),
}


def _summary(episode: Episode) -> dict[str, Any]:
    return {
        "source": episode.source,
        "ways": episode.ways,
        "class_ids": list(episode.class_ids),
        "shots": list(episode.shots),
        "query_per_class": episode.query_per_class,
        "group": episode.group,
        "fingerprint": episode.fingerprint,
    }


def _compute(name: str) -> list[dict[str, Any]] | None:
    run, keys = CASES[name]
    out = []
    for seed, index in keys:
        episode = run(seed, index)
        if episode is None:
            return None
        out.append({"seed": seed, "index": index, **_summary(episode)})
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_episode(name: str) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert name in golden, f"{name} missing from {GOLDEN.name}"
    computed = _compute(name)
    assert computed is not None, f"{name}: no episodes computed"
    assert computed == golden[name]


def test_no_stale_golden_cases() -> None:
    assert set(json.loads(GOLDEN.read_text())) == set(CASES)


if __name__ == "__main__":
    results = {name: _compute(name) for name in sorted(CASES)}
    if any(value is None for value in results.values()):
        raise SystemExit("reference data absent: cannot generate every case")
    blocks = [
        f"  {json.dumps(name)}: [\n" + ",\n".join("    " + json.dumps(entry) for entry in entries) + "\n  ]"
        for name, entries in results.items()
    ]
    GOLDEN.write_text("{\n" + ",\n".join(blocks) + "\n}\n")
    print(f"wrote {GOLDEN}")
