"""ImageNet-CoG level splits and few-shot subsets: which images of a concept are test,
train, few-shot train and validation.

Per concept, over its records in store order (record id order = file-name order):

- ``test``: ``TEST_PER_CONCEPT`` (50) images, the first 50 positions of a permutation
  keyed on (source fingerprint, wnid); ``train``: the rest, at most
  ``MAX_TRAIN_PER_CONCEPT`` (1300), taken in the same permutation's order. The
  reference ships these lists; we cannot, so they are drawn once per store content and
  never depend on the level, the shots or the seed. A concept of 50 images or fewer
  (only possible with a toy ``min_images``) has all of them in test and none in train.
- IN-1K instead (``HeldOutTest``), as naver/cog evaluates it: ``test`` is the class's
  official ILSVRC-2012 validation images (the ILSVRC store's ``validation`` partition,
  50 per class) and ``train`` every train image of the class, nothing held out and no
  cap. A store without that partition is ``FailedPrecondition``: IN-1K is never drawn
  from train images, whose test set every IN-1K-pretrained backbone has trained on.
- ``train`` with ``shots`` N: the first N of a permutation of the concept's train
  images keyed on (fingerprint, wnid, seed), so for one seed the subsets nest
  (1 in 2 in 4 ... in 128). A concept with fewer than N train images gives all it has.
- ``val`` for a seed: ``int(0.2 n)`` (at least 1 when n >= 2) of the concept's n full
  train images, the first positions of a permutation keyed on (fingerprint, wnid, seed).
  It does not depend on the shots: the reference (naver/cog ``logreg.py`` with
  ``feature_ops.split_trainset``) holds 20% of the full train set out first and, for a
  few-shot search, draws the N images from the remaining 80%.
- ``search`` with ``shots`` N and a seed: what the hyper-parameter search trains on, the
  concept's train images minus val, then (N > 0) the first N of a permutation of them
  keyed on (fingerprint, wnid, seed), nested across N like ``train``'s.

A split lists concepts in label order (sorted wnid; label = position) and each
concept's records by record id. Permutations are legacy ``RandomState`` streams from
the one seeding helper (``core.seeding``, protocol ``imagenet_cog``), so everything
here is a pure function of (source fingerprint, level configuration, level, split,
shots, seed) and of the records, never of input order, process or NumPy release.

Requests: ``shots`` 0 means all train images; a few-shot train set and every val set
need a seed (>= 1; the paper uses 1..5); the test set and the full train set do not
depend on the seed and are always reported with seed 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sampler_common.checks import check_seed
from sampler_common.splits import COG as COG_SPLIT_NAMES
from sampler_server.core.cog import (
    LEVEL_NAMES,
    LEVEL_SIZE,
    MAX_TRAIN_PER_CONCEPT,
    MIN_IMAGES,
    SEEN_LEVEL,
    SHOTS,
    SOURCE,
    TEST_PER_CONCEPT,
    VAL_FRACTION,
)
from sampler_server.core.hashing import FieldHasher
from sampler_server.core.seeding import Protocol, derive_rng
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, field_checks
from sampler_server.quoting import quoted

SPLITS = COG_SPLIT_NAMES.names
LEVELS = (SEEN_LEVEL, *LEVEL_NAMES)
SEEN_SOURCE = "ilsvrc_2012"
"""Source kind of the ILSVRC-2012 store whose classes are the seen level IN-1K."""
_SPLIT_DOMAIN = "sampler-server/cog-split/v1"
_BATCH_DOMAIN = "sampler-server/cog-batch/v1"


@dataclass(frozen=True)
class SplitRequest:
    """A checked, canonical name of one level split: seedless splits carry seed 0."""

    level: str
    split: str
    shots: int = 0
    seed: int = 0

    @classmethod
    def parse(cls, level: str, split: str, shots: int = 0, seed: int = 0) -> "SplitRequest":
        """``InvalidArgument`` naming the field and what it allows; the seed of the test
        set and of the full train set is dropped (they do not depend on it)."""
        if level not in LEVELS:
            raise InvalidArgument(f"level: got {quoted(level)}, expected one of {', '.join(LEVELS)}")
        with field_checks():  # the names and aliases the client and the CLI accept (sampler_common.splits)
            split = COG_SPLIT_NAMES.canonical(split)
        if isinstance(shots, bool) or not isinstance(shots, (int, np.integer)) or (shots and shots not in SHOTS):
            raise InvalidArgument(f"shots: got {shots!r}, expected 0 (all images) or one of "
                                  f"{', '.join(map(str, SHOTS))}")
        with field_checks():
            check_seed(seed)
        shots, seed = int(shots), int(seed)
        if split == "test":
            if shots:
                raise InvalidArgument(f"shots: got {shots} for split test, expected 0 (the test set is "
                                      f"always {TEST_PER_CONCEPT} images per concept)")
            return cls(level, split, 0, 0)
        if split == "train" and not shots:
            return cls(level, split, 0, 0)
        if split == "val" and shots:
            raise InvalidArgument(f"shots: got {shots} for split val, expected 0 (val is 20% of the full train "
                                  "set whatever the shots; a few-shot search trains on split search)")
        if not seed:
            what = {"train": f"a {shots}-shot train set", "val": "the val split",
                    "search": "the search split (train minus val)"}[split]
            raise InvalidArgument(f"seed: {what} is drawn at random and needs a seed >= 1 (the paper uses "
                                  f"1 to 5), got 0")
        return cls(level, split, shots, seed)

    @property
    def label(self) -> str:
        shots = f" {self.shots}-shot" if self.shots else ""
        seed = f" seed {self.seed}" if self.seed else ""
        return f"{self.level} {self.split}{shots}{seed}"


def _rng(fingerprint: str, wnid: str, split: Split, seed: int, index: int) -> np.random.RandomState:
    if not wnid:
        raise InvalidArgument("wnid: empty; every CoG concept is a WordNet synset id")
    return derive_rng(seed, Protocol.IMAGENET_COG, f"{fingerprint}/{wnid}", split, index)


def _sorted_ids(record_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    ids = np.unique(np.asarray(record_ids, dtype=np.int64))
    if len(ids) != len(record_ids):
        raise InvalidArgument("record_ids: a concept lists a record twice")
    return ids


def partition_concept(fingerprint: str, wnid: str, record_ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(test, full train) record ids of one concept, each sorted."""
    ids = _sorted_ids(record_ids)
    if not len(ids):
        return ids, ids
    order = _rng(fingerprint, wnid, Split.TEST, 0, 0).permutation(len(ids))
    test = ids[order[:TEST_PER_CONCEPT]]
    train = ids[order[TEST_PER_CONCEPT: TEST_PER_CONCEPT + MAX_TRAIN_PER_CONCEPT]]
    return np.sort(test), np.sort(train)


