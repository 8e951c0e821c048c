"""What in a run configuration defines the results, and what only says how they were computed.

A trainer sends its run configuration with its reports; the metrics store keeps the first
and refuses a report whose configuration defines other results (another learning rate,
another backbone: a new run id is needed). What a run was computed with (library
versions, the device, thread counts and determinism settings, recorded by
``clients/determinism.py``) is kept from the first report but is not compared: evaluating
a checkpoint again on another machine, or with other threads, is the same run as long as
its results are the same, which the store checks result by result. ``compare`` groups
the keys the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUN_KEYS = frozenset({"run", "run_id"})
"""Top-level configuration keys that name the run itself, not what it computed."""
FINGERPRINT_KEYS = frozenset({"result_sha256"})
"""Top-level configuration keys that fingerprint a run's result (the final weights' sha256)."""
ENVIRONMENT_KEYS = frozenset({"deterministic", "requested_deterministic", "op_determinism", "threads",
                              "intra_op_threads", "inter_op_threads", "device", "requested_device", "device_name",
                              "machine", "platform"})
"""Top-level keys that say what a run was computed with (with every ``*_version`` key)."""


def is_environment(key: str) -> bool:
    """Whether a top-level key says what a run was computed with, not what defines its results."""
    return key in ENVIRONMENT_KEYS or key.endswith("_version")


def defining(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without what it was computed with: the part a run's reports must agree on."""
    return {key: value for key, value in config.items() if not is_environment(key)}
