"""A loopback TCP relay that misbehaves on demand, for fault-injection tests.

>>> with Relay("127.0.0.1", server.grpc_port, mode="delay", delay=0.15) as relay:  # doctest: +SKIP
...     client = ts.Client(f"grpc://127.0.0.1:{relay.port}")

The relay listens on 127.0.0.1 on a free port and forwards each accepted connection to the
target. It works on bytes only, so it serves plaintext and TLS alike. Modes:

- ``"pass"``: forward both ways.
- ``"delay"``: hold every chunk ``delay`` seconds before forwarding it, in both directions
  (each direction holds its chunks one after the other: a slow link).
- ``"reset"``: close client connections with a TCP RST (``SO_LINGER`` 0), new ones at once
  after the accept, and open ones as soon as the mode changes.
- ``"close"``: close new client connections cleanly (FIN) at once after the accept, as a
  port forwarder does while the server behind it is not listening yet.
- ``"blackhole"``: read what the client sends and drop it; never answer, never close. A
  connection accepted in this mode is never connected to the target, and stays a black hole.
- ``"drop_response"``: forward requests to the target, drop everything it answers, keep the
  client's connection open.
- ``"trickle"``: forward requests; send the answers one byte every ``trickle_interval`` seconds.

The mode can be changed at any time (``relay.mode = "reset"``); open connections follow the
new mode from their next chunk on (within ``POLL_INTERVAL`` for ``"reset"``).

Every socket is non-blocking and every wait is bounded and checks for shutdown, so
``close()`` (the context manager's exit) stops all threads and closes all sockets within a
fraction of a second.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from types import TracebackType
from typing import Final

__all__ = ["MODES", "Relay"]

MODES: Final = ("pass", "delay", "reset", "close", "blackhole", "drop_response", "trickle")

POLL_INTERVAL: Final = 0.05
CHUNK: Final = 65536
# A peer that takes nothing for this long is given up (its connection is closed).
SEND_STALL_LIMIT: Final = 10.0
CONNECT_TIMEOUT: Final = 2.0
JOIN_TIMEOUT: Final = 5.0

_POLL_IN: Final = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
_POLL_OUT: Final = select.POLLOUT | select.POLLHUP | select.POLLERR


def _reset(sock: socket.socket) -> None:
    """Close a socket with an RST instead of a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Stop(Exception):
    """The connection (or the relay) is finished: unwind the pump."""


