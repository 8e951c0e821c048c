"""EpisodeConfig: the paper's defaults, validation messages, canonical JSON and hash."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from sampler_common.checks import MAX_COUNT
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.errors import InvalidArgument

DEFAULT_JSON = (
    '{"all_classes":false,"ignore_hierarchy_probability":0.0,"kind":"meta_dataset.episode/v1",'
    '"max_log_weight":0.6931471805599453,"max_num_query":10,"max_support_set_size":500,'
    '"max_support_size_contrib_per_class":100,"max_ways_upper_bound":50,"min_examples_in_class":0,'
    '"min_log_weight":-0.6931471805599453,"min_ways":5,"num_query":null,"num_support":null,"num_ways":null}'
)


def test_defaults_are_the_papers() -> None:
    config = EpisodeConfig()
    assert (config.min_ways, config.max_ways_upper_bound) == (5, 50)
    assert config.max_num_query == 10
    assert config.max_support_set_size == 500
    assert config.max_support_size_contrib_per_class == 100
    assert config.min_log_weight == math.log(0.5) and config.max_log_weight == math.log(2)
    assert config.min_examples_in_class == 0 and config.ignore_hierarchy_probability == 0.0
    assert config.variable_ways and not config.all_classes


def test_canonical_json_and_hash_are_pinned() -> None:
    config = EpisodeConfig()
    assert config.canonical_json() == DEFAULT_JSON
    assert config.config_hash() == "4745a7837aa3eef27c1baa648607b3263fb94abfc130fa6175bdb287680f612b"


def test_hash_identifies_the_config() -> None:
    assert EpisodeConfig(ignore_hierarchy_probability=1).config_hash() == EpisodeConfig(
        ignore_hierarchy_probability=1.0
    ).config_hash()
    assert EpisodeConfig.fixed(5, 5, 15) == EpisodeConfig(num_ways=5, num_support=5, num_query=15)
    changed = {
        "num_ways": 5, "num_support": 1, "num_query": 1, "all_classes": True, "min_ways": 4,
        "max_ways_upper_bound": 40, "max_num_query": 9, "max_support_set_size": 400,
        "max_support_size_contrib_per_class": 90, "min_log_weight": -0.5, "max_log_weight": 0.5,
        "min_examples_in_class": 2, "ignore_hierarchy_probability": 0.5, "max_span_leaves": 522,
    }
    assert set(changed) == {f.name for f in dataclasses.fields(EpisodeConfig)}
    hashes = {EpisodeConfig().config_hash()}
    for name, value in changed.items():
        overrides = {name: value}
        if name == "all_classes":
            overrides = {"all_classes": True}
        hashes.add(EpisodeConfig(**overrides).config_hash())
    assert len(hashes) == 1 + len(changed)


def test_span_cap_enters_the_hash_only_when_set() -> None:
    # Unset, the field is absent from the canonical JSON: every earlier hash (and so every
    # earlier episode fingerprint) is unchanged.
    assert "max_span_leaves" not in EpisodeConfig().to_json()
    assert EpisodeConfig().span_cap == 392
    capped = EpisodeConfig(max_span_leaves=522)
    assert capped.span_cap == 522 and capped.to_json()["max_span_leaves"] == 522
    assert capped.canonical_json() == DEFAULT_JSON.replace('"max_support_set_size"', '"max_span_leaves":522,"max_support_set_size"')
    # Setting the reference's value is still a different config (the same compositions).
    assert EpisodeConfig(max_span_leaves=392).config_hash() != EpisodeConfig().config_hash()


def test_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        EpisodeConfig(5)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        EpisodeConfig().min_ways = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_ways": 0}, f"num_ways: got 0, expected an integer in [1, {MAX_COUNT}]"),
        ({"num_ways": -5}, "num_ways: got -5, expected an integer in [1, "),
        ({"num_support": 0}, "num_support: got 0, expected an integer in [1, "),
        ({"num_query": 2**40}, f"num_query: got {2**40}, expected an integer in [1, {MAX_COUNT}]"),
        ({"num_ways": 2.0}, "num_ways: got 2.0, expected an integer"),
        ({"num_ways": True}, "num_ways: got True, expected an integer"),
        ({"min_ways": 0}, "min_ways: got 0, expected an integer in [1, "),
        ({"min_ways": 6, "max_ways_upper_bound": 5}, "max_ways_upper_bound: got 5, expected an integer in [min_ways=6, "),
        ({"max_num_query": 0}, "max_num_query: got 0, expected an integer in [1, "),
        ({"max_support_set_size": -1}, "max_support_set_size: got -1, expected an integer in [1, "),
        ({"max_support_size_contrib_per_class": 0}, "max_support_size_contrib_per_class: got 0, expected an integer in [1, "),
        ({"min_examples_in_class": -1}, "min_examples_in_class: got -1, expected an integer in [0, "),
        ({"min_log_weight": 1.0, "max_log_weight": 0.0}, "max_log_weight: got 0.0, expected a number in [min_log_weight=1.0, 64.0]"),
        ({"min_log_weight": float("nan")}, "min_log_weight: got nan, expected a number in [-64.0, 64.0]"),
        ({"max_log_weight": 1000.0}, "max_log_weight: got 1000.0, expected a number in [min_log_weight="),
        ({"ignore_hierarchy_probability": 1.5}, "ignore_hierarchy_probability: got 1.5, expected a number in [0.0, 1.0]"),
        ({"ignore_hierarchy_probability": -0.1}, "ignore_hierarchy_probability: got -0.1, expected a number in [0.0, 1.0]"),
        ({"ignore_hierarchy_probability": "0.5"}, "ignore_hierarchy_probability: got '0.5', expected a number"),
        ({"all_classes": 1}, "all_classes: got 1, expected true or false"),
        ({"all_classes": True, "num_ways": 5}, "num_ways: got 5 with all_classes=true, expected no num_ways"),
        ({"max_span_leaves": 4}, f"max_span_leaves: got 4, expected an integer in [5, {MAX_COUNT}]"),
        ({"max_span_leaves": 0}, "max_span_leaves: got 0, expected an integer in [5, "),
        ({"max_span_leaves": 2**32}, f"max_span_leaves: got {2**32}, expected an integer in [5, {MAX_COUNT}]"),
        ({"max_span_leaves": 500.0}, "max_span_leaves: got 500.0, expected an integer"),
    ],
)
def test_invalid_configs(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        EpisodeConfig(**kwargs)
