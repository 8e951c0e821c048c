"""The class-split enum every layer shares (store manifests, samplers, the wire).

Its names are Meta-Dataset's, ``sampler_common.splits.MD``: the client, the CLI and the
server read a user's split name through it, so "val" and "validation" mean "valid"
everywhere and a refusal lists the same accepted names.
"""

from __future__ import annotations

import enum

from sampler_common.splits import MD
from sampler_server.errors import field_checks


class Split(str, enum.Enum):
    """Class splits as Meta-Dataset names them; the value is the manifest/wire name."""

    TRAIN = "train"
    VALID = "valid"
    TEST = "test"

    @classmethod
    def parse(cls, value: str, field: str = "split") -> "Split":
        """The split ``value`` names (an alias of the validation split included); ``InvalidArgument``
        listing the accepted names otherwise."""
        with field_checks():
            return cls(MD.canonical(value, field))
