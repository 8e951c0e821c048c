"""``sampler-server cog levels`` (being written)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``levels`` to the ``cog`` command group."""
