"""naver/cog's published level and split files, read without running a pickle's code.

The ImageNet-CoG authors publish the benchmark as two pickles (naver/cog README, "The
CoG level files"; ``data/__init__.py`` and ``data/datasets.py`` read them):

- ``cog_levels_mapping_file.pkl``: a list of 5 lists of wnids, L1 first (1000 each);
- ``cog_concepts_split_file.pkl``: a dict wnid -> {"train": names, "test": names},
  numpy arrays of file names relative to the IN-21K images root (the reference joins
  root and name, dropping one leading "/"), e.g. ``n01234567/n01234567_10.JPEG``.

A pickle is a program: ``pickle.load`` may import and call anything. ``load_restricted``
runs the unpickler with a ``find_class`` that resolves only the globals numpy's arrays
pickle through (``_reconstruct``, ``ndarray`` as its argument only, ``dtype``, ``scalar``,
``_frombuffer``, under numpy 1.x's ``numpy.core`` and 2.x's ``numpy._core`` names, and
``_codecs.encode`` of a str, which protocol 2 uses for bytes); any other global (``os.system``, a custom class,
``copyreg._reconstructor``) and any persistent id is refused with one line naming the
file. What it returns is then checked to hold only lists, tuples, dicts, strings,
numbers and numpy string or object arrays of strings.

The parsed forms are frozen and canonical: each level's wnids sorted (label i = the i-th
wnid, as the reference numbers them), each concept's names sorted (the reference sorts
``.tolist()`` before use), so every result here is a function of the files' content. The
files' SHA-256 enters every fingerprint built on them. Everything is pure (bytes in).
"""

from __future__ import annotations

import codecs
import hashlib
import io
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sampler_server.core.cog import LEVEL_NAMES, NUM_LEVELS
from sampler_server.core.hierarchy.wordnet import is_wnid
from sampler_server.errors import InputFormatError, NotFound
from sampler_server.quoting import quoted

SPLIT_KEYS = ("train", "test")
"""The keys of each concept's entry in the concepts split file."""


class _NdarrayName:
    """What ``numpy.ndarray`` resolves to inside a pickle: only ``_reconstruct`` accepts it,
    so a pickle cannot call the constructor itself (e.g. to allocate a huge array)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise pickle.UnpicklingError("it calls numpy.ndarray, which is rebuilt through _reconstruct only")


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """The globals numpy arrays, dtypes and scalars pickle through, under both numpy
    generations' module names, taken from the objects themselves (no private import)."""
    reconstruct = np.ndarray.__reduce__(np.zeros(0))[0]
    frombuffer = np.zeros(1).__reduce_ex__(5)[0]
    scalar = np.float64(0).__reduce__()[0]

    def reconstruct_ndarray(subtype: Any, shape: Any, typecode: Any) -> np.ndarray:
        if subtype is not _NdarrayName:
            raise pickle.UnpicklingError("_reconstruct builds numpy.ndarray only")
        return reconstruct(np.ndarray, shape, typecode)

    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): _NdarrayName, ("numpy", "dtype"): np.dtype,
                                           ("_codecs", "encode"): codecs.encode}
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct_ndarray
        allowed[(f"{core}.multiarray", "scalar")] = scalar
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


_ALLOWED_GLOBALS = _numpy_globals()


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, source: str) -> None:
        super().__init__(io.BytesIO(data))
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED_GLOBALS.get((module, name))
        if found is None:
            raise InputFormatError(self.source, f"the pickle names {module}.{name}, which is not read: only lists, "
                                   "dicts, strings, numbers and numpy string/object arrays are (a pickle is code "
                                   "otherwise)")
        if found is codecs.encode:
            return _encode_text
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise InputFormatError(self.source, "the pickle refers to a persistent object, which is not read: only lists, "
                               "dicts, strings, numbers and numpy string/object arrays are")


