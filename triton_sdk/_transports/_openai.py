"""HTTP to an OpenAI-compatible frontend (``openai_url``): one JSON answer, or the JSON
events of a server-sent-event stream up to ``data: [DONE]``, blocking (``http.client``)
and asyncio (aiohttp). Both protocols' transports send :class:`OpenAIPost` and
:class:`OpenAIEvents` here, with the call's headers and the client's TLS files, as they
send :class:`FetchMetrics`. Failures become the SDK's errors."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aiohttp

from .._call import CallContext
from .._config import TLSConfig, redact_url
from .._errors import InferenceError, TritonError, classify_transport_error, unreadable
from .._generate import ServerSentEvents
from .._openai_route import error_from_body, event_error
from .._ops import OpenAIEvents, OpenAIPost
from ._http_pool import (
    EventWait,
    connection_for,
    deadline_of,
    hold_socket,
    interrupt,
    release_socket,
    request_headers,
    socket_of,
    ssl_context,
    tls_name,
)

__all__ = ["openai_events", "openai_events_async", "openai_post", "openai_post_async"]

JSONObject = dict[str, Any]


def _failure(exc: BaseException, url: str, model: str | None, timeout: float | None) -> TritonError:
    error = classify_transport_error(exc, model=model, timeout=timeout, url=redact_url(url))
    return error or TritonError(f"request to {redact_url(url)} failed: {exc!r}", model=model)


def _connection(
    url: str, timeout: float | None, tls: TLSConfig | None, stream: bool
) -> tuple[http.client.HTTPConnection, str]:
    """A connection to the frontend, and the path to send to. A stream's timeout bounds
    the wait for each event (EventWait); a single answer's, the whole exchange."""
    parts = urlsplit(url)
    deadline = None if stream else deadline_of(timeout)
    return connection_for(parts, timeout, tls, deadline), parts.path


def _headers(headers: Mapping[str, str] | None, stream: bool) -> dict[str, str]:
    accept = "text/event-stream" if stream else "application/json"
    return request_headers({"Content-Type": "application/json", "Accept": accept}, headers or {})


def _json(data: bytes, url: str, model: str | None) -> JSONObject:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise unreadable(
            f"the OpenAI-compatible frontend at {url} sent something that is not JSON: "
            f"{data[:120]!r}",
            model,
        ) from exc
    if not isinstance(value, dict):
        raise unreadable(f"the frontend at {url} sent {value!r}, not an object", model)
    return value


def _events(datas: Iterable[str], url: str, model: str | None) -> Iterator[JSONObject | None]:
    """The JSON object of each event's data (its ``data:`` lines joined, as server-sent
    events are); None for ``[DONE]``, the stream's end."""
    for data in datas:
        if data.strip() == "[DONE]":
            yield None
            return
        event = _json(data.encode("utf-8", "surrogateescape"), url, model)
        error = event_error(event, model)
        if error is not None:
            raise error
        yield event


def _cut_short(url: str, model: str | None) -> TritonError:
    # The frontend sends no error event: when the model fails mid-stream it drops the
    # connection before "data: [DONE]".
    return InferenceError(
        f"the OpenAI-compatible frontend at {url} ended the stream before [DONE]: the "
        "request failed on the server (its log says why)",
        model=model,
        may_have_run=True,
    )


# Blocking


def _close(connection: http.client.HTTPConnection) -> None:
    release_socket(connection)
    connection.close()


def _open(
    op: OpenAIPost | OpenAIEvents, ctx: CallContext, tls: TLSConfig | None, stream: bool
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    url, model, timeout = op.url, op.model, ctx.timeout
    connection, path = _connection(url, timeout, tls, stream)
    try:
        connection.request("POST", path, op.payload, _headers(ctx.headers, stream))
        hold_socket(connection)
        response = connection.getresponse()
        if response.status >= 300:
            raise error_from_body(response.status, response.read(), url, model)
    except (OSError, http.client.HTTPException) as exc:
        _close(connection)
        raise _failure(exc, url, model, timeout) from exc
    except BaseException:
        _close(connection)
        raise
    return connection, response


def openai_post(op: OpenAIPost, ctx: CallContext, tls: TLSConfig | None) -> JSONObject:
    """The frontend's one JSON answer to ``op``."""
    connection, response = _open(op, ctx, tls, False)
    try:
        raw = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, op.url, op.model, ctx.timeout) from exc
    finally:
        _close(connection)
    return _json(raw, op.url, op.model)


