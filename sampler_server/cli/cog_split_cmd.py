"""``sampler-server cog split`` (being written)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``split`` to the ``cog`` command group."""
