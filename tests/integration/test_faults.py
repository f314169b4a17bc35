"""Network faults between the client and a real server, on grpc/http x sync/async.

A byte-level relay (``_relay.Relay``) sits between the client and the server and slows,
trickles, swallows or resets the traffic. What is checked is what callers rely on:

- a slow link still connects, at the first attempt;
- a timeout is a deadline: a call ends at its timeout however the bytes dribble in;
- a timed-out request is not retried (the server may still run it);
- a reset connection is retried under the policy, and then raises a retryable
  ``TritonConnectionError``;
- a server killed with SIGKILL and restarted under load costs no failed call, given a
  retry policy long enough to ride out the restart.

Only the public API is used. Elapsed-time bounds are upper bounds with generous margins:
the machine may be shared with other test runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from ._relay import Relay
from .conftest import close_client, inference_count, open_client, request_count

EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "triton_sdk" / "examples" / "models"

TRANSPORTS = [
    pytest.param("grpc", "sync", id="grpc-sync"),
    pytest.param("grpc", "async", id="grpc-async"),
    pytest.param("http", "sync", id="http-sync"),
    pytest.param("http", "async", id="http-async"),
]

INPUT0 = [1.0, 2.0, 3.0, 4.0]
INPUT1 = [1.0, 1.0, 1.0, 1.0]
ADD_SUB_INPUTS: dict[str, Any] = {"INPUT0": INPUT0, "INPUT1": INPUT1}

# Retries that would show: three attempts, almost no wait between them.
FAST_RETRY = ts.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02, jitter=False)
# Long enough to ride out a server restart of a few seconds.

# Slack over a call's timeout before "it took too long": scheduling on a loaded machine.
MARGIN = 0.3


# Servers


def add_sub_repository(target: Path) -> Path:
    (target / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    return target


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """The server behind the relays."""
    with LocalServer(add_sub_repository(tmp_path_factory.mktemp("faults_repository"))) as server:
        yield server


@pytest.fixture(scope="module")
def crash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A server of its own for the kill -9 tests."""
    with LocalServer(add_sub_repository(tmp_path_factory.mktemp("crash_repository"))) as server:
        yield server


# Clients and relays


@pytest.fixture(autouse=True)
def no_relay_left_running() -> Iterator[None]:
    """Every relay a test started has stopped all its threads by the end of the test."""
    yield
    left = [thread.name for thread in threading.enumerate() if thread.name.startswith("relay-")]
    assert left == [], f"relay threads still running: {left}"


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


def target_port(server: LocalServer, protocol: str) -> int:
    return server.grpc_port if protocol == "grpc" else server.http_port


@pytest.fixture
def make_relay(fault_server: LocalServer) -> Iterator[Callable[..., Relay]]:
    """Relays in front of the fault server's gRPC or HTTP port, closed at teardown."""
    relays: list[Relay] = []

    def make(protocol: str, **options: Any) -> Relay:
        relay = Relay("127.0.0.1", target_port(fault_server, protocol), **options)
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.close()


@pytest.fixture
def make_client(make_relay: Callable[..., Relay], loop: LoopThread) -> Iterator[Callable[..., Any]]:
    """Clients through a relay (closed at teardown, before the relays)."""
    clients: list[Any] = []

    def make(protocol: str, mode: str, relay: Relay, **options: Any) -> Any:
        client = open_client(f"{protocol}://127.0.0.1:{relay.port}", mode, loop, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        close_client(client, loop)


def check_add_sub(result: Any) -> None:
    assert result["OUTPUT0"].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert result["OUTPUT1"].tolist() == [0.0, 1.0, 2.0, 3.0]


def connected_model(make_client: Callable[..., Any], protocol: str, mode: str, relay: Relay) -> Any:
    """The add_sub handle of a fresh client, its connection open and working (relay passing)."""
    relay.mode = "pass"
    client = make_client(protocol, mode, relay, retry=FAST_RETRY)
    model = client.model("add_sub")
    check_add_sub(model.infer(**ADD_SUB_INPUTS))
    return model


def timed(call: Callable[[], Any]) -> tuple[BaseException | None, float]:
    """Run call; return what it raised (None if nothing) and how long it took."""
    started = time.monotonic()
    try:
        call()
    except BaseException as error:
        return error, time.monotonic() - started
    return None, time.monotonic() - started


# a. A slow link connects at the first attempt (defect 1 on gRPC)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_slow_link_connects_at_first_attempt(
    make_relay: Callable[..., Relay], make_client: Callable[..., Any], protocol: str, mode: str
) -> None:
    # 150 ms each way per chunk: a connection handshake of a few round trips takes a
    # second or two. A call with a 10 s timeout and no retries must still get through.
    relay = make_relay(protocol, mode="delay", delay=0.15)
    client = make_client(protocol, mode, relay, retry=ts.RetryPolicy.none())
    started = time.monotonic()
    metadata = client.server_metadata(timeout=10)
    assert metadata.name == "triton"
    assert time.monotonic() - started < 10
    # Once connected, the link stays usable.
    assert client.server_metadata(timeout=10).name == "triton"


