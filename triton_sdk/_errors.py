"""The exception tree, and the pure rules that classify server and transport failures.

Every exception the SDK raises derives from :class:`TritonError`. The backends call the
``classify_*`` functions below at the one place where a foreign exception is caught, and
raise the result ``from`` the original, so the original stays reachable as ``__cause__``.

Tree::

    TritonError
    ├── InvalidInputError (also ValueError)       found on the client; nothing was sent
    ├── UnknownOutputError (also KeyError)        a result has no output of that name
    ├── ModelNotFoundError                        the server has no model of that name/version
    ├── ModelNotReadyError                        the model exists but cannot serve now
    ├── TritonConnectionError (also ConnectionError)
    ├── TritonTimeoutError (also TimeoutError)
    └── InferenceError                            the server or the model failed the request
"""

from __future__ import annotations

import asyncio
import http.client
import re
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, TypeVar

from ._display import Displayable, Table

__all__ = [
    "InferenceError",
    "InvalidInputError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "SequenceLostError",
    "ServerOverloadedError",
    "TritonConnectionError",
    "TritonError",
    "TritonTimeoutError",
    "UnknownOutputError",
    "UnsupportedError",
    "UnsupportedRequestError",
]

Status = str | int
"""A gRPC status code name without prefix (``"UNAVAILABLE"``) or an HTTP status (``503``)."""


