"""Argument types shared by every trainer command's flags (framework-free; ``sampler_common``'s
field checks only, so a trainer flag refuses a bad seed or image size in the words the client,
the server and ``sampler-server`` use)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sampler_common.checks import FieldError, check_image_size, check_seed
from sampler_common.splits import SplitNames


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


def positive_float(text: str) -> float:
    """An argparse type: a positive finite number, else one line saying what was given."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive finite number")
    return value


def float_in(low: float, high: float, low_open: bool = False) -> Any:
    """An argparse type: a number in [low, high] (``low_open``: (low, high]), else one line
    saying what was given and what is allowed."""
    allowed = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected a number in {allowed}") from None
        if not (low < value if low_open else low <= value) or not value <= high:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected a number in {allowed}")
        return value

    parse.__name__ = f"number in {allowed}"
    return parse


def field_flag(check: Callable[[object], int], minimum: int | None = None) -> Any:
    """An argparse type: an integer that ``check`` (a ``sampler_common.checks`` function) accepts,
    and, where a trainer needs more, at least ``minimum``; else one line, the shared check's
    message (``image_size: got 0, expected an integer in [1, 1024]``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer") from None
        try:
            value = check(value)
        except FieldError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"got {value}, expected an integer >= {minimum}")
        return value

    parse.__name__ = check.__name__.removeprefix("check_")
    return parse


seed_flag = field_flag(check_seed)
"""A seed flag: 0 to 2**64 - 1, as every layer checks it."""
image_size_flag = field_flag(check_image_size)
"""An image size flag: 1 to 1024 pixels, as every layer checks it."""


def split_flag(vocabulary: SplitNames, others: tuple[str, ...] = ()) -> Any:
    """An argparse type: a split name of ``vocabulary`` (``sampler_common.splits``: its canonical
    names and the validation split's aliases, valid/val/validation, as the client, the server and
    the CLI take them), or one of ``others`` (words that are not splits, e.g. ``none``); the
    canonical name, else one line listing what is accepted."""
    def parse(text: str) -> str:
        if text in others:
            return text
        try:
            return vocabulary.canonical(text)
        except FieldError:
            extra = f", or {', '.join(others)}" if others else ""
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {vocabulary.accepted}{extra}") from None

    parse.__name__ = "split"
    return parse


def split_metavar(vocabulary: SplitNames, others: tuple[str, ...] = ()) -> str:
    """``{name,...}`` as argparse shows choices: the canonical names and ``others``."""
    return "{" + ",".join((*vocabulary.names, *others)) + "}"
