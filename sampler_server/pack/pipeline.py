"""The pack pipeline shared by every converter.

Streaming: classes are listed one at a time, items travel to worker processes in
small batches with a bounded number in flight, results come back in submission
order and are appended to the store. Memory therefore depends on the batch size
and worker count, not on the number of images. Record ids follow plan order, so
the store is the same whatever ``--workers`` is. A plan's held-out validation
partition (ILSVRC-2012) streams the same way after every class, into ranges of its
own with a fingerprint of its own; the classes' ranges and fingerprint are those of
the same plan without it.
"""

from __future__ import annotations

import collections
import concurrent.futures as futures
import errno
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
from tqdm import tqdm

from sampler_server import __version__, procutil
from sampler_server.errors import DiskFull, FailedPrecondition, InputFormatError, InvalidArgument, SamplerError
from sampler_server.imaging import ResizeMethod
from sampler_server.pack.derive import Derived, DeriveOptions, Failed, derive_batch
from sampler_server.pack.plan import RecordSidecar, SourceItem, SourcePlan
from sampler_server.store.fingerprint import ClassDigestFingerprint, ContentFingerprint
from sampler_server.store.manifest import VALIDATION, ClassInfo, HeldOutPartition, Manifest, Split, load_manifest
from sampler_server.store.wordnet_split import write_split_file
from sampler_server.store.writer import StoreWriter, is_servable

_BATCH = 32
_SKIPPED_LISTED = 1000
_LMDB_OVERHEAD = 1.1
_FULL_BELOW = 128 << 20  # an LMDB EIO with less free than this (two write transactions) is a full disk


@dataclass(frozen=True)
class PackOptions:
    """Options common to every converter (the CLI's ``pack`` flags)."""

    max_side: int | None = None
    raw_size: int | None = None
    on_error: str = "fail"
    workers: int = 0  # 0 = one per CPU core
    name: str | None = None
    overwrite: bool = False
    progress: bool = True
    jpeg_quality: int = 95
    raw_resize: ResizeMethod = ResizeMethod.BILINEAR  # how --raw-size records are resized
    lossless_derived: bool = False  # derived images as PNG instead of the reference's JPEG q75

    def __post_init__(self) -> None:
        if not isinstance(self.raw_resize, ResizeMethod):
            try:
                object.__setattr__(self, "raw_resize", ResizeMethod(self.raw_resize))
            except ValueError:
                allowed = ", ".join(m.value for m in ResizeMethod)
                raise InvalidArgument(f"--raw-resize must be one of {allowed}, got {self.raw_resize!r}") from None
        if self.max_side is not None and not 1 <= self.max_side <= 65535:
            raise InvalidArgument(f"--max-side must be in [1, 65535], got {self.max_side}")
        if self.raw_size is not None and not 1 <= self.raw_size <= 4096:
            raise InvalidArgument(f"--raw-size must be in [1, 4096], got {self.raw_size}")
        if self.max_side is not None and self.raw_size is not None:
            raise InvalidArgument("--max-side and --raw-size exclude each other (raw records are already S x S)")
        if self.on_error not in ("fail", "skip"):
            raise InvalidArgument(f"--on-error must be 'fail' or 'skip', got {self.on_error!r}")
        if self.workers < 0 or self.workers > 512:
            raise InvalidArgument(f"--workers must be in [0, 512] (0 = one per core), got {self.workers}")
        if not 1 <= self.jpeg_quality <= 100:
            raise InvalidArgument(f"jpeg quality must be in [1, 100], got {self.jpeg_quality}")
        if self.name is not None and (not self.name or self.name.startswith(".") or "/" in self.name):
            raise InvalidArgument(f"--name must be a plain directory name, got {self.name!r}")

    def effective_workers(self) -> int:
        return self.workers or max(1, os.cpu_count() or 1)

    def recorded(self) -> dict[str, Any]:
        """What the manifest keeps (encoding choices only; none enters the fingerprint)."""
        return {"max_side": self.max_side, "raw_size": self.raw_size, "on_error": self.on_error,
                "jpeg_quality": self.jpeg_quality if (self.max_side or self.raw_size) else None,
                **self.encoding()}

    def encoding(self) -> dict[str, Any]:
        """The options that decide what a store holds; a rerun with others is refused."""
        return {"max_side": self.max_side, "raw_size": self.raw_size,
                "raw_resize": self.raw_resize.value if self.raw_size else None,
                "lossless_derived": self.lossless_derived}


