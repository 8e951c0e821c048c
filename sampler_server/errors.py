"""The project's error hierarchy.

Every error a user can cause is a ``SamplerError`` whose message names the input
and what is allowed. The CLI turns them into one-line messages and a non-zero
exit; the gRPC layer (one place) maps them to status codes. ``assert`` is kept for
internal invariants only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sampler_common.checks import FieldError


class SamplerError(Exception):
    """Root of every error the project raises on purpose."""


class InvalidArgument(SamplerError, ValueError):
    """A parameter is outside what is allowed (maps to INVALID_ARGUMENT)."""


@contextlib.contextmanager
def field_checks() -> Iterator[None]:
    """Inside, a ``sampler_common.checks`` refusal (``FieldError``) becomes ``InvalidArgument``
    with the same message: the server and the CLI say what the client says."""
    try:
        yield
    except FieldError as error:
        raise InvalidArgument(str(error)) from None


class NotFound(SamplerError, LookupError):
    """A named source, class, run or file does not exist (maps to NOT_FOUND)."""


class FailedPrecondition(SamplerError):
    """The request is well formed but the state forbids it (FAILED_PRECONDITION)."""


class DataLoss(SamplerError):
    """Stored or input data is corrupt or unreadable (maps to DATA_LOSS)."""


class ResourceExhausted(SamplerError):
    """The request would exceed a configured limit (maps to RESOURCE_EXHAUSTED)."""


class Unavailable(SamplerError):
    """The service cannot answer now but may soon: the server is draining (SIGTERM), or the
    metrics database is unreachable. Clients retry later or elsewhere (maps to UNAVAILABLE)."""


class Unauthenticated(SamplerError):
    """A call carries no token, or one the server does not know (maps to UNAUTHENTICATED)."""


class PermissionDenied(SamplerError):
    """The caller is known but may not do this, e.g. write to another token's run
    (maps to PERMISSION_DENIED)."""


class DiskFull(ResourceExhausted):
    """The disk (or quota) holding an output filled up while writing it."""


class InputFormatError(DataLoss):
    """An original dataset file is missing, malformed or corrupt (pack time)."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
