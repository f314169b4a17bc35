"""A thread-safe pool of keep-alive ``http.client`` connections, for the blocking transport."""

from __future__ import annotations

import contextlib
import http.client
import math
import select
import socket
import ssl
import time
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import SplitResult

if TYPE_CHECKING:
    import aiohttp

from .._checks import overlay_headers
from .._compression import decompress
from .._concurrency import within
from .._config import Endpoint, TLSConfig
from .._errors import InvalidInputError, unreadable
from .._fork import on_fork
from .._http_codec import HEADER_LENGTH

__all__ = [
    "AnswerLost",
    "ConnectionPool",
    "EventWait",
    "NotSent",
    "PoolClosed",
    "body_of",
    "connection_for",
    "connection_to",
    "deadline_of",
    "header_length",
    "hold_socket",
    "interrupt",
    "release_socket",
    "request_headers",
    "socket_of",
    "ssl_context",
]


def request_headers(own: dict[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """A request's headers: the transport's ``own``, and the caller's ``given``, which
    replace those of the same name in any case. Only the names callers may give can
    meet: ``Accept`` and ``Accept-Encoding``."""
    return overlay_headers(own, given) if given else own


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """The value of header ``name`` (in any case) in ``headers``, or None."""
    lowered = name.lower()
    return next((value for key, value in headers.items() if key.lower() == lowered), None)


JOIN_BELOW: Final = 64 * 1024
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
    except (OSError, ssl.SSLError) as exc:
        where = "the system's" if tls.ca_file is None else f"ca_file {tls.ca_file}"
        raise InvalidInputError(f"cannot use the TLS files: {where}: {exc}") from exc
    if tls.cert_file is None:
        return context
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_passphrase)
    except _EncryptedKey:
        raise InvalidInputError(
            f"the key file {tls.key_file} is encrypted: TLSConfig takes a key without a "
            "passphrase (openssl pkey -in KEY -out PLAIN_KEY writes one)"
        ) from None
    except (OSError, ssl.SSLError) as exc:
        given = f"cert_file {tls.cert_file}" + (
            "" if tls.key_file is None else f" with key_file {tls.key_file}"
        )
        raise InvalidInputError(f"cannot use the TLS files: {given}: {exc}") from exc
    return context


class _EncryptedKey(Exception):
    pass


def _no_passphrase() -> str:
    """Asked for an encrypted key's passphrase: refuse (OpenSSL would otherwise prompt
    on the terminal, and a client being made would wait there for good)."""
    raise _EncryptedKey


def header_length(value: str | None) -> int | None:
    """The answer's Inference-Header-Content-Length; an answer with another value in it
    cannot be read (the request was answered: not a lost answer)."""
    if value is None:
        return None
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):  # (int() takes "-1", "1_0", "٣" too)
        raise unreadable(
            f"the server's answer could not be read: its {HEADER_LENGTH} is {value!r}, not a length"
        )
    return int(digits)


def body_of(parts: Sequence[bytes | memoryview] | None) -> tuple[Any, int]:
    if parts is None:
        return None, 0
    size = sum(len(part) if isinstance(part, bytes) else part.nbytes for part in parts)
    if size < JOIN_BELOW or len(parts) == 1:
        return b"".join(parts), size
    return parts, size


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


class _DeadlineIO:
    """Socket reads and writes that end by ``deadline`` (a ``time.monotonic()`` value):
    each one waits at most the time left, so a peer that trickles bytes cannot stretch
    a call past its timeout. None: each operation waits the socket's own timeout."""

    deadline: float | None = None

    def _time_left(self) -> None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            cast("socket.socket", self).settimeout(left)

    def recv_into(self, buffer: Any, *args: Any) -> int:
        self._time_left()
        return super().recv_into(buffer, *args)  # type: ignore[misc, no-any-return]

    def sendall(self, data: Any, *args: Any) -> None:
        self._time_left()
        super().sendall(data, *args)  # type: ignore[misc]


class _DeadlineSocket(_DeadlineIO, socket.socket):
    pass


class _DeadlineSSLSocket(_DeadlineIO, ssl.SSLSocket):
    pass


def _with_deadline(sock: socket.socket, deadline: float | None) -> _DeadlineSocket:
    wrapped = _DeadlineSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    wrapped.settimeout(sock.gettimeout())
    wrapped.deadline = deadline
    return wrapped


