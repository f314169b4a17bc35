"""Reading the server's Prometheus endpoint (its own port, 8002 by default)."""

from __future__ import annotations

import asyncio
import http.client
import ssl
from collections.abc import Mapping
from urllib.parse import SplitResult, urlsplit

import aiohttp

from .._config import TLSConfig
from .._errors import (
    InvalidInputError,
    TritonConnectionError,
    TritonError,
    classify_transport_error,
)
from .._http_codec import error_from_response
from ._http import aiohttp_error, ssl_context

__all__ = ["fetch_metrics", "fetch_metrics_async"]


def _failure(exc: BaseException, url: str) -> TritonError:
    error = classify_transport_error(exc)
    return error or TritonConnectionError(f"cannot read metrics from {url}: {exc!r}")


def _checked_url(url: str) -> tuple[SplitResult, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise InvalidInputError(f"not a metrics URL: {url!r} (expected http(s)://host:port/path)")
    return parts, port


def fetch_metrics(
    url: str, timeout: float | None, headers: Mapping[str, str], tls: TLSConfig | None
) -> str:
    """The metrics text at ``url``, sent with the client's headers and TLS files."""
    parts, port = _checked_url(url)
    host = parts.hostname or ""
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl_context(tls)
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/metrics", headers=dict(headers))
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url) from exc
    finally:
        connection.close()
    if response.status != 200:
        raise error_from_response(response.status, body)
    return body.decode("utf-8")


async def fetch_metrics_async(
    url: str, timeout: float | None, headers: Mapping[str, str], tls: TLSConfig | None
) -> str:
    """The metrics text at ``url``, without blocking the event loop."""
    _checked_url(url)
    context: ssl.SSLContext | bool = ssl_context(tls) if url.startswith("https:") else True
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url, headers=headers, ssl=context) as response,
        ):
            body = await response.read()
            status = response.status
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise aiohttp_error(exc, timeout) from exc
    if status != 200:
        raise error_from_response(status, body)
    return body.decode("utf-8")
