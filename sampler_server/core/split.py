"""The class-split enum every layer shares (store manifests, samplers, the wire)."""

from __future__ import annotations

import enum

from sampler_server.errors import NotFound
from sampler_server.quoting import quoted


class Split(str, enum.Enum):
    """Class splits as Meta-Dataset names them; the value is the manifest/wire name."""

    TRAIN = "train"
    VALID = "valid"
    TEST = "test"

    @classmethod
    def parse(cls, value: str) -> "Split":
        aliases = {"validation": cls.VALID, "val": cls.VALID}
        if value in aliases:
            return aliases[value]
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(s.value for s in cls)
            raise NotFound(f"unknown split {quoted(value)}; allowed: {allowed}") from None
