"""The one place that maps project errors to gRPC status codes.

Handlers raise ``SamplerError`` subclasses; the decorators here abort the RPC with
the matching code and the error's message (which names the field and the allowed
range). Anything else is a bug: logged with its traceback and reported as INTERNAL,
and the server keeps serving.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from sampler_common.checks import FieldError
from sampler_server.errors import (
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    SamplerError,
    Unauthenticated,
    Unavailable,
)
from sampler_server.quoting import bounded_message
from sampler_server.service.handlers import UnparsableRequest

log = logging.getLogger("sampler_server.service")

_CODES: tuple[tuple[type[SamplerError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DataLoss, grpc.StatusCode.DATA_LOSS),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
)


def status_code(error: SamplerError) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.UNKNOWN


F = TypeVar("F", bound=Callable[..., Any])


def _check_parsed(request: Any) -> None:
    if isinstance(request, UnparsableRequest):
        raise InvalidArgument(request.reason)


def _noticed(servicer: Any, error: SamplerError) -> None:
    """A store found unreadable while serving stops being served (health included); a
    DATA_LOSS answer is counted (the server's metrics)."""
    store = getattr(error, "store", None)
    if store is not None and hasattr(servicer, "store_unreadable"):
        servicer.store_unreadable(store, str(error))
    if isinstance(error, DataLoss) and hasattr(servicer, "data_lost"):
        servicer.data_lost(error)


def unary(method: F) -> F:
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            _check_parsed(request)
            return method(self, request, context)
        except FieldError as error:  # a shared field check outside ``field_checks``: still the client's fault
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded_message(str(error)))
        except SamplerError as error:
            _noticed(self, error)
            context.abort(status_code(error), bounded_message(str(error)))
        except Exception:
            log.exception("internal error in %s", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}; see the server log")

    return wrapper  # type: ignore[return-value]


def streaming(method: F) -> F:
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            _check_parsed(request)
            yield from method(self, request, context)
        except FieldError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded_message(str(error)))
        except SamplerError as error:
            _noticed(self, error)
            context.abort(status_code(error), bounded_message(str(error)))
        except Exception:
            log.exception("internal error in %s", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}; see the server log")

    return wrapper  # type: ignore[return-value]
