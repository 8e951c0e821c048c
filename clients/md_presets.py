"""Meta-Dataset's best configurations as trainer presets: ``--preset md/<learner>/<setting>``.

The values are data (``md_presets.json``), each with the reference file it was read from
(google-research/meta-dataset ``learn/gin/``; ../shared/reference/md_learners.md, sections 4 and
5). A preset sets the defaults of the trainer's flags, so a flag given beside it wins; its
``preset`` value is the server's benchmark variant the data comes from (md-v1). A run records
the preset's name and the flags given beside it that changed one of its values.

What a preset cannot say is said, not hidden: ``init_from`` (the reference starts these learners
from a pre-trained backbone, which only a checkpoint of the user's can be), ``differs`` (where
this trainer's learner is not the reference's), and ``not_expressible`` (presets refused, with why).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRESETS_FILE = Path(__file__).with_name("md_presets.json")


@dataclass(frozen=True)
class MDPreset:
    name: str
    reference: str           # the best-configuration file of meta-dataset's learn/gin/
    init_from: str | None    # what the reference initialises the backbone from; None: from scratch
    differs: str | None      # where this trainer's learner differs from the reference's
    values: dict[str, Any]   # by argparse destination
    origins: dict[str, str]  # the file (and line) each value comes from


@functools.cache
def _loaded() -> tuple[dict[str, MDPreset], dict[str, str]]:
    data = json.loads(PRESETS_FILE.read_text())
    presets = {name: MDPreset(name, entry["reference"], entry["init_from"], entry["differs"],
                              {key: value for key, (value, _) in entry["values"].items()},
                              {key: origin for key, (_, origin) in entry["values"].items()})
               for name, entry in data["presets"].items()}
    return presets, dict(data["not_expressible"])


def names() -> tuple[str, ...]:
    return tuple(_loaded()[0])


def is_md_preset(value: str | None) -> bool:
    """A trainer preset (``md/...``) rather than a server benchmark variant (``md-v1``)."""
    return value is not None and "/" in value


def md_preset(name: str) -> MDPreset:
    """The preset ``name``; ValueError naming the ones there are (and why one is missing)."""
    presets, refused = _loaded()
    if name in presets:
        return presets[name]
    why = f" ({refused[name]})" if name in refused else ""
    raise ValueError(f"got {name}{why}, expected a server benchmark variant (md-v1, md-v2) or one of "
                     f"{', '.join(presets)}")


def overridden(preset: MDPreset, args: Any) -> list[str]:
    """The preset's values that flags given beside it changed (destinations, sorted)."""
    return sorted(key for key, value in preset.values.items()
                  if key != "preset" and _plain(getattr(args, key)) != value)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def describe(preset: MDPreset, changed: list[str]) -> str:
    """The run's line about its preset."""
    line = f"preset {preset.name}: meta-dataset learn/gin/{preset.reference}"
    if changed:
        line += f"; given beside it: {', '.join('--' + key.replace('_', '-') for key in changed)}"
    if preset.differs:
        line += f"; differs from the reference: {preset.differs}"
    return line