class _Headers:
    """A response's headers, read without the email package: ``http.client`` parses
    them with it, which costs more than the rest of a small exchange. Only what
    ``HTTPResponse`` uses of ``HTTPMessage`` is here; names compare case-insensitively."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items  # (lower-case name, value), in the order sent

    def get(self, name: str, failobj: Any = None) -> Any:
        name = name.lower()
        for key, value in self._items:
            if key == name:
                return value
        return failobj

    def get_all(self, name: str, failobj: Any = None) -> Any:
        name = name.lower()
        return [value for key, value in self._items if key == name] or failobj

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)


_MAX_LINE: Final = 65536
_MAX_HEADERS: Final = 100


def _parse_headers(fp: Any) -> _Headers:
    """The header block of a response, with http.client's limits on lines and count."""
    items: list[tuple[str, str]] = []
    while True:
        line = fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n"):
            return _Headers(items)
        if not line:  # (http.client reads the end of the stream as the end of the headers)
            raise http.client.RemoteDisconnected(
                "the server closed the connection inside the answer's headers"
            )
        if len(items) >= _MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")
        text = line.decode("iso-8859-1")
        if text[0] in " \t" and items:  # a folded continuation of the previous header
            key, value = items[-1]
            items[-1] = (key, f"{value} {text.strip()}")
            continue
        name, colon, value = text.partition(":")
        if colon:
            items.append((name.strip().lower(), value.strip()))


class _Response(http.client.HTTPResponse):
    """``HTTPResponse`` with its own ``begin``'s code, run with :func:`_parse_headers`
    in place of the email-based parser; everything else is the standard library's."""

    begin = types.FunctionType(
        http.client.HTTPResponse.begin.__code__,
        {**vars(http.client), "parse_headers": _parse_headers},
        "begin",
    )


