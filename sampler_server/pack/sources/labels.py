"""Class names for sources whose classes are numbers (Traffic Signs, VGG Flower).

Meta-Dataset names such classes ``'<zero-padded number>.<name>'``. The names come
from ``--labels`` (one per line in number order, '#' comments) or, without it, from
the entries of an official split file, matched by their numeric prefix; with
neither, a class is just its zero-padded number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import ConverterOptions
from sampler_server.pack.sources.common import require_file

_PREFIXED = re.compile(r"([0-9]+)\.(.+)", re.DOTALL)


def read_labels_file(path: Path) -> list[str]:
    """Names from a labels file: '#' comment lines, then one name per line in id order."""
    path = require_file(Path(path), "labels file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputFormatError(path, f"cannot read the labels file ({error})") from None
    names = [line.strip() for line in lines if not line.lstrip().startswith("#")]
    while names and not names[-1]:
        names.pop()
    if not names:
        raise InputFormatError(path, "labels file holds no names")
    if "" in names:
        position = names.index("") + 1
        raise InputFormatError(path, f"name {position} is blank (a blank line would shift every later class id)")
    return names


def names_by_prefix(split_file: Path) -> dict[int, str]:
    """Class id -> full entry, from the entries ``<digits>.<name>`` of an MD split file."""
    try:
        data = json.loads(Path(split_file).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFormatError(split_file, "class-splits file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputFormatError(split_file, f"not a valid JSON class-splits file ({error})") from None
    if not isinstance(data, dict):
        raise InputFormatError(split_file, "expected a JSON object with keys train, valid, test")
    out: dict[int, str] = {}
    for names in data.values():
        for entry in names if isinstance(names, list) else []:
            match = _PREFIXED.fullmatch(entry) if isinstance(entry, str) else None
            if match is None:
                continue  # load_split_file reports entries that match no class
            number = int(match.group(1))
            if number in out and out[number] != entry:
                raise InputFormatError(split_file, f"two classes with number {number}: {out[number]!r}, {entry!r}")
            out[number] = entry
    return out


@dataclass(frozen=True)
class ClassNamer:
    """``'%0<width>d.<name>'`` with the name at ``labels[number - first_label]``."""

    width: int
    first_label: int
    labels: tuple[str, ...] | None = None
    labels_path: Path | None = None
    from_split: Mapping[int, str] | None = None

    def __call__(self, number: int) -> str:
        digits = f"{number:0{self.width}d}"
        if self.labels is not None:
            index = number - self.first_label
            if not 0 <= index < len(self.labels):
                raise InputFormatError(
                    self.labels_path or "labels",
                    f"names {len(self.labels)} classes, but the input has class {number}",
                )
            return f"{digits}.{self.labels[index]}"
        if self.from_split is not None and number in self.from_split:
            return self.from_split[number]
        return digits


def class_namer(options: ConverterOptions, width: int, first_label: int) -> ClassNamer:
    """How class numbers become names: --labels first, then the split file, else digits."""
    if options.labels is not None:
        labels = tuple(read_labels_file(options.labels))
        return ClassNamer(width, first_label, labels=labels, labels_path=options.labels)
    if options.class_splits is not None:
        return ClassNamer(width, first_label, from_split=names_by_prefix(options.class_splits))
    return ClassNamer(width, first_label)
