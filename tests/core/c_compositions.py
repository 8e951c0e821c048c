"""Episode compositions without their record ids, for the distribution tests.

A composition is what an episode's shape is made of: its classes in label order, the
node or alphabet they came from, the query images per class and the shots per class.
``EpisodeSampler.sample_with`` draws these first (Step 1, then Step 2 from the same
stream) with ``core.md.classes`` and ``core.md.examples``; only then does it draw the
record ids (Floyd subsets, most of an episode's cost) and hash the fingerprint. The
tests whose assertions are about compositions alone call those same functions on the
same derived stream, in the same order, and stop before the records: the values are
the ones ``sample`` returns, at a tenth of the cost. The stream is ``derive_rng``'s
(the same digest's eight words seed MT19937 by ``init_by_array``), re-seeding one
legacy ``RandomState`` rather than building one per episode (NumPy's constructor first
seeds from OS entropy, most of ``derive_rng``'s time). ``compositions`` also samples
every tenth episode in full and asserts its composition is the one computed here, so
a sampler whose episodes stopped following its own Steps 1 and 2, or a derivation
that changed, still fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sampler_server.core.md import EpisodeSampler, MultiSourceSampler
from sampler_server.core.md import examples
from sampler_server.core.md.classes import sample_classes
from sampler_server.core.md.episode import Episode
from sampler_server.core.seeding import Protocol, derivation_digest
from sampler_server.core.split import Split

CHECK_EVERY = 10
"""Every tenth composition is compared with the full episode ``sample`` returns."""


@dataclass(frozen=True)
class Composition:
    """An episode's source, classes, group, query per class and shots, without record ids."""

    source: str
    class_ids: tuple[int, ...]
    group: str | None
    query_per_class: int
    shots: tuple[int, ...] | None  # None: Step 2's support draws not computed

    @property
    def ways(self) -> int:
        return len(self.class_ids)

    @property
    def support_size(self) -> int:
        assert self.shots is not None
        return sum(self.shots)


_STREAM = np.random.RandomState()


def _derived(seed: int, key: str, split: Split, index: int) -> np.random.RandomState:
    """``derive_rng(seed, META_DATASET, key, split, index)``'s stream (one RandomState, re-seeded)."""
    digest = derivation_digest(seed, Protocol.META_DATASET, key, split, index)
    _STREAM.seed(np.frombuffer(digest, dtype=">u4").astype(np.uint32))
    return _STREAM


def _compose(sampler: EpisodeSampler, rng, with_shots: bool) -> Composition:
    """``sampler.sample_with``'s Steps 1 and 2, in its order of draws, without the records."""
    plan, config = sampler.plan, sampler.plan.config
    class_ids, group = sample_classes(plan, rng)
    counts = [plan.spec.classes[c].count for c in class_ids]
    query = examples.query_size(config, counts)
    shots = None
    if with_shots and config.num_support is not None:
        shots = (config.num_support,) * len(class_ids)
    elif with_shots:
        size = examples.support_size(config, counts, query, examples.draw_beta(rng))
        shots = examples.shots(counts, query, size, examples.draw_log_weights(rng, config, len(class_ids)))
    return Composition(sampler.source, tuple(class_ids), group, query, shots)


def composition(sampler: EpisodeSampler | MultiSourceSampler, seed: int, index: int, *,
                with_shots: bool = True) -> Composition:
    """The composition of ``sampler.sample(seed, index)``, drawn from the same stream."""
    if isinstance(sampler, MultiSourceSampler):
        if len(sampler.sources) == 1:
            return composition(sampler.samplers[sampler.sources[0]], seed, index, with_shots=with_shots)
        rng = _derived(seed, sampler.key, sampler.split, index)  # MultiSourceSampler.sample's order
        source = sampler.sources[int(rng.randint(len(sampler.sources)))]
        return _compose(sampler.samplers[source], rng, with_shots)
    return _compose(sampler, _derived(seed, sampler.source, sampler.split, index), with_shots)


def of_episode(episode: Episode, with_shots: bool = True) -> Composition:
    return Composition(episode.source, episode.class_ids, episode.group, episode.query_per_class,
                       episode.shots if with_shots else None)


def compositions(sampler: EpisodeSampler | MultiSourceSampler, seed: int, count: int, *,
                 with_shots: bool = True) -> list[Composition]:
    """Compositions of episodes 0 .. count - 1; every ``CHECK_EVERY``-th is also sampled in
    full and must be that episode's."""
    found = [composition(sampler, seed, index, with_shots=with_shots) for index in range(count)]
    for index in range(0, count, CHECK_EVERY):
        episode = sampler.sample(seed, index)
        assert of_episode(episode, with_shots) == found[index], (index, episode)
        assert all(len(ids) == found[index].query_per_class for ids in episode.query)
    return found
