"""Argument types shared by every trainer command's flags (framework-free, no other imports)."""

from __future__ import annotations

import argparse
from typing import Any


def int_at_least(minimum: int) -> Any:
    """An argparse type: an integer >= ``minimum``, else one line saying what was given and what is allowed."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= {minimum}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"got {value}, expected an integer >= {minimum}")
        return value

    parse.__name__ = f"integer>={minimum}"
    return parse