def openai_events(
    op: OpenAIEvents, ctx: CallContext, tls: TLSConfig | None
) -> Iterator[JSONObject]:
    """The JSON events of the frontend's answer to ``op``. Closing the iterator closes
    the connection, which cancels the request on the server; the call's stop cuts it
    first, so that a thread blocked reading it wakes."""
    url, model, timeout = op.url, op.model, ctx.timeout
    connection, response = _open(op, ctx, tls, True)
    try:
        if ctx._stop is not None:
            ctx._stop.arm(lambda: interrupt(connection))
        # The timeout bounds the wait for each event: the frontend's keep-alive comments
        # do not restart it.
        waiting = EventWait(timeout)
        sse = ServerSentEvents()
        while True:
            sock = socket_of(connection)
            if sock is not None:
                sock.settimeout(waiting.left())
            line = response.readline()
            for event in _events(sse.feed(line) if line else sse.finish(), url, model):
                if event is None:
                    return
                yield event
                waiting.restart()
            if not line:
                break
    except http.client.IncompleteRead as exc:
        raise _cut_short(url, model) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        _close(connection)
    raise _cut_short(url, model)


# asyncio


def _session(timeout: float | None, stream: bool) -> aiohttp.ClientSession:
    import aiohttp  # imported when the first such call is made, as the transports do

    # A stream's timeout bounds the wait for each event (EventWait); a single answer's,
    # the whole exchange. No Accept-Encoding: a compressed stream would arrive in bursts.
    limit = (
        aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        if stream
        else aiohttp.ClientTimeout(total=timeout)
    )
    return aiohttp.ClientSession(
        timeout=limit,
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
    )


def _aiohttp_failures() -> tuple[type[BaseException], ...]:
    import aiohttp

    return (OSError, aiohttp.ClientError, TimeoutError, asyncio.TimeoutError)


async def _aopen(
    op: OpenAIPost | OpenAIEvents, ctx: CallContext, tls: TLSConfig | None, stream: bool
) -> tuple[aiohttp.ClientSession, aiohttp.ClientResponse]:
    url, model, timeout = op.url, op.model, ctx.timeout
    context: ssl.SSLContext | bool = ssl_context(tls) if url.startswith("https:") else True
    session = _session(timeout, stream)
    try:
        response = await session.post(
            url,
            data=op.payload,
            headers=_headers(ctx.headers, stream),
            ssl=context,
            server_hostname=tls_name(url, tls),
            allow_redirects=False,  # (as the blocking transport: no headers sent elsewhere)
        )
        if response.status >= 300:
            raw = await response.read()
            response.release()
            raise error_from_body(response.status, raw, url, model)
    except TritonError:
        await session.close()
        raise
    except _aiohttp_failures() as exc:
        await session.close()
        raise _failure(exc, url, model, timeout) from exc
    except BaseException:  # cancelled while waiting for the answer
        await session.close()
        raise
    return session, response


async def openai_post_async(op: OpenAIPost, ctx: CallContext, tls: TLSConfig | None) -> JSONObject:
    """The frontend's one JSON answer to ``op``, without blocking the event loop."""
    session, response = await _aopen(op, ctx, tls, False)
    try:
        raw = await response.read()
    except _aiohttp_failures() as exc:
        raise _failure(exc, op.url, op.model, ctx.timeout) from exc
    finally:
        response.release()
        await session.close()
    return _json(raw, op.url, op.model)


async def openai_events_async(
    op: OpenAIEvents, ctx: CallContext, tls: TLSConfig | None
) -> AsyncIterator[JSONObject]:
    """The asyncio twin of :func:`openai_events`."""
    import aiohttp

    url, model, timeout = op.url, op.model, ctx.timeout
    session, response = await _aopen(op, ctx, tls, True)
    try:
        if ctx._stop is not None:
            # Ends the wait of a task reading the events (aiohttp would not wake it on
            # close).
            ctx._stop.arm(lambda: response.content.set_exception(_cut_short(url, model)))
        waiting = EventWait(timeout)  # (see openai_events)
        # (read as chunks come, not by aiohttp's readline, which refuses lines over twice
        # its buffer: a chunk that echoes a long prompt)
        sse = ServerSentEvents()
        while True:
            data = await waiting.readany(response.content)
            for event in _events(sse.feed(data) if data else sse.finish(), url, model):
                if event is None:
                    return
                yield event
                waiting.restart()
            if not data:
                break
    except aiohttp.ClientPayloadError as exc:
        raise _cut_short(url, model) from exc
    except _aiohttp_failures() as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        response.release()
        await session.close()
    raise _cut_short(url, model)
