"""Calls under a RetryPolicy, through both clients' call path, on a MockTransport."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
import pytest
import tenacity

import triton_sdk as ts
from triton_sdk import _async_client, _client
from triton_sdk._errors import classify_status, classify_transport_error
from triton_sdk._retry import TokenBucket, attempt_timeout, should_retry
from triton_sdk._transports._errors import grpc_error
from triton_sdk.testing import MockTransport

from .._event_stream import serving

MODES = ["sync", "async"]

FAST = ts.RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002, jitter=False)


def unavailable(number: int = 0) -> ts.TritonError:
    return ts.TritonConnectionError(
        f"connection refused #{number}", model="m", request_id="r1", retryable=True
    )


class FakeAttempt:
    """Fails with the given errors in turn, then returns ``result``; records each timeout."""

    def __init__(
        self,
        errors: list[BaseException] | Callable[[int], BaseException],
        result: str = "ok",
        sleep: float = 0.0,
    ) -> None:
        self.errors = errors
        self.result = result
        self.sleep = sleep
        self.timeouts: list[float | None] = []
        self.raised: list[BaseException] = []

    def __call__(self, timeout: float | None) -> str:
        self.timeouts.append(timeout)
        if self.sleep:
            time.sleep(self.sleep)
        number = len(self.timeouts)
        if callable(self.errors):
            error = self.errors(number)
        elif number <= len(self.errors):
            error = self.errors[number - 1]
        else:
            return self.result
        self.raised.append(error)
        raise error

    @property
    def calls(self) -> int:
        return len(self.timeouts)


async def run(
    mode: str,
    attempt: FakeAttempt,
    *,
    policy: ts.RetryPolicy | None = FAST,
    timeout: float | None = 5.0,
    idempotent: bool = True,
    **client_options: Any,
) -> Any:
    """Call the client's ``server_metadata`` (idempotent) or ``load_model`` (not), each
    attempt answered by ``attempt``; the answer is what ``attempt`` returned."""

    def handler(op: Any, ctx: Any) -> Any:
        return {"name": attempt(ctx.timeout)}

    options: dict[str, Any] = {"transport": MockTransport(handler), "retry": policy}
    options["timeout"] = timeout
    options.update(client_options)
    if mode == "sync":
        with ts.Client("grpc://test", **options) as client:
            if idempotent:
                return client.server_metadata().name
            client.load_model("m")
            return attempt.result
    async with ts.AsyncClient("grpc://test", **options) as aclient:
        if idempotent:
            return (await aclient.server_metadata()).name
        await aclient.load_model("m")
        return attempt.result


@pytest.fixture
def no_tenacity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make building any retry machinery fail: the first attempt must not need it."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("retry machinery built for a call that needed no retry")

    monkeypatch.setattr(_client, "Retrying", refuse)
    monkeypatch.setattr(_async_client, "AsyncRetrying", refuse)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("no_tenacity")
async def test_success_on_first_try_creates_no_retries(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="triton_sdk")
    attempt = FakeAttempt([])
    assert await run(mode, attempt) == "ok"
    assert attempt.timeouts == [5.0]
    logged = [record.getMessage() for record in caplog.records if record.name == "triton_sdk"]
    assert [message.split(" ")[0] for message in logged] == ["sending", "server_metadata"]
    assert not [message for message in logged if "retry" in message or "resend" in message]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("no_tenacity")
async def test_non_retryable_failure_creates_no_retries(mode: str) -> None:
    error = ts.InferenceError("model failed", status="INTERNAL")
    attempt = FakeAttempt([error])
    with pytest.raises(ts.InferenceError) as info:
        await run(mode, attempt)
    assert info.value is error
    assert attempt.calls == 1


@pytest.mark.parametrize("mode", MODES)
async def test_retryable_failure_then_success(mode: str) -> None:
    attempt = FakeAttempt([unavailable(1), unavailable(2)], result="done")
    assert await run(mode, attempt) == "done"
    assert attempt.calls == 3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("max_attempts", [2, 3, 5])
async def test_retries_up_to_max_attempts_then_reraises_the_last_error(
    mode: str, max_attempts: int
) -> None:
    policy = ts.RetryPolicy(
        max_attempts=max_attempts, initial_backoff=0.001, max_backoff=0.002, jitter=False
    )
    attempt = FakeAttempt(unavailable)
    with pytest.raises(ts.TritonConnectionError) as info:
        await run(mode, attempt, policy=policy)
    assert attempt.calls == max_attempts
    assert info.value is attempt.raised[-1]
    assert not isinstance(info.value, tenacity.RetryError)


@pytest.mark.parametrize("mode", MODES)
async def test_max_attempts_1_is_one_try(mode: str) -> None:
    attempt = FakeAttempt(unavailable)
    with pytest.raises(ts.TritonConnectionError):
        await run(mode, attempt, policy=ts.RetryPolicy.none())
    assert attempt.calls == 1


@pytest.mark.parametrize("mode", MODES)
async def test_retry_none_on_the_client_is_one_try(mode: str) -> None:
    attempt = FakeAttempt(unavailable)
    with pytest.raises(ts.TritonConnectionError):
        await run(mode, attempt, policy=None)
    assert attempt.calls == 1


@pytest.mark.parametrize("mode", MODES)
async def test_retry_none_on_a_call_is_one_try_under_a_retrying_client(mode: str) -> None:
    spec = ts.ModelSpec(
        name="m",
        max_batch_size=0,
        inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
        outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(1,))},
    )
    attempt = FakeAttempt(unavailable)
    mock = MockTransport(lambda op, ctx: attempt(ctx.timeout), models=[spec])
    if mode == "sync":
        with ts.Client("grpc://test", transport=mock, retry=FAST) as client:
            model = client.model("m")
            with pytest.raises(ts.TritonConnectionError):
                model.infer(X=[1.0], retry=None)
            assert attempt.calls == 1
            with pytest.raises(ts.TritonConnectionError):
                model.infer(X=[1.0])  # the client's policy still retries
    else:
        async with ts.AsyncClient("grpc://test", transport=mock, retry=FAST) as aclient:
            amodel = await aclient.model("m")
            with pytest.raises(ts.TritonConnectionError):
                await amodel.infer(X=[1.0], retry=None)
            assert attempt.calls == 1
            with pytest.raises(ts.TritonConnectionError):
                await amodel.infer(X=[1.0])
    assert attempt.calls == 1 + FAST.max_attempts


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "error",
    [
        ts.InferenceError("model failed", status="INTERNAL"),
        ts.InvalidInputError("bad input"),
        ts.ModelNotFoundError("unknown model", status=404),
        classify_status(400, "unexpected shape for input 'IN'"),
        classify_status("UNAVAILABLE", "Ssl handshake failed: SSL_ERROR_SSL"),
        classify_status("UNAVAILABLE", "This protocol is restricted, expecting header 'k'"),
    ],
    ids=["internal", "invalid-input", "not-found", "http-400", "tls", "restricted"],
)
async def test_non_retryable_errors_are_tried_once(mode: str, error: ts.TritonError) -> None:
    attempt = FakeAttempt([error, error, error])
    with pytest.raises(type(error)) as info:
        await run(mode, attempt)
    assert info.value is error
    assert attempt.calls == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "error",
    [
        classify_status("DEADLINE_EXCEEDED", "Deadline Exceeded"),
        classify_transport_error(TimeoutError("timed out")),
    ],
    ids=["grpc-deadline", "socket-timeout"],
)
async def test_timeouts_are_never_retried(mode: str, error: ts.TritonError) -> None:
    assert isinstance(error, ts.TritonTimeoutError)
    attempt = FakeAttempt([error, error, error])
    with pytest.raises(ts.TritonTimeoutError) as info:
        await run(mode, attempt)
    assert info.value is error
    assert attempt.calls == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "error",
    [
        classify_status("UNAVAILABLE", "failed to connect to all addresses"),
        classify_status(503, "Exceeds maximum queue size"),
    ],
    ids=["unreachable", "queue-full"],
)
async def test_non_idempotent_calls_are_tried_once(mode: str, error: ts.TritonError) -> None:
    assert error.retryable
    attempt = FakeAttempt([error, error, error])
    with pytest.raises(type(error)) as info:
        await run(mode, attempt, idempotent=False)
    assert info.value.message == error.message
    assert info.value.model == "m"  # (the mock's copy names the call's model)
    assert attempt.calls == 1


@pytest.mark.parametrize("mode", MODES)
async def test_classified_unavailable_answers_are_retried(mode: str) -> None:
    errors: list[BaseException] = [
        classify_status("UNAVAILABLE", "failed to connect to all addresses"),
        classify_status(503, "Exceeds maximum queue size"),
    ]
    attempt = FakeAttempt(errors)
    assert await run(mode, attempt) == "ok"
    assert attempt.calls == 3


@pytest.mark.parametrize("mode", MODES)
async def test_other_exceptions_propagate_unchanged(mode: str) -> None:
    bug = RuntimeError("a bug in the attempt")
    attempt = FakeAttempt([unavailable(1), bug])
    with pytest.raises(RuntimeError) as info:
        await run(mode, attempt)
    assert info.value is bug
    assert attempt.calls == 2


@pytest.mark.parametrize("mode", MODES)
async def test_a_non_retryable_error_after_retries_ends_the_call(mode: str) -> None:
    final = ts.InferenceError("model failed", status="INTERNAL")
    attempt = FakeAttempt([unavailable(1), final, unavailable(3)])
    with pytest.raises(ts.InferenceError) as info:
        await run(mode, attempt, policy=ts.RetryPolicy(max_attempts=5, initial_backoff=0.001))
    assert info.value is final
    assert attempt.calls == 2


@pytest.mark.parametrize("mode", MODES)
async def test_backoff_is_waited_between_attempts(mode: str) -> None:
    policy = ts.RetryPolicy(max_attempts=3, initial_backoff=0.05, multiplier=2.0, jitter=False)
    attempt = FakeAttempt(unavailable)
    start = time.monotonic()
    with pytest.raises(ts.TritonConnectionError):
        await run(mode, attempt, policy=policy)
    assert time.monotonic() - start >= 0.05 + 0.1 - 0.01


# The deadline


DEADLINE = 0.3


def deadline_policy(**overrides: Any) -> ts.RetryPolicy:
    kwargs: dict[str, Any] = {
        "max_attempts": 10_000,
        "initial_backoff": 0.02,
        "max_backoff": 0.02,
        "jitter": False,
        "deadline": DEADLINE,
    }
    kwargs.update(overrides)
    return ts.RetryPolicy(**kwargs)


@pytest.mark.parametrize("mode", MODES)
async def test_deadline_bounds_the_whole_call(mode: str) -> None:
    attempt = FakeAttempt(unavailable, sleep=0.005)
    start = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError) as info:
        await run(mode, attempt, policy=deadline_policy())
    elapsed = time.monotonic() - start
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + 2.0
    assert 2 <= attempt.calls < 100
    # The last failure is kept as the cause, and the error says what it is about.
    assert info.value.__cause__ is attempt.raised[-1]
    assert isinstance(info.value, TimeoutError)
    assert info.value.model == "m"
    assert info.value.request_id == "r1"
    assert "connection refused" in str(info.value)


@pytest.mark.parametrize("mode", MODES)
async def test_a_backoff_that_oversleeps_the_deadline_ends_on_the_last_failure(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop rule let a retry start, but the sleep ran past the deadline: the call
    # still ends as a timeout caused by the last failure, naming the request.
    attempts = iter(range(100))

    def late_second_attempt(timeout: float | None, deadline_at: float | None, now: float) -> float:
        if next(attempts) >= 1:
            raise ts.TritonTimeoutError("the retry deadline passed before the next attempt")
        return 1.0

    monkeypatch.setattr("triton_sdk._call.attempt_timeout", late_second_attempt)
    attempt = FakeAttempt(unavailable)
    with pytest.raises(ts.TritonTimeoutError) as info:
        await run(mode, attempt, policy=deadline_policy())
    assert attempt.calls == 1
    assert info.value.__cause__ is attempt.raised[-1]
    assert info.value.model == "m"
    assert "connection refused" in str(info.value)


@pytest.mark.parametrize("mode", MODES)
async def test_deadline_cuts_each_attempt_timeout(mode: str) -> None:
    attempt = FakeAttempt(unavailable, sleep=0.005)
    with pytest.raises(ts.TritonTimeoutError):
        await run(mode, attempt, policy=deadline_policy(), timeout=5.0)
    timeouts = attempt.timeouts
    assert all(each is not None for each in timeouts)
    values = [each for each in timeouts if each is not None]
    assert DEADLINE - 0.1 < values[0] <= DEADLINE
    assert all(0 < each <= DEADLINE for each in values)
    assert values == sorted(values, reverse=True)  # what is left only shrinks
    assert values[-1] < values[0]


@pytest.mark.parametrize("mode", MODES)
async def test_deadline_without_call_timeout_gives_the_remaining_time(mode: str) -> None:
    attempt = FakeAttempt([unavailable(1)])
    assert await run(mode, attempt, policy=deadline_policy(), timeout=None) == "ok"
    first, second = attempt.timeouts
    assert first is not None
    assert second is not None
    assert DEADLINE - 0.1 < first <= DEADLINE
    assert second < first


@pytest.mark.parametrize("mode", MODES)
async def test_shorter_call_timeout_is_kept_under_a_deadline(mode: str) -> None:
    attempt = FakeAttempt([unavailable(1)])
    assert await run(mode, attempt, policy=deadline_policy(deadline=30.0), timeout=2.0) == "ok"
    assert attempt.timeouts == [2.0, 2.0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("timeout", [5.0, None])
async def test_without_deadline_each_attempt_gets_the_call_timeout(
    mode: str, timeout: float | None
) -> None:
    attempt = FakeAttempt(unavailable)
    with pytest.raises(ts.TritonConnectionError):
        await run(mode, attempt, timeout=timeout)
    assert attempt.timeouts == [timeout] * 3


@pytest.mark.parametrize("mode", MODES)
async def test_max_attempts_before_the_deadline_reraises_the_last_error(mode: str) -> None:
    policy = ts.RetryPolicy(max_attempts=3, initial_backoff=0.001, jitter=False, deadline=30.0)
    attempt = FakeAttempt(unavailable)
    with pytest.raises(ts.TritonConnectionError) as info:
        await run(mode, attempt, policy=policy)
    assert not isinstance(info.value, ts.TritonTimeoutError)
    assert info.value is attempt.raised[-1]
    assert attempt.calls == 3


# Logging


@pytest.mark.parametrize("mode", MODES)
async def test_retries_are_logged(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    attempt = FakeAttempt([unavailable(1), unavailable(2)])
    assert await run(mode, attempt) == "ok"
    records = [record for record in caplog.records if record.name == "triton_sdk"]
    assert len(records) == 2
    for number, record in enumerate(records, start=1):
        message = record.getMessage()
        assert "server_metadata" in message
        assert f"connection refused #{number}" in message
        assert record.levelno >= logging.INFO


@pytest.mark.parametrize("mode", MODES)
async def test_no_retry_log_for_errors_that_are_not_retried(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="triton_sdk")
    attempt = FakeAttempt([ts.InferenceError("model failed")])
    with pytest.raises(ts.InferenceError):
        await run(mode, attempt)
    logged = [record.getMessage() for record in caplog.records if record.name == "triton_sdk"]
    assert logged[1:] == ["server_metadata failed: InferenceError: model failed"]  # no retry


# The pure helpers


@pytest.mark.parametrize(
    ("error", "idempotent", "expected"),
    [
        (unavailable(), True, True),
        (unavailable(), False, False),
        (ts.InferenceError("x"), True, False),
        (ConnectionRefusedError(), True, False),  # not yet classified: not the SDK's
    ],
)
def test_should_retry(error: BaseException, idempotent: bool, expected: bool) -> None:
    assert should_retry(error, idempotent=idempotent) is expected


def test_attempt_timeout() -> None:
    assert attempt_timeout(5.0, None, 100.0) == 5.0
    assert attempt_timeout(None, None, 100.0) is None
    assert attempt_timeout(5.0, 102.0, 100.0) == 2.0
    assert attempt_timeout(1.0, 102.0, 100.0) == 1.0
    assert attempt_timeout(None, 102.0, 100.0) == 2.0
    with pytest.raises(ts.TritonTimeoutError):
        attempt_timeout(5.0, 100.0, 100.0)


# Failures after the request went out


@pytest.mark.parametrize("mode", MODES)
async def test_a_retry_after_the_request_went_out_is_a_warning(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    lost = ts.TritonConnectionError("connection reset", retryable=True, may_have_run=True)
    attempt = FakeAttempt([lost])
    assert await run(mode, attempt) == "ok"
    (record,) = [record for record in caplog.records if record.name == "triton_sdk"]
    assert record.levelno == logging.WARNING
    assert "may run it twice" in record.getMessage()


@pytest.mark.parametrize("mode", MODES)
async def test_a_retry_before_the_request_went_out_is_an_info(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    attempt = FakeAttempt([unavailable(1)])
    assert await run(mode, attempt) == "ok"
    (record,) = [record for record in caplog.records if record.name == "triton_sdk"]
    assert record.levelno == logging.INFO


@pytest.mark.parametrize(
    ("message", "may_have_run", "retryable"),
    [
        ("failed to connect to all addresses; last error: connection refused", False, True),
        ("recvmsg:Connection reset by peer", True, True),
        ("Socket closed", True, True),
        # A name that does not resolve: nothing was sent (grpcio 1.85's words).
        (
            "errors resolving nosuchhost.invalid:8001: [field:hostname lookup error:address "
            "lookup failed for nosuchhost.invalid:8001: Domain name not found]",
            False,
            True,
        ),
        # Closed before gRPC could start (an HTTP port, a port forwarder): grpc sends a
        # request only once the server has answered the connection.
        (
            "failed to connect to all addresses; last error: UNAVAILABLE: Socket closed",
            False,
            False,
        ),
    ],
)
def test_grpc_unavailable_says_whether_the_request_may_have_run(
    message: str, may_have_run: bool, retryable: bool
) -> None:
    class Unavailable(Exception):
        def code(self) -> Any:
            return type("Code", (), {"name": "UNAVAILABLE"})()

        def details(self) -> str:
            return message

    error = grpc_error(Unavailable(), None)
    assert isinstance(error, ts.TritonConnectionError)
    assert error.retryable is retryable
    assert error.may_have_run is may_have_run


def test_a_grpc_status_without_details_reads_as_its_code() -> None:
    # The message was grpc's repr: "<_InactiveRpcError of RPC that terminated with: ...".
    class Cancelled(Exception):
        def code(self) -> Any:
            return type("Code", (), {"name": "CANCELLED"})()

        def details(self) -> str:
            return ""

        def __str__(self) -> str:
            return "<_InactiveRpcError of RPC that terminated with: ...>"

    error = grpc_error(Cancelled(), None)
    assert error.message == "the call ended with CANCELLED, without a message"
    assert error.status == "CANCELLED"


def test_timeouts_may_have_run() -> None:
    assert classify_status("DEADLINE_EXCEEDED", "Deadline Exceeded").may_have_run
    timeout = classify_transport_error(TimeoutError("timed out"))
    assert timeout is not None
    assert timeout.may_have_run


# The retry budget: retries of all calls together


def test_token_bucket_spends_its_reserve_then_earns_from_calls() -> None:
    bucket = TokenBucket(ts.RetryBudget(ratio=0.1, reserve=3))
    assert [bucket.withdraw() for _ in range(4)] == [True, True, True, False]
    bucket.calls += 9
    assert not bucket.withdraw()  # 0.9 of a retry
    bucket.calls += 1
    assert bucket.withdraw()
    bucket.calls += 10_000  # never more than the reserve at once
    assert [bucket.withdraw() for _ in range(4)] == [True, True, True, False]


@pytest.mark.parametrize("mode", MODES)
async def test_a_spent_budget_stops_retries_across_calls(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    policy = ts.RetryPolicy(max_attempts=10, initial_backoff=0.001, jitter=False)
    attempt = FakeAttempt(unavailable)

    def handler(op: Any, ctx: Any) -> Any:
        return {"name": attempt(ctx.timeout)}

    options: dict[str, Any] = {
        "transport": MockTransport(handler),
        "retry": policy,
        "retry_budget": ts.RetryBudget(ratio=0, reserve=3),
    }
    client: Any = ts.Client("grpc://test", **options) if mode == "sync" else None
    aclient = ts.AsyncClient("grpc://test", **options) if mode == "async" else None

    async def call() -> None:
        if aclient is not None:
            await aclient.server_metadata()
        else:
            client.server_metadata()

    for expected_calls in (4, 5, 6):  # 1 + the 3 retries of the reserve, then no retries
        with pytest.raises(ts.TritonConnectionError) as info:
            await call()
        assert info.value is attempt.raised[-1]
        assert attempt.calls == expected_calls
    assert "retry budget is spent" in caplog.text


@pytest.mark.parametrize("mode", MODES)
async def test_no_budget_means_no_bound(mode: str) -> None:
    policy = ts.RetryPolicy(max_attempts=6, initial_backoff=0.001, jitter=False)
    attempt = FakeAttempt(unavailable)
    for _ in range(3):
        with pytest.raises(ts.TritonConnectionError):
            await run(mode, attempt, policy=policy, retry_budget=None)
    assert attempt.calls == 18


def test_retry_budget_is_checked() -> None:
    with pytest.raises(ts.InvalidInputError, match="retry_budget"):
        ts.Client("grpc://test", retry_budget=0.1)  # type: ignore[arg-type]
    with pytest.raises(ts.InvalidInputError):
        ts.RetryBudget(ratio=-1)


def test_numbers_computed_with_numpy_are_taken_as_their_values() -> None:
    # As a timeout is: np.float32(2.0) was refused ("must be a number, got float32").
    policy = ts.RetryPolicy(
        max_attempts=np.int64(4),  # type: ignore[arg-type]
        initial_backoff=np.float32(0.5),  # type: ignore[arg-type]
        max_backoff=np.float64(2.0),
        multiplier=np.int32(3),  # type: ignore[arg-type]
        deadline=np.float32(2.0),  # type: ignore[arg-type]
    )
    assert policy == ts.RetryPolicy(
        max_attempts=4, initial_backoff=0.5, max_backoff=2.0, multiplier=3, deadline=2.0
    )
    assert type(policy.max_attempts) is int
    assert type(policy.deadline) is float
    assert ts.RetryPolicy(deadline=np.float64(np.inf)).deadline is None
    budget = ts.RetryBudget(ratio=np.float32(0.5), reserve=np.int8(2))  # type: ignore[arg-type]
    assert (budget.ratio, budget.reserve) == (0.5, 2)
    for wrong in (np.float64(2.0), np.bool_(True)):
        with pytest.raises(ts.InvalidInputError, match="max_attempts must be an int"):
            ts.RetryPolicy(max_attempts=wrong)  # type: ignore[arg-type]


# Calls logged at DEBUG


def test_a_client_made_at_debug_logs_its_calls_without_header_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="triton_sdk")
    mock = MockTransport(lambda op, ctx: {"name": "triton"})
    headers = {"authorization": "Bearer s3cret"}
    with ts.Client("grpc://test", transport=mock, headers=headers) as client:
        client.server_metadata()
    messages = [record.getMessage() for record in caplog.records]
    assert (
        "sending server_metadata to grpc://test:8001 (attempt 1, timeout 60.0, "
        "headers ['authorization'])" in messages
    )
    assert any(message.startswith("server_metadata answered in ") for message in messages)
    assert "s3cret" not in caplog.text


def test_a_call_that_ends_without_an_answer_is_logged_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="triton_sdk")
    spec = ts.ModelSpec(
        name="talker",
        inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
        outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(1,))},
        decoupled=True,
    )
    mock = MockTransport(lambda op, ctx: iter(()), models=[spec])
    with ts.Client("grpc://test", transport=mock) as client:
        model = client.model("talker")
        caplog.clear()
        assert list(model.stream(X=[1.0])) == []
    messages = [record.getMessage() for record in caplog.records]
    assert messages[1:] == ["stream 'talker' ended without an answer"]


def test_a_client_made_without_debug_has_no_logging_hook() -> None:
    logging.getLogger("triton_sdk").setLevel(logging.WARNING)
    with ts.Client("grpc://test", transport=MockTransport()) as client:
        assert client._settings.hooks == ()


class Gateway(BaseHTTPRequestHandler):
    """A gateway whose server is away: 503 to every health check, each after 50 ms."""

    protocol_version = "HTTP/1.1"
    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        time.sleep(0.05)
        body = b"no healthy upstream"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_gateways_503_to_a_health_check_is_retried_then_false() -> None:
    # HTTP answered False at once, where gRPC retries UNAVAILABLE under the policy.
    async def asynchronous(url: str) -> bool:
        async with ts.AsyncClient(url, retry=FAST) as client:
            return await client.is_live()

    for kind in ("sync", "async"):
        Gateway.requests = 0
        with serving(Gateway) as url:
            if kind == "async":
                assert asyncio.run(asynchronous(url)) is False
            else:
                with ts.Client(url, retry=FAST) as client:
                    assert client.is_live() is False
        assert Gateway.requests == 3, kind


def test_waiting_ends_with_why_the_server_was_not_ready_not_with_its_last_short_probe() -> None:
    # The last probe had what was left of the wait (0.01 s), so on any link slower than
    # that the error said "no answer within 0.01 s" instead of the gateway's answer.
    with (
        serving(Gateway) as url,
        ts.Client(url) as client,
        pytest.raises(ts.TritonTimeoutError) as caught,
    ):
        client.wait_until_ready(timeout=0.5)
    assert "no healthy upstream" in str(caught.value)
    assert "within 0.01" not in str(caught.value)


class KServeNotReady(BaseHTTPRequestHandler):
    """KServe's own answer for a model that is not ready: 503 with its error JSON."""

    protocol_version = "HTTP/1.1"
    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        body = b'{"error": "Model with name m is not ready."}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_servers_own_503_to_a_health_check_is_its_answer_not_retried() -> None:
    # KServe says "not ready" so: retrying it cost each poll 3 requests and the budget.
    KServeNotReady.requests = 0
    with serving(KServeNotReady) as url, ts.Client(url, retry=FAST) as client:
        assert client.is_model_ready("m") is False
    assert KServeNotReady.requests == 1
