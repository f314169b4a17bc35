"""HTTP to an OpenAI-compatible server: one JSON answer, or the JSON events of a
server-sent-event stream up to ``data: [DONE]``, blocking (``http.client``) and asyncio
(aiohttp). Failures become the SDK's errors."""

from __future__ import annotations

import http.client
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aiohttp

from .._errors import InferenceError, TritonError, classify_transport_error
from .._openai_route import error_from_body, event_error

__all__ = ["OpenAICall", "apost_events", "apost_json", "post_events", "post_json"]

JSONObject = dict[str, Any]


class OpenAICall(TypedDict):
    """The keyword arguments of every call here."""

    timeout: float | None
    headers: Mapping[str, str] | None
    model: str | None


def _failure(exc: BaseException, url: str, model: str | None, timeout: float | None) -> TritonError:
    error = classify_transport_error(exc, model=model, timeout=timeout, url=url)
    return error or TritonError(f"request to {url} failed: {exc!r}", model=model)


def _connection(url: str, timeout: float | None) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    return kind(parts.netloc, timeout=timeout), path


def _headers(headers: Mapping[str, str] | None, stream: bool) -> dict[str, str]:
    accept = "text/event-stream" if stream else "application/json"
    return {"Content-Type": "application/json", "Accept": accept, **(headers or {})}


def _event(line: bytes, model: str | None) -> JSONObject | None:
    """The JSON object of one ``data:`` line; None for other lines and ``[DONE]``."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return None
    event: JSONObject = json.loads(data)
    error = event_error(event, model)
    if error is not None:
        raise error
    return event


def _open(
    url: str,
    body: JSONObject,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    stream: bool,
    model: str | None,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    connection, path = _connection(url, timeout)
    try:
        connection.request("POST", path, json.dumps(body).encode(), _headers(headers, stream))
        response = connection.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        raise _failure(exc, url, model, timeout) from exc
    if response.status >= 400:
        raw = response.read()
        connection.close()
        raise error_from_body(response.status, raw, url, model)
    return connection, response


def post_json(
    url: str,
    body: JSONObject,
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> JSONObject:
    connection, response = _open(url, body, timeout, headers, False, model)
    try:
        answer: JSONObject = json.loads(response.read())
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        connection.close()
    return answer


def post_events(
    url: str,
    body: JSONObject,
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> Iterator[JSONObject]:
    """The stream's events; closing the iterator closes the connection (the server then
    cancels the request)."""
    connection, response = _open(url, body, timeout, headers, True, model)
    try:
        while line := response.readline():
            if line.strip() == b"data: [DONE]":
                return
            event = _event(line, model)
            if event is not None:
                yield event
    except http.client.IncompleteRead as exc:
        raise _cut_short(url, model) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        connection.close()
    raise _cut_short(url, model)


async def _aopen(
    session: aiohttp.ClientSession,
    url: str,
    body: JSONObject,
    headers: Mapping[str, str] | None,
    stream: bool,
    model: str | None,
) -> aiohttp.ClientResponse:
    response = await session.post(
        url, data=json.dumps(body).encode(), headers=_headers(headers, stream)
    )
    if response.status >= 400:
        raw = await response.read()
        response.release()
        raise error_from_body(response.status, raw, url, model)
    return response


def _cut_short(url: str, model: str | None) -> TritonError:
    # The frontend sends no error event: when the model fails mid-stream it drops the
    # connection before "data: [DONE]".
    return InferenceError(
        f"the OpenAI-compatible frontend at {url} ended the stream before [DONE]: the "
        "request failed on the server (its log says why)",
        model=model,
        may_have_run=True,
    )


def _payload_error() -> type[Exception]:
    import aiohttp

    return aiohttp.ClientPayloadError


def _client_error() -> type[Exception]:
    import aiohttp

    return aiohttp.ClientError


def _session(timeout: float | None) -> aiohttp.ClientSession:
    import aiohttp  # imported when the first such call is made, as the transports do

    # No Accept-Encoding: a compressed stream would arrive in bursts.
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout),
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
    )


async def apost_json(
    url: str,
    body: JSONObject,
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> JSONObject:
    try:
        async with _session(timeout) as session:
            response = await _aopen(session, url, body, headers, False, model)
            answer: JSONObject = json.loads(await response.read())
            return answer
    except TritonError:
        raise
    except (OSError, _client_error(), TimeoutError) as exc:
        raise _failure(exc, url, model, timeout) from exc


async def apost_events(
    url: str,
    body: JSONObject,
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> AsyncIterator[JSONObject]:
    try:
        async with _session(timeout) as session:
            response = await _aopen(session, url, body, headers, True, model)
            async with response:
                async for line in response.content:
                    if line.strip() == b"data: [DONE]":
                        return
                    event = _event(line, model)
                    if event is not None:
                        yield event
    except TritonError:
        raise
    except _payload_error() as exc:
        raise _cut_short(url, model) from exc
    except (OSError, _client_error(), TimeoutError) as exc:
        raise _failure(exc, url, model, timeout) from exc
    raise _cut_short(url, model)