def few_shot(fingerprint: str, wnid: str, train_ids: Sequence[int] | np.ndarray, shots: int, seed: int) -> np.ndarray:
    """The ``shots``-image subset of one concept's train ids for ``seed`` (sorted); all of
    them when it has fewer. Subsets of one seed nest across ``shots``."""
    ids = _sorted_ids(train_ids)
    if not len(ids):
        return ids
    order = _rng(fingerprint, wnid, Split.TRAIN, seed, 0).permutation(len(ids))
    return np.sort(ids[order[:shots]])


def val_count(n: int) -> int:
    """Images held out of an n-image train set: int(0.2 n), at least 1 when n >= 2."""
    if n < 2:
        return 0
    return max(1, int(n * VAL_FRACTION))


def validation(fingerprint: str, wnid: str, train_ids: Sequence[int] | np.ndarray, seed: int) -> np.ndarray:
    """The val ids (sorted) held out of one concept's full train set for ``seed``."""
    ids = _sorted_ids(train_ids)
    take = val_count(len(ids))
    if not take:
        return ids[:0]
    order = _rng(fingerprint, wnid, Split.VALID, seed, 0).permutation(len(ids))
    return np.sort(ids[order[:take]])


def search_train(fingerprint: str, wnid: str, train_ids: Sequence[int] | np.ndarray, shots: int,
                 seed: int) -> np.ndarray:
    """What the search trains on (sorted): the full train ids minus val for ``seed``, then
    ``shots`` of them (all when 0), drawn as ``few_shot`` draws from the full train set."""
    ids = _sorted_ids(train_ids)
    rest = np.setdiff1d(ids, validation(fingerprint, wnid, ids, seed), assume_unique=True)
    if not shots or not len(rest):
        return rest
    order = _rng(fingerprint, wnid, Split.TRAIN, seed, 1).permutation(len(rest))
    return np.sort(rest[order[:shots]])


@dataclass(frozen=True)
class HeldOutTest:
    """A level tested on a partition of its own (IN-1K: ILSVRC-2012's official validation
    images). ``records[wnid]``: the concept's test records; its train set is then every
    record of its pool (nothing held out, no cap). ``fingerprint`` (the partition's
    content) enters the split fingerprint; ``partition`` names what test records are."""

    records: Mapping[str, Sequence[int] | np.ndarray]
    fingerprint: str
    partition: str = "validation"


TRAIN_PARTITION = "train"


