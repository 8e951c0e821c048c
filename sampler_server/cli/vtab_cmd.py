"""``sampler-server vtab tasks|split``: what VTAB tasks a data directory can serve, and a split's records.

Both read manifests and the stores' TFDS side files only (``store.vtab_records``),
never an image; the labels come from the task registry (``core.vtab``). A task is
listed once per store holding its TFDS dataset in a version the task takes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sampler_server.catalog.tasks import pick_tfds_store, split_availability, tasks_of, tfds_stores_in
from sampler_server.core.vtab import SPLITS, TASKS, get_task
from sampler_server.core.vtab.splits import parse_split
from sampler_server.store.vtab_records import list_split


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "vtab", help="VTAB-1k tasks of packed TFDS stores",
        description="List the VTAB tasks a data directory can serve, or one split's records and labels.",
    )
    commands = parser.add_subparsers(dest="vtab_command", metavar="COMMAND", required=True)
    tasks = commands.add_parser(
        "tasks", help="the tasks whose TFDS dataset is packed under DATA",
        description="One entry per (task, store): group, number of classes, TFDS and VTAB split sizes.",
    )
    tasks.add_argument("--data", required=True, type=Path, help="data directory (or one store)")
    tasks.add_argument("--json", action="store_true", help="machine-readable output")
    tasks.set_defaults(func=run_tasks)
    split = commands.add_parser(
        "split", help="one VTAB split's records in order, with labels (no images read)",
        description="The records of SPLIT of TASK in order: TFDS split, canonical index and label, "
        "with the split's fingerprint.",
    )
    split.add_argument("--data", required=True, type=Path, help="data directory (or one store)")
    split.add_argument("--task", required=True, help="task name: " + ", ".join(TASKS))
    split.add_argument("--split", required=True, help="VTAB split: " + ", ".join(SPLITS) + " (trainval1000: the "
                       "first 1000 of TFDS's default, shard-interleaved read of trainval, what task_adaptation's "
                       "run_all_tasks.sh trains on; trainval1000-canonical: the first 1000 in canonical order)")
    split.add_argument("--store", help="store name when several hold the task's dataset (default: first by name)")
    split.add_argument("--json", action="store_true", help="machine-readable output")
    split.set_defaults(func=run_split)


def task_entries(data: Path) -> list[dict[str, Any]]:
    entries = []
    for records in tfds_stores_in(data):
        sizes = records.split_sizes()
        for task in tasks_of(records):
            counts, unavailable = split_availability(task, records)
            entries.append({
                "task": task.name, "group": task.group.value, "store": records.manifest.name,
                "tfds": f"{records.name}:{records.version}", "num_classes": task.num_classes,
                "tfds_split_sizes": sizes, "splits": counts, "unavailable": unavailable,
                "store_fingerprint": records.manifest.fingerprint,
            })
    return entries


def run_tasks(args: argparse.Namespace) -> int:
    entries = task_entries(args.data)
    if args.json:
        print(json.dumps({"data": str(args.data), "tasks": entries}, indent=1))
        return 0
    if not entries:
        print(f"{args.data}: no VTAB task can be served (pack one with `sampler-server pack vtab`)")
    for entry in entries:
        splits = ", ".join(f"{name} {count}" for name, count in entry["splits"].items())
        print(f"{entry['task']:22} {entry['group']:11} {entry['num_classes']:>4} classes  store {entry['store']} "
              f"({entry['tfds']})  {splits}")
    return 0


def run_split(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    split = parse_split(args.split)  # the names and aliases the client and the server accept
    records = pick_tfds_store(tfds_stores_in(args.data), task, args.store, where=f"in {args.data}", field="--store")
    listing = list_split(records, task, split)
    if args.json:
        print(json.dumps({
            "task": listing.task, "split": listing.split, "store": listing.store,
            "store_fingerprint": listing.store_fingerprint, "num_classes": listing.num_classes,
            "count": len(listing.record_ids), "fingerprint": listing.fingerprint,
            "records": [
                {"record_id": record_id, "tfds_split": tfds_split, "tfds_index": index, "label": label}
                for record_id, (tfds_split, index), label in zip(listing.record_ids, listing.locations, listing.labels)
            ],
        }, indent=1))
        return 0
    print(f"{listing.task} {listing.split}: {len(listing.record_ids)} records, {listing.num_classes} classes, "
          f"store {listing.store}, fingerprint {listing.fingerprint}")
    for record_id, (tfds_split, index), label in zip(listing.record_ids, listing.locations, listing.labels):
        print(f"{record_id:>9}  {tfds_split}[{index}]  {label}")
    return 0
