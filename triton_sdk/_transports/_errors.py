"""Foreign exceptions to the SDK's own: the one place each transport's failures are read.

Each function returns the most specific :class:`TritonError` (the rules are the pure
``classify_*`` of ``_errors``); the caller raises it ``from`` the original.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._call import AnyOp
from .._errors import (
    InvalidInputError,
    TritonConnectionError,
    TritonError,
    answered_in_http2,
    classify_status,
    classify_transport_error,
    closed_in_setup,
    refused_before_sending,
    timeout_message,
)

__all__ = ["closed_before_sending", "closed_error", "grpc_error", "http_error", "refused_error"]


def http_error(
    exc: BaseException,
    op: AnyOp | None,
    timeout: float | None,
    url: str | None = None,
    *,
    sent: bool = False,
) -> TritonError:
    """A failure of ``http.client``, a socket or aiohttp, below the HTTP exchange, with
    the server's ``url`` in its message. ``sent``: the request had gone out, so the
    server may have run it (not so where the answer came in HTTP/2: a gRPC port runs
    no HTTP request)."""
    error = _http_error(exc, op, timeout, url)
    if sent and not answered_in_http2(exc):
        error.may_have_run = True
    return error


def _http_error(
    exc: BaseException, op: AnyOp | None, timeout: float | None, url: str | None
) -> TritonError:
    model = None if op is None else op.model
    request_id = None if op is None else op.request_id
    if _tls_connect_reset(exc):
        return closed_in_setup(
            TritonConnectionError(
                f"TLS failure: the server closed the connection during the handshake (is it "
                f"serving plain HTTP?): {exc}",
                model=model,
                request_id=request_id,
            )
        )
    error = classify_transport_error(
        exc, model=model, request_id=request_id, timeout=timeout, url=url
    )
    if error is None:
        error = TritonConnectionError(
            f"HTTP request failed: {exc!r}", model=model, request_id=request_id
        )
    return error


def _tls_connect_reset(exc: BaseException) -> bool:
    """aiohttp's report of a TLS connection the server reset during the handshake, as a
    plain-HTTP server does (the blocking transport sees an SSL error there)."""
    key = getattr(exc, "_conn_key", None)
    cause = getattr(exc, "os_error", None)
    return bool(getattr(key, "is_ssl", False)) and isinstance(
        cause, ConnectionResetError | EOFError
    )


def _closed_while_connecting(lowered: str) -> bool:
    # A clean close (not a reset, which a balancer dropping a dead pod also sends).
    return "failed to connect" in lowered and "socket closed" in lowered and "reset" not in lowered


def grpc_error(
    exc: Any, op: AnyOp | None, *, tls: bool = False, timeout: float | None = None
) -> TritonError:
    """A ``grpc.RpcError``: its status code, read with its message.

    On a TLS channel, a server that closes the connection while it is being set up
    refused the handshake (a client certificate it does not accept, or none): that is
    not retried, like every other TLS failure.
    """
    model = None if op is None else op.model
    request_id = None if op is None else op.request_id
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    if code is None:
        return TritonConnectionError(details or str(exc), model=model, request_id=request_id)
    # (Without details, str(exc) is grpc's repr of the whole call.)
    message = details or f"the call ended with {code.name}, without a message"
    lowered = message.lower()
    if code.name == "UNAVAILABLE" and _closed_while_connecting(lowered):
        # The port answered and hung up before gRPC could begin: not a server that is
        # down (that refuses), but one that does not speak this: waiting will not help.
        hint = (
            "TLS failure: the server closed the connection during the handshake (does it "
            "want a client certificate, or another one? is this an HTTP port?)"
            if tls
            else "the server closed the connection before gRPC could start: is this "
            "Triton's HTTP port (use http://), or does it want TLS (use grpcs://)?"
        )
        return closed_in_setup(
            TritonConnectionError(
                f"{hint}: {message}",
                status=code.name,
                model=model,
                request_id=request_id,
            )
        )
    if code.name == "DEADLINE_EXCEEDED":
        message = timeout_message(model, timeout, message)
    error = classify_status(code.name, message, model=model, request_id=request_id)
    if isinstance(error, TritonConnectionError) and error.retryable:
        error.may_have_run = not any(hint in lowered for hint in _NEVER_CONNECTED)
    return error


# gRPC's words for a call that failed before any connection carried it.
_NEVER_CONNECTED = (
    "failed to connect",
    "connection refused",
    "connect failed",
    "dns resolution failed",
    "errors resolving",  # (grpcio 1.7x and later, with the lookup's own words after it)
    "name resolution",
    "no route to host",
    "network is unreachable",
)


def closed_error(exc: BaseException) -> TritonError:
    return TritonError(f"the client's connection is closed ({exc})")


def closed_before_sending() -> TritonError:
    """The error of a call that found the client's connections closed before it went out
    (close() came between its check of the client and its send): one message on every
    transport, not grpc's or the pool's own words."""
    return refused_before_sending(closed_error(RuntimeError("closed before the call went out")))


def closed_by_aclose() -> TritonError:
    return closed_error(RuntimeError("closed by aclose()"))


def closed_in_flight() -> TritonError:
    """The error of a call that closing the client cut off (it had gone out)."""
    error = closed_error(RuntimeError("closed while the call was in flight"))
    error.may_have_run = True
    return error


def task_cancelled() -> bool:
    """Whether the running task has been asked to cancel (always False before Python
    3.11, which cannot tell)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is not None and cancelling() > 0


def raise_if_cut_by_close(exc: asyncio.CancelledError, closed: bool) -> None:
    """Raise the closed client's error in place of a CancelledError that came from the
    client's own close (which cancels the calls in flight); a cancellation of the
    caller's task is left to go on as it is."""
    if closed and not task_cancelled():
        raise closed_in_flight() from exc


def refused_error(exc: ValueError) -> TritonError:
    """grpc's ValueError for something it will not send (e.g. metadata it refuses)."""
    return InvalidInputError(f"gRPC refused the request: {exc}")
