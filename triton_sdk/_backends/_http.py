"""HTTP backends: a thread-safe blocking transport, and one on aiohttp for asyncio.

tritonclient's blocking HTTP client runs on gevent and must not be shared between
threads, and neither of its HTTP clients takes a timeout per call. These backends speak
the same protocol (see ``_http_codec``) on transports that do both: the standard
library's ``http.client`` with a small pool of keep-alive connections, and aiohttp.
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import aiohttp

from .._config import Endpoint, TLSConfig
from .._errors import (
    TritonConnectionError,
    TritonError,
    TritonTimeoutError,
    classify_transport_error,
)
from .._http_codec import HEADER_LENGTH, HttpCall, Routes
from .._request import InferRequest
from .._result import InferResult
from ._protocol import JSON

__all__ = ["AsyncHttpBackend", "HttpBackend"]

T = TypeVar("T")

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
    context = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
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
            return http.client.HTTPConnection(self._host, self._port, timeout=timeout)
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
        try:
            connection = self._idle.pop()
        except IndexError:
            return self._exchange(self._connect(timeout), method, path, body, headers, timeout)
        try:
            return self._exchange(connection, method, path, body, headers, timeout)
        except _STALE_CONNECTION:
            # The server closed this idle connection (it restarted, or timed it out)
            # before our request reached it: send once more on a fresh connection.
            return self._exchange(self._connect(timeout), method, path, body, headers, timeout)

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str],
        timeout: float | None,
    ) -> tuple[int, int | None, bytes]:
        try:
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            connection.request(method, path, body, dict(headers))
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

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


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

    def infer(self, request: InferRequest, timeout: float | None) -> InferResult:
        return self._run(self._routes.infer(request), timeout)

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

    def _open(self) -> aiohttp.ClientSession:
        context: ssl.SSLContext | bool = ssl_context(self._tls) if self.endpoint.tls else False
        connector = aiohttp.TCPConnector(limit=0, ssl=context)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # Triton compresses answers when asked to; on the paths this SDK serves the CPU
            # is dearer than the bytes.
            headers={"Accept-Encoding": "identity", **self._headers},
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
        )
        return self._session

    async def _run(self, call: HttpCall[T], timeout: float | None) -> T:
        session = self._session or self._open()
        body, _ = _body(call.body)
        if body is not None and not isinstance(body, bytes):
            body = b"".join(body)
        server_hostname = self._tls.server_hostname if self._tls else None
        try:
            async with session.request(
                call.method,
                self._origin + call.path,
                data=body,
                headers=call.headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
                server_hostname=server_hostname,
            ) as response:
                data = await response.read()
                status = response.status
                header_length = _header_length(response.headers.get(HEADER_LENGTH))
        except (aiohttp.ClientSSLError, aiohttp.ClientConnectorCertificateError) as exc:
            raise TritonConnectionError(
                f"TLS failure: {exc}", model=call.model, request_id=call.request_id
            ) from exc
        except asyncio.TimeoutError as exc:
            raise TritonTimeoutError(
                f"timed out after {timeout}s", model=call.model, request_id=call.request_id
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TritonConnectionError(
                f"connection failed: {exc}",
                model=call.model,
                request_id=call.request_id,
                retryable=True,
            ) from exc
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

    async def infer(self, request: InferRequest, timeout: float | None) -> InferResult:
        return await self._run(self._routes.infer(request), timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
