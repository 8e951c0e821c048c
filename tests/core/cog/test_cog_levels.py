"""ImageNet-CoG levels: ranking, spread, canonical JSON, bad input, speed, counts from manifests."""

from __future__ import annotations

import json
import time

import networkx as nx
import pytest

from sampler_server.core.cog import (
    LEVEL_NAMES,
    RULES,
    SOURCE,
    CogLevels,
    compute_levels,
    counts_from_manifests,
    parse_counts,
)
from sampler_server.core.cog.levels import SIMILARITY_DECIMALS, level_starts
from sampler_server.core.hierarchy.wordnet import load_wordnet_graph
from sampler_server.errors import DataLoss, FailedPrecondition, InputFormatError, InvalidArgument, NotFound
from sampler_server.fixtures import cog_counts
from sampler_server.store.manifest import ClassInfo, Manifest

FIXTURE_FINGERPRINT = "9467a0b6a84116504c2d9bdcd1c9de2979225b0c21c8142c0a92f900e24795ed"
"""Of the fixture's levels with level_size 4 and min_images 60; changes only deliberately."""


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return load_wordnet_graph()


def _fixture_levels() -> CogLevels:
    return compute_levels(cog_counts.cog_counts(), level_size=cog_counts.LEVEL_SIZE, min_images=cog_counts.MIN_IMAGES)


def test_level_starts_spread_levels_with_equal_gaps_and_round_half_to_even() -> None:
    assert level_starts(20, 4) == (0, 4, 8, 12, 16)  # exactly enough: contiguous
    assert level_starts(30, 4) == (0, 6, 13, 20, 26)  # 6.5 -> 6, 19.5 -> 20
    assert level_starts(5146, 1000) == (0, 1036, 2073, 3110, 4146)  # the paper's count of eligible concepts
    for eligible in range(20, 60):
        starts = level_starts(eligible, 4)
        assert starts[-1] + 4 == eligible and all(b - a >= 4 for a, b in zip(starts, starts[1:]))


def test_fixture_levels_rank_by_decreasing_similarity_then_wnid() -> None:
    levels = _fixture_levels()
    assert len(levels.eligible) == 30 and levels.num_concepts == len(cog_counts.cog_counts())
    assert dict(levels.excluded) == {rule: len(group) for rule, group in cog_counts.RULE_GROUPS.items()}
    keys = [(-levels.similarity[w], w) for w in levels.eligible]
    assert keys == sorted(keys)
    assert list(levels.similarity) == list(levels.eligible)
    assert [level.name for level in levels.levels] == list(LEVEL_NAMES)
    previous_min = 1.0
    for level, start in zip(levels.levels, (0, 6, 13, 20, 26)):
        assert level.rank_range == (start, start + 4)
        assert level.wnids_ranked == levels.eligible[start:start + 4]
        values = [levels.similarity[w] for w in level.wnids_ranked]
        assert values == sorted(values, reverse=True)
        assert level.similarity_range == (values[-1], values[0])
        assert level.similarity_range[1] <= previous_min
        previous_min = level.similarity_range[0]
        assert level.concepts == tuple(sorted(level.wnids_ranked))
        assert levels.level(level.name) is level
    assert all(0.0 <= v <= 1.0 and round(v, SIMILARITY_DECIMALS) == v for v in levels.similarity.values())
    # Near concepts first (instances of volcano, an IN-1K concept), far ones last.
    assert levels.level("L1").wnids_ranked[:2] == ("n09174718", "n09175016")  # Etna, Fuji
    assert levels.level("L5").similarity_range[0] == 0.0
    assert levels.fingerprint == FIXTURE_FINGERPRINT
    with pytest.raises(NotFound, match="'L6' does not exist"):
        levels.level("L6")


def test_json_is_canonical_and_independent_of_insertion_order() -> None:
    counts = cog_counts.cog_counts()
    first = compute_levels(counts, level_size=4, min_images=60).to_json_text()
    again = compute_levels(dict(counts), level_size=4, min_images=60).to_json_text()
    shuffled = dict(sorted(counts.items(), key=lambda item: (item[1], item[0][::-1])))
    assert list(shuffled) != list(counts)
    assert first == again == compute_levels(shuffled, level_size=4, min_images=60).to_json_text()
    data = json.loads(first)
    assert first == json.dumps(data, sort_keys=True, indent=1) + "\n"
    assert set(data["excluded"]) == set(RULES)
    assert {"eligible", "excluded", "similarity", "levels", "level_size", "min_images", "fingerprint"} <= set(data)
    assert data["levels"][1] == {
        "name": "L2", "wnids": data["eligible"][6:10], "rank_range": [6, 10],
        "similarity_range": [data["similarity"][data["eligible"][9]], data["similarity"][data["eligible"][6]]],
    }


def test_similarity_depends_on_the_fragment_not_only_on_eligible_concepts() -> None:
    counts = cog_counts.cog_counts()
    smaller = {w: c for w, c in counts.items() if w not in cog_counts.TOO_FEW[:40]}
    a = compute_levels(counts, level_size=4, min_images=60)
    b = compute_levels(smaller, level_size=4, min_images=60)
    assert a.eligible != b.eligible or a.similarity != b.similarity
    assert set(a.eligible) == set(b.eligible) and b.fragment_size < a.fragment_size


