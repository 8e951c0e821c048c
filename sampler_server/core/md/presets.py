"""Named Meta-Dataset source sets: MD-v1 (Triantafillou et al.) and MD-v2 (VTAB+MD).

MD-v1: 10 sources; the 8 training sources (ilsvrc_2012, omniglot, aircraft,
cu_birds, dtd, quickdraw, fungi, vgg_flower) are also the validation sources;
test adds traffic_sign and mscoco. ImageNet uses the carnivore/device split.

MD-v2: ImageNet is train-only (all 1000 classes in train) and vgg_flower is gone.
Train: ilsvrc_2012, omniglot, aircraft, cu_birds, dtd, quickdraw, fungi. Test:
aircraft, cu_birds, dtd, fungi, mscoco, omniglot, quickdraw, traffic_sign.
Validation (the VTAB+MD paper uses "MD-v2 validation episodes" without listing
them; our choice): the MD-v2 training sources that keep validation classes,
i.e. omniglot, aircraft, cu_birds, dtd, quickdraw, fungi.

Every listing is sorted by name, the order multi-source sampling uses.
"""

from __future__ import annotations

import enum

from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted


class Benchmark(str, enum.Enum):
    MD_V1 = "md-v1"
    MD_V2 = "md-v2"

    @classmethod
    def parse(cls, value: str) -> Benchmark:
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(b.value for b in cls)
            raise InvalidArgument(f"benchmark: got {quoted(value)}, expected one of {allowed}") from None


_V1_TRAIN = ("aircraft", "cu_birds", "dtd", "fungi", "ilsvrc_2012", "omniglot", "quickdraw", "vgg_flower")
_V2_TRAIN = ("aircraft", "cu_birds", "dtd", "fungi", "ilsvrc_2012", "omniglot", "quickdraw")

BENCHMARK_SOURCES: dict[Benchmark, dict[Split, tuple[str, ...]]] = {
    Benchmark.MD_V1: {
        Split.TRAIN: _V1_TRAIN,
        Split.VALID: _V1_TRAIN,
        Split.TEST: tuple(sorted(_V1_TRAIN + ("mscoco", "traffic_sign"))),
    },
    Benchmark.MD_V2: {
        Split.TRAIN: _V2_TRAIN,
        Split.VALID: tuple(s for s in _V2_TRAIN if s != "ilsvrc_2012"),
        Split.TEST: ("aircraft", "cu_birds", "dtd", "fungi", "mscoco", "omniglot", "quickdraw", "traffic_sign"),
    },
}

IMAGENET_SPLIT: dict[Benchmark, str] = {Benchmark.MD_V1: "md", Benchmark.MD_V2: "md_v2"}
"""The ImageNet class split each benchmark uses (values of ``hierarchy.imagenet.ImageNetVariant``)."""


def benchmark_sources(benchmark: Benchmark | str, split: Split | str) -> tuple[str, ...]:
    """The sources of ``benchmark`` for ``split``, sorted by name."""
    return BENCHMARK_SOURCES[Benchmark.parse(benchmark) if isinstance(benchmark, str) else benchmark][Split(split)]
