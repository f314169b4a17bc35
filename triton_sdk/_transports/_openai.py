"""HTTP to an OpenAI-compatible server: one JSON answer, or the JSON events of a
server-sent-event stream up to ``data: [DONE]``, blocking (``http.client``) and asyncio
(aiohttp). Failures become the SDK's errors."""

from __future__ import annotations

import http.client
import json
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aiohttp

from .._call import StreamStop
from .._errors import InferenceError, TritonError, classify_transport_error
from .._openai_route import error_from_body, event_error
from ._http_pool import interrupt

__all__ = ["OpenAICall", "apost_events", "apost_json", "post_events", "post_json"]

JSONObject = dict[str, Any]
T = TypeVar("T")


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


def _json(data: bytes, url: str, model: str | None) -> JSONObject:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise InferenceError(
            f"the OpenAI-compatible frontend at {url} sent something that is not JSON: "
            f"{data[:120]!r}",
            model=model,
        ) from exc
    if not isinstance(value, dict):
        raise InferenceError(f"the frontend at {url} sent {value!r}, not an object", model=model)
    return value


def _event(line: bytes, url: str, model: str | None) -> JSONObject | None:
    """The JSON object of one ``data:`` line; None for other lines."""
    if not line.startswith(b"data:"):
        return None
    event = _json(line[5:].strip(), url, model)
    error = event_error(event, model)
    if error is not None:
        raise error
    return event


def _done(line: bytes) -> bool:
    return line.strip() == b"data: [DONE]"


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
        if response.status >= 400:
            raise error_from_body(response.status, response.read(), url, model)
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        raise _failure(exc, url, model, timeout) from exc
    except TritonError:
        connection.close()
        raise
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
        raw = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        connection.close()
    return _json(raw, url, model)


class EventStream(Generic[T]):
    """The events of one answer, each parsed; closing it, read or not, closes the
    connection, which cancels the request on the server.

    Hand it to a ``ResponseStream`` with its ``stop``: closing that cuts the connection
    first, so that a thread reading the events ends its wait and its loop.
    """

    def __init__(
        self,
        events: Generator[JSONObject, None, None],
        parse: Callable[[JSONObject], T],
        connection: http.client.HTTPConnection,
    ) -> None:
        self._events = events
        self._parse = parse
        self._connection = connection
        self.stop = StreamStop()
        self.stop.arm(lambda: interrupt(connection))

    def __iter__(self) -> EventStream[T]:
        return self

    def __next__(self) -> T:
        try:
            return self._parse(next(self._events))
        except TritonError:
            if self.stop.requested:  # closed by another thread: the reader's loop just ends
                raise StopIteration from None
            raise

    def close(self) -> None:
        # Busy in another thread: ValueError, and that thread's generator closes the
        # connection as it ends.
        self._events.close()
        self._connection.close()  # a generator not yet started runs no finally


def post_events(
    url: str,
    body: JSONObject,
    parse: Callable[[JSONObject], T],
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> EventStream[T]:
    """Send the request now (its errors are raised here), and return its events, parsed."""
    connection, response = _open(url, body, timeout, headers, True, model)
    return EventStream(_events(connection, response, url, model, timeout), parse, connection)


def _events(
    connection: http.client.HTTPConnection,
    response: http.client.HTTPResponse,
    url: str,
    model: str | None,
    timeout: float | None,
) -> Generator[JSONObject, None, None]:
    try:
        while line := response.readline():
            if _done(line):
                return
            event = _event(line, url, model)
            if event is not None:
                yield event
    except http.client.IncompleteRead as exc:
        raise _cut_short(url, model) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        connection.close()
    raise _cut_short(url, model)


# asyncio


def _session(timeout: float | None) -> aiohttp.ClientSession:
    import aiohttp  # imported when the first such call is made, as the transports do

    # No Accept-Encoding: a compressed stream would arrive in bursts.
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout),
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
    )


def _aiohttp_failures() -> tuple[type[BaseException], ...]:
    import aiohttp

    return (OSError, aiohttp.ClientError, TimeoutError)


async def _aopen(
    url: str,
    body: JSONObject,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    stream: bool,
    model: str | None,
) -> tuple[aiohttp.ClientSession, aiohttp.ClientResponse]:
    session = _session(timeout)
    try:
        response = await session.post(
            url, data=json.dumps(body).encode(), headers=_headers(headers, stream)
        )
        if response.status >= 400:
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


async def apost_json(
    url: str,
    body: JSONObject,
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> JSONObject:
    session, response = await _aopen(url, body, timeout, headers, False, model)
    try:
        raw = await response.read()
    except _aiohttp_failures() as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        response.release()
        await session.close()
    return _json(raw, url, model)


class AsyncEventStream(Generic[T]):
    """The asyncio twin of :class:`EventStream`."""

    def __init__(
        self,
        events: AsyncGenerator[JSONObject, None],
        parse: Callable[[JSONObject], T],
        session: aiohttp.ClientSession,
        response: aiohttp.ClientResponse,
    ) -> None:
        self._events = events
        self._parse = parse
        self._session = session
        self._response = response
        self.stop = StreamStop()
        # Ends the wait of a task reading the events (aiohttp would not wake it on close).
        self.stop.arm(lambda: response.content.set_exception(_cut_short(str(response.url), None)))

    def __aiter__(self) -> AsyncEventStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return self._parse(await self._events.__anext__())
        except TritonError:
            if self.stop.requested:  # closed by another task: the reader's loop just ends
                raise StopAsyncIteration from None
            raise

    async def aclose(self) -> None:
        # Busy in another task: RuntimeError, and that task's generator releases the
        # answer and the session as it ends.
        await self._events.aclose()
        self._response.release()  # a generator not yet started runs no finally
        await self._session.close()


async def apost_events(
    url: str,
    body: JSONObject,
    parse: Callable[[JSONObject], T],
    *,
    timeout: float | None,
    headers: Mapping[str, str] | None,
    model: str | None,
) -> AsyncEventStream[T]:
    """Send the request now (its errors are raised here), and return its events, parsed."""
    session, response = await _aopen(url, body, timeout, headers, True, model)
    events = _aevents(session, response, url, model, timeout)
    return AsyncEventStream(events, parse, session, response)


async def _aevents(
    session: aiohttp.ClientSession,
    response: aiohttp.ClientResponse,
    url: str,
    model: str | None,
    timeout: float | None,
) -> AsyncGenerator[JSONObject, None]:
    import aiohttp

    try:
        async for line in response.content:
            if _done(line):
                return
            event = _event(line, url, model)
            if event is not None:
                yield event
    except aiohttp.ClientPayloadError as exc:
        raise _cut_short(url, model) from exc
    except _aiohttp_failures() as exc:
        raise _failure(exc, url, model, timeout) from exc
    finally:
        response.release()
        await session.close()
    raise _cut_short(url, model)