# b. A timeout is a deadline, even when the answer trickles in (defect 9 on sync HTTP)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_trickled_answer_times_out_at_the_timeout(
    make_relay: Callable[..., Relay], make_client: Callable[..., Any], protocol: str, mode: str
) -> None:
    relay = make_relay(protocol)
    model = connected_model(make_client, protocol, mode, relay)
    relay.trickle_interval = 0.02  # one byte every 20 ms: a whole answer takes seconds
    relay.mode = "trickle"
    error, elapsed = timed(lambda: model.infer(**ADD_SUB_INPUTS, timeout=0.2))
    assert isinstance(error, ts.TritonTimeoutError), f"{error!r} after {elapsed:.2f}s"
    assert elapsed < 0.2 + MARGIN, f"timeout=0.2 took {elapsed:.2f}s"
    assert not error.retryable


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_trickled_metrics_time_out_at_the_timeout(
    fault_server: LocalServer, loop: LoopThread, protocol: str, mode: str
) -> None:
    # The blocking client bounded each read of the metrics page, not the call: a page
    # that trickled in took seconds past the timeout.
    relay = Relay("127.0.0.1", fault_server.metrics_port, mode="trickle", trickle_interval=0.02)
    try:
        url = f"{protocol}://127.0.0.1:{target_port(fault_server, protocol)}"
        client = open_client(url, mode, loop, metrics_url=f"http://127.0.0.1:{relay.port}")
        try:
            error, elapsed = timed(lambda: client.metrics(timeout=0.5))
        finally:
            close_client(client, loop)
        assert isinstance(error, ts.TritonTimeoutError), f"{error!r} after {elapsed:.2f}s"
        assert elapsed < 0.5 + MARGIN, f"timeout=0.5 took {elapsed:.2f}s"
    finally:
        relay.close()


# c. No answer at all: a timeout, one attempt


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_blackholed_request_times_out_and_is_not_retried(
    make_relay: Callable[..., Relay], make_client: Callable[..., Any], protocol: str, mode: str
) -> None:
    relay = make_relay(protocol)
    model = connected_model(make_client, protocol, mode, relay)
    relay.mode = "blackhole"
    connections = relay.connections
    error, elapsed = timed(lambda: model.infer(**ADD_SUB_INPUTS, timeout=0.3))
    assert isinstance(error, ts.TritonTimeoutError), f"{error!r} after {elapsed:.2f}s"
    assert not error.retryable
    # FAST_RETRY would have made a second attempt of 0.3 s (over HTTP, on a new connection).
    assert elapsed < 0.3 + MARGIN, f"timeout=0.3 took {elapsed:.2f}s"
    time.sleep(0.1)
    assert relay.connections == connections, "a timed-out request was sent again"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_blackholed_server_times_out_at_connect(
    make_relay: Callable[..., Relay], make_client: Callable[..., Any], protocol: str, mode: str
) -> None:
    # The TCP connection is accepted, nothing ever comes back: on gRPC the HTTP/2
    # handshake never completes, on HTTP the request gets no answer.
    relay = make_relay(protocol, mode="blackhole")
    client = make_client(protocol, mode, relay, retry=FAST_RETRY)
    error, elapsed = timed(lambda: client.server_metadata(timeout=0.3))
    assert isinstance(error, ts.TritonTimeoutError), f"{error!r} after {elapsed:.2f}s"
    assert elapsed < 0.3 + MARGIN, f"timeout=0.3 took {elapsed:.2f}s"
    if protocol == "http":
        time.sleep(0.1)
        assert relay.connections == 1, "a timed-out request was sent again"


