"""Foreign exceptions to the SDK's own: the one place each transport's failures are read.

Each function returns the most specific :class:`TritonError` (the rules are the pure
``classify_*`` of ``_errors``); the caller raises it ``from`` the original.
"""

from __future__ import annotations

from typing import Any

from .._errors import (
    InvalidInputError,
    TritonConnectionError,
    TritonError,
    classify_status,
    classify_transport_error,
)
from .._ops import Op, StreamOp

__all__ = ["closed_error", "grpc_error", "http_error", "refused_error"]

AnyOp = Op[Any] | StreamOp[Any]


def http_error(exc: BaseException, op: AnyOp | None, timeout: float | None) -> TritonError:
    """A failure of ``http.client``, a socket or aiohttp, below the HTTP exchange."""
    model = None if op is None else op.model
    request_id = None if op is None else op.request_id
    error = classify_transport_error(exc, model=model, request_id=request_id, timeout=timeout)
    if error is None:
        error = TritonConnectionError(
            f"HTTP request failed: {exc!r}", model=model, request_id=request_id
        )
    return error


def grpc_error(exc: Any, op: AnyOp | None) -> TritonError:
    """A ``grpc.RpcError``: its status code, read with its message."""
    model = None if op is None else op.model
    request_id = None if op is None else op.request_id
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    message = details or str(exc)
    if code is None:
        return TritonConnectionError(message, model=model, request_id=request_id)
    return classify_status(code.name, message, model=model, request_id=request_id)


def closed_error(exc: BaseException) -> TritonError:
    return TritonError(f"the client's connection is closed ({exc})")


def refused_error(exc: ValueError) -> TritonError:
    """grpc's ValueError for something it will not send (e.g. metadata it refuses)."""
    return InvalidInputError(f"gRPC refused the request: {exc}")
