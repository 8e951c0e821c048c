"""Who is calling, what they may call, and one log line per call: the server interceptor.

Tokens come from a JSON-lines file, one ``{"name": ..., "token": ..., "role": ...}`` a
line, validated whole at start (errors name the line). A client sends its token as
``authorization: Bearer <token>`` metadata on every call. When tokens are configured:

- a call with no token, or one the file does not hold, is UNAUTHENTICATED;
- ``read`` tokens call everything but ``ReportMetrics`` (PERMISSION_DENIED);
- ``report`` tokens also report, to runs they created; ``admin`` tokens do anything;
- health checking and reflection stay open without a token, so probes and tools such
  as grpcurl work; they serve no data.

Run ownership and read filtering are the servicer's and the metrics store's: the
interceptor hands them the caller through ``current_caller()``, a context variable set
around each call's behaviour (None when no tokens are configured). Without tokens the
interceptor only logs.

Every call, answered or refused, leaves one INFO line on the ``sampler_server.calls``
logger: method, peer, token name ("-" when none), status code name and duration in
milliseconds; the fields are also attached to the record as ``record.call``, which
``JsonLogFormatter`` writes as one JSON object a line (``serve --log-json``).
"""

from __future__ import annotations

import contextvars
import datetime
import enum
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from sampler_server.errors import InvalidArgument

call_log = logging.getLogger("sampler_server.calls")

SAMPLER_SERVICE = "/sampler.v1.Sampler/"
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/",
                 "/grpc.reflection.v1.ServerReflection/")
WRITE_METHODS = frozenset({SAMPLER_SERVICE + "ReportMetrics"})


class Role(enum.Enum):
    READ = "read"      # every read; no writes
    REPORT = "report"  # reads and writes its own runs
    ADMIN = "admin"    # everything


@dataclass(frozen=True)
class Caller:
    name: str
    role: Role

    @property
    def reads_every_run(self) -> bool:
        return self.role is not Role.REPORT


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("sampler_caller", default=None)


def current_caller() -> Caller | None:
    """The caller of the call being served; None when the server checks no tokens."""
    return _CALLER.get()


def load_tokens(path: str | Path) -> dict[str, Caller]:
    """Token -> caller from a JSON-lines file; blank lines are skipped.

    Raises:
        InvalidArgument: one line naming the file, the line and what is wrong (bad JSON,
            a missing or empty field, an unknown role, a repeated token or name), or a
            file without tokens.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise InvalidArgument(f"--tokens: cannot read {path} ({error.strerror or error})") from None
    callers: dict[str, Caller] = {}
    token_line: dict[str, int] = {}
    name_line: dict[str, int] = {}
    roles = ", ".join(r.value for r in Role)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        if not isinstance(entry, dict):
            raise InvalidArgument(f'{where}: not a JSON object {{"name": ..., "token": ..., "role": ...}}')
        for key in ("name", "token", "role"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise InvalidArgument(f"{where}: {key}: missing or not a non-empty string")
        name, token = entry["name"], entry["token"]
        try:
            role = Role(entry["role"])
        except ValueError:
            raise InvalidArgument(f"{where}: role: got {entry['role']!r}, expected one of {roles}") from None
        if token in token_line:
            raise InvalidArgument(f"{where}: token of {name!r} repeats line {token_line[token]}; tokens must differ")
        if name in name_line:
            raise InvalidArgument(f"{where}: name {name!r} repeats line {name_line[name]}; names own runs, so they "
                                  "must differ")
        token_line[token], name_line[name] = number, number
        callers[token] = Caller(name, role)
    if not callers:
        raise InvalidArgument(f"--tokens: {path} holds no tokens")
    return callers


class _CallRecord:
    """Logs a call once, whichever of completion or cancellation comes first."""

    def __init__(self, method: str, context: grpc.ServicerContext) -> None:
        self.method = method
        self.peer = context.peer()
        self.token = "-"
        self.started = time.perf_counter()
        self._done = False
        self._lock = threading.Lock()

    def finish(self, status: grpc.StatusCode | None) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        fields = {"method": self.method, "peer": self.peer, "token": self.token,
                  "status": (status or grpc.StatusCode.OK).name,
                  "ms": round((time.perf_counter() - self.started) * 1000, 1)}
        call_log.info(" ".join(f"{key}={value}" for key, value in fields.items()), extra={"call": fields})


def _outcome(context: grpc.ServicerContext) -> grpc.StatusCode:
    """The code of a call that raised: the one it aborted with, else UNKNOWN (gRPC's own)."""
    return context.code() or grpc.StatusCode.UNKNOWN


class AuthInterceptor(grpc.ServerInterceptor):
    """Checks tokens (when ``tokens`` is given), sets ``current_caller`` and logs each call."""

    def __init__(self, tokens: dict[str, Caller] | None) -> None:
        self.tokens = tokens

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(method, handler.unary_unary))
        if handler.stream_unary is not None:
            return handler._replace(stream_unary=self._unary(method, handler.stream_unary))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=self._streaming(method, handler.unary_stream))
        return handler._replace(stream_stream=self._streaming(method, handler.stream_stream))

    def _authorise(self, method: str, context: grpc.ServicerContext, record: _CallRecord) -> Caller | None:
        """The caller, or abort with UNAUTHENTICATED / PERMISSION_DENIED."""
        if self.tokens is None:
            return None
        caller = None
        for key, value in context.invocation_metadata():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                caller = self.tokens.get(value[len("Bearer "):].strip())
                if caller is None and not method.startswith(OPEN_SERVICES):
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "the token sent is not one this server knows")
        if caller is None:
            if method.startswith(OPEN_SERVICES):
                return None
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "no token: send 'authorization: Bearer <token>' metadata (clients: --token-file or "
                          "SAMPLER_TOKEN)")
        record.token = caller.name
        if method in WRITE_METHODS and caller.role is Role.READ:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"token {caller.name!r} has role read; {method.rsplit('/', 1)[-1]} needs a report or "
                          "admin token")
        return caller

    def _unary(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            record = _CallRecord(method, context)
            try:
                call_context = contextvars.copy_context()
                call_context.run(_CALLER.set, self._authorise(method, context, record))
                reply = call_context.run(behaviour, request, context)
            except BaseException:
                record.finish(_outcome(context))
                raise
            record.finish(context.code())
            return reply

        return wrapped

    def _streaming(self, method: str, behaviour: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            record = _CallRecord(method, context)
            # a stream the client cancels may never be resumed or closed: log it on termination
            context.add_callback(lambda: record.finish(context.code() or grpc.StatusCode.CANCELLED))
            try:
                call_context = contextvars.copy_context()
                call_context.run(_CALLER.set, self._authorise(method, context, record))
                replies = call_context.run(behaviour, request, context)
                while True:
                    try:
                        reply = call_context.run(next, replies)
                    except StopIteration:
                        break
                    yield reply
                    del reply  # not held while the next one is prepared
            except GeneratorExit:
                call_context.run(replies.close)
                record.finish(grpc.StatusCode.CANCELLED)
                raise
            except BaseException:
                record.finish(_outcome(context))
                raise
            record.finish(context.code())

        return wrapped


class JsonLogFormatter(logging.Formatter):
    """Each record as one JSON object a line: time, level, logger, message, and a call's
    fields (method, peer, token, status, ms) at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        entry.update(getattr(record, "call", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)
