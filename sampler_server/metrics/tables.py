"""Text grids for reports: one aligned-columns layout and one markdown layout for every table."""

from __future__ import annotations

from collections.abc import Sequence


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
