"""Reading the server's Prometheus endpoint (its own port, 8002 by default).

Both protocols' transports send :class:`FetchMetrics` here: the endpoint is plain HTTP
whatever protocol the client speaks.
"""

from __future__ import annotations

import http.client
import ssl
from urllib.parse import SplitResult, urlsplit

from .._call import CallContext
from .._compression import decompress
from .._config import TLSConfig, check_metrics_url, redact_url
from .._errors import TritonError, UnsupportedError
from .._http_codec import error_from_response
from ._errors import http_error
from ._http_pool import (
    connection_for,
    deadline_of,
    header_value,
    request_headers,
    ssl_context,
    tls_name,
)

__all__ = ["fetch_metrics", "fetch_metrics_async", "metrics_url_read"]


def _checked_url(url: str) -> SplitResult:
    """The URL's parts, the path ``/metrics`` when it gives none (as Triton's port
    answers any other path with an empty page)."""
    parts = urlsplit(check_metrics_url(url))
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return parts


def metrics_url_read(url: str) -> str:
    """The URL that is read for the metrics at ``url`` (its path ``/metrics`` when it gives
    none)."""
    return _checked_url(url).geturl()


def _failure(exc: BaseException, url: str, timeout: float | None) -> TritonError:
    error = http_error(exc, None, timeout)
    shown = redact_url(url)
    return type(error)(f"cannot read metrics from {shown}: {error}", retryable=error.retryable)


def _text(status: int, body: bytes, url: str) -> str:
    if status != 200:
        raise error_from_response(status, body)
    if not body.strip():
        # Triton's metrics port answers any path but /metrics so: metrics of nothing.
        raise UnsupportedError(f"no metrics at {redact_url(url)} (an empty page)", status=status)
    return body.decode("utf-8")


def fetch_metrics(url: str, ctx: CallContext, tls: TLSConfig | None) -> str:
    """The metrics text at ``url``, sent with the call's headers and the client's TLS files."""
    parts = _checked_url(url)
    # The whole exchange ends by the timeout, however slowly the endpoint sends.
    connection = connection_for(parts, ctx.timeout, tls, deadline_of(ctx.timeout))
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", target, headers=dict(ctx.headers))
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, ctx.timeout) from exc
    finally:
        connection.close()
    encoding = response.getheader("Content-Encoding")
    body = decompress(body, encoding, header_value(ctx.headers, "Accept-Encoding"))
    return _text(response.status, body, url)


async def fetch_metrics_async(url: str, ctx: CallContext, tls: TLSConfig | None) -> str:
    """The metrics text at ``url``, without blocking the event loop."""
    import asyncio

    import aiohttp

    target = _checked_url(url).geturl()
    context: ssl.SSLContext | bool = ssl_context(tls) if url.startswith("https:") else True
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=ctx.timeout),
                auto_decompress=False,  # (read as the blocking one reads: see decompress)
            ) as session,
            session.get(
                target,
                headers=request_headers({"Accept-Encoding": "identity"}, ctx.headers),
                ssl=context,
                server_hostname=tls_name(target, tls),
                allow_redirects=False,  # (as the blocking read: no headers sent elsewhere)
            ) as response,
        ):
            body = await response.read()
            status = response.status
            encoding = response.headers.get("Content-Encoding")
            accepted = response.request_info.headers.get("Accept-Encoding")
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise _failure(exc, url, ctx.timeout) from exc
    return _text(status, decompress(body, encoding, accepted), url)
