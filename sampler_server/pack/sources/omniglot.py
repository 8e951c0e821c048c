"""Omniglot converter (Lake et al. 2015, as Meta-Dataset uses it).

Original layout (the two official zips extracted into one folder)::

    ROOT/images_background/<Alphabet>/characterNN/*.png   (30 alphabets)
    ROOT/images_evaluation/<Alphabet>/characterNN/*.png   (20 alphabets)

Every PNG is a 105x105 1-bit drawing of one character by one drawer.

What the converter applies, and why:
- One class per character, named ``<alphabet>-<character folder>`` and grouped by
  alphabet (the reference's names; the alphabet is the upper level of Omniglot's
  two-level hierarchy, which episodes sample from).
- Splits are structural, as in Meta-Dataset Sec. 3.1: ``images_evaluation``
  alphabets are test; ``images_background`` alphabets are train, except the 5 with
  the fewest characters, which are validation (ties broken by alphabet name, so
  the choice never depends on listing order). On the real data that is Blackfoot,
  Ojibwe, Inuktitut, Tagalog and Alphabet_of_the_Magi. A split file is therefore
  not accepted.
- Images are inverted when written (``Derivation(invert=True)``), as the reference
  does, so stored images have the opposite polarity of the original drawings. They
  are stored as the reference stores them, RGB JPEG at quality 75 (its lossy
  re-encoding is part of its pixels: p99 16, max 45 levels from the lossless drawing
  at 105 px); ``--lossless-derived`` stores greyscale PNG instead.
- Images within a character are in file-name order; classes in the canonical
  order (split, then name).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import (
    ConverterOptions,
    Derivation,
    SourceItem,
    SourcePlan,
)
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    list_images,
    reject_unused,
    require_dir,
)
from sampler_server.store.manifest import Split

SOURCE = "omniglot"
DESCRIPTION = "Omniglot: ROOT/images_background and ROOT/images_evaluation, <alphabet>/<character>/*.png"
ACCEPTS: tuple[str, ...] = ()

BACKGROUND_DIR = "images_background"
EVALUATION_DIR = "images_evaluation"
NUM_VALID_ALPHABETS = 5
SPLIT_RULE = "omniglot: images_evaluation=test, images_background=train but its 5 smallest alphabets=valid"
HIERARCHY = "omniglot-alphabets"
_INVERT = Derivation(invert=True)


@dataclass(frozen=True)
class Alphabet:
    """An alphabet and its character folders (sorted by name)."""

    name: str
    characters: tuple[Path, ...]


def smallest_alphabets(alphabets: list[Alphabet], count: int = NUM_VALID_ALPHABETS) -> set[str]:
    """Names of the ``count`` alphabets with the fewest characters; ties by name.

    With ``count`` or fewer alphabets (small fixtures) all of them are returned.
    """
    by_size = sorted(alphabets, key=lambda a: (len(a.characters), a.name))
    return {a.name for a in by_size[:count]}


def _visible_dirs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))


def _read_alphabets(folder: Path) -> list[Alphabet]:
    alphabets = []
    for alphabet_dir in _visible_dirs(folder):
        characters = tuple(_visible_dirs(alphabet_dir))
        if not characters:
            raise InputFormatError(alphabet_dir, "alphabet folder holds no character folders")
        alphabets.append(Alphabet(alphabet_dir.name, characters))
    if not alphabets:
        raise InputFormatError(folder, "holds no alphabet folders")
    return alphabets


def _character_items(root: Path, character_dir: Path) -> list[SourceItem]:
    return [
        SourceItem(origin=path.relative_to(root).as_posix(), path=path, derivation=_INVERT)
        for path in list_images(character_dir, (".png",))
    ]


def _check_disjoint(root: Path, background: list[Alphabet], evaluation: list[Alphabet]) -> None:
    shared = sorted({a.name for a in background} & {a.name for a in evaluation})
    if shared:
        raise InputFormatError(root, f"alphabets {shared} appear in both {BACKGROUND_DIR} and {EVALUATION_DIR}")


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    background = _read_alphabets(require_dir(root / BACKGROUND_DIR, BACKGROUND_DIR))
    evaluation = _read_alphabets(require_dir(root / EVALUATION_DIR, EVALUATION_DIR))
    _check_disjoint(root, background, evaluation)
    valid = smallest_alphabets(background)
    builder = PlanBuilder(SOURCE)
    for alphabets, folder_split in ((background, Split.TRAIN), (evaluation, Split.TEST)):
        for alphabet in alphabets:
            split = Split.VALID if alphabet.name in valid else folder_split
            for character in alphabet.characters:
                builder.add(
                    ClassEntry(
                        name=f"{alphabet.name}-{character.name}",
                        items=lambda d=character: _character_items(root, d),
                        group=alphabet.name,
                        split=split,
                    )
                )
    notes = {"valid_alphabets": sorted(valid)}
    return builder.build(options, hierarchy=HIERARCHY, notes=notes, structural_rule=SPLIT_RULE)
