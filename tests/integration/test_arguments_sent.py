"""Refused means nothing sent: bad arguments never put a request byte on the wire.

Each client talks to a tritonserver of this module's own (``add_sub``: INPUT0/INPUT1 FP32
[4], no batch axis) through a loopback relay that counts the request bytes clients send.
A call refused with :class:`ts.InvalidInputError` must leave that count where it was.
Clients first make a successful call, so that connection setup is not counted, and the
count is read only once it holds still.

The relay is this file's own, not ``_relay.Relay``: that one counts every byte, and an
idle gRPC connection sends HTTP/2 PING and WINDOW_UPDATE frames of its own now and then
(30-50 bytes, seen during refused calls). Here gRPC traffic is parsed into frames and
only HEADERS, DATA and CONTINUATION frames (requests) are counted; HTTP counts every byte.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import Blocking, LoopThread
from .conftest import EXAMPLE_MODELS

pytestmark = pytest.mark.timeout(120)

GOOD: dict[str, Any] = {
    "INPUT0": np.array([1.0, 2.0, 3.0, 4.0], np.float32),
    "INPUT1": np.ones(4, np.float32),
}
TRANSPORTS = ["grpc-sync", "grpc-async", "http-sync", "http-async"]

# The relay's count holds still this long before it is read.
QUIET = 0.1
SETTLE_LIMIT = 5.0


@pytest.fixture(scope="module")
def args_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repository = tmp_path_factory.mktemp("arguments_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    with LocalServer(Path(repository)) as running:
        yield running


@pytest.fixture(scope="module")
def module_loop() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


class CountingRelay:
    """Forwards 127.0.0.1:``port`` to ``target``; counts the request bytes clients send.

    ``http2=True`` counts only HTTP/2 HEADERS, DATA and CONTINUATION frames (9-byte frame
    header included); otherwise every byte from a client counts.
    """

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    REQUEST_FRAMES = frozenset({0x0, 0x1, 0x9})  # DATA, HEADERS, CONTINUATION

    def __init__(self, target_port: int, *, http2: bool) -> None:
        self.target = ("127.0.0.1", target_port)
        self.http2 = http2
        self.request_bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=5)
            for sock in (client, upstream):
                sock.settimeout(0.05)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream, True)
            self._spawn(self._pump, upstream, client, False)

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        buffer = b""
        preface = self.http2
        while not self._stop.is_set():
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if from_client and not self.http2:
                self._count(len(data))
            elif from_client:
                buffer += data
                if preface and len(buffer) >= len(self.PREFACE):
                    buffer, preface = buffer[len(self.PREFACE) :], False
                while not preface and len(buffer) >= 9:
                    size = 9 + int.from_bytes(buffer[:3], "big")
                    if len(buffer) < size:
                        break
                    if buffer[3] in self.REQUEST_FRAMES:
                        self._count(size)
                    buffer = buffer[size:]
            try:
                sink.sendall(data)
            except OSError:
                return

    def _count(self, size: int) -> None:
        with self._lock:
            self.request_bytes += size

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(5)
        with self._lock:
            for sock in self._sockets:
                sock.close()


class Wired(NamedTuple):
    """A client that talks to the server only through ``relay``, and its add_sub handle."""

    client: Any
    model: Any
    relay: CountingRelay


@contextlib.contextmanager
def relay_to(server: LocalServer, protocol: str) -> Iterator[CountingRelay]:
    port = server.grpc_port if protocol == "grpc" else server.http_port
    relay = CountingRelay(port, http2=protocol == "grpc")
    try:
        yield relay
    finally:
        relay.close()


def settled(relay: CountingRelay) -> int:
    """The relay's count of request bytes, once it has held still for QUIET seconds."""
    count = relay.request_bytes
    since = time.monotonic()
    give_up = since + SETTLE_LIMIT
    while time.monotonic() < give_up:
        time.sleep(0.02)
        now = relay.request_bytes
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET:
            return count
    raise AssertionError(f"the relay's count never held still: {relay!r}")


@pytest.fixture(scope="module", params=TRANSPORTS)
def wired(
    request: pytest.FixtureRequest, args_server: LocalServer, module_loop: LoopThread
) -> Iterator[Wired]:
    protocol, mode = str(request.param).split("-")
    with relay_to(args_server, protocol) as relay:
        url = f"{protocol}://{relay.address}"
        if mode == "sync":
            client: Any = ts.Client(url, timeout=10)
        else:
            client = Blocking(ts.AsyncClient(url, timeout=10), module_loop)
        try:
            model = client.model("add_sub")
            # Connected: setup bytes are behind us.
            assert model.infer(**GOOD)["OUTPUT0"].tolist() == [2.0, 3.0, 4.0, 5.0]
            yield Wired(client, model, relay)
        finally:
            if isinstance(client, Blocking):
                module_loop.run(client.target.aclose())
            else:
                client.close()


def bytes_sent_by(
    relay: CountingRelay, call: Callable[[], object]
) -> tuple[int, BaseException | None]:
    """Client bytes the relay saw during ``call`` (and what it raised, if anything)."""
    before = settled(relay)
    raised: BaseException | None = None
    try:
        call()
    except Exception as error:
        raised = error
    return settled(relay) - before, raised


# A handful of refused calls: (the call, a word of the message naming the argument)

