"""Episode configuration: Meta-Dataset's knobs as a frozen, validated, hashable value.

Defaults are the reference's variable-way, variable-shot setting (Meta-Dataset
Sec. 3.2 and Appendix .2): ways uniform in [5, min(50, available)], at most 10
query images per class, support at most 500 images and at most 100 per class,
class log-weights in [log 0.5, log 2), no minimum class size, hierarchy always used.

Setting ``num_ways`` / ``num_support`` / ``num_query`` fixes the ways, the shots per
class or the query images per class (each independently; what is not fixed follows
the paper's formulas). ``all_classes`` makes every (eligible) class of the split part
of every episode, in class-id order. A fixed ``num_ways`` overrides ``min_ways`` and
``max_ways_upper_bound``; a fixed ``num_query`` overrides ``max_num_query``; a fixed
``num_support`` overrides the support caps (``max_support_set_size``,
``max_support_size_contrib_per_class``) and the class weights.

Validation happens in ``__post_init__`` (``InvalidArgument``, "got X, expected Y");
what depends on the data (ways above the classes of a split, shots above a class's
images) is checked when a sampler is built for a spec, before any sampling.
``canonical_json`` (sorted keys, every field, shortest round-trip floats) and
``config_hash`` (its SHA-256) identify a config; the hash enters every episode's
fingerprint.

``max_span_leaves`` (WordNet-split sources such as ILSVRC-2012; ignored by the
others) caps how many leaves an eligible internal node may span; unset means the
reference's 392. It is the one optional field that appears in ``to_json`` (and so
in the canonical JSON and the hash) only when set: it was added after episodes were
published, and leaving it out when unset keeps every earlier config hash, hence
every earlier episode fingerprint, unchanged. Setting it, even to 392, is a
different config (its hash differs; the compositions at 392 are the same).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from sampler_common.checks import check_count
from sampler_server.core.hashing import FieldHasher
from sampler_server.core.hierarchy import MAX_SPAN_LEAVES, MIN_SPAN_LEAVES
from sampler_server.errors import InvalidArgument, field_checks

MAX_ABS_LOG_WEIGHT = 64.0
"""Log-weights beyond +-64 would overflow nothing but mean nothing either; they are refused."""
CONFIG_KIND = "meta_dataset.episode/v1"
_OMITTED_WHEN_UNSET = frozenset({"max_span_leaves"})
_COUNT_FIELDS = ("num_ways", "num_support", "num_query", "min_ways", "max_ways_upper_bound", "max_num_query",
                 "max_support_set_size", "max_support_size_contrib_per_class", "min_examples_in_class",
                 "max_span_leaves")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpisodeConfig:
    """How Meta-Dataset episodes are drawn (see the module docstring for the modes)."""

    num_ways: int | None = None
    num_support: int | None = None
    num_query: int | None = None
    all_classes: bool = False
    min_ways: int = 5
    max_ways_upper_bound: int = 50
    max_num_query: int = 10
    max_support_set_size: int = 500
    max_support_size_contrib_per_class: int = 100
    min_log_weight: float = math.log(0.5)
    max_log_weight: float = math.log(2.0)
    min_examples_in_class: int = 0
    ignore_hierarchy_probability: float = 0.0
    max_span_leaves: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_ways", "num_support", "num_query"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        _check_int("min_ways", self.min_ways, 1)
        _check_int("max_ways_upper_bound", self.max_ways_upper_bound, self.min_ways, "min_ways")
        _check_int("max_num_query", self.max_num_query, 1)
        _check_int("max_support_set_size", self.max_support_set_size, 1)
        _check_int("max_support_size_contrib_per_class", self.max_support_size_contrib_per_class, 1)
        _check_int("min_examples_in_class", self.min_examples_in_class, 0)
        if self.max_span_leaves is not None:
            _check_int("max_span_leaves", self.max_span_leaves, MIN_SPAN_LEAVES)
        if not isinstance(self.all_classes, bool):
            raise InvalidArgument(f"all_classes: got {self.all_classes!r}, expected true or false")
        if self.all_classes and self.num_ways is not None:
            raise InvalidArgument(
                f"num_ways: got {self.num_ways} with all_classes=true, expected no num_ways "
                "(an all-classes episode takes every class of the split)"
            )
        low = _check_float("min_log_weight", self.min_log_weight, -MAX_ABS_LOG_WEIGHT, MAX_ABS_LOG_WEIGHT)
        _check_float("max_log_weight", self.max_log_weight, low, MAX_ABS_LOG_WEIGHT, "min_log_weight")
        _check_float("ignore_hierarchy_probability", self.ignore_hierarchy_probability, 0.0, 1.0)
        for name in ("min_log_weight", "max_log_weight", "ignore_hierarchy_probability"):
            # 1 and 1.0 are the same setting: store floats so the canonical JSON agrees.
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in _COUNT_FIELDS:
            if getattr(self, name) is not None:  # a NumPy integer is stored as the int it equals
                object.__setattr__(self, name, int(getattr(self, name)))

    @classmethod
    def fixed(cls, ways: int, shots: int, query: int, **overrides: Any) -> EpisodeConfig:
        """N-way K-shot Q-query episodes (hierarchy used unless ignore_hierarchy_probability=1)."""
        return cls(num_ways=ways, num_support=shots, num_query=query, **overrides)

    @classmethod
    def all_of_split(cls, **overrides: Any) -> EpisodeConfig:
        """Episodes over every class of the split (shots and query variable unless fixed in overrides)."""
        return cls(all_classes=True, **overrides)

    @property
    def variable_ways(self) -> bool:
        return self.num_ways is None and not self.all_classes

    @property
    def span_cap(self) -> int:
        """The most leaves an eligible node may span: ``max_span_leaves``, or 392 when unset."""
        return MAX_SPAN_LEAVES if self.max_span_leaves is None else self.max_span_leaves

    def to_json(self) -> dict[str, Any]:
        """Every field (defaults included) plus the config kind; ``max_span_leaves`` only when set."""
        out: dict[str, Any] = {"kind": CONFIG_KIND}
        for item in dataclasses.fields(self):
            if item.name in _OMITTED_WHEN_UNSET and getattr(self, item.name) is None:
                continue  # fields added later: absent when unset, so older hashes stay valid
            out[item.name] = getattr(self, item.name)
        return out

    def canonical_json(self) -> str:
        """Sorted keys, no spaces, shortest round-trip floats: equal configs give equal text."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    def config_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON, domain-separated."""
        return FieldHasher("sampler-server/episode-config/v1").text(self.canonical_json()).hexdigest()


def _check_int(name: str, value: object, lower: int, lower_name: str | None = None) -> int:
    """A count of the config, checked as the client and the CLI check it (``sampler_common.checks``)."""
    with field_checks():
        return check_count(name, value, lower, lower_name=lower_name or "")


def _check_float(name: str, value: object, lower: float, upper: float, lower_name: str | None = None) -> float:
    bound = f"{lower_name}={lower!r}" if lower_name else repr(lower)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name}: got {value!r}, expected a number in [{bound}, {upper!r}]")
    if not (math.isfinite(value) and lower <= value <= upper):
        raise InvalidArgument(f"{name}: got {value!r}, expected a number in [{bound}, {upper!r}]")
    return float(value)