class _Connection:
    """One client connection, its upstream connection, and the two threads that pump them."""

    def __init__(self, relay: Relay, client: socket.socket) -> None:
        self.relay = relay
        self.client = client
        self.upstream: socket.socket | None = None
        self.done = threading.Event()
        self.reset = False
        self._lock = threading.Lock()
        self._running = 0
        self.sockets_closed = False
        self.threads: list[threading.Thread] = []

    # Lifetime

    def start(self, connect: bool) -> None:
        self._spawn(self._client_to_server, "relay-c2s", connect)

    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=self._run, args=(target, *args), name=name, daemon=True)
        with self._lock:
            self._running += 1
            self.threads.append(thread)
        thread.start()

    def _run(self, target: object, *args: object) -> None:
        try:
            target(*args)  # type: ignore[operator]
        except (_Stop, OSError):
            pass
        finally:
            self.finish()
            with self._lock:
                self._running -= 1
                last = self._running == 0
            if last:
                self._close_sockets()

    def finish(self, reset: bool = False) -> None:
        """End the connection; the pumps notice within POLL_INTERVAL."""
        if reset:
            self.reset = True
        self.done.set()

    def _close_sockets(self) -> None:
        with self._lock:
            if self.sockets_closed:
                return
            self.sockets_closed = True
        if self.reset:
            _reset(self.client)
        else:
            self.client.close()
        if self.upstream is not None:
            self.upstream.close()

    @property
    def finished(self) -> bool:
        """Whether its sockets are closed and its threads have ended."""
        return self.sockets_closed and not any(t.is_alive() for t in self.threads)

    def close_now(self) -> None:
        """Called by the relay after joining the threads: whatever is still open, close."""
        self.finish()
        self._close_sockets()

    # Bounded, stop-aware socket operations

    def _check(self) -> None:
        if self.done.is_set() or self.relay.closed:
            raise _Stop
        if self.relay.mode == "reset":
            self.finish(reset=True)
            raise _Stop

    def _wait(self, seconds: float) -> None:
        """Sleep, waking up for the end of the connection or of the relay."""
        end = time.monotonic() + seconds
        while True:
            self._check()
            left = end - time.monotonic()
            if left <= 0:
                return
            self.done.wait(min(left, POLL_INTERVAL))

    def _recv(self, sock: socket.socket) -> bytes:
        """The next chunk from sock; raises _Stop on EOF or when the connection ends."""
        poller = select.poll()
        poller.register(sock, _POLL_IN)
        while True:
            self._check()
            if poller.poll(POLL_INTERVAL * 1000):
                try:
                    data = sock.recv(CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    raise _Stop
                # The mode may have turned to "reset" while this chunk was on its way: a
                # reset connection forwards nothing more.
                self._check()
                return data

    def _send(self, sock: socket.socket, data: bytes) -> None:
        poller = select.poll()
        poller.register(sock, _POLL_OUT)
        view = memoryview(data)
        stalled_since = time.monotonic()
        while view:
            self._check()
            if not poller.poll(POLL_INTERVAL * 1000):
                if time.monotonic() - stalled_since > SEND_STALL_LIMIT:
                    raise _Stop
                continue
            try:
                sent = sock.send(view)
            except BlockingIOError:
                continue
            view = view[sent:]
            stalled_since = time.monotonic()

    # The pumps

    def _connect_upstream(self) -> None:
        try:
            upstream = socket.create_connection(self.relay.target, timeout=CONNECT_TIMEOUT)
        except OSError:
            # The target is not there: the client sees its connection reset, as it would
            # see a refused connection without the relay.
            self.finish(reset=True)
            raise _Stop from None
        upstream.setblocking(False)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.upstream = upstream
        self._spawn(self._server_to_client, "relay-s2c")

    def _client_to_server(self, connect: bool) -> None:
        if connect:
            self._connect_upstream()
        while True:
            data = self._recv(self.client)
            self.relay._count_from_client(len(data))
            mode = self.relay.mode
            if self.upstream is None or mode == "blackhole":
                continue
            if mode == "delay":
                self._wait(self.relay.delay)
            self._send(self.upstream, data)

    def _server_to_client(self) -> None:
        assert self.upstream is not None
        while True:
            data = self._recv(self.upstream)
            mode = self.relay.mode
            if mode in ("blackhole", "drop_response"):
                continue
            if mode == "delay":
                self._wait(self.relay.delay)
            while data and self.relay.mode == "trickle":
                self._send(self.client, data[:1])
                self.relay._count_to_client(1)
                data = data[1:]
                if data:
                    self._wait(self.relay.trickle_interval)
            if data:
                self._send(self.client, data)
                self.relay._count_to_client(len(data))


class Relay:
    """A TCP relay from 127.0.0.1:``port`` to ``target_host:target_port``; see the module doc.

    Attributes:
        port: the port it listens on.
        connections: client connections accepted so far.
        bytes_from_clients: bytes read from clients so far (forwarded or not).
        bytes_to_clients: bytes sent to clients so far.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        mode: str = "pass",
        *,
        delay: float = 0.15,
        trickle_interval: float = 0.02,
    ) -> None:
        self.target = (target_host, target_port)
        self.mode = mode
        self.delay = delay
        self.trickle_interval = trickle_interval
        self.connections = 0
        self.bytes_from_clients = 0
        self.bytes_to_clients = 0
        self._counter_lock = threading.Lock()
        self._closed = threading.Event()
        self._open: list[_Connection] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.bind(("127.0.0.1", 0))
            self._listener.listen(64)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="relay-accept", daemon=True
        )
        self._acceptor.start()

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"unknown relay mode {value!r}; one of {MODES}")
        self._mode = value

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    def _count_from_client(self, count: int) -> None:
        with self._counter_lock:
            self.bytes_from_clients += count

    def _count_to_client(self, count: int) -> None:
        with self._counter_lock:
            self.bytes_to_clients += count

    def _accept_loop(self) -> None:
        poller = select.poll()
        poller.register(self._listener, select.POLLIN)
        while not self._closed.is_set():
            if not poller.poll(POLL_INTERVAL * 1000):
                continue
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                if self._closed.is_set():
                    return
                continue
            with self._counter_lock:
                self.connections += 1
            mode = self.mode
            if mode == "reset" or self._closed.is_set():
                _reset(client)
                continue
            if mode == "close":
                client.close()
                continue
            client.setblocking(False)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(self, client)
            with self._counter_lock:
                self._open = [c for c in self._open if not c.finished]
                self._open.append(connection)
            connection.start(connect=mode != "blackhole")

    def close(self) -> None:
        """Stop accepting, end every connection, join every thread, close every socket."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._acceptor.join(JOIN_TIMEOUT)
        self._listener.close()
        with self._counter_lock:
            connections = list(self._open)
            self._open.clear()
        for connection in connections:
            connection.finish()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for connection in connections:
            # Threads are appended (by the first pump) before they start: read the list
            # again after each join.
            index = 0
            while index < len(connection.threads):
                connection.threads[index].join(max(0.0, deadline - time.monotonic()))
                index += 1
            connection.close_now()
        stuck = [t.name for c in connections for t in c.threads if t.is_alive()]
        if self._acceptor.is_alive():
            stuck.append(self._acceptor.name)
        if stuck:
            raise RuntimeError(f"relay threads did not stop: {stuck}")

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Relay 127.0.0.1:{self.port} -> {self.target[0]}:{self.target[1]} "
            f"mode={self.mode} connections={self.connections}>"
        )
