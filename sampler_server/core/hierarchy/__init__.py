"""Class hierarchies the samplers walk: WordNet 3.0 nouns, the ImageNet split, Omniglot.

Every function here is pure (the only I/O is reading the WordNet file shipped in the
package) and every listing it returns is sorted by a stable key (wnid or name), so
results never depend on set/dict order, hash seeds or input order.

Modules:
- ``wordnet``: the noun is-a graph (parser, shipped derived file, loader).
- ``build_wordnet``: regenerates the shipped file from Debian's ``wordnet-base``.
- ``imagenet``: the Meta-Dataset ImageNet split and its eligible internal nodes.
- ``precomputed``: that split computed at pack time, as verified bytes a server reads
  without WordNet.
- ``omniglot``: alphabet -> character hierarchy and its Meta-Dataset split.
"""

from __future__ import annotations

from sampler_server.core.split import Split

MIN_SPAN_LEAVES = 5
"""Internal nodes spanning fewer leaves are never eligible (Meta-Dataset's lower bound)."""
MAX_SPAN_LEAVES = 392
"""Meta-Dataset's upper bound: the smallest that covers every leaf of its 712-class train graph."""

__all__ = ["MAX_SPAN_LEAVES", "MIN_SPAN_LEAVES", "Split"]