@dataclass
class PackSummary:
    """What a finished pack reports (printed by the CLI, returned to callers)."""

    source: str
    store_dir: Path
    manifest: Manifest
    num_skipped: int
    num_bytes: int
    seconds: float
    peak_rss_mb: float
    unchanged: bool = False
    workers_peak_rss_mb: float = 0.0
    anon_rss_mb: float | None = None  # heap etc., without file-backed LMDB map pages
    empty_classes: list[str] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return self.manifest.total_records / self.seconds if self.seconds > 0 else 0.0  # validation included


def _batched(plan: SourcePlan) -> Iterator[list[tuple[int, SourceItem]]]:
    batch: list[tuple[int, SourceItem]] = []
    for class_index, class_plan in enumerate(plan.classes + plan.validation):
        for item in class_plan.items():
            batch.append((class_index, item))
            if len(batch) >= _BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def _results_inline(plan: SourcePlan, options: DeriveOptions) -> Iterator[tuple[int, Derived | Failed]]:
    for batch in _batched(plan):
        yield from derive_batch(batch, options)


def _results_pooled(
    plan: SourcePlan, options: DeriveOptions, pool: futures.ProcessPoolExecutor, in_flight: int
) -> Iterator[tuple[int, Derived | Failed]]:
    pending: collections.deque[futures.Future] = collections.deque()
    for batch in _batched(plan):
        pending.append(pool.submit(derive_batch, batch, options))
        if len(pending) >= in_flight:
            yield from pending.popleft().result()
    while pending:
        yield from pending.popleft().result()


def _check_existing(final_dir: Path, plan: SourcePlan, options: PackOptions) -> Manifest | None:
    """An existing store of another source or other options is never silently replaced."""
    if not final_dir.exists():
        return None
    if not is_servable(final_dir):
        if any(final_dir.iterdir()):
            raise FailedPrecondition(f"{final_dir}: exists and is not a store; choose another --output or --name")
        return None
    existing = load_manifest(final_dir)
    if options.overwrite:
        return existing
    if existing.source != plan.source:
        raise FailedPrecondition(
            f"{final_dir}: already holds a store of source {existing.source!r}; "
            f"pass --overwrite to replace it or choose another --name"
        )
    encoding = options.encoding()
    held = {key: existing.pack_options.get(key) for key in encoding}
    if held != encoding:
        described = lambda values: ", ".join(f"{key}={value}" for key, value in values.items())  # noqa: E731
        raise FailedPrecondition(
            f"{final_dir}: already holds a store of source {plan.source!r} packed with {described(held)}; "
            f"this pack asks for {described(encoding)}; "
            f"pass --overwrite to replace it or choose another --name"
        )
    return existing


def _peak_rss_mb(children: bool = False) -> float:
    """Peak resident set size of this process (or of its largest finished child)."""
    import resource

    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024.0


