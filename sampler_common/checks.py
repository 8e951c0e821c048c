"""One check per request field, shared by the client, the server and the CLI.

Each layer validates an image size, a seed, an episode index, a batch size, a stream
count or an episode's ways/shots/query through the function here, so one bad value
gets one message wherever it is caught, naming the field by its wire name, the value
and what is allowed: ``image_size: got 0, expected an integer in [1, 1024]``.

What 0 means: a user's 0 is refused like any value out of range (0 px, 0 images per
batch, 0 ways). On the wire an unset uint32 reads as 0, so the server takes a wire 0
as "the protocol's default" (84 px for MD, 224 px for VTAB and CoG, 256 images per
CoG batch); the client never sends a user's 0, it refuses it first. A stream's
``count`` is the exception: 0 is a real value there, "unbounded", in every layer.

Pure: no I/O, no imports beyond the standard library. Every refusal is a
``FieldError`` (a ``ValueError``); the server maps it to INVALID_ARGUMENT and the CLI
to a one-line error and exit status 2.
"""

from __future__ import annotations

import numbers

MAX_IMAGE_SIZE = 1024
"""Largest decoded side a request may ask for, in pixels."""
MAX_SEED = 2**64 - 1
"""Seeds are uint64 on the wire."""
MAX_INDEX = 2**63 - 1
"""Episode and batch indices fit an int64 (the samplers' arithmetic)."""
MAX_COUNT = 2**31 - 1
"""Upper bound of an episode's ways, shots and query (and of the MD config's other counts)."""
MAX_BATCH_SIZE = 65536
"""Most images in one Meta-Dataset or VTAB batch."""
MAX_COG_BATCH_SIZE = 4096
"""Most images in one ImageNet-CoG batch."""
MAX_STREAM_COUNT = 10_000_000
"""Most items one bounded stream request may ask for (0 = unbounded)."""


class FieldError(ValueError):
    """A request field outside what is allowed; the message names the field, the value and the range."""

    def __init__(self, field: str, value: object, expected: str, context: str = "") -> None:
        """``context`` follows the value: what else of the request the refusal depends on
        (e.g. " with regime 10")."""
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{field}: got {shown(value)}{context}, expected {expected}")


def shown(value: object) -> str:
    """How a message shows a value: integers plainly (NumPy's too), anything else by repr."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    return repr(value)


def integer_in(field: str, value: object, lower: int, upper: int, *, lower_name: str = "", note: str = "") -> int:
    """``value`` as an int when it is an integer (not a bool) in [lower, upper], else ``FieldError``.

    ``lower_name`` names a lower bound that is another field (``min_ways=5``); ``note`` follows
    the range in the message (e.g. "(0 = unbounded)").
    """
    bound = f"{lower_name}={lower}" if lower_name else str(lower)
    expected = f"an integer in [{bound}, {upper}]" + (f" {note}" if note else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise FieldError(field, value, expected)
    if not lower <= int(value) <= upper:
        raise FieldError(field, value, expected)
    return int(value)


def check_image_size(value: object, field: str = "image_size") -> int:
    """A decoded image side in pixels: 1 to ``MAX_IMAGE_SIZE``."""
    return integer_in(field, value, 1, MAX_IMAGE_SIZE)


def check_seed(value: object, field: str = "seed") -> int:
    """A user seed: 0 to 2**64 - 1."""
    return integer_in(field, value, 0, MAX_SEED)


def check_index(value: object, field: str = "index") -> int:
    """An episode or batch index (or a stream's ``start_index``): 0 to 2**63 - 1."""
    return integer_in(field, value, 0, MAX_INDEX)


def check_batch_size(value: object, field: str = "batch_size", upper: int = MAX_BATCH_SIZE) -> int:
    """Images per batch: 1 to ``upper`` (``MAX_BATCH_SIZE``; CoG's is ``MAX_COG_BATCH_SIZE``)."""
    return integer_in(field, value, 1, upper)


def check_stream_count(value: object, field: str = "count") -> int:
    """How many items a stream delivers: 0 (unbounded) to ``MAX_STREAM_COUNT``."""
    return integer_in(field, value, 0, MAX_STREAM_COUNT, note="(0 = unbounded)")


def check_step(value: object, field: str = "index_step") -> int:
    """The stride between a stream's indices: 1 to 2**63 - 1."""
    return integer_in(field, value, 1, MAX_INDEX)


def check_count(field: str, value: object, lower: int = 1, *, lower_name: str = "") -> int:
    """An episode's ways, shots or query (``num_ways``, ``num_support``, ``num_query``) or another
    count of the episode configuration: ``lower`` to ``MAX_COUNT``."""
    return integer_in(field, value, lower, MAX_COUNT, lower_name=lower_name)
