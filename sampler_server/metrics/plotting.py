"""What every report's plots share: matplotlib's file backend, a file-safe name and one
figure ending (labels, grid, legend, PNG written, figure closed).

Importing this module selects the Agg backend before pyplot loads, so plots are written
on a machine without a display; each protocol's plot module imports pyplot after it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def file_safe_name(name: str) -> str:
    """``name`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def finish_axes(axes: plt.Axes, figure: plt.Figure, xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    """Labels, grid and legend of one figure, written to ``path`` as PNG and closed (every plot module's ending)."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path