def test_too_few_eligible_is_one_line_with_what_each_rule_removed() -> None:
    with pytest.raises(FailedPrecondition) as caught:
        compute_levels(cog_counts.cog_counts(), level_size=7, min_images=60, source="--counts c.json")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("--counts c.json: 30 of 189 concepts are eligible, the levels need 35 (5 x level_size 7)")
    assert message.endswith("removed: in1k 40, in1k_ancestor 6, too_few_images 103, person 4, not_leaf 3, listed 3; "
                            "a smaller store needs smaller levels: lower level_size and min_images (the demo's store "
                            "takes level_size 4, min_images 60)")
    with pytest.raises(FailedPrecondition, match="0 of 0 concepts"):
        compute_levels({}, level_size=1, min_images=60)


def test_unknown_wnids_are_named_with_how_many_more() -> None:
    counts = {**cog_counts.cog_counts(), "n99999999": 100, "dog": 3, "n00001741": 5}
    with pytest.raises(InvalidArgument) as caught:
        compute_levels(counts, level_size=4, min_images=60, source="--counts c.json")
    assert str(caught.value) == "--counts c.json: 'dog' is not a WordNet 3.0 noun synset (2 more unknown)"
    with pytest.raises(InvalidArgument, match=r"^counts: 'n99999999' is not a WordNet 3.0 noun synset$"):
        compute_levels({"n99999999": 1}, level_size=1, min_images=1)


@pytest.mark.parametrize(("level_size", "min_images", "match"), [
    (0, 60, "level_size: got 0, expected an integer >= 1"),
    (True, 60, "level_size: got True"),
    (4, -1, "min_images: got -1, expected an integer >= 0"),
    (4, 60.0, "min_images: got 60.0"),
])
def test_bad_configuration(level_size: object, min_images: object, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        compute_levels(cog_counts.cog_counts(), level_size=level_size, min_images=min_images)  # type: ignore[arg-type]


def test_bad_counts_values_in_a_mapping() -> None:
    with pytest.raises(InvalidArgument, match="count of 'n01440764' is -1"):
        compute_levels({"n01440764": -1}, level_size=1, min_images=1)
    with pytest.raises(InvalidArgument, match="count of 'n01440764' is 2.5"):
        compute_levels({"n01440764": 2.5}, level_size=1, min_images=1)  # type: ignore[dict-item]


@pytest.mark.parametrize(("text", "match"), [
    ("{", "c.json: not JSON"),
    ("[1, 2]", "c.json: expected a JSON object mapping wnids to image counts, got a list"),
    ('{"n01440764": 3.0}', "c.json: count of 'n01440764' is 3.0, expected an integer >= 0"),
    ('{"n01440764": -2}', "count of 'n01440764' is -2"),
    ('{"n01440764": true}', "count of 'n01440764' is True"),
    ('{"n01440764": "7"}', "count of 'n01440764' is '7'"),
    ('{"n01440764": 3, "n01440764": 4}', "c.json: wnid 'n01440764' appears twice"),
    (b"\xff\xfe{", "c.json: not JSON"),
])
def test_parse_counts_refuses_anything_but_an_object_of_counts(text: str | bytes, match: str) -> None:
    with pytest.raises(InputFormatError, match=match):
        parse_counts(text, source="c.json")


def test_parse_counts_reads_an_object() -> None:
    assert parse_counts('{"n01440764": 3, "n09174718": 0}') == {"n01440764": 3, "n09174718": 0}


def _manifest(name: str, source: str, wnids: dict[str, int]) -> Manifest:
    classes, start = [], 0
    for i, (wnid, count) in enumerate(wnids.items()):
        classes.append(ClassInfo(id=i, name=wnid, start=start, end=start + count, wnid=wnid))
        start += count
    return Manifest(source=source, name=name, classes=tuple(classes), split_rule="none", fingerprint="f")


def test_counts_from_manifests_sums_imagenet21k_shards_only() -> None:
    shards = [
        _manifest("in21k-00001-of-00002", SOURCE, {"n09371360": 7, "n09411430": 2}),
        _manifest("in21k-00000-of-00002", SOURCE, {"n01440764": 5}),
        _manifest("ilsvrc", "ilsvrc_2012", {"n01440764": 1300}),
    ]
    counts = counts_from_manifests(shards)
    assert counts == {"n01440764": 5, "n09371360": 7, "n09411430": 2} and list(counts) == sorted(counts)
    with pytest.raises(FailedPrecondition, match="n01440764 is in two imagenet21k stores, a and b"):
        counts_from_manifests([_manifest("a", SOURCE, {"n01440764": 5}), _manifest("b", SOURCE, {"n01440764": 5})])
    nameless = Manifest(source=SOURCE, name="c", classes=(ClassInfo(id=0, name="x", start=0, end=1),),
                        split_rule="none", fingerprint="f")
    with pytest.raises(DataLoss, match="store c: class 'x' has no wnid"):
        counts_from_manifests([nameless])


@pytest.mark.timing
def test_21841_concepts_take_well_under_a_minute(graph: nx.DiGraph) -> None:
    counts = cog_counts.synthetic_in21k_counts(graph)
    assert len(counts) == cog_counts.IN21K_SIZE
    started = time.perf_counter()
    levels = compute_levels(counts, graph=graph)
    elapsed = time.perf_counter() - started
    assert elapsed < 20.0, f"{elapsed:.1f} s"
    assert len(levels.eligible) >= 5000 and all(len(level.wnids_ranked) == 1000 for level in levels.levels)
    assert levels.excluded["in1k"] == 999 and all(levels.excluded[rule] > 0 for rule in RULES)
    similarities = [levels.similarity[w] for w in levels.eligible]
    assert similarities == sorted(similarities, reverse=True)
