"""sample_episode: (DatasetSpec, split, config, seed, index) -> Episode, a pure function.

Order of draws from the episode's RNG (``core.seeding.derive_rng`` keyed by seed,
protocol, source, split, index), fixed because golden fingerprints pin it:
1. Step 1 (``classes``): hierarchy coin, group, ways, class permutation, as applicable;
2. Step 2 (``examples``): beta, then one log-weight per class (variable shots only);
3. records: the subset uniforms of every class in episode order, then the query picks.
Nothing else is read: no clock, no global RNG, no I/O. Building an
``EpisodeSampler`` validates once (``plan.build_plan``); ``sample`` then cannot fail
for any valid seed and index.
"""

from __future__ import annotations

import numpy as np

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md import examples
from sampler_server.core.md.classes import sample_classes
from sampler_server.core.md.episode import Episode, episode_fingerprint
from sampler_server.core.md.plan import SamplingPlan, build_plan
from sampler_server.core.seeding import Protocol, check_seed_and_index, derive_rng
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split


class EpisodeSampler:
    """Validated sampler of one source and split; ``sample(seed, index)`` is random access."""

    def __init__(self, spec: DatasetSpec, split: Split | str, config: EpisodeConfig, name: str | None = None) -> None:
        """``name``: the store as served, for refusals (draws depend on the spec's source alone)."""
        self.plan: SamplingPlan = build_plan(spec, split, config, name)
        self._config_hash = config.config_hash()

    @property
    def source(self) -> str:
        return self.plan.spec.source

    @property
    def split(self) -> Split:
        return self.plan.split

    def sample(self, seed: int, index: int) -> Episode:
        check_seed_and_index(seed, index)
        rng = derive_rng(seed, Protocol.META_DATASET, self.source, self.split, index)
        return self.sample_with(rng, seed, index)

    def sample_with(self, rng: np.random.RandomState, seed: int, index: int) -> Episode:
        """Draw from an RNG already derived for this episode (multi-source draws the source first)."""
        plan, config = self.plan, self.plan.config
        classes = plan.spec.classes
        class_ids, group = sample_classes(plan, rng)
        counts = [classes[c].count for c in class_ids]
        query = examples.query_size(config, counts)
        if config.num_support is not None:
            shots = (config.num_support,) * len(class_ids)
        else:
            size = examples.support_size(config, counts, query, examples.draw_beta(rng))
            shots = examples.shots(counts, query, size, examples.draw_log_weights(rng, config, len(class_ids)))
        ranges = [(classes[c].start, classes[c].count) for c in class_ids]
        query_ids, support_ids = examples.draw_records(rng, ranges, query, shots)
        fingerprint = episode_fingerprint(
            protocol=Protocol.META_DATASET,
            source=self.source,
            split=self.split,
            store_fingerprint=plan.spec.fingerprint,
            config_hash=self._config_hash,
            class_ids=class_ids,
            support=support_ids,
            query=query_ids,
        )
        return Episode(
            source=self.source,
            split=self.split,
            seed=int(seed),
            index=int(index),
            class_ids=tuple(class_ids),
            support=tuple(support_ids),
            query=tuple(query_ids),
            group=group,
            store_fingerprint=plan.spec.fingerprint,
            config_hash=self._config_hash,
            fingerprint=fingerprint,
        )


def sample_episode(spec: DatasetSpec, split: Split | str, config: EpisodeConfig, seed: int, index: int) -> Episode:
    """Episode ``index`` of ``spec``/``split`` under ``config`` and ``seed`` (validates, then samples)."""
    return EpisodeSampler(spec, split, config).sample(seed, index)
