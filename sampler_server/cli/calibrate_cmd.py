"""``sampler-server calibrate``: calibrated risks and CCI of results from anywhere, no server needed.

FILE is a JSON list of ``{"task", "n", "role", "run", "risk"}`` objects (role ``model``,
``scratch`` or ``max``; ``max`` has no ``n``) plus, per task, ``{"task", "role": "blind",
"risk"}``; ``-`` reads standard input. The computation and the JSON are
``core.regimes.calibration``'s, the same the calibrated report uses.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sampler_server.core.regimes import calibrate, notes, parse_entries
from sampler_server.errors import InvalidArgument, NotFound


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="calibrated risk cR and CCI of model, scratch and max results (JSON file)",
        description="Per task and regime: cR = (R - R_max) / (R_blind - R_max) of every model run and of the "
        "scratch run, and each model run's Calibrated Cumulative Improvement.",
    )
    parser.add_argument("--input", required=True, help="JSON list of result objects ('-': standard input)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def read_input(source: str) -> Any:
    """The parsed JSON of ``source`` (a path, or ``-``); errors name the file."""
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
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"--input {where}: not JSON ({error})") from None


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def run(args: argparse.Namespace) -> int:
    where = "standard input" if args.input == "-" else args.input
    result = calibrate(parse_entries(read_input(args.input), where=where))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for task, entry in result["tasks"].items():
        print(f"{task}: R_blind {entry['blind_risk']:.4f}, R_max {entry['max_risk']:.4f}")
        print(f"  {'run':20} {'n':>8} {'risk':>8} {'cR':>8} {'cR_scratch':>10}")
        for run_name, run_entry in entry["runs"].items():
            for regime in run_entry["regimes"]:
                print(f"  {run_name:20} {regime['n']:>8} {regime['risk']:>8.4f} {_number(regime['cR']):>8} "
                      f"{_number(regime['cR_scratch']):>10}")
            print(f"  {run_name:20} CCI {_number(run_entry['cci'])}")
    for line in notes(result):
        print(f"note: {line}")
    return 0
