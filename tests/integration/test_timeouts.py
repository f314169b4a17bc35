"""Timeouts, on grpc/http x sync/async: per call, per client, overridden, off; never retried.

The ``sleep`` model sleeps SECONDS before answering. A timed-out request still runs on
the server (Triton does not cancel it), so the bounds below are only on the client side.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from ._relay import Relay
from .conftest import close_client, open_client

# Generous functional bounds: a 0.2 s timeout against a 1 s model must fail long
# before the model would have answered.
QUICKLY = 0.8


def retry_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "triton_sdk" and record.levelno == logging.INFO
    ]


def test_per_call_timeout(client: Any) -> None:
    model = client.model("sleep")
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError) as caught:
        model.infer(SECONDS=[1.0], timeout=0.2)
    elapsed = time.monotonic() - started
    assert elapsed < QUICKLY
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.model == "sleep"


def test_per_client_timeout(make_client: Any) -> None:
    model = make_client(timeout=0.2).model("sleep")
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError):
        model.infer(SECONDS=[1.0])
    assert time.monotonic() - started < QUICKLY


def test_per_call_timeout_overrides_client_default(make_client: Any) -> None:
    model = make_client(timeout=0.2).model("sleep")
    result = model.infer(SECONDS=[0.5], timeout=5.0)
    assert result["SLEPT"].tolist() == [0.5]


def test_timeout_none_means_no_timeout(make_client: Any) -> None:
    # None on the call lifts the client's 0.2 s default ...
    model = make_client(timeout=0.2).model("sleep")
    assert model.infer(SECONDS=[0.5], timeout=None)["SLEPT"].tolist() == [0.5]
    # ... and None on the client means no default at all.
    unbounded = make_client(timeout=None).model("sleep")
    assert unbounded.infer(SECONDS=[0.5])["SLEPT"].tolist() == [0.5]


def test_timed_out_request_is_not_retried(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    policy = ts.RetryPolicy(max_attempts=5, initial_backoff=0.01, jitter=False)
    model = make_client(retry=policy).model("sleep")
    caplog.clear()
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError):
        model.infer(SECONDS=[1.0], timeout=0.2)
    # One attempt: five would take at least a second.
    assert time.monotonic() - started < QUICKLY
    assert retry_records(caplog) == []


def test_timed_out_request_is_not_retried_with_per_call_policy(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    model = client.model("sleep")
    caplog.clear()
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError):
        model.infer(
            SECONDS=[1.0],
            timeout=0.2,
            retry=ts.RetryPolicy(max_attempts=5, initial_backoff=0.01, jitter=False),
        )
    assert time.monotonic() - started < QUICKLY
    assert retry_records(caplog) == []


# wait_until_ready against a server that never answers


@pytest.fixture
def dead_client(protocol: str, mode: str, loop_thread: LoopThread) -> Iterator[Any]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scheme = "grpc" if protocol == "grpc" else "http"
    client = open_client(f"{scheme}://127.0.0.1:{port}", mode, loop_thread)
    yield client
    close_client(client, loop_thread)


def test_wait_until_ready_times_out(dead_client: Any) -> None:
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError):
        dead_client.wait_until_ready(timeout=0.5)
    assert time.monotonic() - started < 3.0


def test_wait_until_ready_on_running_server(client: Any) -> None:
    client.wait_until_ready(timeout=10.0)


def test_waiting_for_a_model_not_in_the_repository_says_so(client: Any) -> None:
    with pytest.raises(
        ts.TritonTimeoutError,
        match=r"model 'nope' at .* after 0.3s \(last: it is not in the model repository\)",
    ) as waited:
        client.wait_until_ready(timeout=0.3, model="nope")
    assert waited.value.model == "nope"


def test_wait_until_ready_waits_through_a_forwarder_whose_server_is_not_up_yet(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    # A port forwarder (docker, kubectl port-forward) accepts and closes connections
    # while the server behind it starts: gRPC reads that as "wrong port or TLS", which
    # must not end the wait. The timeout names the last probe's failure.
    port = server.grpc_port if protocol == "grpc" else server.http_port
    with Relay("127.0.0.1", port, mode="close") as forwarder:
        client = open_client(f"{protocol}://{forwarder.address}", mode, loop_thread)
        try:
            with pytest.raises(
                ts.TritonTimeoutError, match=r"not ready after 0.5s \(last: "
            ) as caught:
                client.wait_until_ready(timeout=0.5)
            assert isinstance(caught.value.__cause__, ts.TritonConnectionError)
            opening = threading.Timer(0.5, setattr, (forwarder, "mode", "pass"))
            opening.start()
            started = time.monotonic()
            client.wait_until_ready(timeout=20)
            assert time.monotonic() - started >= 0.4
            opening.join()
        finally:
            close_client(client, loop_thread)


def test_wait_until_ready_raises_at_once_on_a_port_of_the_other_protocol(
    server: LocalServer, mode: str, loop_thread: LoopThread
) -> None:
    # An HTTP client on the gRPC port: no wait heals that.
    client = open_client(f"http://127.0.0.1:{server.grpc_port}", mode, loop_thread)
    try:
        started = time.monotonic()
        with pytest.raises(ts.TritonConnectionError, match="answered in HTTP/2"):
            client.wait_until_ready(timeout=30)
        assert time.monotonic() - started < 10
        with pytest.raises(ts.TritonConnectionError, match="answered in HTTP/2") as caught:
            client.server_metadata()
        # A gRPC port runs no HTTP request: nothing ran, whatever went out.
        assert not caught.value.may_have_run
    finally:
        close_client(client, loop_thread)


def test_the_metadata_read_before_the_first_http_inference_shares_its_timeout(
    server: LocalServer, mode: str, loop_thread: LoopThread
) -> None:
    # The read (which chooses the body's format) had a whole timeout of its own, and the
    # inference another: a first call could take twice its timeout.
    with Relay("127.0.0.1", server.http_port, mode="delay", delay=0.15) as slow:
        client = open_client(f"http://{slow.address}", mode, loop_thread, retry=None)
        try:
            model = client.model("add_sub")  # (the spec read: 0.3 s and more each way)
            started = time.monotonic()
            with pytest.raises(ts.TritonTimeoutError) as caught:
                model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1], timeout=0.45)
            assert time.monotonic() - started < 0.45 + 0.3
            assert caught.value.model == "add_sub"
            assert "within 0.45 s" in str(caught.value)  # (the call's, not what was left)
        finally:
            close_client(client, loop_thread)
