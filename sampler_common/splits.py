"""The split names of each protocol, and the one set of aliases, for every layer.

Each protocol has one canonical vocabulary (what replies, reports and fingerprints
carry). The client, the server and the CLI read a user's split name through
``SplitNames.canonical``, so they accept the same names and refuse the same ones with
the same message, which lists every accepted name.

Aliases: "valid", "val" and "validation" all name the protocol's validation split,
and only that ("valid" for Meta-Dataset's validation classes; "val" for VTAB's full
validation split, a data regime's held-out part and ImageNet-CoG's hyperparameter
split). Nothing else is aliased: VTAB's ``val200`` (the first 200 of ``val``) and
``val`` are different splits, as are ``trainval`` and ``train800val200``.

Pure: no I/O; a refusal is a ``sampler_common.checks.FieldError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sampler_common.checks import FieldError

VALIDATION_ALIASES = ("valid", "val", "validation")
"""The names of a protocol's validation split; each protocol spells it one way canonically."""


@dataclass(frozen=True)
class SplitNames:
    """One protocol's split vocabulary: its canonical names and which one is the validation split."""

    protocol: str
    names: tuple[str, ...]
    validation: str

    @property
    def aliases(self) -> dict[str, str]:
        """alias -> canonical name (the other spellings of the validation split)."""
        return {alias: self.validation for alias in VALIDATION_ALIASES if alias != self.validation}

    @property
    def accepted(self) -> str:
        """The accepted names as a message lists them: canonical, then the aliases."""
        others = ", ".join(self.aliases)
        return f"one of {', '.join(self.names)} (or {others} for {self.validation})"

    def canonical(self, name: object, field: str = "split", context: str = "") -> str:
        """The canonical name of ``name`` (itself, or what its alias stands for); else ``FieldError``
        (``context``: what else the vocabulary depends on, e.g. " with regime 10")."""
        if isinstance(name, str):
            if name in self.names:
                return name
            if name in self.aliases:
                return self.aliases[name]
        raise FieldError(field, name, self.accepted, context)

    def within(self, allowed: tuple[str, ...]) -> "SplitNames":
        """The same aliases over a narrower set of names (e.g. a packed source's held-out splits)."""
        return SplitNames(self.protocol, allowed, self.validation)


MD = SplitNames("md", ("train", "valid", "test"), "valid")
"""Meta-Dataset's class splits."""
VTAB = SplitNames("vtab", ("train800", "val200", "train800val200", "test", "train", "val", "trainval",
                           "trainval1000", "trainval1000-canonical"), "val")
"""VTAB's splits (``sampler_server.core.vtab.splits`` says how each is carved from TFDS's)."""
COG = SplitNames("cog", ("train", "val", "test", "search"), "val")
"""ImageNet-CoG's level splits (``search``: the train split minus ``val``, for hyperparameter search)."""
REGIME = SplitNames("baselines", ("train", "val"), "val")
"""A control-baseline data regime's parts (GetRegime)."""
REGIME_STREAM = SplitNames("baselines", ("train", "val", "trainval"), "val")
"""What a task batch stream with a regime reads: a part of the regime, or the whole (``trainval``)."""
