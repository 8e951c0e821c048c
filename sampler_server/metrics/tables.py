"""What every report table shares: its formats, its run-list check, one MD-style cell and
one text grid (aligned columns or markdown)."""

from __future__ import annotations

from collections.abc import Sequence

from sampler_server.errors import InvalidArgument
from sampler_server.metrics.ranks import Estimate

FORMATS = ("table", "markdown", "json")


def check_format(fmt: str) -> str:
    """``fmt`` itself when it is one of ``FORMATS``; ``InvalidArgument`` naming them otherwise."""
    if fmt not in FORMATS:
        raise InvalidArgument(f"format: got {fmt!r}, expected one of {', '.join(FORMATS)}")
    return fmt


def check_runs(run_ids: Sequence[str]) -> None:
    """At least one run, none given twice (``InvalidArgument`` naming the first repeated one)."""
    if not run_ids:
        raise InvalidArgument("run: none given; expected at least one run id")
    repeated = sorted({r for r in run_ids if list(run_ids).count(r) > 1})
    if repeated:
        raise InvalidArgument(f"run: {repeated[0]!r} given twice")


def estimate_cell(e: Estimate) -> str:
    """``mean ± ci (episodes)`` in percent, as every Meta-Dataset cell reads (the MD table
    and the MD part of VTAB+MD)."""
    ci = e.ci95
    return f"{100 * e.mean:.2f} ± {100 * ci:.2f} ({e.episodes})" if ci is not None else f"{100 * e.mean:.2f} (1)"


def render_grid(header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str], fmt: str) -> str:
    """``header`` and ``rows`` as a markdown table (``fmt == "markdown"``) or aligned columns,
    then a blank line and ``notes``, one per line."""
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines + [""] + list(notes))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines + [""] + list(notes))
