"""Class-to-split assignment for sources without a hierarchy.

Two rules:
- an official split file in the JSON format Meta-Dataset publishes
  (``{"train": [...], "valid": [...], "test": [...]}``, class names as the
  converter names them); every class must appear exactly once;
- otherwise the documented default: classes sorted by name, permuted by a
  legacy ``RandomState`` (frozen across NumPy releases) seeded from a SHA-256 of
  the source name, then cut with the reference converter's counts:
  train = floor(0.7 n), valid = floor(0.85 n) - floor(0.7 n), test = the rest.
  Test-only sources (MD's Traffic Signs, MSCOCO) use their own fixed rules.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.store.manifest import Split

DEFAULT_RULE = "default-70-15-15"


def load_split_file(path: Path, class_names: Sequence[str]) -> dict[str, Split]:
    """Name -> split from an MD-format file; unknown or missing classes are errors."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFormatError(path, "class-splits file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputFormatError(path, f"not a valid JSON class-splits file ({error})") from None
    if not isinstance(data, dict):
        raise InputFormatError(path, "expected a JSON object with keys train, valid, test")
    unknown_keys = set(data) - {"train", "valid", "test"}
    if unknown_keys:
        raise InputFormatError(path, f"unknown keys {sorted(unknown_keys)}; allowed: train, valid, test")
    known = set(class_names)
    assignment: dict[str, Split] = {}
    for key in ("train", "valid", "test"):
        names = data.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InputFormatError(path, f"'{key}' must be a list of class names")
        for name in names:
            if name not in known:
                raise InputFormatError(path, f"unknown class {name!r} in '{key}' (not found in the input)")
            if name in assignment:
                raise InputFormatError(path, f"class {name!r} is listed in two splits")
            assignment[name] = Split(key)
    missing = sorted(known - set(assignment))
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise InputFormatError(path, f"classes in no split: {shown}{more}")
    return assignment


def split_file_rule(path: Path) -> str:
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return f"file:{Path(path).name}:sha256={digest}"


def _permutation(source: str, n: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(f"class-split/{source}".encode()).digest()[:4], "big")
    return np.random.RandomState(seed).permutation(n)


DEFAULT_FRACTIONS = (0.7, 0.15, 0.15)


def fractions_rule(fractions: Sequence[float]) -> str:
    """The manifest's name of a ``--split-fractions`` rule, e.g. ``fractions-0.4-0.2-0.4``."""
    return "fractions-" + "-".join(f"{f:g}" for f in fractions)


def check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Three shares (train, valid, test), each in [0, 1], summing to 1; else one line naming the flag."""
    values = tuple(float(f) for f in fractions)
    if len(values) != 3 or any(not 0.0 <= f <= 1.0 for f in values) or abs(sum(values) - 1.0) > 1e-9:
        shown = " ".join(f"{f:g}" for f in values)
        raise InvalidArgument(f"--split-fractions: got {shown}, expected three shares of the classes (train valid "
                              "test), each in [0, 1], summing to 1, e.g. 0.4 0.2 0.4")
    return values  # type: ignore[return-value]


def default_split(source: str, class_names: Sequence[str],
                  fractions: Sequence[float] = DEFAULT_FRACTIONS) -> dict[str, Split]:
    """The documented deterministic 70/15/15 rule (reference converter's counts), or the same
    permutation cut at other ``fractions`` (``--split-fractions``)."""
    names = sorted(class_names)
    n = len(names)
    # the default's own expressions, so its splits stay bit for bit what they were
    n_train = int(0.7 * n) if tuple(fractions) == DEFAULT_FRACTIONS else int(fractions[0] * n + 1e-9)
    n_trainval = (int(0.85 * n) if tuple(fractions) == DEFAULT_FRACTIONS
                  else int((fractions[0] + fractions[1]) * n + 1e-9))
    order = _permutation(source, n)
    out: dict[str, Split] = {}
    for position, index in enumerate(order):
        if position < n_train:
            split = Split.TRAIN
        elif position < n_trainval:
            split = Split.VALID
        else:
            split = Split.TEST
        out[names[int(index)]] = split
    return out


def half_valid_half_test(source: str, class_names: Sequence[str]) -> dict[str, Split]:
    """MSCOCO's default: no training classes; floor(n/2) valid, the rest test."""
    names = sorted(class_names)
    order = _permutation(source, len(names))
    n_valid = len(names) // 2
    return {
        names[int(index)]: (Split.VALID if position < n_valid else Split.TEST)
        for position, index in enumerate(order)
    }


def all_test(class_names: Sequence[str]) -> dict[str, Split]:
    return {name: Split.TEST for name in class_names}


def assign_splits(
    source: str,
    class_names: Sequence[str],
    split_file: Path | None,
    default: str = DEFAULT_RULE,
    fractions: Sequence[float] | None = None,
) -> tuple[dict[str, Split], str]:
    """(name -> split, rule description); a given file always wins over the default, and
    ``fractions`` (``--split-fractions``) cut the default rule's permutation at other shares."""
    if split_file is not None and fractions is not None:
        raise InvalidArgument("--split-fractions: not with --class-splits (both say which split each class is in)")
    if split_file is not None:
        return load_split_file(split_file, class_names), split_file_rule(split_file)
    if fractions is not None:
        shares = check_fractions(fractions)
        return default_split(source, class_names, shares), fractions_rule(shares)
    if default == "all-test":
        return all_test(class_names), "all-test"
    if default == "half-valid-half-test":
        return half_valid_half_test(source, class_names), "default-half-valid-half-test"
    return default_split(source, class_names), DEFAULT_RULE
