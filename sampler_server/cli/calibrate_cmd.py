"""``sampler-server calibrate``: calibrated risks and CCI of results from anywhere, no server needed.

FILE is a JSON list of ``{"task", "n", "role", "run", "risk"}`` objects (role ``model``,
``scratch`` or ``max``; ``max`` has no ``n``) plus, per task, ``{"task", "role": "blind",
"risk"}`` (``model`` and ``scratch`` entries may add an integer ``"seed"``); ``-`` reads
standard input. FILE may also be the control-baselines reference's results CSV
(``[,]domain,method,train_size,test_loss,seed``: ``core.baselines.reference_csv``); then
every method is calibrated, ``scratch`` included, as the reference's notebook tabulates it.
The computation and the JSON are ``core.baselines.calibration``'s, the same the calibrated
report uses; ``--cci-seeds`` picks the reference's per-(n, seed) CCI (``points``, the
default) or the seed-mean variant (``mean``), and the output names which.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sampler_server.core.baselines.calibration import CCI_SEEDS, DEFAULT_CCI_SEEDS, RiskEntry, calibrate
from sampler_server.core.baselines.calibration import cci_seeds_label, notes, parse_entries
from sampler_server.core.baselines.reference_csv import is_reference_csv, parse_reference_csv
from sampler_server.errors import InvalidArgument, NotFound


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="calibrated risk cR and CCI of model, scratch and max results (JSON file)",
        description="Per task and regime: cR = (R - R_max) / (R_blind - R_max) of every model run and of the "
        "scratch run, and each model run's Calibrated Cumulative Improvement.",
    )
    parser.add_argument("--input", required=True,
                        help="JSON list of result objects, or the reference's results CSV "
                        "(domain,method,train_size,test_loss,seed) ('-': standard input)")
    parser.add_argument("--cci-seeds", choices=CCI_SEEDS, default=DEFAULT_CCI_SEEDS,
                        help="points (default): the reference notebook's CCI, every (n, seed) of a run its own point "
                        "against the scratch risk averaged over seeds; mean: each run averaged over its seeds at each "
                        "n first")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def read_text(source: str) -> tuple[str, str]:
    """(text, where) of ``source`` (a path, or ``-``); errors name the file."""
    if source == "-":
        text, where = sys.stdin.read(), "standard input"
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise NotFound(f"--input: no file {source}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidArgument(f"--input {source}: cannot read it ({error})") from None
        where = source
    return text, where


def read_entries(source: str) -> tuple[list[RiskEntry], bool]:
    """The entries of ``source`` (JSON, or the reference's CSV) and whether it was the CSV."""
    text, where = read_text(source)
    if is_reference_csv(text):
        return parse_reference_csv(text, where=where), True
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"--input {where}: neither JSON ({error}) nor the reference's results CSV "
                              "(header [,]domain,method,train_size,test_loss,seed)") from None
    return parse_entries(data, where=where), False


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def run(args: argparse.Namespace) -> int:
    entries, from_csv = read_entries(args.input)
    result = calibrate(entries, cci_seeds=args.cci_seeds, scratch_cci=from_csv)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(cci_seeds_label(result["cci_seeds"]))
    for task, entry in result["tasks"].items():
        print(f"{task}: R_blind {entry['blind_risk']:.4f}, R_max {entry['max_risk']:.4f}")
        print(f"  {'run':20} {'n':>8} {'seed':>6} {'risk':>8} {'cR':>8} {'cR_scratch':>10}")
        for run_name, run_entry in entry["runs"].items():
            for regime in run_entry["regimes"]:
                seed = regime.get("seed", "mean")
                print(f"  {run_name:20} {regime['n']:>8} {seed:>6} {regime['risk']:>8.4f} {_number(regime['cR']):>8} "
                      f"{_number(regime['cR_scratch']):>10}")
            cci = "undefined" if run_entry["cci"] is None else f"{run_entry['cci']:.4f}"
            print(f"  {run_name:20} CCI {cci} ({result['cci_seeds']})")
    for line in notes(result):
        print(f"note: {line}")
    return 0