def concept_records(fingerprint: str, wnid: str, record_ids: Sequence[int] | np.ndarray,
                    request: SplitRequest, test_ids: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """The sorted record ids one concept contributes to ``request``'s split; ``test_ids``:
    its held-out test records (``HeldOutTest``), its train set then all of ``record_ids``."""
    if test_ids is not None:
        test, train = _sorted_ids(test_ids), _sorted_ids(record_ids)
    else:
        test, train = partition_concept(fingerprint, wnid, record_ids)
    if request.split == "test":
        return test
    if request.split == "val":
        return validation(fingerprint, wnid, train, request.seed)
    if request.split == "search":
        return search_train(fingerprint, wnid, train, request.shots, request.seed)
    if request.shots:
        return few_shot(fingerprint, wnid, train, request.shots, request.seed)
    return train


def split_sizes(count: int) -> tuple[int, int]:
    """(full train, test) images of a concept of ``count`` images."""
    test = min(TEST_PER_CONCEPT, count)
    return min(MAX_TRAIN_PER_CONCEPT, count - test), test


@dataclass(frozen=True)
class CogSplit:
    """One level split in order: ``labels[i]`` is the position of record ``record_ids[i]``'s
    concept in ``wnids``. ``level_size`` / ``min_images`` are 0 for IN-1K (its splits do
    not depend on the level configuration)."""

    level: str
    split: str
    shots: int
    seed: int
    level_size: int
    min_images: int
    source_fingerprint: str
    wnids: tuple[str, ...]
    record_ids: np.ndarray
    labels: np.ndarray
    fingerprint: str
    partition: str = TRAIN_PARTITION
    """The store partition every record comes from: "train", or "validation" for IN-1K's test split."""

    @property
    def size(self) -> int:
        return len(self.record_ids)

    @property
    def partitions(self) -> list[str]:
        """Per record (parallel to ``record_ids``): the store partition it comes from."""
        return [self.partition] * self.size

    @property
    def num_classes(self) -> int:
        return len(self.wnids)

    def to_json(self) -> dict[str, Any]:
        """What ``sampler-server cog split --json`` prints: the split and its records in order."""
        return {
            "level": self.level, "split": self.split, "shots": self.shots, "seed": self.seed,
            "level_size": self.level_size, "min_images": self.min_images,
            "source_fingerprint": self.source_fingerprint, "num_classes": self.num_classes,
            "count": self.size, "fingerprint": self.fingerprint, "wnids": list(self.wnids),
            "records": [{"record_id": int(r), "label": int(label), "wnid": self.wnids[label],
                         "partition": self.partition}
                        for r, label in zip(self.record_ids.tolist(), self.labels.tolist())],
        }


def split_fingerprint(source_fingerprint: str, level_size: int, min_images: int, request: SplitRequest,
                      wnids: Sequence[str], record_ids: np.ndarray, labels: np.ndarray,
                      held_out_fingerprint: str = "") -> str:
    hasher = FieldHasher(_SPLIT_DOMAIN).text(source_fingerprint).integer(level_size).integer(min_images)
    if held_out_fingerprint:  # the test partition's content (IN-1K's validation images)
        hasher.text("held-out").text(held_out_fingerprint)
    hasher.text(request.level).text(request.split).integer(request.shots).integer(request.seed)
    hasher.integer(len(wnids))
    for wnid in wnids:
        hasher.text(wnid)
    return hasher.integers(record_ids.tolist()).integers(labels.tolist()).hexdigest()


def build_split(source_fingerprint: str, records: Mapping[str, Sequence[int] | np.ndarray], concepts: Sequence[str],
                request: SplitRequest, *, level_size: int, min_images: int,
                held_out: HeldOutTest | None = None) -> CogSplit:
    """The split of ``request`` over ``concepts`` (the level's wnids, any order), whose
    records are ``records[wnid]`` in a store of content ``source_fingerprint``.

    ``level_size`` / ``min_images`` are the level configuration the concepts came from
    (they enter the fingerprint; IN-1K ignores them). ``held_out``: the level's test
    partition (IN-1K needs one: ``held_out_test``). ``InvalidArgument`` when a concept
    has no records listed; ``FailedPrecondition`` for IN-1K without ``held_out``."""
    if request.level == SEEN_LEVEL and held_out is None:
        raise missing_validation("the ILSVRC-2012 store")
    wnids = tuple(sorted(set(concepts)))
    if len(wnids) != len(concepts):
        raise InvalidArgument(f"concepts: a level lists a concept twice ({len(concepts)} given, {len(wnids)} distinct)")
    missing = [w for w in wnids if w not in records]
    if missing:
        raise InvalidArgument(f"concepts: {len(missing)} have no records in the store, e.g. {quoted(missing[0])}")
    if request.level == SEEN_LEVEL:
        level_size = min_images = 0
    if held_out is not None:
        lacking = [w for w in wnids if w not in held_out.records]
        if lacking:
            raise FailedPrecondition(f"concepts: {len(lacking)} have no {held_out.partition} records in the store, "
                                     f"e.g. {quoted(lacking[0])}")
    parts = [concept_records(source_fingerprint, wnid, records[wnid], request,
                             held_out.records[wnid] if held_out is not None else None) for wnid in wnids]
    record_ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    labels = np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for p in parts])
    fingerprint = split_fingerprint(source_fingerprint, level_size, min_images, request, wnids, record_ids, labels,
                                    held_out.fingerprint if held_out is not None else "")
    partition = held_out.partition if held_out is not None and request.split == "test" else TRAIN_PARTITION
    return CogSplit(request.level, request.split, request.shots, request.seed, level_size, min_images,
                    source_fingerprint, wnids, record_ids.astype(np.int64), labels, fingerprint, partition)


