"""Reproducible results, framework-free: what ``--deterministic`` means and what a run records.

Episodes are pure functions of (request, seed, index) on the server; a trainer's results
are reproducible only when its own computation is too. ``--deterministic on`` asks each
framework (``clients.torch.determinism``, ``clients.tf.determinism``) for deterministic
kernels only, fixed thread counts and every random draw from a generator seeded from the
run's seed by name (``clients.seeds.derive_seed``). ``auto`` (the default) is on for a CPU
run, where it costs little, and off on a GPU, where deterministic kernels cost speed; an
op that has no deterministic kernel makes the run fail at start with one line naming it.

The run configuration sent with the reports records the settings (``Determinism.as_config``),
the library versions (``library_versions``) and, once known, the result fingerprint: the
sha256 of the final weights (``weights_sha256``). ``sampler-server report --run A --run B``
compares two runs by them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

from clients.flag_types import int_at_least
from clients.trainer_options import OptionGroup, Record, Resume, option

DETERMINISTIC_CHOICES = ("auto", "on", "off")


def cores() -> int:
    """The cores this process may run on (its affinity), the default thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def reproducibility_group(seed: int | None = None) -> OptionGroup:
    """``--deterministic`` and ``--threads``: the same flags in every trainer command of both
    frameworks. ``seed``: for a command without ``--seed`` (cog, evaluate), the seed its
    random draws derive from (a named backbone's random weights, TensorFlow's global
    generators), held by its namespace as ``seed``."""
    return OptionGroup(
        "reproducibility",
        (option("--deterministic", choices=DETERMINISTIC_CHOICES, default="auto",
                record=Record.ENVIRONMENT, resume=Resume.FREE, forward=("transfer", "cog"),
                help="on: deterministic kernels only (an op without one fails the run at start), fixed thread "
                     "counts, seeded draws; auto: on on CPU, off on a GPU (where it costs speed)"),
         option("--threads", type=int_at_least(1), default=None, metavar="N",
                record=Record.ENVIRONMENT, resume=Resume.FREE, forward=("transfer", "cog"),
                help=f"intra- and inter-op threads of the framework (default: this process's cores, {cores()} "
                     "here)" + "%(default).0s")),
        "the same command on the same machine gives the same weights and reports when deterministic; the run "
        "configuration records these settings, the library versions and the sha256 of the final weights",
        {} if seed is None else {"seed": seed})


@dataclass(frozen=True, kw_only=True)
class ReproducibilityOptions:
    """The reproducibility group of a parsed command line, typed and checked."""

    deterministic: str
    threads: int | None

    def __post_init__(self) -> None:
        if self.deterministic not in DETERMINISTIC_CHOICES:
            raise ValueError(f"deterministic: got {self.deterministic!r}, expected one of "
                             f"{', '.join(DETERMINISTIC_CHOICES)}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads: got {self.threads!r}, expected None or an integer >= 1")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReproducibilityOptions:
        """The group's values of ``args``, read by name (a namespace without them raises)."""
        return cls(deterministic=args.deterministic, threads=args.threads)


@dataclass(frozen=True)
class Determinism:
    """The resolved settings of one run: ``requested`` as given, ``enabled`` after ``auto``."""

    requested: str
    enabled: bool
    intra_op_threads: int
    inter_op_threads: int

    def as_config(self) -> dict[str, Any]:
        return {"deterministic": self.enabled, "requested_deterministic": self.requested,
                "intra_op_threads": self.intra_op_threads, "inter_op_threads": self.inter_op_threads}


def resolve_determinism(args: argparse.Namespace, accelerated: bool) -> Determinism:
    """``--deterministic``/``--threads`` for a run on a GPU (``accelerated``) or not."""
    options = ReproducibilityOptions.from_args(args)
    enabled = options.deterministic == "on" or (options.deterministic == "auto" and not accelerated)
    threads = options.threads or cores()
    return Determinism(options.deterministic, enabled, threads, threads)


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def library_versions(**framework: str) -> dict[str, Any]:
    """What a result may depend on besides the arguments: Python, numpy, this package, the
    machine's architecture, and ``framework``'s own (``torch_version="2.13.0"``, ...)."""
    return {"python_version": platform.python_version(), "numpy_version": np.__version__,
            "sampler_version": package_version("sampler-server"), "machine": platform.machine(),
            "platform": sys.platform, **framework}


def weights_sha256(named: Iterable[tuple[str, Any]]) -> str:
    """sha256 (hex) of named arrays in the given order: each name, dtype, shape and bytes
    (C order), so two runs' final weights compare by one string."""
    digest = hashlib.sha256()
    for name, value in named:
        array = np.ascontiguousarray(np.asarray(value))
        digest.update(name.encode())
        digest.update(str(array.dtype).encode())
        digest.update(repr(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
