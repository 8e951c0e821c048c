"""Step 0: multi-source episodes; the source is drawn uniformly with the episode's own RNG.

The RNG is derived from (seed, protocol, ``"sources:" + "+".join(sorted sources)``,
split, index); its first draw, ``randint(len(sources))``, picks the source among
the names sorted, and the episode is then drawn from the same stream by that
source's sampler. The order in which sources are listed therefore does not
matter. A set of one source is that source: its episodes equal ``sample_episode``'s.
Every source's plan is validated when the sampler is built, before any sampling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.episode import Episode
from sampler_server.core.md.plan import parse_split
from sampler_server.core.md.sampler import EpisodeSampler
from sampler_server.core.seeding import Protocol, check_seed_and_index, derive_rng
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument, NotFound


class MultiSourceSampler:
    """Episodes whose source is drawn uniformly among ``sources``."""

    def __init__(
        self, specs: Mapping[str, DatasetSpec], sources: Sequence[str], split: Split | str, config: EpisodeConfig,
        served: Mapping[str, str] | None = None,
    ) -> None:
        """``served``: source -> its store's name as served, which refusals name (not the draws)."""
        if isinstance(sources, str) or not sources:
            raise InvalidArgument(f"sources: got {sources!r}, expected a non-empty list of source names")
        names = sorted(sources)
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidArgument(f"sources: got {repeated[0]!r} more than once, expected distinct names")
        missing = [name for name in names if name not in specs]
        if missing:
            available = ", ".join(sorted(specs)) or "none"
            raise NotFound(f"source {missing[0]!r} is not loaded; available: {available}")
        for name in names:
            if specs[name].source != name:
                raise InvalidArgument(f"specs[{name!r}] describes source {specs[name].source!r}, expected {name!r}")
        self.split = parse_split(split)
        self.sources = tuple(names)
        self.samplers = {name: EpisodeSampler(specs[name], self.split, config, (served or {}).get(name))
                         for name in names}
        self.key = "sources:" + "+".join(names)

    def sample(self, seed: int, index: int) -> Episode:
        check_seed_and_index(seed, index)
        if len(self.sources) == 1:
            return self.samplers[self.sources[0]].sample(seed, index)
        rng = derive_rng(seed, Protocol.META_DATASET, self.key, self.split, index)
        source = self.sources[int(rng.randint(len(self.sources)))]
        return self.samplers[source].sample_with(rng, seed, index)


def sample_multisource(
    specs: Mapping[str, DatasetSpec],
    sources: Sequence[str],
    split: Split | str,
    config: EpisodeConfig,
    seed: int,
    index: int,
) -> Episode:
    """Episode ``index`` of the uniform mixture of ``sources`` (see the module docstring)."""
    return MultiSourceSampler(specs, sources, split, config).sample(seed, index)
