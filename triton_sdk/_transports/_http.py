"""HTTP transports: a thread-safe blocking one, and one on aiohttp for asyncio.

tritonclient's blocking HTTP client runs on gevent and must not be shared between
threads, and neither of its HTTP clients takes a timeout per call. These transports
send what ``_http_codec`` describes on transports that do both: the standard library's
``http.client`` with a pool of keep-alive connections (``_http_pool``), and aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import math
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final, Literal, TypeVar

import aiohttp

from .._call import CallContext
from .._compression import Compression, compress, decompress
from .._concurrency import aclose_iterator
from .._config import Endpoint, TLSConfig
from .._errors import TritonError, TritonTimeoutError, never_sent
from .._http_codec import HEADER_LENGTH, Body, HttpCall, HttpCodec, HttpStream, is_triton
from .._ops import GetServerMetadata, Op, OpenAIEvents, StreamOp
from .._request import InferRequest
from ._errors import (
    closed_before_sending,
    closed_by_aclose,
    closed_in_flight,
    http_error,
    raise_if_cut_by_close,
)
from ._http_pool import (
    AnswerLost,
    ConnectionPool,
    EventWait,
    NotSent,
    PoolClosed,
    body_of,
    header_length,
    interrupt,
    request_headers,
    socket_of,
    ssl_context,
)
from ._loop import check_loop, check_open_loop
from ._openai import openai_events, openai_events_async
from ._own_url import OWN_URL_CALLS, OwnTLS, own_url_acall, own_url_call

__all__ = ["AsyncHttpTransport", "HttpTransport"]

T = TypeVar("T")

_ASYNC_CONNECTIONS: Final = 100
"""At most this many connections per AsyncClient over HTTP; more requests wait for one."""

_LARGE_BODY: Final = 2**20
_BUFFERED_MAX: Final = 2**31

_HTTP_FAILURES: Final = (OSError, http.client.HTTPException, ValueError)

# How a stream the server ends by dropping the connection breaks off.
_CUT_OFF: Final = (http.client.IncompleteRead, ConnectionError)
_AIOHTTP_CUT_OFF: Final = (
    aiohttp.ClientPayloadError,
    aiohttp.ServerDisconnectedError,
    ConnectionError,
)

_AIOHTTP_FAILURES: Final = (
    aiohttp.ClientError,
    aiohttp.http_exceptions.HttpProcessingError,
    OSError,
    asyncio.TimeoutError,
)


def _compressed(
    call: HttpCall[Any], body: Any, size: int, compression: str, headers: dict[str, str]
) -> tuple[Any, int]:
    """The answer asked for compressed, and the body compressed (headers say so) when
    the server reads it so (see HttpCall.compressible)."""
    headers["Accept-Encoding"] = compression
    if body is None or not call.compressible:
        return body, size
    data = compress(body if isinstance(body, bytes) else b"".join(body), compression)
    headers["Content-Encoding"] = compression
    return data, len(data)


class HttpTransport:
    """Blocking HTTP, safe to share between threads; each call takes its own timeout."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        tls: TLSConfig | None,
        compression: Compression = None,
        max_connection_age: float | None = None,
        binary: bool | Literal["auto"] = "auto",
    ) -> None:
        self.endpoint = endpoint
        self._own_tls = OwnTLS(tls, lambda: (endpoint.host,))
        self._url = str(endpoint)
        self._tls = tls
        self._compression = compression
        self._codec = HttpCodec(endpoint.base_path, None if binary == "auto" else binary)
        self._pool = ConnectionPool(endpoint, tls, max_age=max_connection_age)

    def call(self, op: Op[T], ctx: CallContext) -> T:
        if isinstance(op, OWN_URL_CALLS):
            return own_url_call(op, ctx, self._own_tls(op.url))  # type: ignore[no-any-return]
        limit = ctx.timeout  # (errors name the call's own timeout: ctx.timeout)
        if self._codec.binary is None and isinstance(op, InferRequest):
            started = time.monotonic()
            try:
                self._codec.binary = is_triton(self.call(GetServerMetadata(), ctx))
            except TritonError as refusal:
                self._codec.binary = _binary_unless_passing(refusal, op, ctx.timeout)
            limit = _rest_of_the_timeout(ctx.timeout, started, op)
        call = self._codec.encode(op)
        body, size = body_of(call.body)
        headers = dict(call.headers)
        if self._compression is not None:
            body, size = _compressed(call, body, size, self._compression, headers)
        if body is not None:
            headers["Content-Length"] = str(size)
        headers = request_headers(headers, ctx.headers)
        try:
            status, length, data = self._pool.request(call.method, call.path, body, headers, limit)
        except PoolClosed as exc:
            raise closed_before_sending() from exc
        except AnswerLost as lost:
            raise http_error(lost.cause, op, ctx.timeout, self._url, sent=True) from lost.cause
        except NotSent as failed:
            raise _not_sent(failed, op, ctx.timeout, self._url) from failed.cause
        except _HTTP_FAILURES as exc:
            raise http_error(exc, op, ctx.timeout, self._url) from exc
        return call.read(status, length, data)

    def stream(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        """The events of one answer; the timeout bounds the wait for each read."""
        if isinstance(op, OpenAIEvents):
            yield from openai_events(op, ctx, self._own_tls(op.url))  # type: ignore[misc]
            return
        call = self._codec.encode_stream(op)
        body, size = body_of(call.body)
        headers = request_headers({**call.headers, "Content-Length": str(size)}, ctx.headers)
        stop = ctx._stop
        went_out = False

        def on_sent(connection: http.client.HTTPConnection) -> None:
            nonlocal went_out
            went_out = True
            if stop is not None:
                stop.arm(lambda: interrupt(connection))

        try:
            connection, response = self._pool.open_stream(
                call.method, call.path, body, headers, ctx.timeout, on_sent
            )
        except PoolClosed as exc:
            raise closed_before_sending() from exc
        except _HTTP_FAILURES as exc:
            raise self._failed(exc, op, ctx, sent=went_out) from exc
        try:
            content_type = response.getheader("Content-Type")
            if not call.opens(response.status, content_type):
                try:
                    refusal = response.read()
                except _HTTP_FAILURES as exc:
                    raise self._failed(exc, op, ctx, sent=True) from exc
                call.refuse(response.status, content_type, refusal)
            decoder = call.decoder()
            # The timeout bounds the wait for each event, not each read: bytes that end no
            # event (keep-alive comments, an event in pieces) do not restart it.
            waiting = EventWait(ctx.timeout)
            while True:
                # read1 rather than readline: readline reports a stream that broke off as
                # a clean end, read1 raises IncompleteRead.
                try:
                    sock = socket_of(connection)
                    if sock is not None:
                        sock.settimeout(waiting.left())
                    data = response.read1(65536)
                    if not data and self._pool.closed:  # close() cut the stream
                        raise closed_in_flight()
                except _HTTP_FAILURES as exc:
                    cut_off = None
                    if isinstance(exc, _CUT_OFF) and not self._pool.closed:
                        cut_off = call.cut_off_error(op.request_id)
                    error = cut_off or self._failed(exc, op, ctx)
                    error.may_have_run = True  # (the answer had begun)
                    raise error from exc
                # Read outside the try: an answer that cannot be read is the server's
                # fault, not the connection's (the client reports it as unreadable).
                for item in decoder.feed(data) if data else decoder.finish():
                    yield item
                    waiting.restart()
                if not data:
                    break
        finally:
            self._pool.end_stream(connection)

    def _failed(
        self, exc: BaseException, op: StreamOp[Any], ctx: CallContext, *, sent: bool = False
    ) -> TritonError:
        """A stream's failure; one that close() cut says the client closed."""
        if self._pool.closed:
            return closed_in_flight()
        return http_error(exc, op, ctx.timeout, self._url, sent=sent)

    def close(self) -> None:
        self._pool.close()


def _not_kept(response: aiohttp.ClientResponse) -> None:
    """Close the connection of a 500 answer that was read, rather than keep it for the
    next call: uvicorn (MLServer, KServe) closes it after a 500 without saying so, and the
    next call would find it reset. aiohttp handed it back to its pool as the body ended
    (for a small one, before the response was returned: ``response.connection`` is None
    by then), and its pool passes over a closed one. Only the response's private
    ``_protocol`` still holds it; without it (another aiohttp) the next call is resent
    as before."""
    protocol = getattr(response, "_protocol", None)
    if protocol is not None:
        protocol.close()


async def _body(response: aiohttp.ClientResponse) -> Body:
    """The answer's body. A large one of known length is read into one buffer as it
    arrives: aiohttp's ``read()`` gathers the pieces and joins them, holding it twice.

    Answers that carry no body whatever their Content-Length (HEAD, 204, 304), and
    lengths past ``_BUFFERED_MAX`` (a broken proxy's, which would be allocated before a
    byte arrived), are left to ``read()``."""
    encoding = response.headers.get("Content-Encoding")
    length = response.content_length
    if (
        encoding
        or length is None
        or not _LARGE_BODY <= length <= _BUFFERED_MAX
        or response.method == "HEAD"
        or response.status in (204, 304)
    ):
        accepted = response.request_info.headers.get("Accept-Encoding")
        return decompress(await response.read(), encoding, accepted)
    body = bytearray(length)
    filled = 0
    try:
        with memoryview(body) as view:
            while filled < length:
                piece = await response.content.readany()
                if not piece:
                    break
                view[filled : filled + len(piece)] = piece
                filled += len(piece)
    except BaseException:
        del body  # the error's traceback holds this frame: not the buffer with it
        raise
    if filled != length:
        del body
        raise aiohttp.ClientPayloadError(
            f"the answer's body ended at {filled} of its {length} bytes (Content-Length)"
        )
    return body


class _Stopped(Exception):
    """Ends the read of a stream that another task stopped (ResponseStream.aclose)."""


class AsyncHttpTransport:
    """HTTP on asyncio through aiohttp; the session opens on first use, in the running loop."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        tls: TLSConfig | None,
        compression: Compression = None,
        max_connection_age: float | None = None,
        binary: bool | Literal["auto"] = "auto",
    ) -> None:
        self.endpoint = endpoint
        self._own_tls = OwnTLS(tls, lambda: (endpoint.host,))
        self._url = str(endpoint)
        self._max_age = max_connection_age
        self._renew_at = 0.0
        # With a maximum connection age: sessions replaced, closed once their last
        # request is done, and the requests each session has under way.
        self._retired: set[aiohttp.ClientSession] = set()
        self._busy: dict[aiohttp.ClientSession, int] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._codec = HttpCodec(endpoint.base_path, None if binary == "auto" else binary)
        self._tls = tls
        self._compression = compression
        self._origin = f"{'https' if endpoint.tls else 'http'}://{endpoint.authority}"
        # Made now, so that unusable TLS files are refused when the client is made.
        self._ssl: ssl.SSLContext | bool = ssl_context(tls) if endpoint.tls else False
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._reading: set[aiohttp.ClientResponse] = set()  # answers being read

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise closed_by_aclose()
        connector = aiohttp.TCPConnector(limit=_ASYNC_CONNECTIONS, ssl=self._ssl)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # Triton compresses answers when asked to; on the paths this SDK serves the CPU
            # is dearer than the bytes.
            headers={"Accept-Encoding": "identity"},
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
        )
        # aiohttp sends an idempotent request again, unasked, when a kept-alive connection
        # drops; the SDK's retry policy alone decides that (RetryPolicy.none() is none).
        if hasattr(self._session, "_retry_connection"):
            self._session._retry_connection = False
        return self._session

    def _request(
        self, call: HttpCall[Any] | HttpStream[Any], ctx: CallContext, timeout: Any
    ) -> Any:  # aiohttp's request context manager, or ours
        """Start ``call`` on this client's session (opened in the running loop)."""
        self._loop = check_loop(self._loop)
        if self._max_age is None:
            return self._send(self._session or self._open(), call, ctx, timeout)
        return self._aged_request(call, ctx, timeout)

    @contextlib.asynccontextmanager
    async def _aged_request(
        self, call: HttpCall[Any] | HttpStream[Any], ctx: CallContext, timeout: Any
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """``_request`` when sessions are renewed: counted, so that a replaced session
        closes only once its last request is done."""
        session = self._session
        if session is None or time.monotonic() >= self._renew_at:
            session = self._renew()
        self._busy[session] = self._busy.get(session, 0) + 1
        try:
            async with self._send(session, call, ctx, timeout) as response:
                yield response
        finally:
            self._busy[session] -= 1
            if not self._busy[session]:
                del self._busy[session]
                if session in self._retired:
                    self._close_later(session)

    def _send(
        self,
        session: aiohttp.ClientSession,
        call: HttpCall[Any] | HttpStream[Any],
        ctx: CallContext,
        timeout: Any,
    ) -> Any:  # aiohttp's request context manager
        body, _ = body_of(call.body)
        if body is not None and not isinstance(body, bytes):
            body = b"".join(body)
        headers = dict(call.headers)
        if self._compression is not None and isinstance(call, HttpCall):
            body, _ = _compressed(call, body, 0, self._compression, headers)
        headers = request_headers(headers, ctx.headers)
        if body is not None and len(body) >= _LARGE_BODY:
            # aiohttp sends a large body in pieces from a file-like object, and warns
            # (an error in strict test runs) when it is given raw bytes.
            body = io.BytesIO(body)
        return session.request(
            call.method,
            self._origin + call.path,
            data=body,
            headers=headers,
            timeout=timeout,
            server_hostname=self._tls.server_hostname if self._tls else None,
            # A redirect is refused, as the blocking transport does: following one would
            # send the request, its body and its headers (credentials) to another host.
            allow_redirects=False,
        )

    async def acall(self, op: Op[T], ctx: CallContext) -> T:
        if isinstance(op, OWN_URL_CALLS):
            return await own_url_acall(op, ctx, self._own_tls(op.url))  # type: ignore[no-any-return]
        limit = ctx.timeout  # (errors name the call's own timeout: ctx.timeout)
        if self._codec.binary is None and isinstance(op, InferRequest):
            started = time.monotonic()
            try:
                self._codec.binary = is_triton(await self.acall(GetServerMetadata(), ctx))
            except TritonError as refusal:
                self._codec.binary = _binary_unless_passing(refusal, op, ctx.timeout)
            except asyncio.CancelledError as cancelled:  # (the inference was not sent)
                raise never_sent(cancelled) from None
            limit = _rest_of_the_timeout(ctx.timeout, started, op)
        call = self._codec.encode(op)
        timeout = _call_timeout(limit)
        try:
            async with self._request(call, ctx, timeout) as response:
                self._reading.add(response)
                try:
                    if self._closed:  # aclose() ran while the answer's head arrived
                        raise closed_in_flight()
                    data = await _body(response)
                    if response.status == 500:
                        _not_kept(response)
                finally:
                    self._reading.discard(response)
                status = response.status
                given = response.headers.get(HEADER_LENGTH) if status == 200 else None
                length = header_length(given)
        except _AIOHTTP_FAILURES as exc:
            if self._closed:
                raise closed_in_flight() from exc
            # Failing to connect is the one failure that proves nothing went out.
            sent = not isinstance(exc, _NOT_CONNECTED)
            raise http_error(exc, op, ctx.timeout, self._url, sent=sent) from exc
        except asyncio.CancelledError as exc:
            raise_if_cut_by_close(exc, self._closed)
            raise
        return call.read(status, length, data)

    async def astream(self, op: StreamOp[T], ctx: CallContext) -> AsyncIterator[T]:
        if isinstance(op, OpenAIEvents):
            events = openai_events_async(op, ctx, self._own_tls(op.url))
            try:
                async for event in events:
                    yield event  # type: ignore[misc]
            finally:
                await aclose_iterator(events)  # cancels the request now, not when collected
            return
        call = self._codec.encode_stream(op)
        # The timeout bounds the wait for each event, not the whole stream (nor each
        # read: see EventWait).
        each = aiohttp.ClientTimeout(total=None, sock_read=ctx.timeout)
        decoder = call.decoder()
        opened = False
        stop = ctx._stop
        reader = asyncio.current_task()
        interrupted = False
        if stop is not None and reader is not None:
            # Until the answer's head arrives (a model that is not decoupled sends it with
            # its one answer), another task stops the stream by interrupting the reader.
            def interrupt() -> None:
                nonlocal interrupted
                interrupted = True
                reader.cancel()

            stop.arm(interrupt)
        try:
            async with self._request(call, ctx, each) as response:
                self._reading.add(response)
                if stop is not None:
                    stop.arm(lambda: response.content.set_exception(_Stopped()))
                try:
                    if self._closed:  # aclose() ran while the answer's head arrived
                        raise closed_in_flight()
                    content_type = response.headers.get("Content-Type")
                    if not call.opens(response.status, content_type):
                        refusal = await response.read()
                        if response.status == 500:
                            _not_kept(response)
                        call.refuse(response.status, content_type, refusal)
                    opened = True
                    waiting = EventWait(ctx.timeout)
                    while data := await waiting.readany(response.content):
                        for item in decoder.feed(data):
                            yield item
                            waiting.restart()
                finally:
                    self._reading.discard(response)
        except _Stopped:
            return
        except asyncio.CancelledError as exc:
            if interrupted and _only_interrupted(reader):
                return
            raise_if_cut_by_close(exc, self._closed)
            raise
        except _AIOHTTP_FAILURES as exc:
            if self._closed:
                raise closed_in_flight() from exc
            cut_off = None
            if opened and isinstance(exc, _AIOHTTP_CUT_OFF):
                cut_off = call.cut_off_error(op.request_id)
            sent = opened or not isinstance(exc, _NOT_CONNECTED)
            error = cut_off or http_error(exc, op, ctx.timeout, self._url, sent=sent)
            error.may_have_run = error.may_have_run or opened
            raise error from exc
        finally:
            if stop is not None:
                stop.disarm()  # (the reader's task must never be interrupted later)
        for item in decoder.finish():
            yield item

    def _renew(self) -> aiohttp.ClientSession:
        """A new session (new connections) for new requests, every
        ``max_connection_age`` seconds; the one before closes when its last request ends."""
        previous = self._session
        if previous is not None:
            if previous in self._busy:
                self._retired.add(previous)
            else:
                self._close_later(previous)
        assert self._max_age is not None
        self._renew_at = time.monotonic() + self._max_age
        return self._open()

    def _close_later(self, session: aiohttp.ClientSession) -> None:
        self._retired.discard(session)
        closing = asyncio.get_running_loop().create_task(session.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def refuse_other_loop(self) -> None:
        """Raise the documented TritonError when called in a loop other than its own
        (see check_open_loop)."""
        check_open_loop(self._loop)

    async def aclose(self) -> None:
        self.refuse_other_loop()  # (aiohttp raised a RuntimeError of its own)
        self._closed = True
        # Closing a session drops its connections without telling the answers being read,
        # whose readers would then wait forever: tell them.
        for response in self._reading:
            response.content.set_exception(closed_in_flight())
        self._reading.clear()
        sessions = [*self._retired, *([self._session] if self._session else [])]
        self._session = None
        self._retired.clear()
        for session in sessions:
            await session.close()
        if self._closing:
            await asyncio.gather(*self._closing)


def _only_interrupted(task: asyncio.Task[Any] | None) -> bool:
    """Take back the cancellation a stream's stop gave ``task``; True unless someone else
    cancelled it too (Python 3.11+ counts them; before, the stop is taken as the only one)."""
    uncancel = getattr(task, "uncancel", None)
    return uncancel is None or uncancel() == 0


def _binary_unless_passing(
    error: TritonError, request: InferRequest, timeout: float | None
) -> bool:
    """After the server's metadata could not be read for ``http_binary="auto"``: binary
    for good where the server will not say (a gateway, a restricted endpoint), but a
    failure that may pass (unreachable, timed out, overloaded) decides nothing. The
    call fails with it, under its retry policy, and the next one asks again: a JSON-only
    server briefly down would otherwise get binary requests for the client's life."""
    if isinstance(error, TritonTimeoutError):
        raise _metadata_timed_out(request, timeout) from error
    if error.retryable:
        error.may_have_run = False  # (the inference itself was not sent)
        # The call's own failure, as gRPC's would be: it names the model and request id.
        error.model, error.request_id = request.model, request.request_id or None
        raise never_sent(error)
    return True


def _not_sent(failed: NotSent, op: Op[Any], timeout: float | None, url: str) -> TritonError:
    """The error of a request cut off before it was written whole (a timeout, a reset):
    the server got part of it, and runs none of it."""
    error = http_error(failed.cause, op, timeout, url)
    if isinstance(error, TritonTimeoutError):
        within = "" if timeout is None else f" within {timeout:g} s"
        error.message = (
            f"the request could not be sent whole to {url}{within} ({failed.cause}); the "
            "server runs none of it"
        )
        error.args = (error.message,)
    error.may_have_run = False
    return never_sent(error)


def _metadata_timed_out(request: InferRequest, timeout: float | None) -> TritonTimeoutError:
    within = "" if timeout is None else f" within {timeout:g} s"
    return never_sent(
        TritonTimeoutError(
            f"infer {request.model!r}: the server's metadata, read before a client's first "
            f"inference to choose the body's format, did not come{within}; the inference "
            "was not sent",
            model=request.model,
            request_id=request.request_id,
        )
    )


def _rest_of_the_timeout(
    timeout: float | None, started: float, request: InferRequest
) -> float | None:
    """What is left of the call's ``timeout`` for the inference that follows the metadata
    read: one timeout bounds the two (the read may have waited for a connection)."""
    if timeout is None:
        return None
    left = timeout - (time.monotonic() - started)
    if left <= 0:
        raise _metadata_timed_out(request, timeout)
    return left


_NOT_CONNECTED: Final = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
_CONNECT_MARGIN: Final = 0.02


def _call_timeout(seconds: float | None) -> aiohttp.ClientTimeout:
    """aiohttp's bounds for a call of ``seconds``: connecting has a bound of its own, a
    hair shorter than the whole call's, so that a connection that cannot be made (a
    host that drops packets) fails as such, since nothing was sent, and not as a
    timeout after which the server may still run the request. No rounding of the
    deadlines to whole seconds (aiohttp's default above 5 s), which would make the two
    fire together."""
    if seconds is None:
        return aiohttp.ClientTimeout(total=None)
    return aiohttp.ClientTimeout(
        total=seconds + _CONNECT_MARGIN, sock_connect=seconds, ceil_threshold=math.inf
    )
