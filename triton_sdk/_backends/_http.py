"""HTTP backends: a thread-safe blocking transport, and one on aiohttp for asyncio.

tritonclient's blocking HTTP client runs on gevent and must not be shared between
threads, and neither of its HTTP clients takes a timeout per call. These backends speak
the same protocol (see ``_http_codec``) on transports that do both: the standard
library's ``http.client`` with a small pool of keep-alive connections, and aiohttp.
"""

from __future__ import annotations

import asyncio
import http.client
import select
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import aiohttp

from .._config import Endpoint, TLSConfig
from .._errors import (
    InferenceError,
    InvalidInputError,
    TritonConnectionError,
    TritonError,
    TritonTimeoutError,
    classify_transport_error,
)
from .._generate import (
    JSONValue,
    ServerSentEvents,
    event_to_result,
    generate_body,
    response_fields,
    tensors_to_fields,
)
from .._http_codec import HEADER_LENGTH, HttpCall, Routes, decode_json
from .._request import InferRequest, ParameterValue
from .._result import InferResult
from .._spec import ModelSpec
from ._loop import check_loop
from ._protocol import JSON

__all__ = ["AsyncHttpBackend", "HttpBackend"]

T = TypeVar("T")

_ASYNC_CONNECTIONS: Final = 100
"""At most this many connections per AsyncClient over HTTP; more requests wait for one."""

_JOIN_BELOW: Final = 64 * 1024
"""Bodies smaller than this are joined and sent in one write; larger ones part by part."""

_STALE_CONNECTION: Final = (
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    http.client.RemoteDisconnected,
)


def ssl_context(tls: TLSConfig | None) -> ssl.SSLContext:
    """A verifying client context, trusting ``tls.ca_file`` (or the system) and with the
    client certificate when one is configured."""
    tls = tls or TLSConfig()
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInputError(f"cannot use the TLS files: {exc}") from exc
    return context


def _transport_error(exc: BaseException, call: HttpCall[Any]) -> TritonError:
    error = classify_transport_error(exc, model=call.model, request_id=call.request_id)
    if error is None:
        error = TritonConnectionError(
            f"HTTP request failed: {exc!r}", model=call.model, request_id=call.request_id
        )
    return error


def _header_length(value: str | None) -> int | None:
    return None if value is None else int(value)


def _body(parts: Sequence[bytes | memoryview] | None) -> tuple[Any, int]:
    if parts is None:
        return None, 0
    size = sum(len(part) if isinstance(part, bytes) else part.nbytes for part in parts)
    if size < _JOIN_BELOW or len(parts) == 1:
        return b"".join(parts), size
    return parts, size


_AIOHTTP_FAILURES: Final = (
    aiohttp.ClientError,
    aiohttp.http_exceptions.HttpProcessingError,
    OSError,
    asyncio.TimeoutError,
)


