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

DETERMINISTIC_CHOICES = ("auto", "on", "off")


def cores() -> int:
    """The cores this process may run on (its affinity), the default thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def add_reproducibility_group(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``--deterministic`` and ``--threads``: the same flags in every trainer command of both frameworks."""
    group = parser.add_argument_group(
        "reproducibility", "the same command on the same machine gives the same weights and reports when "
                           "deterministic; the run configuration records these settings, the library versions "
                           "and the sha256 of the final weights")
    group.add_argument("--deterministic", choices=DETERMINISTIC_CHOICES, default="auto",
                       help="on: deterministic kernels only (an op without one fails the run at start), fixed "
                            "thread counts, seeded draws; auto: on on CPU, off on a GPU (where it costs speed)")
    group.add_argument("--threads", type=int_at_least(1), default=None, metavar="N",
                       help=f"intra- and inter-op threads of the framework (default: this process's cores, "
                            f"{cores()} here)" + "%(default).0s")
    return group


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
    requested = getattr(args, "deterministic", "auto") or "auto"
    if requested not in DETERMINISTIC_CHOICES:
        raise ValueError(f"deterministic: got {requested!r}, expected one of {', '.join(DETERMINISTIC_CHOICES)}")
    enabled = requested == "on" or (requested == "auto" and not accelerated)
    threads = getattr(args, "threads", None) or cores()
    return Determinism(requested, enabled, threads, threads)


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
