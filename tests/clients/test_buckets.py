"""Shape buckets (``clients.buckets``): the bounds a request implies hold for every
episode the server's sampler produces (hypothesis, over flat, alphabet and node
structured specs and the request's knobs), every episode fits its bucket, and the
buckets are few; the packed layout; one-line errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import examples, require_reference
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from clients.buckets import (
    MD_MAX_QUERY_PER_CLASS,
    MD_MAX_SUPPORT,
    MD_MAX_WAYS,
    EpisodeBounds,
    Ladder,
    pack_episode,
    resolve_buckets,
)
from clients.core import EpisodeSpec
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.imagenet_spec import imagenet_spec
from sampler_server.core.md import EpisodeSampler, MultiSourceSampler
from sampler_server.core.md.presets import benchmark_sources
from sampler_server.core.spec import DatasetSpec, NodeSpec
from sampler_server.errors import InvalidArgument
from sampler_server.catalog.wire_values import config_from_wire
from sampler_server.store.manifest import ClassInfo, Split

SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ladder_limit(ladder: Ladder, cap: int) -> int:
    """The most sizes a ladder may have up to ``cap``: the multiples up to 8 steps, then
    one per factor ``ratio``, and the cap."""
    start = 8 * ladder.multiple
    return 8 + max(0, math.ceil(math.log(max(cap, start) / start) / math.log(ladder.ratio))) + 1


def test_md_defaults_are_the_servers():
    config = EpisodeConfig()
    assert (MD_MAX_WAYS, MD_MAX_QUERY_PER_CLASS, MD_MAX_SUPPORT) == (
        config.max_ways_upper_bound, config.max_num_query, config.max_support_set_size)


def test_md_default_ladder_is_small_and_tight():
    bounds = EpisodeBounds.of_request(EpisodeSpec(sources=("x",)).to_request())
    assert (bounds.max_support, bounds.max_query, bounds.max_ways) == (500, 500, 50)
    ladder = Ladder.for_bounds(bounds)
    sizes = ladder.sizes()
    assert sizes[-1] == 1000 and list(sizes) == sorted(set(sizes)) and len(sizes) <= 30
    for n in range(1, 1001):
        size = ladder.size(n)
        assert n <= size <= max(n * ladder.ratio + ladder.multiple, 8 * ladder.multiple), n
        assert size in sizes
    # the uncapped grid goes on above the cap, for bounds the client could not know
    assert ladder.size(1001) >= 1001 and ladder.size(5000) >= 5000
    assert len({Ladder().size(n) for n in range(1, 5001)}) <= _ladder_limit(Ladder(), 5000)


def test_a_finer_ratio_pads_less_with_more_sizes():
    bounds = EpisodeBounds.of_request(EpisodeSpec(sources=("x",)).to_request())
    default, fine = Ladder.for_bounds(bounds), Ladder.for_bounds(bounds, 1.0625)
    assert fine.ratio == 1.0625 and fine.cap == default.cap == 1000
    assert len(default.sizes()) < len(fine.sizes()) <= _ladder_limit(fine, 1000)
    for n in range(1, 1001):
        assert n <= fine.size(n) <= max(n * fine.ratio + fine.multiple, 8 * fine.multiple), n
    # the grids are not nested (153 rows: 168 on the finer, 160 on the default), but on the whole the finer pads less
    assert sum(fine.size(n) for n in range(65, 1001)) < sum(default.size(n) for n in range(65, 1001))


def test_bounds_of_fixed_and_all_class_requests():
    fixed = EpisodeBounds.of_request(EpisodeSpec(sources=("x",), ways=5, shots=3, query=7).to_request())
    assert (fixed.max_support, fixed.max_query, fixed.max_ways, fixed.max_images) == (15, 35, 5, 50)
    shots = EpisodeBounds.of_request(EpisodeSpec(sources=("x",), shots=4,
                                                 config={"max_ways_upper_bound": 20, "max_num_query": 3}).to_request())
    assert (shots.max_support, shots.max_query, shots.max_ways) == (80, 60, 20)
    everything = EpisodeBounds.of_request(EpisodeSpec(sources=("x",), config={"all_classes": True}).to_request())
    assert (everything.max_ways, everything.max_query, everything.max_support, everything.max_images) == (
        None, None, 500, None)
    assert Ladder.for_bounds(everything).cap is None


# ---- every episode the sampler can produce fits (hypothesis) ------------------------------

class_sizes = st.one_of(st.integers(2, 25), st.integers(26, 400), st.integers(401, 5000))


@st.composite
def specs(draw: st.DrawFn) -> DatasetSpec:
    """A TEST-split spec: flat, in alphabets (Omniglot-like) or under nodes (ImageNet-like)."""
    kind = draw(st.sampled_from(["flat", "alphabets", "nodes"]))
    counts = draw(st.lists(class_sizes, min_size=5, max_size=90))
    splits = [Split.TEST] * len(counts)
    if kind == "flat":
        return DatasetSpec.from_counts("flat", counts, splits)
    if kind == "alphabets":
        size = draw(st.integers(5, 30))
        groups = [f"alphabet_{i // size:02d}" for i in range(len(counts))]
        return DatasetSpec.from_counts("omniglot", counts, splits, groups=groups)
    spans = draw(st.lists(st.integers(1, len(counts)), min_size=1, max_size=6))
    nodes = tuple(sorted((f"n{i:08d}", tuple(range(span))) for i, span in enumerate(spans)))
    return DatasetSpec.from_counts("ilsvrc_2012", counts, splits,
                                   hierarchy={Split.TEST: tuple(NodeSpec(name, leaves) for name, leaves in nodes)})


@st.composite
def requests(draw: st.DrawFn) -> EpisodeSpec:
    """What a trainer may ask for: fixed or variable ways, shots and query, MD's knobs."""
    config: dict = {}
    if draw(st.booleans()):
        config["max_ways_upper_bound"] = draw(st.integers(5, 60))
    if draw(st.booleans()):
        config["max_num_query"] = draw(st.integers(1, 15))
    if draw(st.booleans()):
        config["max_support_set_size"] = draw(st.integers(50, 700))
    if draw(st.booleans()):
        config["max_support_size_contrib_per_class"] = draw(st.integers(1, 150))
    if draw(st.integers(0, 5)) == 0:
        config["all_classes"] = True
    ways = None if config.get("all_classes") or draw(st.booleans()) else draw(st.integers(2, 12))
    shots = draw(st.one_of(st.none(), st.integers(1, 6)))
    query = draw(st.one_of(st.none(), st.integers(1, 6)))
    return EpisodeSpec(sources=("s",), split="test", ways=ways, shots=shots, query=query, config=config)


