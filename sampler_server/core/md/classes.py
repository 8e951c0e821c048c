"""Step 1: the episode's ordered class ids (their order is the label order).

- all classes: every candidate class, in class-id order (no draw);
- sources with a hierarchy draw U = ``random_sample()``; if U >= p
  (``ignore_hierarchy_probability``) the classes come from one candidate group drawn
  uniformly (groups sorted by id, ``randint``):
  * eligible node (ImageNet): all its candidate leaves, or ``max_ways_upper_bound``
    (50) of them at random if it spans more; no separate ways draw;
  * alphabet (Omniglot): ways uniform in [min_ways, min(max_ways_upper_bound,
    classes of the alphabet)], then that many of its classes at random;
  * fixed ``num_ways``: that many classes of the drawn group (groups are candidates
    only when they have at least ``num_ways`` classes);
- otherwise (flat): ways uniform in [min_ways, min(max_ways_upper_bound,
  candidates)] (or the fixed ``num_ways``), then that many candidates at random.
"At random" is the head of a ``permutation`` of the pool, so the chosen classes come
in a uniformly random order.
"""

from __future__ import annotations

import numpy as np

from sampler_server.core.md.plan import ClassStructure, SamplingPlan


def sample_classes(plan: SamplingPlan, rng: np.random.RandomState) -> tuple[tuple[int, ...], str | None]:
    """(ordered class ids, id of the node or alphabet they came from, or None)."""
    config = plan.config
    if config.all_classes:
        return plan.candidates, None
    if plan.draws_hierarchy_coin and float(rng.random_sample()) >= config.ignore_hierarchy_probability:
        group = plan.groups[int(rng.randint(len(plan.groups)))]
        if config.num_ways is not None:
            ways = config.num_ways
        elif plan.structure is ClassStructure.NODES:
            ways = min(len(group.classes), config.max_ways_upper_bound)
        else:
            ways = _uniform_ways(rng, config.min_ways, config.max_ways_upper_bound, len(group.classes))
        return _choose(rng, group.classes, ways), group.id
    if config.num_ways is not None:
        ways = config.num_ways
    else:
        ways = _uniform_ways(rng, config.min_ways, config.max_ways_upper_bound, len(plan.candidates))
    return _choose(rng, plan.candidates, ways), None


def _uniform_ways(rng: np.random.RandomState, min_ways: int, max_ways: int, available: int) -> int:
    high = min(max_ways, available)
    assert min_ways <= high, "the plan guarantees a non-empty ways range"
    return int(rng.randint(min_ways, high + 1))


def _choose(rng: np.random.RandomState, pool: tuple[int, ...], ways: int) -> tuple[int, ...]:
    assert 1 <= ways <= len(pool), (ways, len(pool))
    return tuple(pool[i] for i in rng.permutation(len(pool))[:ways].tolist())
