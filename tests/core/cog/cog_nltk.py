"""NLTK's WordNet reader over Debian's ``wordnet-base`` files, for the CoG fidelity tests.

The CoG paper walked WordNet 3.0 with NLTK; these tests compare our graph and our Lin
similarity with NLTK's on the same database. Debian ships the database without
``lexnames`` (NLTK reads it at start-up), so the reader opens a copy of the files
(NLTK refuses paths that leave its root, symlinks included) plus ``lexnames`` rebuilt
from the table in Debian's ``lexnames(5WN)`` manual page. ``map_wn`` is switched off:
it maps other WordNet versions for the multilingual data and needs ``index.sense``.
"""

from __future__ import annotations

import gzip
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

from prerequisites import missing

WORDNET_DIR = Path("/usr/share/wordnet")
LEXNAMES_MAN = Path("/usr/share/man/man5/lexnames.5WN.gz")
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


def lexnames_from_man_page(text: str) -> str:
    """``lexnames``: ``NN<TAB>name<TAB>category`` for the 45 lexicographer files."""
    rows = re.findall(r"^([0-9]{2})\t(\S+)\s*\t", text, flags=re.MULTILINE)
    assert [int(number) for number, _ in rows] == list(range(45)), rows
    return "".join(f"{number}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n" for number, name in rows)


def open_nltk_wordnet(root: Path) -> Any:
    """NLTK's reader over a copy of the Debian database in ``root`` (fails when absent, unless opted out)."""
    if not (WORDNET_DIR / "data.noun").is_file() or not LEXNAMES_MAN.is_file():
        missing("SAMPLER_TESTS_WITHOUT_WORDNET",
                f"{WORDNET_DIR} or {LEXNAMES_MAN} is missing (make test installs it: apt-get install wordnet-base)")
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class DebianWordNet(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            return None

    root.mkdir(parents=True, exist_ok=True)
    for path in WORDNET_DIR.iterdir():
        if path.is_file():
            shutil.copyfile(path, root / path.name)
    (root / "lexnames").write_text(lexnames_from_man_page(gzip.decompress(LEXNAMES_MAN.read_bytes()).decode()))
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available"
        reader = DebianWordNet(str(root), None)
    assert reader.get_version() == "3.0"
    return reader


def nltk_parents(reader: Any, wnid: str) -> list[str]:
    """Sorted hypernyms and instance hypernyms of a noun wnid, as NLTK gives them."""
    synset = reader.synset_from_pos_and_offset("n", int(wnid[1:]))
    return sorted(f"n{parent.offset():08d}" for parent in synset.hypernyms() + synset.instance_hypernyms())