# d. Connection reset: retried under the policy, then a retryable TritonConnectionError


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_reset_connection_is_retried_then_raises(
    make_relay: Callable[..., Relay], make_client: Callable[..., Any], protocol: str, mode: str
) -> None:
    relay = make_relay(protocol, mode="reset")
    client = make_client(protocol, mode, relay, retry=FAST_RETRY)
    error, elapsed = timed(lambda: client.server_metadata(timeout=5))
    assert isinstance(error, ts.TritonConnectionError), f"{error!r} after {elapsed:.2f}s"
    assert error.retryable
    assert elapsed < 5, f"three reset attempts took {elapsed:.2f}s"
    assert relay.bytes_to_clients == 0
    if protocol == "http":
        # Each HTTP attempt opens a connection (the previous one was reset).
        assert relay.connections == FAST_RETRY.max_attempts
    else:
        # gRPC reconnects in the background, on its own backoff: an attempt made while
        # the channel waits fails without a connection. At least one, at most one each.
        assert 1 <= relay.connections <= FAST_RETRY.max_attempts


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_infer_on_reset_connection_is_retried_then_raises(
    make_relay: Callable[..., Relay],
    make_client: Callable[..., Any],
    fault_server: LocalServer,
    protocol: str,
    mode: str,
) -> None:
    relay = make_relay(protocol)
    model = connected_model(make_client, protocol, mode, relay)
    before = inference_count(fault_server, "add_sub")
    relay.mode = "reset"  # the open connection is reset too
    time.sleep(0.3)
    connections = relay.connections
    error, elapsed = timed(lambda: model.infer(**ADD_SUB_INPUTS, timeout=5))
    assert isinstance(error, ts.TritonConnectionError), f"{error!r} after {elapsed:.2f}s"
    assert error.retryable
    assert elapsed < 5, f"three reset attempts took {elapsed:.2f}s"
    new_connections = relay.connections - connections
    if protocol == "http":
        assert new_connections == FAST_RETRY.max_attempts
    else:
        assert 1 <= new_connections <= FAST_RETRY.max_attempts
    assert inference_count(fault_server, "add_sub") == before, "a reset request reached the server"


# e. The answer is lost: a timeout, not retried, although the server ran the request


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_lost_answer_times_out_and_is_not_retried(
    make_relay: Callable[..., Relay],
    make_client: Callable[..., Any],
    fault_server: LocalServer,
    protocol: str,
    mode: str,
) -> None:
    relay = make_relay(protocol)
    model = connected_model(make_client, protocol, mode, relay)
    before = inference_count(fault_server, "add_sub")
    relay.mode = "drop_response"
    error, elapsed = timed(lambda: model.infer(**ADD_SUB_INPUTS, timeout=0.5))
    assert isinstance(error, ts.TritonTimeoutError), f"{error!r} after {elapsed:.2f}s"
    assert not error.retryable
    assert elapsed < 0.5 + MARGIN, f"timeout=0.5 took {elapsed:.2f}s"
    # The server did run it, once: a retry would have run it again.
    assert inference_count(fault_server, "add_sub") == before + 1


