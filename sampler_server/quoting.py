"""Quoting what a user sent inside an error message, at a bounded length.

A request field can be megabytes long; an error that echoes it whole would be larger
than the client accepts (it then sees RESOURCE_EXHAUSTED instead of the error) and
floods the log. Messages quote at most ``QUOTE_LIMIT`` characters of any input.
"""

from __future__ import annotations

QUOTE_LIMIT = 200
MESSAGE_LIMIT = 2000
"""The most characters of any error message sent to a client (a net under ``quoted``)."""


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)``, cut to ``limit`` characters with a note of the full length."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def bounded_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """One line of at most ``limit`` characters."""
    line = " ".join(message.split())
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... ({len(line)} characters in all)"