def _anonymous_rss_mb() -> float | None:
    """Resident anonymous memory now (Linux): what grows if packing leaked state."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


@dataclass
class _Progress:
    """How far the writing got (for the disk-full message)."""

    classes: int
    classes_done: int = 0


def _start_pool(workers: int) -> futures.ProcessPoolExecutor:
    """A pool whose workers all run now (fork starts them all at the first task) and end
    with this process, whatever ends it."""
    pool = futures.ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=procutil.die_with_parent,
        initargs=(os.getpid(),),
    )
    pool.submit(os.getpid).result()
    return pool


def _is_disk_full(error: BaseException, directory: Path) -> bool:
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(error, lmdb.Error):
        return False
    text = str(error)
    if "No space left" in text or "quota exceeded" in text.lower():
        return True
    # LMDB reports a short write (the disk filled in the middle of a page run) as EIO.
    return "Input/output error" in text and _free_bytes(directory) < _FULL_BELOW


def _free_bytes(directory: Path) -> int:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return 0


def _disk_full(writer: StoreWriter, progress: _Progress, output_root: Path) -> DiskFull:
    """One line: the output, what was written, about what the whole store needs, what is free."""
    written = writer.num_bytes
    # the classes not reached yet at this rate, and LMDB's pages around the values
    needed = int(max(written, written * progress.classes // max(progress.classes_done, 1)) * _LMDB_OVERHEAD)
    free = _free_bytes(output_root)
    mb = lambda n: f"{n / 1e6:.1f} MB"  # noqa: E731
    return DiskFull(
        f"{writer.final_dir}: disk full after writing {mb(written)} ({writer.num_records} images, "
        f"{progress.classes_done} of {progress.classes} classes); the store needs about {mb(needed)} and "
        f"{mb(free)} is free on {output_root}: free about {mb(max(needed - free, 0))} more or choose another "
        f"--output (nothing was kept)"
    )


def run_pack(plan: SourcePlan, output_root: Path, options: PackOptions) -> PackSummary:
    """Pack a converter's plan into ``output_root/<name>``; atomic on success, nothing on failure."""
    name = options.name or plan.default_name or plan.source
    derive_options = DeriveOptions(
        max_side=options.max_side,
        raw_size=options.raw_size,
        jpeg_quality=options.jpeg_quality,
        raw_resize=options.raw_resize,
        reference_encoding=plan.reference_encoding,
        lossless_derived=options.lossless_derived,
    )
    output_root = Path(output_root)
    final_dir = output_root / name
    existing = _check_existing(final_dir, plan, options)
    workers = options.effective_workers()
    started = time.perf_counter()

    # Workers start (and die with this process) before the writer takes the store's lock:
    # a forked child shares the parent's open files, and a lock held by an orphan would
    # refuse every rerun. No LMDB handle crosses a fork either.
    pool = _start_pool(workers) if workers > 1 else None
    writer = StoreWriter(output_root, name)
    progress = _Progress(classes=len(plan.classes) + len(plan.validation))
    refused = False
    sidecar: RecordSidecar | None = None
    try:
        try:
            writer.open()
        except FailedPrecondition:  # another pack holds the lock: its partial store is not ours to remove
            refused = True
            raise
        sidecar = plan.sidecar(writer.partial_dir) if plan.sidecar is not None else None
        results = (
            _results_pooled(plan, derive_options, pool, in_flight=2 * workers + 2)
            if pool is not None
            else _results_inline(plan, derive_options)
        )
        summary = _write_all(plan, results, writer, options, existing, started, progress, sidecar)
    except BaseException as error:
        if refused:
            raise
        full = _is_disk_full(error, output_root)
        if sidecar is not None:
            sidecar.abort()
        writer.abort()
        if full:
            raise _disk_full(writer, progress, output_root) from None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    summary.workers_peak_rss_mb = _peak_rss_mb(children=True)
    summary.anon_rss_mb = _anonymous_rss_mb()
    return summary