def level_config(level_size: int, min_images: int) -> tuple[int, int]:
    """(level_size, min_images) of a request, 0 meaning the paper's 1000 / 782."""
    for name, value in (("level_size", level_size), ("min_images", min_images)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise InvalidArgument(f"{name}: got {value!r}, expected a positive integer (0 = the paper's value)")
    return int(level_size) or LEVEL_SIZE, int(min_images) or MIN_IMAGES


def level_source(level: str) -> str:
    """The source kind whose store serves ``level``: ILSVRC-2012 for IN-1K, else IN-21K."""
    return SEEN_SOURCE if level == SEEN_LEVEL else SOURCE


def missing_store(level: str, where: str) -> NotFound:
    """The error for a level whose store ``where`` (a data directory, the server) lacks."""
    source = level_source(level)
    other = f"; levels without it: {', '.join(LEVEL_NAMES)}" if level == SEEN_LEVEL else ""
    return NotFound(f"level {level}: {where} has no {source} store (pack it with `sampler-server pack "
                    f"{source}`){other}")


def missing_validation(store: str) -> FailedPrecondition:
    """The error for IN-1K over an ILSVRC store packed without its validation images."""
    return FailedPrecondition(
        f"level {SEEN_LEVEL}: {store} has no validation partition; IN-1K tests on ILSVRC-2012's official "
        f"validation images (never on train images): repack it with `sampler-server pack {SEEN_SOURCE} --input "
        f"TRAIN_DIR --validation VAL_DIR`")


def held_out_test(manifest: Any, store: str) -> HeldOutTest:
    """IN-1K's test partition: the ILSVRC store's validation records by wnid
    (``store.manifest.HeldOutPartition``); ``FailedPrecondition`` naming ``pack
    ilsvrc_2012 --validation`` when ``manifest`` has none."""
    validation = getattr(manifest, "validation", None)
    if validation is None:
        raise missing_validation(f"store {store}")
    records = {c.wnid: range(start, end) for c, (start, end) in zip(manifest.classes, validation.ranges) if c.wnid}
    return HeldOutTest(records, validation.fingerprint, validation.name)


def seen_sizes(manifest: Any, store: str) -> dict[str, tuple[int, int]]:
    """IN-1K's (train, test) images per wnid: every train image, the validation images."""
    held_out = held_out_test(manifest, store)
    return {c.wnid: (c.count, len(held_out.records[c.wnid])) for c in manifest.classes if c.wnid}


def seen_concepts(classes: Sequence[Any]) -> tuple[str, ...]:
    """IN-1K's concepts: the wnids of the ILSVRC store's classes, sorted (its MD class
    splits do not apply: CoG uses every class)."""
    return tuple(sorted(c.wnid for c in classes if c.wnid))


def records_by_wnid(classes: Sequence[Any]) -> dict[str, range]:
    """wnid -> record ids of a store's classes (``ClassInfo``: contiguous [start, end));
    classes without a wnid are not CoG concepts and are left out."""
    return {c.wnid: range(c.start, c.end) for c in classes if c.wnid}


def num_batches(size: int, batch_size: int) -> int:
    """Batches of a split streamed in order; an empty split is one empty batch (it carries ``last``)."""
    return max(1, -(-size // batch_size))


def batch_fingerprint(split_fingerprint: str, index: int, record_ids: Sequence[int] | np.ndarray,
                      labels: Sequence[int] | np.ndarray) -> str:
    """A batch's identity: its split, its index and its records with their labels."""
    hasher = FieldHasher(_BATCH_DOMAIN).text(split_fingerprint).integer(int(index))
    return hasher.integers(np.asarray(record_ids).tolist()).integers(np.asarray(labels).tolist()).hexdigest()