@SETTINGS
@given(spec=specs(), request=requests(), seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10**6))
def test_every_sampled_episode_fits_its_bucket(spec: DatasetSpec, request: EpisodeSpec, seed: int, index: int):
    wire = request.to_request()
    try:
        sampler = EpisodeSampler(spec, Split.TEST, config_from_wire(wire.config))
    except InvalidArgument:  # a request the server refuses before any episode: nothing to bucket
        assume(False)
    bounds = EpisodeBounds.of_request(wire)
    ladder = Ladder.for_bounds(bounds)
    for offset in range(4):
        episode = sampler.sample(seed, index + offset)
        assert bounds.max_ways is None or episode.ways <= bounds.max_ways
        assert bounds.max_support is None or episode.support_size <= bounds.max_support
        assert bounds.max_query is None or episode.query_size <= bounds.max_query
        images = episode.support_size + episode.query_size
        assert bounds.max_images is None or images <= ladder.cap
        assert ladder.size(images) >= images
    if ladder.cap is not None:
        assert len(ladder.sizes()) <= _ladder_limit(ladder, ladder.cap)


def test_md_v2_training_episodes_use_few_buckets():
    """Real MD-v2 train sources (the reference's class counts; ImageNet by WordNet): 600
    variable episodes fall into at most the ladder's 29 sizes, and most fall into fewer."""
    specs: dict[str, DatasetSpec] = {}
    order = (Split.TRAIN, Split.VALID, Split.TEST)
    for name in ("aircraft", "cu_birds", "dtd", "fungi", "mscoco", "quickdraw", "omniglot"):
        data = json.loads(require_reference(f"md_specs/{name}_dataset_spec.json").read_text())
        counts = [int(data["images_per_class"][str(i)]) for i in range(len(data["images_per_class"]))]
        if "classes_per_split" in data:
            splits = [s for s in order for _ in range(int(data["classes_per_split"][s.name]))]
            specs[name] = DatasetSpec.from_counts(name, counts, splits)
            continue
        splits, groups = [], []
        for alphabet, split in enumerate(s for s in order for _ in range(int(data["superclasses_per_split"][s.name]))):
            size = int(data["classes_per_superclass"][str(alphabet)])
            splits += [split] * size
            groups += [f"alphabet_{alphabet:02d}"] * size
        specs[name] = DatasetSpec.from_counts(name, counts, splits, groups=groups)
    leaf_images = json.loads(require_reference("md_specs/ilsvrc_2012_num_leaf_images.json").read_text())
    classes, start = [], 0
    for class_id, wnid in enumerate(sorted(leaf_images)):
        classes.append(ClassInfo(id=class_id, name=wnid, start=start, end=start + leaf_images[wnid], wnid=wnid))
        start += leaf_images[wnid]
    manifest = type("Manifest", (), {"source": "ilsvrc_2012", "fingerprint": "counts", "classes": tuple(classes)})
    specs["ilsvrc_2012"] = imagenet_spec(manifest, variant="md_v2")

    sources = [name for name in benchmark_sources("md-v2", Split.TRAIN) if name in specs]
    assert len(sources) >= 7
    sampler = MultiSourceSampler(specs, sources, Split.TRAIN, EpisodeConfig())
    ladder = Ladder.for_bounds(EpisodeBounds.of_request(EpisodeSpec(sources=tuple(sources)).to_request()))
    episodes = [sampler.sample(0, i) for i in range(600)]
    totals = [e.support_size + e.query_size for e in episodes]
    pairs = {(e.support_size, e.query_size) for e in episodes}
    buckets = {ladder.size(n) for n in totals}
    assert max(totals) <= ladder.cap and all(ladder.size(n) >= n for n in totals)
    assert len(buckets) <= len(ladder.sizes()) <= 30
    assert len(pairs) > 10 * len(buckets)  # what bucketing saves: hundreds of shapes down to a few dozen
    padding = sum(ladder.size(n) - n for n in totals) / sum(totals)
    assert padding < ladder.ratio - 1  # the padded rows cost less than one grid step on average