REFUSED: dict[str, tuple[Callable[[Any], object], str]] = {
    "lone surrogate in request_id": (
        lambda m: m.infer(**GOOD, request_id="\ud800"),
        "request_id",
    ),
    "request_id=123": (lambda m: m.infer(**GOOD, request_id=123), "request_id"),
    "header value with a line break": (
        lambda m: m.infer(**GOOD, headers={"x-note": "a\r\nx-injected: 1"}),
        "header",
    ),
    "headers=[('a', 'b')]": (lambda m: m.infer(**GOOD, headers=[("a", "b")]), "headers"),
    "float64 1e300 into FP32": (
        lambda m: m.infer(INPUT0=np.array([1e300, 0.0, 0.0, 0.0]), INPUT1=GOOD["INPUT1"]),
        "INPUT0",
    ),
    "bool array into FP32": (
        lambda m: m.infer(INPUT0=np.array([True] * 4), INPUT1=GOOD["INPUT1"]),
        "INPUT0",
    ),
    "timeout='5'": (lambda m: m.infer(**GOOD, timeout="5"), "timeout"),
    "retry=3": (lambda m: m.infer(**GOOD, retry=3), "retry"),
    "a parameter value with a lone surrogate": (
        lambda m: m.infer(**GOOD, parameters={"p": "\ud800"}),
        "parameter",
    ),
    # The server's C strings end at a NUL: these arrived cut ("req", "abc", "p").
    "a NUL in request_id": (lambda m: m.infer(**GOOD, request_id="req\x00-42"), "request_id"),
    "a NUL in a parameter value": (
        lambda m: m.infer(**GOOD, parameters={"p": "abc\x00def"}),
        "parameter",
    ),
    "a NUL in a parameter name": (
        lambda m: m.infer(**GOOD, parameters={"p\x00q": "x"}),
        "parameter name",
    ),
}


def test_a_valid_call_is_counted(wired: Wired) -> None:
    # The control: the relay does see what a call sends (the two inputs alone are 32 bytes).
    sent, raised = bytes_sent_by(wired.relay, lambda: wired.model.infer(**GOOD))
    assert raised is None
    assert sent > 32


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_call_sends_nothing(wired: Wired, case: str) -> None:
    call, named = REFUSED[case]
    sent, raised = bytes_sent_by(wired.relay, lambda: call(wired.model))
    assert isinstance(raised, ts.InvalidInputError), repr(raised)
    assert named.lower() in str(raised).lower(), str(raised)
    assert sent == 0
    # The connection is still good afterwards.
    assert wired.model.infer(**GOOD)["OUTPUT1"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("timeout", [math.inf, 1e12])
def test_an_endless_timeout_is_no_limit(wired: Wired, timeout: float) -> None:
    result = wired.model.infer(**GOOD, timeout=timeout)
    assert result["OUTPUT0"].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert wired.client.server_metadata(timeout=timeout).version


# Property: whatever the arguments, a result or a TritonError; refused means not sent

ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=6)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**31, 2**63, 2**64, -(2**63) - 1, 2**100]),
    st.floats(allow_nan=True, allow_infinity=True),
    ANY_TEXT,
    st.sampled_from(["\ud800", "a\udcffb", ""]),
    st.binary(max_size=6),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4)
ARRAYS = st.one_of(
    hnp.arrays(
        st.one_of(hnp.scalar_dtypes(), hnp.unicode_string_dtypes(max_len=3)),
        SHAPES,
    ),
    st.sampled_from([np.float32, np.uint8, np.float64]).map(
        lambda dtype: np.broadcast_to(np.zeros(1, dtype), (1, 2**58))
    ),
)
ANYTHING = st.recursive(
    st.one_of(SCALARS, ARRAYS),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(ANY_TEXT, st.integers()), children, max_size=2),
    ),
    max_leaves=5,
)
GOOD_OPTIONS: dict[str, st.SearchStrategy[Any]] = {
    "timeout": st.one_of(st.none(), st.floats(1.0, 10.0), st.just(math.inf)),
    "request_id": st.text(alphabet="abc-123", max_size=8),
    "priority": st.just(0),
    "parameters": st.just({"p": 1}),
    "outputs": st.just(["OUTPUT0"]),
    "headers": st.just({"x-a": "b"}),
    "retry": st.just(ts.RetryPolicy.none()),
}


@st.composite
def infer_calls(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of add_sub.infer: each input and option good, arbitrary or absent."""
    arguments: dict[str, Any] = {}
    for name in ("INPUT0", "INPUT1"):
        arguments[name] = draw(st.one_of(st.just(GOOD[name]), st.just(GOOD[name]), ANYTHING))
    for name, good in GOOD_OPTIONS.items():
        choice = draw(st.sampled_from(["left out", "left out", "good", "anything"]))
        if choice == "good":
            arguments[name] = draw(good)
        elif choice == "anything":
            arguments[name] = draw(ANYTHING)
    return arguments


@pytest.fixture(scope="module")
def grpc_sync(args_server: LocalServer) -> Iterator[Wired]:
    with (
        relay_to(args_server, "grpc") as relay,
        ts.Client(f"grpc://{relay.address}", timeout=10) as client,
    ):
        model = client.model("add_sub")
        model.infer(**GOOD)
        yield Wired(client, model, relay)


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    # No shrinking: each example takes a few tenths of a second against the server; the
    # unit test of the same property shrinks its failures.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(arguments=infer_calls())
def test_any_arguments_give_a_result_or_a_triton_error_and_refused_sends_nothing(
    grpc_sync: Wired, arguments: dict[str, Any]
) -> None:
    sent, raised = bytes_sent_by(grpc_sync.relay, lambda: grpc_sync.model.infer(**arguments))
    if raised is None:
        return
    if not isinstance(raised, ts.TritonError):
        raise raised
    if isinstance(raised, ts.InvalidInputError):
        assert sent == 0, f"refused ({raised}) after sending {sent} bytes"