def _caused_by_ssl(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError) or isinstance(
            getattr(seen, "os_error", None), ssl.SSLError
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def aiohttp_error(
    exc: BaseException,
    timeout: float | None,
    model: str | None = None,
    request_id: str | None = None,
) -> TritonError:
    """The SDK's error for an aiohttp failure. TLS failures are not retryable."""
    if isinstance(exc, aiohttp.ClientSSLError) or _caused_by_ssl(exc):
        return TritonConnectionError(f"TLS failure: {exc}", model=model, request_id=request_id)
    if isinstance(exc, asyncio.TimeoutError):
        return TritonTimeoutError(f"timed out after {timeout}s", model=model, request_id=request_id)
    return TritonConnectionError(
        f"connection failed: {exc}", model=model, request_id=request_id, retryable=True
    )


_STREAM_HINT: Final = (
    " (model.stream over HTTP goes through the generate_stream extension, which takes one "
    "sample of scalar or 1-D inputs; a gRPC client streams any decoupled model)"
)


def _wanted(request: InferRequest) -> set[str] | None:
    return None if request.outputs is None else {output.name for output in request.outputs}


def _refused_input(error: InferenceError) -> bool:
    """Whether the server could not turn the JSON fields into the model's inputs."""
    message = error.message.lower()
    return any(hint in message for hint in ("parse", "json", "shape", "datatype", "data-type"))


def _with_hint(error: TritonError) -> TritonError:
    return type(error)(
        error.message + _STREAM_HINT,
        status=error.status,
        model=error.model,
        request_id=error.request_id,
        retryable=error.retryable,
    )


def _explain_stream_refusal(chunks: Iterator[bytes], model: str) -> Iterator[bytes]:
    """Pass the stream through; a refusal of its inputs gets a hint about gRPC."""
    try:
        first = next(chunks, None)
    except InferenceError as error:
        if _refused_input(error):
            raise _with_hint(error) from error
        raise
    if first is not None:
        yield first
        yield from chunks


async def _explain_async_stream_refusal(
    chunks: AsyncIterator[bytes], model: str
) -> AsyncIterator[bytes]:
    try:
        first = await anext(chunks, None)
    except InferenceError as error:
        if _refused_input(error):
            raise _with_hint(error) from error
        raise
    if first is not None:
        yield first
        async for chunk in chunks:
            yield chunk


async def _async_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    parser = ServerSentEvents()
    async for chunk in chunks:
        for data in parser.feed(chunk):
            yield data
    for data in parser.finish():
        yield data


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """An idle HTTP connection has nothing to read unless the server closed it.

    ``poll`` rather than ``select``: select fails on descriptors above 1023.
    """
    sock = connection.sock
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


class _Connection(http.client.HTTPConnection):
    """An HTTP connection that sends a small request's head and body in one write.

    ``http.client`` writes the head and the body separately; for the small requests of
    a typical inference that is a second system call and packet on every request.
    """

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        buffer = getattr(self, "_buffer", None)
        if (
            isinstance(message_body, bytes)
            and len(message_body) < _JOIN_BELOW
            and not encode_chunked
            and isinstance(buffer, list)
        ):
            buffer.extend((b"", b""))
            message = b"\r\n".join(buffer) + message_body
            del buffer[:]
            self.send(message)
            return
        super()._send_output(message_body, encode_chunked)  # type: ignore[misc]


class _HTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that may check the certificate against another name."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float | None,
        context: ssl.SSLContext,
        server_hostname: str | None,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._tls_name = server_hostname or host

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls_context.wrap_socket(self.sock, server_hostname=self._tls_name)


class _ConnectionPool:
    """Keep-alive ``http.client`` connections, handed to one thread at a time."""

    def __init__(self, endpoint: Endpoint, tls: TLSConfig | None, max_idle: int = 32) -> None:
        self._host = endpoint.host
        self._port = endpoint.port
        self._context = ssl_context(tls) if endpoint.tls else None
        self._server_hostname = tls.server_hostname if tls else None
        self._idle: deque[http.client.HTTPConnection] = deque()
        self._max_idle = max_idle

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._context is None:
            return _Connection(self._host, self._port, timeout=timeout)
        return _HTTPSConnection(
            self._host,
            self._port,
            timeout=timeout,
            context=self._context,
            server_hostname=self._server_hostname,
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str],
        timeout: float | None,
    ) -> tuple[int, int | None, bytes]:
        """One exchange, on an idle keep-alive connection when there is one.

        An idle connection may have been closed by the server (a restart, an idle
        timeout): it is checked before use, and a failure while sending on it is
        repeated at once on a fresh connection, since the request did not get through.
        A connection that breaks after the request went out is reported, not repeated:
        whether to send again is the retry policy's decision.
        """
        connection = self._idle_connection()
        if connection is None:
            connection = self._connect(timeout)
            self._send(connection, method, path, body, headers, timeout)
            return self._receive(connection)
        try:
            self._send(connection, method, path, body, headers, timeout)
        except _STALE_CONNECTION:
            connection = self._connect(timeout)
            self._send(connection, method, path, body, headers, timeout)
        return self._receive(connection)

    def _idle_connection(self) -> http.client.HTTPConnection | None:
        """An idle connection the server has not closed meanwhile, if any."""
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return None
            if _still_open(connection):
                return connection
            connection.close()

    def _send(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str],
        timeout: float | None,
    ) -> None:
        try:
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            connection.request(method, path, body, dict(headers))
        except BaseException:
            connection.close()
            raise

    def _receive(self, connection: http.client.HTTPConnection) -> tuple[int, int | None, bytes]:
        try:
            response = connection.getresponse()
            data = response.read()
        except BaseException:
            connection.close()
            raise
        if response.will_close or len(self._idle) >= self._max_idle:
            connection.close()
        else:
            self._idle.append(connection)
        return response.status, _header_length(response.getheader(HEADER_LENGTH)), data

    def open_stream(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str],
        timeout: float | None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request on a connection of its own, for an answer read piece by piece.

        The caller closes the connection when done; ``timeout`` bounds each read.
        """
        connection = self._connect(timeout)
        try:
            connection.request(method, path, body, dict(headers))
            return connection, connection.getresponse()
        except BaseException:
            connection.close()
            raise

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def __del__(self) -> None:
        # A client dropped without close() should not leave sockets to the collector.
        self.close()


class HttpBackend:
    """Blocking HTTP, safe to share between threads; each call takes its own timeout."""

    def __init__(
        self, endpoint: Endpoint, *, headers: Mapping[str, str], tls: TLSConfig | None
    ) -> None:
        self.endpoint = endpoint
        self._routes = Routes(endpoint.base_path)
        self._headers = dict(headers)
        self._pool = _ConnectionPool(endpoint, tls)

    def _run(self, call: HttpCall[T], timeout: float | None) -> T:
        body, size = _body(call.body)
        headers = {**self._headers, **call.headers}
        if body is not None:
            headers["Content-Length"] = str(size)
        try:
            status, header_length, data = self._pool.request(
                call.method, call.path, body, headers, timeout
            )
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _transport_error(exc, call) from exc
        return call.read(status, header_length, data)

    def is_live(self, timeout: float | None) -> bool:
        return self._run(self._routes.live(), timeout)

    def is_ready(self, timeout: float | None) -> bool:
        return self._run(self._routes.ready(), timeout)

    def is_model_ready(self, name: str, version: str | None, timeout: float | None) -> bool:
        return self._run(self._routes.model_ready(name, version), timeout)

    def server_metadata(self, timeout: float | None) -> JSON:
        return self._run(self._routes.server_metadata(), timeout)

    def model_metadata(self, name: str, version: str | None, timeout: float | None) -> JSON:
        return self._run(self._routes.model_metadata(name, version), timeout)

    def model_config(self, name: str, version: str | None, timeout: float | None) -> JSON:
        return self._run(self._routes.model_config(name, version), timeout)

    def repository_index(self, timeout: float | None) -> list[JSON]:
        return self._run(self._routes.repository_index(), timeout)

    def load_model(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        timeout: float | None,
    ) -> None:
        self._run(self._routes.load_model(name, config, files), timeout)

    def unload_model(self, name: str, unload_dependents: bool, timeout: float | None) -> None:
        self._run(self._routes.unload_model(name, unload_dependents), timeout)

    def model_statistics(
        self, name: str | None, version: str | None, timeout: float | None
    ) -> list[JSON]:
        return self._run(self._routes.model_statistics(name, version), timeout)

    def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None, timeout: float | None
    ) -> JSON:
        return self._run(self._routes.trace_settings(model, updates), timeout)

    def log_settings(
        self, updates: Mapping[str, bool | int | str] | None, timeout: float | None
    ) -> JSON:
        return self._run(self._routes.log_settings(updates), timeout)

    def infer(self, request: InferRequest, timeout: float | None) -> InferResult:
        return self._run(self._routes.infer(request), timeout)

    def _chunks(self, call: HttpCall[None], timeout: float | None) -> Iterator[bytes]:
        body, size = _body(call.body)
        headers = {**self._headers, **call.headers, "Content-Length": str(size)}
        try:
            connection, response = self._pool.open_stream(
                call.method, call.path, body, headers, timeout
            )
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _transport_error(exc, call) from exc
        try:
            if response.status != 200:
                call.read(response.status, None, response.read())
            # read1 rather than readline: readline reports a stream that broke off as a
            # clean end, read1 raises IncompleteRead.
            while True:
                try:
                    data = response.read1(65536)
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    raise _transport_error(exc, call) from exc
                if not data:
                    return
                yield data
        finally:
            connection.close()

    def generate(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> dict[str, JSONValue]:
        body = generate_body(fields, parameters, spec=spec)
        return self._run(self._routes.generate(spec.name, version, body), timeout)

    def generate_stream(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> Iterator[dict[str, JSONValue]]:
        body = generate_body(fields, parameters, spec=spec)
        chunks = self._chunks(self._routes.generate_stream(spec.name, version, body), timeout)
        for data in ServerSentEvents().events(chunks):
            yield response_fields(decode_json(data.encode(), "generate_stream"), spec.name)

    def stream(
        self, request: InferRequest, spec: ModelSpec, timeout: float | None
    ) -> Iterator[InferResult]:
        fields = tensors_to_fields(list(request.inputs), spec)
        body = generate_body(fields, request.parameters, request.request_id)
        chunks = self._chunks(
            self._routes.generate_stream(spec.name, request.version, body), timeout
        )
        events = ServerSentEvents().events(_explain_stream_refusal(chunks, spec.name))
        for data in events:
            event = decode_json(data.encode(), "generate_stream")
            response_fields(event, spec.name)
            yield event_to_result(event, spec, _wanted(request))

    def close(self) -> None:
        self._pool.close()


class AsyncHttpBackend:
    """HTTP on asyncio through aiohttp; the session opens on first use, in the running loop."""

    def __init__(
        self, endpoint: Endpoint, *, headers: Mapping[str, str], tls: TLSConfig | None
    ) -> None:
        self.endpoint = endpoint
        self._routes = Routes(endpoint.base_path)
        self._headers = dict(headers)
        self._tls = tls
        self._origin = f"{'https' if endpoint.tls else 'http'}://{endpoint.authority}"
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise TritonError("the client's connection is closed (closed by aclose())")
        context: ssl.SSLContext | bool = ssl_context(self._tls) if self.endpoint.tls else False
        connector = aiohttp.TCPConnector(limit=_ASYNC_CONNECTIONS, ssl=context)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # Triton compresses answers when asked to; on the paths this SDK serves the CPU
            # is dearer than the bytes.
            headers={"Accept-Encoding": "identity", **self._headers},
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
        )
        return self._session

    def _request(
        self, call: HttpCall[Any], timeout: aiohttp.ClientTimeout
    ) -> Any:  # aiohttp's request context manager
        """Start ``call`` on this client's session (opened in the running loop)."""
        self._loop = check_loop(self._loop)
        session = self._session or self._open()
        body, _ = _body(call.body)
        if body is not None and not isinstance(body, bytes):
            body = b"".join(body)
        return session.request(
            call.method,
            self._origin + call.path,
            data=body,
            headers=call.headers,
            timeout=timeout,
            server_hostname=self._tls.server_hostname if self._tls else None,
        )

    async def _run(self, call: HttpCall[T], timeout: float | None) -> T:
        try:
            async with self._request(call, aiohttp.ClientTimeout(total=timeout)) as response:
                data = await response.read()
                status = response.status
                header_length = _header_length(response.headers.get(HEADER_LENGTH))
        except _AIOHTTP_FAILURES as exc:
            raise aiohttp_error(exc, timeout, call.model, call.request_id) from exc
        return call.read(status, header_length, data)

    async def is_live(self, timeout: float | None) -> bool:
        return await self._run(self._routes.live(), timeout)

    async def is_ready(self, timeout: float | None) -> bool:
        return await self._run(self._routes.ready(), timeout)

    async def is_model_ready(self, name: str, version: str | None, timeout: float | None) -> bool:
        return await self._run(self._routes.model_ready(name, version), timeout)

    async def server_metadata(self, timeout: float | None) -> JSON:
        return await self._run(self._routes.server_metadata(), timeout)

    async def model_metadata(self, name: str, version: str | None, timeout: float | None) -> JSON:
        return await self._run(self._routes.model_metadata(name, version), timeout)

    async def model_config(self, name: str, version: str | None, timeout: float | None) -> JSON:
        return await self._run(self._routes.model_config(name, version), timeout)

    async def repository_index(self, timeout: float | None) -> list[JSON]:
        return await self._run(self._routes.repository_index(), timeout)

    async def load_model(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        timeout: float | None,
    ) -> None:
        await self._run(self._routes.load_model(name, config, files), timeout)

    async def unload_model(self, name: str, unload_dependents: bool, timeout: float | None) -> None:
        await self._run(self._routes.unload_model(name, unload_dependents), timeout)

    async def model_statistics(
        self, name: str | None, version: str | None, timeout: float | None
    ) -> list[JSON]:
        return await self._run(self._routes.model_statistics(name, version), timeout)

    async def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None, timeout: float | None
    ) -> JSON:
        return await self._run(self._routes.trace_settings(model, updates), timeout)

    async def log_settings(
        self, updates: Mapping[str, bool | int | str] | None, timeout: float | None
    ) -> JSON:
        return await self._run(self._routes.log_settings(updates), timeout)

    async def infer(self, request: InferRequest, timeout: float | None) -> InferResult:
        return await self._run(self._routes.infer(request), timeout)

    async def _chunks(self, call: HttpCall[None], timeout: float | None) -> AsyncIterator[bytes]:
        # The timeout bounds the wait for each piece of the stream, not the whole of it.
        each = aiohttp.ClientTimeout(total=None, sock_read=timeout)
        try:
            async with self._request(call, each) as response:
                if response.status != 200:
                    call.read(response.status, None, await response.read())
                async for data in response.content.iter_any():
                    yield data
        except _AIOHTTP_FAILURES as exc:
            raise aiohttp_error(exc, timeout, call.model, call.request_id) from exc

    async def generate(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> dict[str, JSONValue]:
        body = generate_body(fields, parameters, spec=spec)
        return await self._run(self._routes.generate(spec.name, version, body), timeout)

    async def generate_stream(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> AsyncIterator[dict[str, JSONValue]]:
        body = generate_body(fields, parameters, spec=spec)
        chunks = self._chunks(self._routes.generate_stream(spec.name, version, body), timeout)
        async for data in _async_events(chunks):
            yield response_fields(decode_json(data.encode(), "generate_stream"), spec.name)

    async def stream(
        self, request: InferRequest, spec: ModelSpec, timeout: float | None
    ) -> AsyncIterator[InferResult]:
        fields = tensors_to_fields(list(request.inputs), spec)
        body = generate_body(fields, request.parameters, request.request_id)
        chunks = self._chunks(
            self._routes.generate_stream(spec.name, request.version, body), timeout
        )
        async for data in _async_events(_explain_async_stream_refusal(chunks, spec.name)):
            event = decode_json(data.encode(), "generate_stream")
            response_fields(event, spec.name)
            yield event_to_result(event, spec, _wanted(request))

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