def _write_all(
    plan: SourcePlan,
    results: Iterator[tuple[int, Derived | Failed]],
    writer: StoreWriter,
    options: PackOptions,
    existing: Manifest | None,
    started: float,
    progress: _Progress,
    sidecar: RecordSidecar | None,
) -> PackSummary:
    fingerprint = (ClassDigestFingerprint if plan.class_digests else ContentFingerprint)(plan.source)
    held_out = ContentFingerprint(plan.source, partition=VALIDATION)
    plans = plan.classes + plan.validation  # index >= len(plan.classes): a class's validation images
    classes: list[ClassInfo] = []
    skipped: list[dict[str, str]] = []
    num_skipped = 0
    class_start = [-1] * len(plans)
    class_end = [0] * len(plans)
    by_image = plan.total_items is not None  # one TFDS split can hold all records: count images
    bar = tqdm(
        total=plan.total_items if by_image else len(plans),
        unit="image" if by_image else "class",
        desc=f"pack {plan.source}",
        disable=not options.progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    current = -1

    def close_class(index: int) -> None:
        progress.classes_done = index + 1
        if not by_image:
            bar.update(1)
        bar.set_postfix(images=writer.num_records, skipped=num_skipped, refresh=False)

    for class_index, result in results:
        while current < class_index:
            if current >= 0:
                close_class(current)
            current += 1
        if by_image:
            bar.update(1)
        if isinstance(result, Failed):
            if options.on_error == "fail":
                raise InputFormatError(result.path, result.problem + " (pass --on-error skip to skip such files)")
            num_skipped += 1
            if len(skipped) < _SKIPPED_LISTED:
                skipped.append({"origin": result.origin, "problem": result.problem})
            continue
        class_plan = plans[class_index]
        content = fingerprint if class_index < len(plan.classes) else held_out
        if class_start[class_index] < 0:
            class_start[class_index] = writer.num_records
            content.add_class(
                class_plan.name, class_plan.wnid, class_plan.group, class_plan.split.value if class_plan.split else None
            )
        writer.append(result.record)
        class_end[class_index] = writer.num_records
        content.add_record(result.origin, result.derivation, result.source_digest)
        if sidecar is not None:
            fingerprint.add_labels(sidecar.add(result.record.metadata))
    while current < len(plans) - 1:
        if current >= 0:
            close_class(current)
        current += 1
    if current >= 0:
        close_class(current)
    bar.close()

    empty: list[str] = []
    digests = fingerprint.class_digests() if isinstance(fingerprint, ClassDigestFingerprint) else None
    for class_index, class_plan in enumerate(plan.classes):
        if class_start[class_index] < 0:
            if options.on_error == "fail":
                raise InputFormatError(class_plan.name, "class has no images")
            empty.append(class_plan.name)
            continue
        classes.append(
            ClassInfo(
                id=len(classes),
                name=class_plan.name,
                start=class_start[class_index],
                end=class_end[class_index],
                split=class_plan.split,
                wnid=class_plan.wnid,
                group=class_plan.group,
                digest=digests[len(classes)] if digests is not None else None,
            )
        )
    if not classes:
        raise InputFormatError(plan.source, "no images were packed")
    validation = _held_out_partition(plan, classes, class_start, class_end, held_out) if plan.validation else None
    manifest = Manifest(
        source=plan.source,
        name=writer.name,
        classes=tuple(classes),
        split_rule=plan.split_rule,
        fingerprint=fingerprint.hexdigest(),
        pack_options={**options.recorded(), **dict(plan.notes)},
        hierarchy=plan.hierarchy,
        num_skipped=num_skipped,
        skipped=tuple(skipped),
        created_by=f"sampler-server {__version__}",
        tfds=sidecar.finish() if sidecar is not None else None,
        validation=validation,
    )
    if existing is not None and not options.overwrite and _content(existing) != _content(manifest):
        raise FailedPrecondition(
            f"{writer.final_dir}: already holds a different {plan.source} store "
            f"(fingerprint {_content_text(existing)}, this input gives {_content_text(manifest)}); "
            f"pass --overwrite to replace it"
        )
    _precompute_wordnet_split(manifest, writer.partial_dir)
    store_dir = writer.commit(manifest)
    return PackSummary(
        source=plan.source,
        store_dir=store_dir,
        manifest=manifest,
        num_skipped=num_skipped,
        num_bytes=writer.num_bytes,
        seconds=time.perf_counter() - started,
        peak_rss_mb=_peak_rss_mb(),
        unchanged=existing is not None and _content(existing) == _content(manifest),
        empty_classes=empty,
    )


def _held_out_partition(
    plan: SourcePlan, classes: list[ClassInfo], class_start: list[int], class_end: list[int],
    held_out: ContentFingerprint,
) -> HeldOutPartition:
    """The validation ranges of the classes kept, in class order (a class whose validation
    images were all skipped gets an empty range)."""
    offset = len(plan.classes)
    by_name = {c.name: index for index, c in enumerate(plan.classes)}
    kept = {info.name for info in classes}
    orphans = [c.name for i, c in enumerate(plan.validation) if c.name not in kept and class_start[offset + i] >= 0]
    if orphans:
        raise InputFormatError(orphans[0], f"has validation images but no train image left ({len(orphans)} such "
                               "classes); a class without train images cannot be evaluated on its validation images")
    ranges: list[tuple[int, int]] = []
    end = classes[-1].end
    for info in classes:
        index = offset + by_name[info.name]
        start = class_start[index] if class_start[index] >= 0 else end
        end = class_end[index] if class_start[index] >= 0 else end
        ranges.append((start, end))
    return HeldOutPartition(VALIDATION, tuple(ranges), held_out.hexdigest(), plan.validation_labels)


def _content(manifest: Manifest) -> tuple[str, str | None]:
    """What decides a store's content: its fingerprint and its validation partition's."""
    return manifest.fingerprint, manifest.validation.fingerprint if manifest.validation is not None else None


def _content_text(manifest: Manifest) -> str:
    text = f"{manifest.fingerprint[:19]}..."
    return text + (f" with validation {manifest.validation.fingerprint[:19]}..." if manifest.validation else "")


def _precompute_wordnet_split(manifest: Manifest, directory: Path) -> None:
    """A store split by WordNet (ILSVRC) gets its split computed now, beside its manifest,
    so that a server starts serving it without loading WordNet (``store.wordnet_split``).
    Classes WordNet cannot split (a wnid it does not know) get no file: their episodes
    are refused when asked for, naming the class, as without it; other uses still work."""
    from sampler_server.core.md.imagenet_spec import needs_wordnet_split, precompute_split

    if not needs_wordnet_split(manifest):
        return
    try:
        blob = precompute_split(manifest)
    except SamplerError:
        return
    write_split_file(directory, blob)


def split_counts(manifest: Manifest) -> dict[str, int]:
    return {split.value: len(manifest.classes_in(split)) for split in Split}