def _encode_text(text: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as protocol 2 uses it for bytes: a str and a text encoding only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "ascii"):
        raise pickle.UnpicklingError(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not a bytes literal")
    return codecs.encode(text, encoding, errors)


def _check_values(value: Any, source: str, depth: int = 0) -> None:
    """Only lists, tuples, dicts, strings, numbers and numpy string/object arrays of strings."""
    if depth > 16:
        raise InputFormatError(source, "nested more than 16 levels deep; expected lists or dicts of names")
    if value is None or isinstance(value, (str, bytes, bool, int, float, np.number, np.str_, np.bytes_)):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_values(item, source, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _check_values(key, source, depth + 1)
            _check_values(item, source, depth + 1)
        return
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "US":
            return
        if value.dtype.kind == "O":
            for item in value.ravel().tolist():
                if not isinstance(item, (str, bytes)):
                    raise InputFormatError(source, f"a numpy object array holds a {type(item).__name__}, expected "
                                           "strings only")
            return
        raise InputFormatError(source, f"a numpy array of dtype {value.dtype}, expected strings (dtype U, S or O)")
    raise InputFormatError(source, f"holds a {type(value).__name__}, expected only lists, dicts, strings, numbers "
                           "and numpy string/object arrays")


def load_restricted(data: bytes, *, source: str) -> Any:
    """The object a pickle holds, if it is made of lists, dicts, strings, numbers and
    numpy string/object arrays only; else ``InputFormatError`` naming ``source``."""
    try:
        value = _RestrictedUnpickler(data, source).load()
    except InputFormatError:
        raise
    except RecursionError:
        raise InputFormatError(source, "not a readable pickle (nested too deeply)") from None
    except Exception as error:  # a malformed pickle raises many kinds; each is one line here
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputFormatError(source, f"not a readable pickle ({text})") from None
    _check_values(value, source)
    return value


def _sequence(value: Any) -> Sequence[Any] | None:
    if isinstance(value, (list, tuple)):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return value.tolist()
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return str(value) if isinstance(value, str) else None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class OfficialLevels:
    """The levels of a levels mapping file: ``levels[k]`` is level ``LEVEL_NAMES[k]``'s
    wnids, sorted (label order)."""

    source: str
    sha256: str
    levels: tuple[tuple[str, ...], ...]

    def concepts(self, name: str) -> tuple[str, ...]:
        """Level ``name``'s wnids in label order."""
        if name not in LEVEL_NAMES:
            raise NotFound(f"level {quoted(name)} does not exist in {self.source}; levels: {', '.join(LEVEL_NAMES)}")
        return self.levels[LEVEL_NAMES.index(name)]

    @property
    def by_name(self) -> dict[str, tuple[str, ...]]:
        return dict(zip(LEVEL_NAMES, self.levels))


def parse_levels_file(data: bytes, *, source: str) -> OfficialLevels:
    """A ``cog_levels_mapping_file.pkl``: a list of 5 lists of wnids, L1 first."""
    value = load_restricted(data, source=source)
    levels = _sequence(value)
    if levels is None or len(levels) != NUM_LEVELS:
        what = f"a {type(value).__name__}" + (f" of {len(levels)}" if levels is not None else "")
        raise InputFormatError(source, f"got {what}, expected a list of {NUM_LEVELS} lists of wnids (L1 first)")
    parsed = []
    for name, level in zip(LEVEL_NAMES, levels):
        wnids = _sequence(level)
        if wnids is None or not wnids:
            raise InputFormatError(source, f"level {name} is not a non-empty list of wnids")
        texts = [_text(w) for w in wnids]
        bad = next((w for w, t in zip(wnids, texts) if t is None or not is_wnid(t)), None)
        if bad is not None:
            raise InputFormatError(source, f"level {name} holds {quoted(bad)}, expected wnids ('n' + 8 digits)")
        ordered = tuple(sorted(texts))  # type: ignore[arg-type]
        twice = next((a for a, b in zip(ordered, ordered[1:]) if a == b), None)
        if twice is not None:
            raise InputFormatError(source, f"level {name} lists {twice} twice")
        parsed.append(ordered)
    return OfficialLevels(source=source, sha256=sha256_hex(data), levels=tuple(parsed))


@dataclass(frozen=True)
class ConceptImages:
    """A concepts split file: wnid -> (train names, test names), each sorted as given."""

    source: str
    sha256: str
    images: Mapping[str, tuple[np.ndarray, np.ndarray]]

    def of(self, wnid: str) -> tuple[np.ndarray, np.ndarray]:
        return self.images[wnid]


def parse_concepts_split_file(data: bytes, *, source: str) -> ConceptImages:
    """A ``cog_concepts_split_file.pkl``: {wnid: {"train": names, "test": names}}.

    Names are kept as given (a leading "/" included) and sorted, as the reference orders
    them; a name listed twice in one concept, or in both its train and test, is refused."""
    value = load_restricted(data, source=source)
    if not isinstance(value, dict) or not value:
        raise InputFormatError(source, f"got a {type(value).__name__}, expected a dict mapping each wnid to "
                               '{"train": names, "test": names}')
    images: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for key, entry in value.items():
        wnid = _text(key)
        if wnid is None or not is_wnid(wnid):
            raise InputFormatError(source, f"key {quoted(key)} is not a wnid ('n' + 8 digits)")
        if wnid in images:
            raise InputFormatError(source, f"concept {wnid} appears twice")
        if not isinstance(entry, dict) or sorted(map(str, entry)) != sorted(SPLIT_KEYS):
            keys = sorted(map(str, entry)) if isinstance(entry, dict) else type(entry).__name__
            raise InputFormatError(source, f"concept {wnid}: got {keys}, expected a dict with keys "
                                   f"{' and '.join(SPLIT_KEYS)}")
        parts = []
        for split in SPLIT_KEYS:
            ordered = _sorted_names(entry[split])
            if ordered is None or (len(ordered) and np.any(np.char.str_len(np.char.strip(ordered, "/\\")) == 0)):
                raise InputFormatError(source, f"concept {wnid} {split}: expected a list or array of file names")
            if len(ordered) > 1 and np.any(ordered[1:] == ordered[:-1]):
                twice = ordered[1:][ordered[1:] == ordered[:-1]][0]
                raise InputFormatError(source, f"concept {wnid} {split}: {twice} is listed twice")
            parts.append(ordered)
        train, test = parts
        at = np.minimum(np.searchsorted(train, test), max(len(train) - 1, 0))
        both = test[train[at] == test] if len(train) else test[:0]  # both sorted: a lookup, not a set operation
        if len(both):
            raise InputFormatError(source, f"concept {wnid}: {both[0]} is in both train and test")
        images[wnid] = (parts[0], parts[1])
    return ConceptImages(source=source, sha256=sha256_hex(data), images=dict(sorted(images.items())))


def _sorted_names(value: Any) -> np.ndarray | None:
    """A concept's names as a sorted numpy str array (code point order, as Python sorts
    str), None when they are not all strings. Numpy string arrays, the reference's form,
    are sorted in numpy (the whole file holds millions of names)."""
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "US":
        if value.dtype.kind == "S":
            try:
                value = np.char.decode(value, "utf-8")
            except UnicodeDecodeError:
                return None
        return np.sort(value)
    names = _sequence(value)
    texts = None if names is None else [_text(n) for n in names]
    if texts is None or any(t is None for t in texts):
        return None
    return np.array(sorted(texts), dtype=str)  # type: ignore[arg-type]


def image_key(wnid: str, name: str) -> str:
    """The store origin (``<wnid folder>/<file>``) a split file's name stands for: one
    leading "/" dropped as the reference drops it; a bare file name is in its concept's folder."""
    if name[:1] in ("/", "\\"):
        name = name[1:]
    return name if "/" in name else f"{wnid}/{name}"
