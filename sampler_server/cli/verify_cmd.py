"""``sampler-server verify DATA``: check every store's data file and every record.

Per store, in this order (a check that fails stops the ones that would read past it):
1. the data file's size against the manifest (``storage.data_bytes``) and against the
   pages LMDB claims: a truncated file is reported, never mapped and read past its end;
2. its SHA-256 against the manifest (``storage.data_sha256``);
3. every record, those of a validation partition (ILSVRC-2012) included: present under
   its id, parsable, and (record layout 2) matching its CRC-32; and no record past the
   last one the manifest describes;
4. a VTAB (TFDS) store's side file of split indices and label attributes: its size
   and SHA-256 against the manifest.
One line per store; exit 0 when every store is OK, 1 when any is damaged or cannot be
verified (packed before checksums: repack it with the same ``pack`` command), 2 for
usage errors. ``--json`` prints one object with a list of stores instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SHOWN_BAD = 10  # record ids listed per store; the count is always complete


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="check data files and record checksums of packed stores",
        description="For every store under DATA (or the store DATA): data file size and SHA-256 against the "
        "manifest, and the checksum of every record. One line per store; exit 1 if any store is damaged "
        "or cannot be verified.",
    )
    parser.add_argument("data", metavar="DATA", type=Path, help="a data directory or one store directory")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.set_defaults(func=run)


@dataclass
class StoreCheck:
    name: str
    status: str = "ok"  # ok | damaged | unverifiable
    problems: list[str] = field(default_factory=list)
    records: int = 0
    validation_records: int = 0
    bad_records: list[int] = field(default_factory=list)
    num_bad: int = 0
    data_bytes: int | None = None

    def fail(self, problem: str) -> None:
        self.status = "damaged"
        self.problems.append(problem)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "problems": self.problems,
            "records_checked": self.records,
            "validation_records_checked": self.validation_records,
            "bad_records": self.num_bad,
            "bad_record_ids": self.bad_records,
            "data_bytes": self.data_bytes,
        }

    def line(self) -> str:
        if self.status == "ok":
            held_out = f", {self.validation_records} of them validation" if self.validation_records else ""
            return f"{self.name}: OK ({self.records} records{held_out}, {self.data_bytes} bytes, checksums match)"
        return f"{self.name}: {self.status.upper()}: " + "; ".join(self.problems)


def verify_store(directory: Path, progress: bool = True) -> StoreCheck:
    """Check one store (see the module docstring); never raises for damage it finds."""
    from tqdm import tqdm

    from sampler_server.errors import SamplerError
    from sampler_server.store.manifest import DATA_NAME
    from sampler_server.store.reader import StoreReader
    from sampler_server.store.writer import file_digest

    check = StoreCheck(directory.name)
    try:
        reader = StoreReader(directory)
    except SamplerError as error:
        check.fail(f"manifest: {error}")
        return check
    manifest = reader.manifest
    data_path = directory / DATA_NAME
    try:
        reader.check_data()  # size against manifest and LMDB pages, before any page is read
    except SamplerError as error:
        check.fail(str(error))
        return check
    check.data_bytes = data_path.stat().st_size
    if manifest.data_size is not None and check.data_bytes != manifest.data_size:
        check.fail(f"{DATA_NAME} is {check.data_bytes} bytes, its manifest records {manifest.data_size}")
    if manifest.data_sha256 is not None:
        with tqdm(total=check.data_bytes, unit="B", unit_scale=True, desc=f"{check.name} sha256",
                  disable=not progress, leave=False, file=sys.stderr) as bar:
            _, digest = file_digest(data_path, bar.update)
        if digest != manifest.data_sha256:
            check.fail(f"{DATA_NAME} SHA-256 is {digest[7:23]}..., its manifest records "
                       f"{manifest.data_sha256[7:23]}... (changed since it was packed)")
    _verify_records(reader, check, progress)
    if manifest.tfds is not None:
        _verify_tfds_records(directory, manifest, check)
    if check.status == "ok" and not manifest.verifiable:
        check.status = "unverifiable"
        check.problems.append(
            f"packed with record layout {manifest.record_layout} (no checksums): its records cannot be "
            "verified; repack it with the same `sampler-server pack` command (same episodes and fingerprint)"
        )
    return check


def _verify_tfds_records(directory: Path, manifest: Any, check: StoreCheck) -> None:
    """A VTAB store's TFDS side file: its size and SHA-256 against the manifest."""
    from sampler_server.errors import SamplerError
    from sampler_server.store.vtab_records import TfdsRecords

    try:
        TfdsRecords(directory, manifest).verify()
    except SamplerError as error:
        check.fail(str(error))


def _verify_records(reader: Any, check: StoreCheck, progress: bool) -> None:
    from tqdm import tqdm

    from sampler_server.errors import DataLoss
    from sampler_server.store.record import read_header

    total = reader.num_records  # the classes' records, then any validation partition's
    held_out = reader.manifest.validation
    first_error = ""
    with tqdm(total=total, unit="rec", desc=f"{check.name} records", disable=not progress, leave=False,
              file=sys.stderr) as bar:
        for start in range(0, total, 256):
            ids = range(start, min(total, start + 256))
            for record_id, value in zip(ids, reader.values_or_none(ids)):
                try:
                    if value is None:
                        raise DataLoss("missing from the LMDB data")
                    read_header(value)
                except DataLoss as error:
                    check.num_bad += 1
                    if len(check.bad_records) < _SHOWN_BAD:
                        check.bad_records.append(record_id)
                    first_error = first_error or f"record {record_id}: {error}"
            check.records += len(ids)
            if held_out is not None:
                check.validation_records += len([i for i in ids if held_out.start <= i < held_out.end])
            bar.update(len(ids))
    stored = reader.stored_entries()
    if stored > total:
        check.fail(f"the data holds {stored} records, {stored - total} past the {total} its manifest describes")
    if check.num_bad:
        listed = ", ".join(map(str, check.bad_records)) + (", ..." if check.num_bad > len(check.bad_records) else "")
        check.fail(f"{check.num_bad} of {total} records damaged (records {listed}; first: {first_error})")


def run(args: argparse.Namespace) -> int:
    from sampler_server.store.reader import find_stores

    stores = find_stores(args.data)
    progress = not args.no_progress and not args.json and sys.stderr.isatty()
    checks = []
    for directory in stores:
        check = verify_store(directory, progress)
        checks.append(check)
        if not args.json:
            print(check.line(), flush=True)
    if args.json:
        print(json.dumps({"data": str(args.data), "stores": [c.to_json() for c in checks]}, indent=1))
    elif not checks:
        print(f"{args.data}: no packed stores")
    return 0 if all(c.status == "ok" for c in checks) else 1