# ---- the packed layout and errors ----------------------------------------------------------


def test_pack_episode_layout():
    rng = np.random.RandomState(0)
    episode = type("E", (), {
        "support_images": rng.randint(0, 256, (7, 4, 4, 3)).astype(np.uint8),
        "query_images": rng.randint(0, 256, (10, 4, 4, 3)).astype(np.uint8),
        "support_labels": np.array([0, 1, 2, 0, 1, 2, 0]), "query_labels": np.arange(10) % 3, "ways": 3, "index": 9})()
    packed = pack_episode(episode, Ladder(cap=1000))
    assert packed.images.shape == (24, 4, 4, 3) and packed.labels.shape == (24,) and packed.padded
    assert (packed.support, packed.query, packed.rows, packed.ways, packed.index) == (7, 10, 17, 3, 9)
    assert np.array_equal(packed.images[:7], episode.support_images)
    assert np.array_equal(packed.images[7:17], episode.query_images)
    assert not packed.images[17:].any() and not packed.labels[17:].any()
    assert np.array_equal(packed.labels[:17], np.concatenate([episode.support_labels, episode.query_labels]))
    exact = pack_episode(episode, None)
    assert exact.images.shape[0] == 17 and not exact.padded
    assert np.array_equal(exact.images, packed.images[:17])


def test_settings_and_errors_are_one_line():
    assert resolve_buckets("auto", True) and not resolve_buckets("auto", False)
    assert resolve_buckets("on", False) and not resolve_buckets("off", True)
    cases = [(lambda: resolve_buckets("yes", True), "auto, on, off"),
             (lambda: Ladder(ratio=1.0), "ratio"), (lambda: Ladder(multiple=0), "multiple"),
             (lambda: Ladder(cap=0), "cap"), (lambda: Ladder().size(0), "images"),
             (lambda: Ladder().sizes(), "no cap")]
    for call, word in cases:
        with pytest.raises(ValueError) as raised:
            call()
        assert word in str(raised.value) and "\n" not in str(raised.value)