def answer_lost(
    model: Any, relay: Relay, fault_server: LocalServer, then: Callable[[], object]
) -> BaseException | None:
    """What an add_sub infer raises when the server runs it, the relay holds its answer
    back, and ``then()`` breaks the connection."""
    before = request_count(fault_server, "add_sub")
    relay.mode = "drop_response"
    outcome: list[BaseException | None] = []
    call = threading.Thread(
        target=lambda: outcome.append(timed(lambda: model.infer(**ADD_SUB_INPUTS, timeout=10))[0])
    )
    call.start()
    deadline = time.monotonic() + 10
    while request_count(fault_server, "add_sub") == before and time.monotonic() < deadline:
        time.sleep(0.01)
    then()
    call.join(15)
    (error,) = outcome
    return error


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_a_connection_broken_after_the_request_left_says_it_may_have_run(
    make_relay: Callable[..., Relay],
    make_client: Callable[..., Any],
    fault_server: LocalServer,
    protocol: str,
    mode: str,
) -> None:
    relay = make_relay(protocol)
    relay.mode = "pass"
    model = make_client(protocol, mode, relay, retry=ts.RetryPolicy.none()).model("add_sub")
    check_add_sub(model.infer(**ADD_SUB_INPUTS))
    before = inference_count(fault_server, "add_sub")
    # Then the connection breaks before the answer comes back.
    error = answer_lost(model, relay, fault_server, lambda: setattr(relay, "mode", "reset"))
    assert isinstance(error, ts.TritonConnectionError), repr(error)
    assert error.retryable
    assert error.may_have_run
    assert inference_count(fault_server, "add_sub") == before + 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_may_have_run_holds_for_any_attempt_not_only_the_last(
    make_relay: Callable[..., Relay],
    make_client: Callable[..., Any],
    fault_server: LocalServer,
    protocol: str,
    mode: str,
) -> None:
    # The first attempt runs on the server and its answer is lost; the resends find no
    # server at all. The error said may_have_run=False, the last attempt's word.
    relay = make_relay(protocol)
    model = connected_model(make_client, protocol, mode, relay)
    # The connection breaks, and nothing listens there any more.
    error = answer_lost(model, relay, fault_server, relay.close)
    assert isinstance(error, ts.TritonConnectionError), repr(error)
    assert error.may_have_run


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_the_first_infer_on_a_lost_server_names_its_model_and_request_id(
    make_relay: Callable[..., Relay], make_client: Callable[..., Any], protocol: str, mode: str
) -> None:
    # HTTP reads the server's metadata before a client's first inference (to choose the
    # body's format): its failure was raised without the call's model and request id.
    relay = make_relay(protocol)
    model = make_client(protocol, mode, relay, retry=FAST_RETRY).model("add_sub")
    relay.mode = "reset"
    time.sleep(0.3)
    error, _ = timed(lambda: model.infer(**ADD_SUB_INPUTS, request_id="r-7", timeout=5))
    assert isinstance(error, ts.TritonConnectionError), repr(error)
    assert (error.model, error.request_id) == ("add_sub", "r-7")
    assert not error.may_have_run


# f. kill -9 and restart under load


class Load:
    """add_sub infers one after another in a thread, until stopped (bounded in count and time)."""

    MAX_CALLS = 20_000
    MAX_SECONDS = 45.0
    PAUSE = 0.01

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls = 0
        self.successes: list[float] = []  # when each successful call ended
        self.errors: list[BaseException] = []
        self.wrong = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-load", daemon=True)

    def _run(self) -> None:
        ends = time.monotonic() + self.MAX_SECONDS
        while not self._stop.is_set() and self.calls < self.MAX_CALLS and time.monotonic() < ends:
            self.calls += 1
            try:
                result = self.model.infer(**ADD_SUB_INPUTS, timeout=10)
            except Exception as error:
                self.errors.append(error)
            else:
                if not np.array_equal(result["OUTPUT0"], np.add(INPUT0, INPUT1)):
                    self.wrong += 1
                self.successes.append(time.monotonic())
            self._stop.wait(self.PAUSE)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        # A call may be riding out the restart: the policy's deadline (30 s) bounds it.
        self._thread.join(40)
        assert not self._thread.is_alive(), "the load thread did not stop"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("protocol", "mode"), TRANSPORTS)
def test_kill_and_restart_under_load_loses_no_call(
    crash_server: LocalServer, loop: LoopThread, protocol: str, mode: str
) -> None:
    url = crash_server.grpc_url if protocol == "grpc" else crash_server.http_url
    # The preset meant for this: it rides out a restart of a few seconds.
    client = open_client(url, mode, loop, retry=ts.RetryPolicy.resilient())
    try:
        model = client.model("add_sub")
        with Load(model) as load:
            time.sleep(1.0)
            calls_before_kill = load.calls
            crash_server.kill()
            killed = time.monotonic()
            time.sleep(0.2)
            crash_server.restart()
            ready = time.monotonic()
            # The load may be in a retry's backoff: wait for a call after the restart.
            deadline = ready + 30
            while not (load.successes and load.successes[-1] > ready):
                if time.monotonic() > deadline or load.errors or not load._thread.is_alive():
                    break
                time.sleep(0.05)
        down_for = ready - killed
    finally:
        close_client(client, loop)
    errors = [f"{type(error).__name__}: {error}" for error in load.errors[:5]]
    assert load.errors == [], f"{len(load.errors)} of {load.calls} calls raised: {errors}"
    assert load.wrong == 0
    assert calls_before_kill > 0
    after_restart = [when for when in load.successes if when > ready]
    assert after_restart, f"no call succeeded after the restart (down for {down_for:.1f}s)"
