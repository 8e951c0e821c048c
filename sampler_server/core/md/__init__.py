"""Meta-Dataset episode sampling: pure functions of (spec, split, config, seed, index).

- ``plan``: validation and candidate classes/groups (every impossible request fails here);
- ``classes``: Step 1, the ordered class ids (hierarchy-aware for nodes and alphabets);
- ``examples``: Step 2, query size, support size, shots and record ids;
- ``sampler``: ``EpisodeSampler`` / ``sample_episode``;
- ``multisource``: Step 0, ``MultiSourceSampler`` / ``sample_multisource``;
- ``presets``: the MD-v1 and MD-v2 source sets;
- ``episode``: the ``Episode`` value and its fingerprint.
"""

from sampler_server.core.md.episode import Episode, episode_fingerprint
from sampler_server.core.md.multisource import (
    MultiSourceSampler,
    sample_multisource,
)
from sampler_server.core.md.plan import (
    ClassStructure,
    Group,
    SamplingPlan,
    build_plan,
)
from sampler_server.core.md.presets import (
    BENCHMARK_SOURCES,
    Benchmark,
    benchmark_sources,
)
from sampler_server.core.md.sampler import EpisodeSampler, sample_episode

__all__ = [
    "BENCHMARK_SOURCES",
    "Benchmark",
    "ClassStructure",
    "Episode",
    "EpisodeSampler",
    "Group",
    "MultiSourceSampler",
    "SamplingPlan",
    "benchmark_sources",
    "build_plan",
    "episode_fingerprint",
    "sample_episode",
    "sample_multisource",
]
