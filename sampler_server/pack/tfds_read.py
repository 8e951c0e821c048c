"""Reading one prepared TFDS dataset in canonical order.

``tensorflow-datasets`` is an optional dependency (the ``vtab`` extra): it is
imported here, on first use, and nowhere on the serving side.

Canonical order is what TFDS slicing refers to: a split's shards in file-number
order, each in file order (``train[i:i+1]`` is example i of that sequence). TFDS's
default read interleaves shards (16 at a time, blocks of 16) even with
``shuffle_files=False`` (``core.vtab.read_order`` computes that order, for
``trainval1000``), so the reader asks for ``interleave_cycle_length=1`` and,
to be sure, checks every example's ``tfds_id`` (``<shard file>__<position>``)
against the next expected one: an out-of-order read fails the pack instead of
shuffling labels silently.

Locating the data (``locate``) only looks at directories: ``DIR/<name>[/<config>]/
<version>/dataset_info.json`` as ``download_and_prepare`` leaves it.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from sampler_server.errors import DataLoss, FailedPrecondition, InputFormatError, InvalidArgument
from sampler_server.quoting import quoted
from sampler_server.store.vtab_records import version_matches

_NAME = re.compile(r"[a-z0-9_]+(/[A-Za-z0-9_.\-]+)?")
_VERSION = re.compile(r"(\d+|\*)\.(\d+|\*)\.(\d+|\*)")
_RESOLVED = re.compile(r"\d+\.\d+\.\d+")
INSTALL_HINT = "pip install 'sampler-server[vtab]'"


@dataclass(frozen=True)
class TfdsName:
    """``name[/config][:version]``; the version may be exact or a pattern like ``3.*.*``."""

    dataset: str  # name[/config], as the VTAB table spells it
    version: str | None = None

    @classmethod
    def parse(cls, text: str) -> TfdsName:
        dataset, _, version = text.partition(":")
        if not _NAME.fullmatch(dataset) or (version and not _VERSION.fullmatch(version)):
            raise InvalidArgument(
                f"--tfds-name: got {quoted(text)}, expected name[/config][:version], e.g. clevr, eurosat/rgb, "
                "kitti:3.1.0 or clevr:3.*.*"
            )
        return cls(dataset, version or None)

    @property
    def base(self) -> str:
        """The builder name without its config (``eurosat`` of ``eurosat/rgb``)."""
        return self.dataset.split("/")[0]


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def prepared_versions(data_dir: Path, dataset: str) -> dict[str, Path]:
    """Version -> directory of every prepared version of ``dataset`` under ``data_dir``
    (TFDS's unfinished ``<version>.incomplete*`` directories are not versions)."""
    root = Path(data_dir) / dataset
    if not root.is_dir():
        return {}
    return {
        child.name: child
        for child in root.iterdir()
        if _RESOLVED.fullmatch(child.name) and (child / "dataset_info.json").is_file()
    }


def locate(data_dir: Path, name: TfdsName, wanted: tuple[str, ...] = ()) -> tuple[Path, str]:
    """(directory, version) of the prepared dataset: the version named, else the highest
    matching one of ``wanted`` (VTAB's version patterns), else the highest there.

    Raises:
        InputFormatError: no such data directory, dataset or version (one line naming them).
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputFormatError(data_dir, "missing TFDS data directory")
    versions = prepared_versions(data_dir, name.dataset)
    if not versions:
        raise InputFormatError(
            data_dir,
            f"no prepared TFDS dataset {name.dataset!r} (expected {name.dataset}/<version>/dataset_info.json, "
            "as tfds download_and_prepare writes it)",
        )
    present = ", ".join(sorted(versions, key=version_key))
    patterns = (name.version,) if name.version else wanted
    if patterns:
        candidates = [v for v in versions if any(version_matches(v, p) for p in patterns)]
        if not candidates:
            asked = name.version or " or ".join(wanted) + " (VTAB's)"
            hint = "" if name.version else f"; pass --tfds-name {name.dataset}:<version> to pack another"
            raise InputFormatError(
                data_dir / name.dataset, f"no version {asked} of TFDS dataset {name.dataset!r} (versions here: {present}){hint}"
            )
    else:
        candidates = list(versions)
    version = max(candidates, key=version_key)
    return versions[version], version


def import_tfds() -> ModuleType:
    """The ``tensorflow_datasets`` module, quiet; FailedPrecondition naming the extra when missing."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    try:
        import tensorflow  # noqa: F401  (TFDS reads its files through it)
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise FailedPrecondition(
            f"packing TFDS datasets needs tensorflow-datasets ({error.name or error} is missing): {INSTALL_HINT}"
        ) from None
    import logging

    for logger in ("tensorflow", "absl"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    return tfds


def open_builder(directory: Path) -> Any:
    """A read-only TFDS builder over prepared files (no builder code or download needed)."""
    tfds = import_tfds()
    try:
        return tfds.builder_from_directory(os.fspath(directory))
    except Exception as error:  # TFDS raises many kinds for unreadable metadata
        raise InputFormatError(directory, f"unreadable TFDS dataset info ({type(error).__name__}: {error})") from None


@dataclass(frozen=True)
class SplitLayout:
    """A split's shards in canonical order and their example counts."""

    name: str
    shard_files: tuple[str, ...]
    shard_lengths: tuple[int, ...]

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)

    def expected_ids(self) -> Iterator[str]:
        """The ``tfds_id`` of each example in canonical order."""
        for file_name, length in zip(self.shard_files, self.shard_lengths):
            for position in range(length):
                yield f"{file_name}__{position}"


def split_layouts(builder: Any) -> dict[str, SplitLayout]:
    """Every split of the dataset, by name."""
    out = {}
    for name, info in builder.info.splits.items():
        files = tuple(os.path.basename(f) for f in info.filenames)
        lengths = tuple(int(n) for n in info.shard_lengths)
        if len(files) != len(lengths):
            raise InputFormatError(builder.data_dir, f"split {name}: {len(files)} shard files but {len(lengths)} shard lengths")
        out[str(name)] = SplitLayout(str(name), files, lengths)
    return out


def read_split(builder: Any, layout: SplitLayout, features: Mapping[str, Any], raw: tuple[str, ...]) -> Iterator[dict]:
    """The examples of one split in canonical order, as numpy values.

    ``features``: the PartialDecoding spec of what to decode; ``raw``: top-level image
    features kept as their stored encoded bytes (no decode, no re-encode)."""
    tfds = import_tfds()
    decoders = tfds.decode.PartialDecoding(
        dict(features), decoders={name: tfds.decode.SkipDecoding() for name in raw}
    )
    read_config = tfds.ReadConfig(interleave_cycle_length=1, add_tfds_id=True, try_autocache=False)
    dataset = builder.as_dataset(split=layout.name, shuffle_files=False, decoders=decoders, read_config=read_config)
    where = f"{builder.data_dir}: split {layout.name}"
    if _fixed_shapes(dataset.element_spec):
        examples = _unbatched(_guarded(tfds.as_numpy(dataset.batch(READ_BATCH)), where, READ_BATCH))
    else:  # a sequence feature (CLEVR's or KITTI's objects): rows of different lengths, read one at a time
        examples = _guarded(tfds.as_numpy(dataset), where, 1)
    for index, (example, wanted) in enumerate(itertools.zip_longest(examples, layout.expected_ids())):
        got = None if example is None else example.pop("tfds_id").decode("utf-8")
        if got != wanted:
            raise DataLoss(
                f"{builder.data_dir}: split {layout.name}, index {index}: read {got or 'nothing'} where canonical "
                f"order has {wanted or 'the end of the split'}; not packed out of order"
            )
        yield example


READ_BATCH = 256
"""Examples per TensorFlow step when every feature has one shape: a step per example costs
about a millisecond of Python and TensorFlow overhead, which was most of packing's time."""


def _fixed_shapes(spec: Any) -> bool:
    import tensorflow as tf

    return all(isinstance(leaf, tf.TensorSpec) and leaf.shape.is_fully_defined() for leaf in tf.nest.flatten(spec))


def _unbatched(batches: Iterator[dict]) -> Iterator[dict]:
    """Each row of each batch, as the example a one-at-a-time read gives (numpy scalars and arrays)."""
    for batch in batches:
        flat = _flatten(batch)
        rows = len(next(iter(flat.values())))
        for row in range(rows):
            yield _nest({path: values[row] for path, values in flat.items()})


def _flatten(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def _nest(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _guarded(examples: Iterator[dict], where: str, per_step: int) -> Iterator[dict]:
    """TensorFlow's own errors for damaged files (multi-line OpErrors) as one-line DataLoss."""
    iterator = iter(examples)
    index = 0
    while True:
        try:
            example = next(iterator)
        except StopIteration:
            return
        except Exception as error:  # tf.errors.* and whatever the decoders raise
            first = re.sub(r"\{\{[^}]*\}\}\s*", "", (str(error).strip().splitlines() or [""])[0])[:200]
            within = "" if per_step == 1 else f" or one of the {per_step - 1} after it"
            raise DataLoss(f"{where}, index {index * per_step}{within}: unreadable TFDS record "
                           f"({type(error).__name__}: {first})") from None
        yield example
        index += 1
