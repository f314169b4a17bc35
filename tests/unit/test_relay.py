"""The fault-injection relay of the integration tests, against a local echo server."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration._relay import Relay

pytestmark = pytest.mark.timeout(30)


class EchoServer:
    """Echoes every chunk back, and remembers what it received."""

    def __init__(self) -> None:
        self.received = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                with self._lock:
                    self.received += data
                try:
                    conn.sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(5)
        self._listener.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def connect(relay: Relay, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", relay.port), timeout=timeout)


def read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def exchange(sock: socket.socket, pause: float = 0.0) -> bytes:
    """Send a byte, wait a moment, send another, read one back."""
    sock.sendall(b"x")
    time.sleep(pause)
    sock.sendall(b"x")
    return sock.recv(1)


def talk(relay: Relay, pause: float = 0.1) -> bytes:
    """Connect, wait a moment, exchange bytes (a reset may show at any step)."""
    with connect(relay) as sock:
        time.sleep(pause)
        return exchange(sock, pause)


def wait_until(predicate: object, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return bool(predicate())  # type: ignore[operator]


def test_pass_forwards_and_counts(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port) as relay, connect(relay) as sock:
        sock.sendall(b"hello")
        assert read_exactly(sock, 5) == b"hello"
        assert relay.connections == 1
        assert relay.bytes_from_clients == 5
        assert wait_until(lambda: relay.bytes_to_clients == 5)


def test_delay_holds_each_direction(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port, mode="delay", delay=0.2) as relay, connect(relay) as sock:
        started = time.monotonic()
        sock.sendall(b"x")
        assert read_exactly(sock, 1) == b"x"
        assert time.monotonic() - started >= 0.38


def test_reset_sends_rst(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port, mode="reset") as relay:
        with pytest.raises(ConnectionResetError):
            talk(relay)
        assert relay.connections == 1
    assert echo.received == b""


def test_switching_to_reset_resets_open_connections(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port) as relay, connect(relay) as sock:
        sock.sendall(b"a")
        assert read_exactly(sock, 1) == b"a"
        relay.mode = "reset"
        with pytest.raises(ConnectionResetError):
            sock.recv(1)


def test_blackhole_reads_and_never_answers(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port, mode="blackhole") as relay, connect(relay) as sock:
        sock.sendall(b"abc")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        assert relay.bytes_from_clients == 3
    assert echo.received == b""


def test_drop_response_forwards_requests_only(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port, mode="drop_response") as relay, connect(relay) as sock:
        sock.sendall(b"abc")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        assert wait_until(lambda: echo.received == b"abc")
        assert relay.bytes_to_clients == 0


def test_trickle_sends_one_byte_at_a_time(echo: EchoServer) -> None:
    relay = Relay("127.0.0.1", echo.port, mode="trickle", trickle_interval=0.05)
    with relay, connect(relay) as sock:
        started = time.monotonic()
        sock.sendall(b"abcdef")
        assert read_exactly(sock, 6) == b"abcdef"
        assert time.monotonic() - started >= 0.2


def test_unknown_mode_is_refused(echo: EchoServer) -> None:
    with Relay("127.0.0.1", echo.port) as relay, pytest.raises(ValueError, match="unknown"):
        relay.mode = "slow"


def test_target_down_resets_the_client() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    with Relay("127.0.0.1", port) as relay, pytest.raises(ConnectionResetError):
        talk(relay)


@pytest.mark.parametrize("mode", ["pass", "delay", "blackhole", "drop_response", "trickle"])
def test_close_leaves_no_threads_or_fds(echo: EchoServer, mode: str) -> None:
    threads_before = threading.active_count()
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with Relay("127.0.0.1", echo.port, mode=mode, delay=5.0, trickle_interval=5.0) as relay:
            socks = [connect(relay) for _ in range(3)]
            for sock in socks:
                sock.sendall(b"payload")
            assert wait_until(lambda: relay.bytes_from_clients == 21)
            started = time.monotonic()
        assert time.monotonic() - started < 2.0
        for sock in socks:
            sock.close()
    assert wait_until(lambda: threading.active_count() <= threads_before)
    # The echo server's own connections end when the relay closes them.
    assert wait_until(lambda: len(os.listdir("/proc/self/fd")) <= fds_before)
