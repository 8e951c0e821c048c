"""Omniglot's two-level hierarchy (alphabet -> character) and its Meta-Dataset split.

Split rule (Meta-Dataset, Sec. 3.1): alphabets of the original ``images_background``
folder are train, except the 5 with the fewest characters, which are validation;
alphabets of ``images_evaluation`` are test. On the real dataset: 25 / 5 / 20
alphabets, 883 / 81 / 659 characters; validation is Blackfoot, Ojibwe, Inuktitut
(the three Canadian Aboriginal Syllabics), Tagalog and Alphabet_of_the_Magi.

Determinism: size ties are broken by alphabet name; alphabets are listed by name and
characters by folder name, so the result does not depend on input order. A class is
named ``<alphabet>-<character folder>`` as in the reference. Inputs with fewer
background alphabets than validation slots (small test fixtures) are accepted: all of
them go to validation and train is empty.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from sampler_server.core.hierarchy import Split
from sampler_server.errors import InvalidArgument

NUM_VALID_ALPHABETS = 5


class OmniglotFolder(str, enum.Enum):
    """The original folder an alphabet comes from (``images_background`` / ``images_evaluation``)."""

    BACKGROUND = "background"
    EVALUATION = "evaluation"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Alphabet:
    """An alphabet, its original folder and its characters (sorted folder names)."""

    name: str
    folder: OmniglotFolder
    characters: tuple[str, ...]

    @property
    def class_names(self) -> tuple[str, ...]:
        """The alphabet's class names, in character order."""
        return tuple(omniglot_class_name(self.name, character) for character in self.characters)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OmniglotSplit:
    """Alphabets per split, each tuple sorted by alphabet name."""

    train: tuple[Alphabet, ...]
    valid: tuple[Alphabet, ...]
    test: tuple[Alphabet, ...]

    def for_split(self, split: Split) -> tuple[Alphabet, ...]:
        """The alphabets of ``split``."""
        return {Split.TRAIN: self.train, Split.VALID: self.valid, Split.TEST: self.test}[Split(split)]

    def class_names(self, split: Split) -> tuple[str, ...]:
        """Class names of ``split``: alphabets by name, characters by folder name."""
        return tuple(name for alphabet in self.for_split(split) for name in alphabet.class_names)

    @property
    def class_order(self) -> tuple[str, ...]:
        """All class names: train, then valid, then test."""
        return self.class_names(Split.TRAIN) + self.class_names(Split.VALID) + self.class_names(Split.TEST)


def omniglot_class_name(alphabet: str, character: str) -> str:
    """The reference's class name for a character: ``<alphabet>-<character folder>``."""
    return f"{alphabet}-{character}"


def build_omniglot_split(
    characters: Iterable[tuple[str, str, str | OmniglotFolder]],
    *,
    num_valid_alphabets: int = NUM_VALID_ALPHABETS,
) -> OmniglotSplit:
    """Split ``(alphabet, character, folder)`` triples as Meta-Dataset does.

    ``folder`` is ``'background'`` or ``'evaluation'``. Raises ``InvalidArgument`` for
    an empty input, an unknown folder, an empty name, a repeated character, or an
    alphabet found in both folders.
    """
    if isinstance(num_valid_alphabets, bool) or not isinstance(num_valid_alphabets, int) or num_valid_alphabets < 0:
        raise InvalidArgument(f"num_valid_alphabets: got {num_valid_alphabets!r}, expected an integer >= 0")
    alphabets = _group(characters)
    background = [a for a in alphabets if a.folder is OmniglotFolder.BACKGROUND]
    by_size = sorted(background, key=lambda a: (len(a.characters), a.name))
    valid_names = {a.name for a in by_size[:num_valid_alphabets]}
    return OmniglotSplit(
        train=tuple(a for a in background if a.name not in valid_names),
        valid=tuple(a for a in background if a.name in valid_names),
        test=tuple(a for a in alphabets if a.folder is OmniglotFolder.EVALUATION),
    )


def _group(characters: Iterable[tuple[str, str, str | OmniglotFolder]]) -> tuple[Alphabet, ...]:
    """Validate the triples and group them into alphabets sorted by name."""
    folders: dict[str, OmniglotFolder] = {}
    members: dict[str, set[str]] = {}
    for alphabet, character, folder_value in characters:
        for label, value in (("alphabet", alphabet), ("character", character)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{label}: got {value!r}, expected a non-empty string")
        try:
            folder = OmniglotFolder(folder_value)
        except ValueError:
            raise InvalidArgument(
                f"folder of {alphabet}/{character}: got {folder_value!r}, expected 'background' or 'evaluation'"
            ) from None
        if folders.setdefault(alphabet, folder) is not folder:
            raise InvalidArgument(f"alphabet {alphabet!r} is in both 'background' and 'evaluation'")
        chars = members.setdefault(alphabet, set())
        if character in chars:
            raise InvalidArgument(f"character {alphabet}/{character} is listed more than once")
        chars.add(character)
    if not members:
        raise InvalidArgument("characters: got an empty list, expected at least one character")
    return tuple(
        Alphabet(name=name, folder=folders[name], characters=tuple(sorted(members[name]))) for name in sorted(members)
    )