class TritonError(Displayable, Exception):
    """Base class of every exception raised by triton_sdk.

    Attributes:
        message: the text of the error.
        status: the gRPC code name (``"INTERNAL"``) or HTTP status (``500``) the server
            answered with; ``None`` when the failure happened on the client or the network.
        model: the model the call was about, when there was one.
        request_id: the request id of the failed inference, when one was set (else None).
        retryable: whether the retry policy may repeat the call (for idempotent calls).
        may_have_run: the request had gone out when the failure happened, so the server
            may have run it; a retry after such a failure can run it twice (logged as a
            warning when it happens).
    """

    def __init__(
        self,
        message: str,
        *,
        status: Status | None = None,
        model: str | None = None,
        request_id: str | None = None,
        retryable: bool = False,
        may_have_run: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.model = model
        self.request_id: str | None = request_id or None  # ("" is a request without one)
        self.retryable = retryable
        self.may_have_run = may_have_run

    _sent_nothing = False  # (see never_sent)
    _refused_here = False  # (see refused_before_sending)
    _in_split_batch = False  # (see in_split_batch)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r})"

    def _table(self) -> Table:
        fields = ("message", "status", "model", "request_id", "retryable", "may_have_run")
        rows = [(field, str(getattr(self, field))) for field in fields]
        message = rows[0][1]
        if len(message) > _SHOWN_MESSAGE:  # (a model's traceback: str(error) has it all)
            rest = len(message) - _SHOWN_MESSAGE
            rows[0] = ("message", f"{message[:_SHOWN_MESSAGE]}... ({rest} more characters)")
        return Table(type(self).__name__, ("", ""), rows)


_SHOWN_MESSAGE: Final = 2000
"""Characters of an error's message its notebook display shows."""


class InvalidInputError(TritonError, ValueError):
    """The arguments of a call do not fit the model (or the result): found on the client.

    A request refused this way was not sent.
    """

    _of_values = False  # (see values_refused)


class UnknownOutputError(TritonError, KeyError):
    """A result was asked for an output it does not hold."""


class ModelNotFoundError(TritonError):
    """The server has no model (or no version) of that name."""


class ModelNotReadyError(TritonError):
    """The model is known to the server but has no version ready to serve."""


class TritonConnectionError(TritonError, ConnectionError):
    """The server could not be reached, or the connection broke (after any retries)."""

    _closed_in_setup = False
    """The server closed the connection while it was being set up (TCP accepted, then a
    clean close before gRPC or TLS could begin): a port forwarder (docker, kubectl
    port-forward) does that while the server behind it is not listening yet, so
    wait_until_ready waits it through, where other failures that are not retried are
    raised at once."""


def closed_in_setup(error: TritonConnectionError) -> TritonConnectionError:
    """``error``, marked as a connection the server closed while it was being set up."""
    error._closed_in_setup = True
    return error


class TritonTimeoutError(TritonError, TimeoutError):
    """A timeout or a retry deadline passed. The server may still run the request."""


class InferenceError(TritonError):
    """The server or the model failed the request; ``status`` tells how."""


class ServerOverloadedError(InferenceError):
    """The server turned the request away unrun: the model's queue was full ("Exceeds
    maximum queue size") or the request waited in it past its queue timeout. Retryable;
    a client over many endpoints tries another one at once."""


class UnsupportedError(TritonError):
    """The server or the model does not do what was asked (an endpoint it lacks, an
    option its backend cannot take); the message names the operation. Nothing was sent
    when the client could tell beforehand."""

    _names_server = False  # (see names_no_server)


class UnsupportedRequestError(UnsupportedError, InferenceError):
    """The server or the model refused this request as one it cannot serve (Triton's
    UNSUPPORTED: gRPC ``UNIMPLEMENTED`` or HTTP 501 in the server's own words, e.g.
    "ModelInfer RPC doesn't support decoupled models"). Both an :class:`UnsupportedError`
    and, being the model's answer to a request, an :class:`InferenceError`."""


class SequenceLostError(TritonConnectionError):
    """A request of a sequence whose endpoint failed. A sequence's state lives in one
    server, so it never moves to another endpoint: start the sequence again."""


# Message fragments, lower-cased. Triton reuses status codes for unrelated situations
# (UNAVAILABLE is "server down", "queue full", "TLS failed" and "restricted endpoint"),
# so the message decides.
_NOT_READY_HINTS = ("has no available versions", "is not ready", "not ready", "not at ready state")
_NOT_FOUND_HINTS = ("unknown model", "is not found", "is not available")
# MLServer's "Model iris with version 2 not found" / "Model iris not found", and KServe's
# "Model with name iris does not exist.", anchored so that other "not found"s stay apart.
_OTHER_SERVERS_NOT_FOUND = re.compile(
    # (KServe's gRPC unload leaves the name out: "Model with name  does not exist.")
    # (A name may hold spaces: "Model no such not found"; the whole message is matched.)
    r"^model .+? (with version \S* ?)?not found\.?$|^model with name +.*? ?does not exist\.?$"
)
# An RPC the server does not have: grpc C++ and Python ("Method not found!"), Java
# ("Method not found: ..."), Go ("unknown method ... for service ...", "unknown service").
_NO_METHOD_HINTS = ("method not found", "unknown method", "unknown service")
_QUEUE_HINTS = ("exceeds maximum queue size", "request timeout expired")
_NOT_AT_READY = "is not at ready state"
# gRPC's own phrases: a bare "tls" or "ssl" could be part of a host name.
_TLS_HINTS = (
    "ssl handshake",
    "ssl_error",
    "tls handshake",
    "handshake failed",
    "certificate",
    "verification check failed",
    "unauthenticated",
)
_REFUSED_HINTS = ("restricted", "not allowed")
# A 503 that is a refusal of a bad log setting, not a busy server.
_BAD_SETTING_503 = "invalid argument for --log"
_RETRYABLE_HTTP = frozenset({502, 503, 504})


def _has(message: str, hints: tuple[str, ...]) -> bool:
    return any(hint in message for hint in hints)


def classify_status(
    status: Status,
    message: str,
    *,
    model: str | None = None,
    request_id: str | None = None,
) -> TritonError:
    """Turn a server answer (gRPC code name or HTTP status, and its message) into an error.

    This is the table documented in ``docs/errors.md``.
    """
    lowered = message.lower()
    error_class, retryable = _status_class(status, lowered)
    if error_class is TritonConnectionError and not retryable:
        message = f"TLS failure: {message}"  # (gRPC's words; HTTP's say it so too)
    error = error_class(
        message,
        status=status,
        model=model,
        request_id=request_id,
        retryable=retryable,
        # A deadline that passed says nothing of whether the server ran the request, nor
        # does a gateway (502/504) that forwarded it and lost the answer.
        may_have_run=error_class is TritonTimeoutError or status in (502, 504),
    )
    if isinstance(error, UnsupportedError) and not _has(lowered, _NO_METHOD_HINTS):
        error._names_server = True  # (its own words say what: not a missing endpoint)
    return error


def _status_class(status: Status, lowered: str) -> tuple[type[TritonError], bool]:
    grpc_code = status if isinstance(status, str) else None
    http_status = status if isinstance(status, int) else None
    if grpc_code == "UNIMPLEMENTED" and _has(lowered, _NO_METHOD_HINTS):
        return UnsupportedError, False  # grpc's answer for an RPC the server does not have
    if grpc_code == "UNIMPLEMENTED" or http_status == 501:
        # Triton's UNSUPPORTED ("ModelInfer RPC doesn't support decoupled models"), KServe's
        # "Model versioning not supported yet": what this server or model cannot do.
        return UnsupportedRequestError, False
    if grpc_code == "NOT_FOUND" or http_status == 404:
        if _has(lowered, _NOT_READY_HINTS):
            return ModelNotReadyError, False
        if _has(lowered, _NOT_FOUND_HINTS) or _OTHER_SERVERS_NOT_FOUND.search(lowered):
            return ModelNotFoundError, False
        return InferenceError, False
    # Statistics and trace settings answer an unknown model with INVALID_ARGUMENT / 400.
    invalid = grpc_code == "INVALID_ARGUMENT" or http_status == 400
    if invalid and "model" in lowered and _has(lowered, _NOT_FOUND_HINTS):
        return ModelNotFoundError, False
    if grpc_code == "DEADLINE_EXCEEDED":
        return TritonTimeoutError, False
    if (grpc_code == "UNAVAILABLE" or http_status == 503) and _NOT_AT_READY in lowered:
        # A version asked for by number that is unloaded or loading: "Request for unknown
        # model: 'm' version 1 is not at ready state" (the server answered: nothing ran).
        return ModelNotReadyError, False
    if grpc_code == "UNAVAILABLE":
        if _has(lowered, _QUEUE_HINTS):
            return ServerOverloadedError, True
        if _has(lowered, _REFUSED_HINTS):
            return InferenceError, False
        if _has(lowered, _TLS_HINTS):
            return TritonConnectionError, False
        return TritonConnectionError, True
    if http_status == 503 and (_has(lowered, _REFUSED_HINTS) or _BAD_SETTING_503 in lowered):
        return InferenceError, False
    if _has(lowered, _QUEUE_HINTS):
        return ServerOverloadedError, True
    return InferenceError, http_status in _RETRYABLE_HTTP


# What reading an answer that is not what the protocol promises raises (a key missing, a
# list where an object belongs, a number out of range): the server's fault, not the caller's.
MALFORMED_ANSWER = (
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,  # (a structure nested deeper than Python's stack)
)


def unreadable_answer(exc: BaseException, what: str, model: str | None = None) -> InferenceError:
    """The error for an answer to ``what`` that could not be read (raise it ``from exc``)."""
    return unreadable(
        f"the server's answer to {what} could not be read: {type(exc).__name__}: {exc}", model
    )


def unreadable(message: str, model: str | None = None) -> InferenceError:
    """The error for an answer that came and cannot be read: the request ran
    (``may_have_run``), so sending it again may run it twice."""
    return InferenceError(message, model=model, may_have_run=True)


def unsupported_operation(error: TritonError, operation: str, url: str) -> UnsupportedError:
    """The error of a server that has no endpoint for ``operation`` (gRPC UNIMPLEMENTED, an
    HTTP 404 for the path itself), naming the operation and the server."""
    named = UnsupportedError(
        f"the server at {url} does not support {operation} ({error.status}: {error.message})",
        status=error.status,
        model=error.model,
        request_id=error.request_id,
    )
    named._names_server = True
    return named


_STARTING: Final = (
    TritonConnectionError,
    TritonTimeoutError,
    InferenceError,
    ModelNotFoundError,
    ModelNotReadyError,
)
"""What a server still starting (or loading the model) answers a readiness probe."""


def heals_by_waiting(error: TritonError) -> bool:
    """Whether a readiness probe's error may pass as the server starts: not a failure
    that is never retried (a certificate refused, a port that speaks another protocol),
    unless the server only closed the connection while it was being set up (a port
    forwarder does that while the server behind it starts); nor the client's own
    refusal (closed, another event loop, a bad header)."""
    if not isinstance(error, _STARTING):
        return False
    if isinstance(error, TritonConnectionError) and not error.retryable:
        return error._closed_in_setup
    # An endpoint restricted to requests with a key: waiting gives the probe none.
    restricted = error.status == 403 or _has(error.message.lower(), _REFUSED_HINTS)
    return not (type(error) is InferenceError and restricted)


def values_refused(message: str, *, model: str | None = None) -> InvalidInputError:
    """The refusal of a request for values that its encoding cannot carry (NaN in JSON,
    a message over gRPC's size): a batch of samples refused so is sent again sample by
    sample by ``map``, which finds the samples at fault."""
    error = InvalidInputError(message, model=model)
    error._of_values = True
    return error


def in_split_batch(error: TritonError, first_row: int, count: int, rows: Sequence[int]) -> None:
    """Say in ``error``, of the request of rows ``first_row`` to ``first_row + count`` of a
    batch split into ``len(rows)`` requests, which rows it held; the call's other requests
    may have run (sent before it, or meanwhile). Once per error (a transport may raise one
    object twice)."""
    if error._in_split_batch:
        return
    error._in_split_batch = True
    error._sent_nothing = False  # (its call may have run)
    error.message = (
        f"{error.message} (rows {first_row}-{first_row + count - 1} of a batch of {sum(rows)} "
        f"sent as {len(rows)} requests of at most max_batch_size: the others may have run)"
    )
    error.args = (error.message,)
    error.may_have_run = True


_Failure = TypeVar("_Failure", bound=BaseException)


def refused_before_sending(error: TritonError) -> TritonError:
    """``error``, marked as a refusal on the client: the request never went out (a
    closed client, an event loop the connections do not belong to)."""
    error._refused_here = True
    return never_sent(error)


def never_sent(error: _Failure) -> _Failure:
    """``error``, marked as a failure that sent nothing the server could run: a failure
    or a cancellation of what the client reads before a first request, a request cut
    off before it was written whole."""
    error._sent_nothing = True  # type: ignore[attr-defined]
    return error


def refused_here(error: TritonError) -> bool:
    """Whether ``error`` is a refusal of the client itself, which no server gave."""
    return error._refused_here


def sent_nothing(error: BaseException) -> bool:
    """Whether ``error`` says the request never left the client."""
    return isinstance(error, InvalidInputError) or getattr(error, "_sent_nothing", False)


def refuse_error_body(answer: object, what: str, model: str | None = None) -> None:
    """Raise the error of an answer that is only ``{"error": ...}`` (a proxy's, answered
    with 200 as generate's can be), which is no answer to ``what``."""
    if isinstance(answer, Mapping) and answer.keys() == {"error"}:
        raise InferenceError(
            f"the server's answer to {what} is an error: {answer['error']}",
            status=200,
            model=model,
        )


def is_values_refusal(error: TritonError) -> bool:
    """Whether ``error`` is a :func:`values_refused` refusal."""
    return isinstance(error, InvalidInputError) and error._of_values


def names_no_server(error: TritonError) -> bool:
    """Whether ``error`` is a server's refusal of an operation it lacks that does not yet
    say which server refused (a client over many endpoints names the one that did)."""
    return (
        isinstance(error, UnsupportedError) and error.status is not None and not error._names_server
    )


def classify_message(
    message: str,
    *,
    status: Status | None = None,
    model: str | None = None,
    request_id: str | None = None,
) -> TritonError:
    """An error reported inside an answer that itself succeeded (a gRPC stream message,
    an HTTP 200 body): there is no error status, so the message decides."""
    lowered = message.lower()
    error_class: type[TritonError] = InferenceError
    if _has(lowered, _QUEUE_HINTS):
        return ServerOverloadedError(
            message, status=status, model=model, request_id=request_id, retryable=True
        )
    if _has(lowered, _NOT_READY_HINTS):
        error_class = ModelNotReadyError
    elif "model" in lowered and _has(lowered, _NOT_FOUND_HINTS):
        error_class = ModelNotFoundError
    return error_class(message, status=status, model=model, request_id=request_id)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, nearest first (at most 8)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def tls_failure(exc: BaseException) -> bool:
    """Whether a TLS handshake or certificate check caused ``exc`` (through its causes)."""
    return any(
        isinstance(seen, ssl.SSLError) or isinstance(getattr(seen, "os_error", None), ssl.SSLError)
        for seen in _causes(exc)
    )


def _handshake_eof(exc: BaseException) -> bool:
    """Whether a TLS failure is the server's clean close during the handshake (an EOF),
    not a refusal of what it was sent."""
    return any(
        isinstance(seen, ssl.SSLEOFError | ssl.SSLZeroReturnError) or "UNEXPECTED_EOF" in str(seen)
        for seen in _causes(exc)
    )


def _connect_timeout(exc: BaseException) -> bool:
    """No connection within the timeout (aiohttp's own error for it): nothing was sent,
    so it is a connection failure (the blocking pool raises a ConnectionError for it)."""
    return type(exc).__name__ == "ConnectionTimeoutError" and _from_aiohttp(exc)


def _from_aiohttp(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module == "aiohttp" or module.startswith("aiohttp.")


def classify_transport_error(
    exc: BaseException,
    *,
    model: str | None = None,
    request_id: str | None = None,
    timeout: float | None = None,
    url: str | None = None,
) -> TritonError | None:
    """Map a failure below the protocol (sockets, TLS, ``http.client``, aiohttp) to an
    error, or None if unknown. ``url`` is the server's, named in the message.

    TLS failures are not retried: a bad certificate does not heal by waiting, nor does an
    HTTP/2 (gRPC) port answering an HTTP/1.1 request.
    """
    detail = str(exc) or type(exc).__name__
    if tls_failure(exc):
        error = TritonConnectionError(f"TLS failure: {detail}", model=model, request_id=request_id)
        return closed_in_setup(error) if _handshake_eof(exc) else error
    if isinstance(exc, TimeoutError | asyncio.TimeoutError) and not _connect_timeout(exc):
        # (TimeoutError and asyncio.TimeoutError are distinct before Python 3.11)
        return TritonTimeoutError(
            timeout_message(model, timeout, detail),
            model=model,
            request_id=request_id,
            may_have_run=True,
        )
    if answered_in_http2(exc):
        at = "" if url is None else f" at {url}"
        return TritonConnectionError(
            f"the server{at} answered in HTTP/2, as a gRPC port does: use grpc:// for "
            "this port (Triton listens for HTTP on 8000 and gRPC on 8001 by default)",
            model=model,
            request_id=request_id,
        )
    if isinstance(exc, OSError | http.client.HTTPException) or _from_aiohttp(exc):
        where = "" if url is None else f" to {url}"
        return TritonConnectionError(
            f"connection{where} failed: {detail}",
            model=model,
            request_id=request_id,
            retryable=True,
        )
    return None


def timeout_message(model: str | None, timeout: float | None, detail: str) -> str:
    """What a timed-out call says: who did not answer, within how long, and that the
    request may still run."""
    who = "the server" if model is None else f"model {model!r}"
    within = "" if timeout is None else f" within {timeout:g} s"
    return f"no answer from {who}{within} ({detail}); the server may still run the request"


def answered_in_http2(exc: BaseException) -> bool:
    """An HTTP/1.1 request answered with HTTP/2 frames (a gRPC port): the status line
    starts with a frame header (``http.client``) or aiohttp shows those bytes."""
    if isinstance(exc, http.client.BadStatusLine):
        return str(getattr(exc, "line", "")).startswith("\x00\x00")
    if not _from_aiohttp(exc):
        return False
    # aiohttp shows the bytes escaped, once or more (a repr inside a repr).
    text = str(exc)
    return "bad status line" in text.lower() and re.search(r"(\\+x00){2}", text) is not None


def redirect_refused(status: int, message: str) -> str:
    """The message of a redirect, which no transport follows: it would send the request
    and its headers (credentials) to wherever the answer points."""
    said = f": {message}" if message else ""
    return (
        f"HTTP {status}: a redirect, which is not followed (it would send the request and "
        f"its headers elsewhere); give the client the URL of the server itself{said}"
    )
