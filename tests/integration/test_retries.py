"""Retries against the real server: refused connections, deadlines, a full queue, a restart.

The SDK logs each retry on the "triton_sdk" logger at INFO; the tests count those records.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from .conftest import EXAMPLE_MODELS, client_for, close_client, open_client

BURST = 6
PATIENT = ts.RetryPolicy(max_attempts=20, initial_backoff=0.05, max_backoff=0.3)


def retry_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "triton_sdk" and record.levelno == logging.INFO
    ]


def closed_port() -> int:
    """A loopback port nobody listens on: bound once by a fresh socket, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def make_dead_client(protocol: str, mode: str, loop_thread: LoopThread) -> Iterator[Any]:
    """make_dead_client(**options): a client of this test's transport to a closed port."""
    opened: list[Any] = []
    scheme = "grpc" if protocol == "grpc" else "http"
    url = f"{scheme}://127.0.0.1:{closed_port()}"

    def make(**options: Any) -> Any:
        client = open_client(url, mode, loop_thread, **options)
        opened.append(client)
        return client

    yield make
    for client in opened:
        close_client(client, loop_thread)


# Connection refused


def test_connection_refused_is_retried(
    make_dead_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    client = make_dead_client(
        retry=ts.RetryPolicy(max_attempts=4, initial_backoff=0.01, jitter=False)
    )
    with pytest.raises(ts.TritonConnectionError):
        client.server_metadata()
    assert len(retry_records(caplog)) == 3


def test_connection_refused_is_retried_on_model_calls(
    make_dead_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    client = make_dead_client(
        retry=ts.RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
    )
    with pytest.raises(ts.TritonConnectionError):
        client.model("add_sub")
    # The first call of model() (metadata) fails after its retries; nothing more is sent.
    assert len(retry_records(caplog)) == 2


def test_no_retries_tries_once(make_dead_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    client = make_dead_client(retry=ts.RetryPolicy.none())
    with pytest.raises(ts.TritonConnectionError):
        client.server_metadata()
    assert retry_records(caplog) == []


def test_deadline_bounds_the_whole_call(
    make_dead_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    client = make_dead_client(
        retry=ts.RetryPolicy(max_attempts=100, initial_backoff=0.05, deadline=0.5)
    )
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError):
        client.server_metadata()
    elapsed = time.monotonic() - started
    assert 0.1 < elapsed < 2.0
    retries = len(retry_records(caplog))
    assert 1 <= retries < 20


def test_deadline_bounds_an_attempt_without_timeout(make_client: Any) -> None:
    # No per-attempt timeout: the deadline alone must cut the slow attempt short.
    model = make_client(timeout=None).model("sleep")
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError):
        model.infer(SECONDS=[1.0], retry=ts.RetryPolicy(deadline=0.3))
    assert time.monotonic() - started < 0.9


@pytest.mark.parametrize("deadline", [float("inf"), 1e10])
def test_a_deadline_past_any_clock_is_no_deadline(make_client: Any, deadline: float) -> None:
    # Without a timeout the deadline alone bounds an attempt: gRPC failed such calls at
    # once with DEADLINE_EXCEEDED, and HTTP with an OverflowError, though nothing was sent.
    client = make_client(timeout=None, retry=ts.RetryPolicy(deadline=deadline))
    assert [status.name for status in client.models()]
    model = client.model("sleep")
    assert model.infer(SECONDS=[0.01], retry=ts.RetryPolicy(deadline=deadline)) is not None


# A full queue: "busy" holds one request in its queue and refuses the rest


def _sync_burst(model: Any, retry: ts.RetryPolicy) -> list[Any]:
    """BURST calls at once from threads; each outcome is a result or the exception."""
    outcomes: list[Any] = [None] * BURST
    barrier = threading.Barrier(BURST)

    def call(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = model.infer(MILLIS=[150], retry=retry)
        except Exception as exc:  # collected and checked by the test
            outcomes[index] = exc

    threads = [threading.Thread(target=call, args=(index,)) for index in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert None not in outcomes, "a call of the burst did not return"
    return outcomes


async def _async_burst(model: ts.AsyncModel, retry: ts.RetryPolicy) -> list[Any]:
    calls = [model.infer(MILLIS=[150], retry=retry) for _ in range(BURST)]
    return list(await asyncio.gather(*calls, return_exceptions=True))


def _check_refusals(outcomes: list[Any], protocol: str) -> None:
    refused = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert refused, "a burst on a queue of one should have been refused at least once"
    for error in refused:
        assert isinstance(error, ts.ServerOverloadedError), repr(error)
        assert error.status == ("UNAVAILABLE" if protocol == "grpc" else 503)
        assert error.retryable
        assert error.model == "busy"
        assert "queue" in str(error).lower()
    for outcome in outcomes:
        if not isinstance(outcome, BaseException):
            assert outcome["MILLIS_OUT"].tolist() == [[150]]


def _check_all_succeeded(outcomes: list[Any]) -> None:
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert errors == []
    for outcome in outcomes:
        assert outcome["MILLIS_OUT"].tolist() == [[150]]


def test_queue_full_without_retries_fails(url: str, protocol: str) -> None:
    with ts.Client(url) as client:
        outcomes = _sync_burst(client.model("busy"), ts.RetryPolicy.none())
    _check_refusals(outcomes, protocol)


def test_queue_full_is_retried_to_success(url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    with ts.Client(url) as client:
        outcomes = _sync_burst(client.model("busy"), PATIENT)
    _check_all_succeeded(outcomes)
    assert retry_records(caplog), "the burst should have needed retries"


async def test_queue_full_without_retries_fails_async(url: str, protocol: str) -> None:
    async with ts.AsyncClient(url) as client:
        outcomes = await _async_burst(await client.model("busy"), ts.RetryPolicy.none())
    _check_refusals(outcomes, protocol)


async def test_queue_full_is_retried_to_success_async(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    async with ts.AsyncClient(url) as client:
        outcomes = await _async_burst(await client.model("busy"), PATIENT)
    _check_all_succeeded(outcomes)
    assert retry_records(caplog), "the burst should have needed retries"


def test_queue_full_is_retried_with_client_policy(make_client: Any) -> None:
    # The client's own policy (not a per-call one) applies to infer too; all four transports.
    model = make_client(retry=PATIENT).model("busy")
    outcomes = _sync_burst(model, PATIENT)
    _check_all_succeeded(outcomes)


# Recovery after the server restarts: a server of its own, on the same ports


@pytest.fixture(scope="module")
def restart_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repository: Path = tmp_path_factory.mktemp("restart_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    with LocalServer(repository) as running:
        yield running


@pytest.fixture
def restart_client(
    restart_server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    policy = ts.RetryPolicy(max_attempts=10, initial_backoff=0.05, max_backoff=0.2, deadline=10)
    with client_for(
        restart_server, protocol, mode, loop_thread, retry=policy, timeout=10.0
    ) as client:
        yield client


def test_recovers_after_server_restart(restart_server: LocalServer, restart_client: Any) -> None:
    model = restart_client.model("add_sub")
    inputs: dict[str, Any] = {"INPUT0": np.arange(4, dtype=np.float32), "INPUT1": np.ones(4)}
    assert model.infer(**inputs)["OUTPUT0"].tolist() == [1.0, 2.0, 3.0, 4.0]
    urls = (restart_server.grpc_url, restart_server.http_url)
    restart_server.kill()
    try:
        # While it is down: an SDK error, not a raw transport exception.
        with pytest.raises(ts.TritonConnectionError):
            model.infer(**inputs, retry=ts.RetryPolicy.none())
        assert restart_client.is_ready() is False
    finally:
        restart_server.restart()
    assert (restart_server.grpc_url, restart_server.http_url) == urls
    # Same client, same handle: the retry policy bridges any stale connection.
    assert model.infer(**inputs)["OUTPUT1"].tolist() == [-1.0, 0.0, 1.0, 2.0]
    assert restart_client.is_ready() is True


# Large answers over gRPC


def test_answer_larger_than_grpc_default_limit(client: Any) -> None:
    # 3 million float32 zeros: 12 MB, three times gRPC's default 4 MiB receive limit.
    result = client.model("zeros").infer(COUNT=[3_000_000])
    out = result["OUT"]
    assert out.shape == (3_000_000,)
    assert out.dtype == np.float32
    assert not out.any()