class _Connection(http.client.HTTPConnection):
    """An HTTP connection that sends a small request's head and body in one write, and
    whose socket ends each exchange by ``deadline``.

    ``http.client`` writes the head and the body separately; for the small requests of
    a typical inference that is a second system call and packet on every request.
    """

    deadline: float | None = None
    response_class = _Response
    retire_at = math.inf  # not reused from then on (a client's max_connection_age)

    def connect(self) -> None:
        with _connecting(self.timeout):
            super().connect()
        self.sock = _with_deadline(self.sock, self.deadline)

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        buffer = getattr(self, "_buffer", None)
        if (
            isinstance(message_body, bytes)
            and len(message_body) < JOIN_BELOW
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
    """An HTTPS connection that may check the certificate against another name, and
    whose socket ends each exchange by ``deadline``."""

    deadline: float | None = None
    response_class = _Response
    retire_at = math.inf

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
        with _connecting(self.timeout):
            http.client.HTTPConnection.connect(self)
            plain = _with_deadline(self.sock, self.deadline)
            wrapped = self._tls_context.wrap_socket(plain, server_hostname=self._tls_name)
        cast("_DeadlineSSLSocket", wrapped).deadline = self.deadline
        self.sock = wrapped


class ConnectTimedOut(ConnectionError):
    """No connection (nor TLS handshake) within the timeout: nothing was sent, so it is
    a connection failure, which another endpoint or a retry may take, not a timeout
    after which the server may still run the request."""


@contextlib.contextmanager
def _connecting(timeout: float | None) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:  # (socket.timeout and ssl's handshake timeout too)
        within = "" if timeout is None else f" within {timeout:g} s"
        raise ConnectTimedOut(f"could not connect{within} ({exc})") from exc


class AnswerLost(Exception):
    """The request went out, then reading its answer failed (``cause`` says how): the
    server may have run it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class NotSent(Exception):
    """Sending the request failed (``cause`` says how) before all of it went out: the
    server got no whole request, so it runs nothing."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PoolClosed(Exception):
    """The pool was closed: no new exchange may start."""


# The sockets of streams' connections, kept here because http.client lets go of
# ``connection.sock`` when an answer ends with the connection's close (no length, no
# chunks), while the answer is still read from that socket.
_STREAM_SOCKETS: Final[weakref.WeakKeyDictionary[http.client.HTTPConnection, socket.socket]] = (
    weakref.WeakKeyDictionary()
)


def hold_socket(connection: http.client.HTTPConnection) -> None:
    """Keep the socket of a stream's connection, whose request was just sent, reachable
    through :func:`socket_of` until :func:`release_socket`."""
    if connection.sock is not None:
        _STREAM_SOCKETS[connection] = connection.sock


def socket_of(connection: http.client.HTTPConnection) -> socket.socket | None:
    """The socket a stream's answer is read from."""
    return connection.sock or _STREAM_SOCKETS.get(connection)


def release_socket(connection: http.client.HTTPConnection) -> None:
    _STREAM_SOCKETS.pop(connection, None)


def interrupt(connection: http.client.HTTPConnection) -> None:
    """End the reads of a connection that another thread is blocked in (a shutdown wakes
    it; closing the socket alone does not)."""
    sock = socket_of(connection)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def connection_to(
    host: str,
    port: int,
    timeout: float | None,
    context: ssl.SSLContext | None,
    server_hostname: str | None = None,
    deadline: float | None = None,
) -> _Connection | _HTTPSConnection:
    """A connection (not yet open) to ``host:port``, over TLS with ``context``; with a
    ``deadline`` (a ``time.monotonic()`` value) its exchange ends by then, however
    slowly the peer sends."""
    connection: _Connection | _HTTPSConnection
    if context is None:
        connection = _Connection(host, port, timeout=timeout)
    else:
        if context.sslsocket_class is not _DeadlineSSLSocket:
            context.sslsocket_class = _DeadlineSSLSocket
        connection = _HTTPSConnection(
            host, port, timeout=timeout, context=context, server_hostname=server_hostname
        )
    connection.deadline = deadline
    return connection


def connection_for(
    url: SplitResult, timeout: float | None, tls: TLSConfig | None, deadline: float | None
) -> _Connection | _HTTPSConnection:
    """:func:`connection_to` the host of an ``http(s)://`` URL of its own (the metrics
    endpoint, the OpenAI-compatible frontend), with the client's TLS files."""
    tls_on = url.scheme == "https"
    return connection_to(
        url.hostname or "",
        url.port or (443 if tls_on else 80),
        timeout,
        ssl_context(tls) if tls_on else None,
        tls_name(url.geturl(), tls),
        deadline,
    )


def tls_name(url: str, tls: TLSConfig | None) -> str | None:
    """The name to check the certificate of ``url``'s server against, when not its host:
    ``tls.server_hostname`` for an ``https`` URL (the transports hand URLs of their own
    the TLS that :class:`~._own_url.OwnTLS` gives for them)."""
    return tls.server_hostname if tls is not None and url.startswith("https:") else None


def deadline_of(timeout: float | None) -> float | None:
    """The ``time.monotonic()`` value by which a call of ``timeout`` seconds ends."""
    return None if timeout is None else time.monotonic() + timeout


class ConnectionPool:
    """Keep-alive ``http.client`` connections, handed to one thread at a time."""

    def __init__(
        self,
        endpoint: Endpoint,
        tls: TLSConfig | None,
        max_idle: int = 32,
        max_age: float | None = None,
    ) -> None:
        # First, so that __del__ works even when reading the TLS files fails below.
        self._idle: deque[http.client.HTTPConnection] = deque()
        self._max_idle = max_idle
        self._max_age = max_age
        self._closed = False
        self._streaming: set[http.client.HTTPConnection] = set()  # connections of streams
        self._host = endpoint.host
        self._port = endpoint.port
        self._context = ssl_context(tls) if endpoint.tls else None
        self._server_hostname = tls.server_hostname if tls else None
        on_fork(self)

    def after_fork_in_child(self) -> None:
        """A forked child lets go of the parent's connections (closing its own copies
        of their sockets only: they stay open for the parent) and makes its own."""
        idle, self._idle = self._idle, deque()
        self._streaming = set()
        for connection in idle:
            if connection.sock is not None:
                connection.sock.close()  # this process's descriptor; no shutdown
                connection.sock = None

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        connection = connection_to(
            self._host, self._port, timeout, self._context, self._server_hostname
        )
        if self._max_age is not None:
            connection.retire_at = time.monotonic() + self._max_age
        return connection

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
        if self._closed:
            raise PoolClosed("the client's connections are closed")
        accepted = header_value(headers, "Accept-Encoding")
        connection = self._idle_connection()
        if connection is None:
            connection = self._connect(timeout)
            self._send(connection, method, path, body, headers, timeout)
            return self._receive(connection, accepted)
        try:
            self._send(connection, method, path, body, headers, timeout)
        except NotSent as failed:
            if not isinstance(failed.cause, _STALE_CONNECTION):
                raise
            connection = self._connect(timeout)
            self._send(connection, method, path, body, headers, timeout)
        return self._receive(connection, accepted)

    def _idle_connection(self) -> http.client.HTTPConnection | None:
        """An idle connection the server has not closed meanwhile, if any."""
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return None
            aged = self._max_age is not None and time.monotonic() >= getattr(
                connection, "retire_at", math.inf
            )
            if not aged and _still_open(connection):
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
        deadline = deadline_of(timeout)
        try:
            # The whole exchange, connecting included, ends by the deadline.
            connection.timeout = timeout
            connection.deadline = deadline  # type: ignore[attr-defined]
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
                cast("_DeadlineIO", connection.sock).deadline = deadline
            connection.request(method, path, body, dict(headers))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            connection.close()
            raise NotSent(exc) from exc
        except BaseException:
            connection.close()
            raise

    def _receive(
        self, connection: http.client.HTTPConnection, accepted: str | None
    ) -> tuple[int, int | None, bytes]:
        try:
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException, ValueError) as exc:  # (a bad length)
            connection.close()
            raise AnswerLost(exc) from exc
        except BaseException:
            connection.close()
            raise
        if (
            response.will_close
            # uvicorn (MLServer, KServe) closes the connection after a 500 without saying
            # so: the next call would find it reset. (Triton's 503s keep theirs: a server
            # refusing for a full queue is no time for new connections.)
            or response.status == 500
            or self._closed
            or len(self._idle) >= self._max_idle
            or (
                self._max_age is not None
                and time.monotonic() >= getattr(connection, "retire_at", math.inf)
            )
        ):
            connection.close()
        else:
            self._idle.append(connection)
            if self.closed:  # close() ran meanwhile (another thread): it may have missed this
                self.close()
        data = decompress(data, response.getheader("Content-Encoding"), accepted)
        # (only an answer of 200 is read by it: an error's status must not hide behind it)
        given = response.getheader(HEADER_LENGTH) if response.status == 200 else None
        return response.status, header_length(given), data

    def open_stream(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str],
        timeout: float | None,
        sent: Callable[[http.client.HTTPConnection], object] | None = None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request on a connection of its own, for an answer read piece by piece.

        The caller hands the connection to :meth:`end_stream` when done; ``timeout``
        bounds each read; ``sent`` sees the connection once the request is out, before
        the wait for the answer. :meth:`close` cuts the streams still open.
        """
        if self._closed:
            raise PoolClosed("the client's connections are closed")
        connection = self._connect(timeout)
        self._streaming.add(connection)
        try:
            connection.request(method, path, body, dict(headers))
            hold_socket(connection)
            if sent is not None:
                sent(connection)
            response = connection.getresponse()
            if self._closed:  # close() ran before this stream's socket could be cut
                raise ConnectionAbortedError("the client was closed")
            return connection, response
        except BaseException:
            self.end_stream(connection)
            raise

    def end_stream(self, connection: http.client.HTTPConnection) -> None:
        self._streaming.discard(connection)
        release_socket(connection)
        connection.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
        for connection in list(self._streaming):
            interrupt(connection)

    def __del__(self) -> None:
        # A client dropped without close() should not leave sockets to the collector.
        self.close()


class EventWait:
    """The wait for a stream's next event, bounded by ``timeout`` (None: no limit)."""

    def __init__(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._since = time.monotonic()

    def restart(self) -> None:
        """An event came: the wait for the next one starts now."""
        self._since = time.monotonic()

    def left(self) -> float | None:
        """The time left to wait; raises TimeoutError, as a socket does, when none is."""
        if self._timeout is None:
            return None
        left = self._timeout - (time.monotonic() - self._since)
        if left <= 0:
            raise TimeoutError("timed out")
        return left

    async def readany(self, content: aiohttp.StreamReader) -> bytes:
        """The next bytes of ``content`` (b"" at its end), waited for at most the time
        left. The time left is taken first: raising once ``readany()`` was called would
        leave its coroutine never awaited."""
        left = self.left()
        return await within(content.readany(), left)
