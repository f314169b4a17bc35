"""What users rely on from both clients' public methods, on a MockTransport.

Every test body runs on :class:`ts.Client` and on :class:`ts.AsyncClient` (the ``mode``
fixture): calls go through :func:`resolve`, which awaits what the asyncio client returns
and drains streams, so one body serves both.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import attrs
import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops, testing
from triton_sdk._concurrency import MAX_CHUNKS_IN_FLIGHT
from triton_sdk.testing import MockTransport, result_of

from ._both import resolve

MODES = ("sync", "async")

FAST = ts.RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002, jitter=False)

CLIENT_HEADERS = {"X-Token": "client", "X-App": "shell"}
CALL_HEADERS = {"x-token": "call", "X-Extra": "1"}
MERGED_HEADERS = {"X-App": "shell", "x-token": "call", "X-Extra": "1"}


def tensor(name: str) -> ts.TensorSpec:
    return ts.TensorSpec(name=name, datatype="FP32", shape=(1,))


def spec(name: str, **options: Any) -> ts.ModelSpec:
    return ts.ModelSpec(
        name=name,
        max_batch_size=4,
        inputs={"X": tensor("X")},
        outputs={"Y": tensor("Y")},
        **options,
    )


DOUBLE = spec("double")
TALKER = spec("talker", decoupled=True)
COUNTER = spec("counter", sequence=True)
WRITER = ts.ModelSpec(  # a text model: chat and complete find its prompt and text
    name="writer",
    inputs={"PROMPT": ts.TensorSpec(name="PROMPT", datatype="BYTES", shape=(1,))},
    outputs={"TEXT": ts.TensorSpec(name="TEXT", datatype="BYTES", shape=(1,))},
)
MODELS = (DOUBLE, TALKER, COUNTER, WRITER)
TEMPLATE = "{{ messages[0].content }}"

CANNED: dict[type[Any], object] = {
    ops.GetServerMetadata: {"name": "triton", "version": "2.50.0", "extensions": []},
    ops.ListModels: [{"name": "double", "version": "1", "state": "READY"}],
    ops.LoadModel: None,
    ops.UnloadModel: None,
    ops.GetModelStatistics: [],
    ops.GetTraceSettings: {"trace_level": ["OFF"]},
    ops.UpdateTraceSettings: {"trace_level": ["OFF"]},
    ops.GetLogSettings: {"log_info": True},
    ops.UpdateLogSettings: {"log_info": True},
    ops.FetchMetrics: "",
    ops.GetSystemSharedMemoryStatus: [],
    ops.GetCudaSharedMemoryStatus: [],
    ops.Generate: {"text": "done"},
    ops.GenerateStream: [{"text": "a"}, {"text": "b"}],
}


def answer(op: Any, ctx: ts.CallContext) -> object:
    """A server for the models of MODELS: Y = 2 * X; streams answer X, X + 1, X + 2."""
    if isinstance(op, ops.InferRequest):
        x = op.inputs[0].array
        if op.outputs and op.outputs[0].class_count:
            return {"Y": np.array([["0.9:1:cat"]] * len(x), dtype=object)}
        return {"Y": x * 2}
    if isinstance(op, ops.StreamInfer):
        x = op.request.inputs[0].array
        return [result_of(op.request.model, {"Y": x + step}) for step in range(3)]
    return CANNED[type(op)]


def unavailable(number: int) -> ts.TritonError:
    return ts.TritonConnectionError(f"connection refused #{number}", retryable=True)


# One body for both clients


END = object()
"""What :func:`next_item` returns from an exhausted stream."""


async def next_item(stream: Any) -> Any:
    if isinstance(stream, AsyncIterator):
        return await anext(stream, END)
    return next(stream, END)


async def close(thing: Any) -> None:
    """``aclose()`` an asyncio client or stream, ``close()`` a blocking one."""
    closer = getattr(thing, "aclose", None) or thing.close
    await resolve(closer())


Connect = Callable[..., tuple[Any, MockTransport]]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def connect(mode: str) -> AsyncIterator[Connect]:
    """``connect(handler, models=..., transport=..., **client_options)`` -> (client, mock);
    the clients are closed after the test."""
    opened: list[Any] = []

    def open_client(
        handler: Any = answer,
        *,
        models: tuple[ts.ModelSpec, ...] = MODELS,
        transport: MockTransport | None = None,
        **options: Any,
    ) -> tuple[Any, MockTransport]:
        mock = transport or MockTransport(handler, models=models)
        kind = ts.Client if mode == "sync" else ts.AsyncClient
        client = kind("grpc://test", transport=mock, **options)
        opened.append(client)
        return client, mock

    yield open_client
    for client in opened:
        await close(client)


class Shell(NamedTuple):
    """A client with client headers, and a handle on each model of MODELS."""

    client: Any
    mock: MockTransport
    double: Any
    talker: Any
    counter: Any
    writer: Any


@pytest.fixture
async def shell(connect: Connect) -> Shell:
    client, mock = connect(headers=CLIENT_HEADERS)
    handles = [await resolve(client.model(spec.name)) for spec in MODELS]
    mock.calls.clear()
    return Shell(client, mock, *handles)


def headers_seen(mock: MockTransport) -> list[dict[str, str]]:
    return [dict(call.ctx.headers) for call in mock.calls]


def ops_sent(mock: MockTransport) -> list[object]:
    return [call.op for call in mock.calls]


def requests_sent(mock: MockTransport) -> list[ops.InferRequest]:
    """The inference requests that reached the transport (and nothing else did)."""
    requests = [call.op for call in mock.calls if isinstance(call.op, ops.InferRequest)]
    assert len(requests) == len(mock.calls)
    return requests


def batch_sizes(mock: MockTransport) -> list[int]:
    return sorted(len(request.inputs[0].array) for request in requests_sent(mock))


Headers = Mapping[str, str] | None

# Every kind of call that reaches the server, with the call's own headers.
CALLS: dict[str, Callable[[Shell, Headers], object]] = {
    "is_live": lambda s, h: s.client.is_live(headers=h),
    "is_ready": lambda s, h: s.client.is_ready(headers=h),
    "is_model_ready": lambda s, h: s.client.is_model_ready("double", headers=h),
    "wait_until_ready": lambda s, h: s.client.wait_until_ready(1.0, model="double", headers=h),
    "server_metadata": lambda s, h: s.client.server_metadata(headers=h),
    "models": lambda s, h: s.client.models(headers=h),
    "model": lambda s, h: s.client.model("double", headers=h),
    "model_spec": lambda s, h: s.client.model_spec("double", headers=h),
    "model_config": lambda s, h: s.client.model_config("double", headers=h),
    "load_model": lambda s, h: s.client.load_model("double", headers=h),
    "unload_model": lambda s, h: s.client.unload_model("double", headers=h),
    "model_statistics": lambda s, h: s.client.model_statistics("double", headers=h),
    "trace_settings": lambda s, h: s.client.trace_settings(headers=h),
    "update_trace_settings": lambda s, h: s.client.update_trace_settings(rate=2, headers=h),
    "log_settings": lambda s, h: s.client.log_settings(headers=h),
    "update_log_settings": lambda s, h: s.client.update_log_settings(info=True, headers=h),
    "metrics": lambda s, h: s.client.metrics(headers=h),
    "system_shared_memory_status": lambda s, h: s.client.system_shared_memory_status(headers=h),
    "cuda_shared_memory_status": lambda s, h: s.client.cuda_shared_memory_status(headers=h),
    "infer": lambda s, h: s.double.infer(X=[[1.0]], headers=h),
    "infer_split_batch": lambda s, h: s.double.infer(X=[[1.0]] * 6, headers=h),
    "infer_sample": lambda s, h: s.double.infer_sample(X=[1.0], headers=h),
    "classify": lambda s, h: s.double.classify(X=[[1.0]], headers=h),
    "stream": lambda s, h: s.talker.stream(X=[[1.0]], headers=h),
    "generate": lambda s, h: s.double.generate(X=1.0, headers=h),
    "generate_stream": lambda s, h: s.talker.generate_stream(X=1.0, headers=h),
    "map": lambda s, h: s.double.map([{"X": [1.0]}] * 5, batch_size=2, headers=h),
    "chat": lambda s, h: s.writer.chat(
        [{"role": "user", "content": "hi"}], chat_template=TEMPLATE, headers=h
    ),
    "chat_stream": lambda s, h: s.writer.chat_stream(
        [{"role": "user", "content": "hi"}], chat_template=TEMPLATE, headers=h
    ),
    "complete": lambda s, h: s.writer.complete("hi", headers=h),
    "complete_stream": lambda s, h: s.writer.complete_stream("hi", headers=h),
    "sequence_infer": lambda s, h: s.counter.sequence().infer(X=[[1.0]], end=True, headers=h),
    "sequence_infer_sample": lambda s, h: s.counter.sequence().infer_sample(
        X=[1.0], end=True, headers=h
    ),
}


# 1. Headers


@pytest.mark.parametrize("call", CALLS)
async def test_client_headers_reach_the_transport_on_every_call(shell: Shell, call: str) -> None:
    await resolve(CALLS[call](shell, None))
    assert shell.mock.calls
    assert headers_seen(shell.mock) == [CLIENT_HEADERS] * len(shell.mock.calls)


@pytest.mark.parametrize("call", CALLS)
async def test_per_call_headers_are_merged_on_top_and_win_case_insensitively(
    shell: Shell, call: str
) -> None:
    await resolve(CALLS[call](shell, CALL_HEADERS))
    assert shell.mock.calls
    assert headers_seen(shell.mock) == [MERGED_HEADERS] * len(shell.mock.calls)


@pytest.mark.parametrize("name", ["x-token", "X-TOKEN", "x-Token", "X-Token"])
@pytest.mark.parametrize("call", ["server_metadata", "infer", "stream"])
async def test_a_per_call_header_replaces_the_clients_in_any_spelling(
    shell: Shell, call: str, name: str
) -> None:
    await resolve(CALLS[call](shell, {name: "call"}))
    assert headers_seen(shell.mock) == [{"X-App": "shell", name: "call"}]


async def test_a_call_without_headers_after_one_with_them_carries_only_the_clients(
    shell: Shell,
) -> None:
    await resolve(shell.double.infer(X=[[1.0]], headers=CALL_HEADERS))
    await resolve(shell.double.infer(X=[[1.0]]))
    await resolve(shell.client.server_metadata(headers={}))
    assert headers_seen(shell.mock) == [MERGED_HEADERS, CLIENT_HEADERS, CLIENT_HEADERS]


async def test_changing_the_headers_given_to_the_client_afterwards_changes_nothing(
    connect: Connect,
) -> None:
    given = dict(CLIENT_HEADERS)
    client, mock = connect(headers=given)
    given["X-Token"] = "changed"
    await resolve(client.server_metadata())
    assert headers_seen(mock) == [CLIENT_HEADERS]


# 2. Invalid headers


INVALID_HEADERS = [
    pytest.param({"bad name": "x"}, id="space-in-name"),
    pytest.param({"": "x"}, id="empty-name"),
    pytest.param({"X-Ok": "a\r\nInjected: 1"}, id="line-break-in-value"),
    pytest.param({"X-Ok": "caf\u00e9"}, id="non-ascii-value"),
    # HTTP dropped the spaces, gRPC kept them: the model saw another value on each.
    pytest.param({"X-Ok": " padded"}, id="space-before-value"),
    pytest.param({"X-Ok": "padded "}, id="space-after-value"),
    # Over HTTP, Triton closed the connection (retried as "may run twice"); over gRPC it
    # refused the call with an InferenceError.
    pytest.param({"X-Big": "v" * 7200}, id="too-large"),
    pytest.param({f"x-{n}": "v" * 20 for n in range(200)}, id="too-many"),
]


@pytest.mark.parametrize("headers", INVALID_HEADERS)
@pytest.mark.parametrize(
    "call", ["server_metadata", "model", "infer", "stream", "generate_stream", "sequence_infer"]
)
async def test_invalid_per_call_headers_raise_and_send_nothing(
    shell: Shell, call: str, headers: dict[str, str]
) -> None:
    with pytest.raises(ts.InvalidInputError):
        await resolve(CALLS[call](shell, headers))
    assert shell.mock.calls == []


async def test_client_and_call_headers_too_large_together_are_refused(connect: Connect) -> None:
    client, mock = connect(headers={"x-client": "c" * 4000})
    with pytest.raises(ts.InvalidInputError, match=r"headers take 80\d\d bytes"):
        await resolve(client.server_metadata(headers={"x-call": "c" * 4000}))
    assert mock.calls == []


@pytest.mark.parametrize("headers", INVALID_HEADERS)
async def test_invalid_client_headers_raise_when_the_client_is_made(
    connect: Connect, headers: dict[str, str]
) -> None:
    with pytest.raises(ts.InvalidInputError):
        connect(headers=headers)


async def test_an_invalid_header_in_map_raises_before_any_batch_is_sent(shell: Shell) -> None:
    with pytest.raises(ts.InvalidInputError):
        await resolve(CALLS["map"](shell, {"bad name": "x"}))
    assert shell.mock.calls == []


@pytest.mark.parametrize(
    "options",
    [{"headers": {"bad name": "x"}}, {"timeout": 0}],
    ids=["invalid-header", "invalid-timeout"],
)
async def test_map_collecting_errors_still_raises_for_invalid_call_options(
    shell: Shell, options: dict[str, Any]
) -> None:
    samples = [{"X": [1.0]}] * 3
    with pytest.raises(ts.InvalidInputError):
        await resolve(shell.double.map(samples, errors="collect", **options))
    assert shell.mock.calls == []


class BadHeaderHook(ts.CallHook):
    """Sets a header value no protocol can carry: every attempt is refused on the client."""

    def __init__(self) -> None:
        self.attempts = 0

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if ctx.call == "infer":
            self.attempts += 1
            ctx.headers = {"x-token": "a\nb"}


async def test_map_sends_no_batch_again_for_a_refusal_of_the_whole_call(connect: Connect) -> None:
    # (Any refusal on the client was taken for a sample's: each batch was tried once per
    # sample, and the error named "sample 0".)
    hook = BadHeaderHook()
    client, mock = connect(hooks=[hook])
    model = await resolve(client.model("double"))
    samples = [{"X": [float(n)]} for n in range(8)]
    outcomes = await resolve(model.map(samples, batch_size=4, errors="collect"))
    assert hook.attempts == 2  # one per batch
    assert [call.ctx.call for call in mock.calls if call.ctx.call == "infer"] == []
    assert all(isinstance(outcome, ts.InvalidInputError) for outcome in outcomes)
    assert not str(outcomes[0]).startswith("sample")


class NoHeadersHook(ts.CallHook):
    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if ctx.call == "infer":
            ctx.headers = None  # type: ignore[assignment]


async def test_a_hook_that_sets_headers_to_none_is_refused(connect: Connect) -> None:
    # It was taken as {}: the client's and the call's headers (a token) were dropped.
    client, mock = connect(hooks=[NoHeadersHook()], headers={"authorization": "Bearer t"})
    model = await resolve(client.model("double"))
    with pytest.raises(ts.InvalidInputError, match=r"a hook set ctx\.headers to NoneType"):
        await resolve(model.infer(X=[[1.0]]))
    assert [call for call in mock.calls if call.ctx.call == "infer"] == []


class ReservedHeaderHook(ts.CallHook):
    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        ctx.headers = {**ctx.headers, "content-length": "5"}


async def test_health_checks_raise_for_a_hooks_invalid_header(connect: Connect) -> None:
    # They answered False, as for a server that is down: the hook's mistake was hidden.
    client, mock = connect(hooks=[ReservedHeaderHook()])
    for check in (client.is_live, client.is_ready, lambda: client.is_model_ready("double")):
        with pytest.raises(ts.InvalidInputError, match="'content-length' is set by the transport"):
            await resolve(check())
    assert mock.calls == []


# 3. Every method that talks to the server takes headers

# Public methods that send nothing: lifetime, and making a sequence handle.
OFFLINE_METHODS = {"close", "aclose", "sequence", "endpoints"}

SHELL_CLASSES = [
    ts.Client,
    ts.AsyncClient,
    ts.Model,
    ts.AsyncModel,
    ts.ModelSequence,
    ts.AsyncModelSequence,
]


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.parametrize("cls", SHELL_CLASSES, ids=lambda cls: cls.__name__)
def test_every_public_method_that_talks_to_the_server_takes_headers(cls: type) -> None:
    methods = public_methods(cls)
    networked = {name: method for name, method in methods.items() if name not in OFFLINE_METHODS}
    assert networked, f"{cls.__name__} has no public methods?"
    for name, method in networked.items():
        parameter = inspect.signature(method).parameters.get("headers")
        assert parameter is not None, f"{cls.__name__}.{name} takes no headers"
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, f"{cls.__name__}.{name}"
        assert parameter.default is None, f"{cls.__name__}.{name}"


def test_the_public_methods_of_both_clients_are_twins() -> None:
    def names(cls: type) -> set[str]:
        return set(public_methods(cls)) - {"close", "aclose"}

    assert names(ts.Client) == names(ts.AsyncClient)
    assert names(ts.Model) == names(ts.AsyncModel)
    assert names(ts.ModelSequence) == names(ts.AsyncModelSequence)
    # The calls test_client_headers_reach_the_transport_on_every_call makes cover them all.
    called = {name.removeprefix("sequence_") for name in CALLS} | {"sequence", "endpoints"}
    every = names(ts.Client) | names(ts.Model) | names(ts.ModelSequence)
    assert every <= called


def test_properties_send_nothing() -> None:
    assert isinstance(inspect.getattr_static(ts.Client, "url"), property)
    assert isinstance(inspect.getattr_static(ts.AsyncClient, "url"), property)
    for cls in (ts.ModelSequence, ts.AsyncModelSequence):
        assert isinstance(inspect.getattr_static(cls, "sequence_id"), property)
        assert isinstance(inspect.getattr_static(cls, "ended"), property)


# 4. Hooks


class Recorder(ts.CallHook):
    """Records what each hook method sees."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        self.events.append(("before_send", op, ctx.attempt))

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        self.events.append(("after_receive", op, result))

    def on_error(self, op: Any, ctx: ts.CallContext, error: ts.TritonError) -> None:
        self.events.append(("on_error", op, error))

    def on_end(self, op: Any, ctx: ts.CallContext) -> None:
        self.events.append(("on_end", op, ctx.attempt))


def failing_twice(result: object) -> tuple[Callable[[Any, ts.CallContext], object], list[Any]]:
    """A handler whose first two attempts fail (retryably), then answers ``result``."""
    errors = [unavailable(1), unavailable(2)]
    pending = list(errors)

    def handler(op: Any, ctx: ts.CallContext) -> object:
        if pending:
            raise pending.pop(0)
        return result

    return handler, errors


async def test_hooks_see_every_attempt_of_a_retried_call(connect: Connect) -> None:
    recorder = Recorder()
    handler, errors = failing_twice({"name": "triton"})
    client, mock = connect(handler, hooks=[recorder], retry=FAST)
    metadata = await resolve(client.server_metadata())
    assert metadata.name == "triton"
    op = mock.calls[0].op
    assert isinstance(op, ops.GetServerMetadata)
    assert ops_sent(mock) == [op, op, op]
    assert [call.ctx.attempt for call in mock.calls] == [1, 2, 3]
    assert recorder.events == [
        ("before_send", op, 1),
        ("on_error", op, errors[0]),
        ("on_end", op, 1),
        ("before_send", op, 2),
        ("on_error", op, errors[1]),
        ("on_end", op, 2),
        ("before_send", op, 3),
        ("after_receive", op, {"name": "triton"}),
        ("on_end", op, 3),
    ]


async def test_after_receive_gets_the_inference_result(connect: Connect) -> None:
    recorder = Recorder()
    client, _ = connect(hooks=[recorder])
    model = await resolve(client.model("double"))
    recorder.events.clear()
    result = await resolve(model.infer(X=[[1.0], [2.0]]))
    (before, after, end) = recorder.events
    assert end == ("on_end", before[1], 1)
    assert before[0] == "before_send"
    assert isinstance(before[1], ops.InferRequest)
    assert after[0] == "after_receive"
    assert after[1] is before[1]
    assert isinstance(after[2], ts.InferResult)
    assert after[2]["Y"].tolist() == result["Y"].tolist() == [[2.0], [4.0]]


async def test_on_error_gets_the_error_the_caller_gets(connect: Connect) -> None:
    recorder = Recorder()
    error = ts.InferenceError("model failed", status="INTERNAL")
    client, _ = connect(lambda op, ctx: error, hooks=[recorder])
    with pytest.raises(ts.InferenceError) as info:
        await resolve(client.server_metadata())
    assert info.value is error
    assert [event[0] for event in recorder.events] == ["before_send", "on_error", "on_end"]
    assert recorder.events[1][2] is error


class AddTraceparent(ts.CallHook):
    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        ctx.headers = {**ctx.headers, "traceparent": f"00-attempt-{ctx.attempt}"}


async def test_a_hook_may_add_a_header_to_each_attempt(connect: Connect) -> None:
    seen: list[dict[str, str]] = []
    handler, _ = failing_twice({"name": "triton"})

    def recording(op: Any, ctx: ts.CallContext) -> object:
        seen.append(dict(ctx.headers))
        return handler(op, ctx)

    client, _ = connect(recording, hooks=[AddTraceparent()], headers=CLIENT_HEADERS, retry=FAST)
    await resolve(client.server_metadata())
    # Each attempt starts from the call's headers, not from the last attempt's.
    assert seen == [{**CLIENT_HEADERS, "traceparent": f"00-attempt-{n}"} for n in (1, 2, 3)]
    seen.clear()
    await resolve(client.server_metadata(headers=CALL_HEADERS))
    assert seen == [{**MERGED_HEADERS, "traceparent": "00-attempt-1"}]


async def test_a_header_a_hook_sets_in_another_case_replaces_the_clients(
    connect: Connect,
) -> None:
    # A rotating token: one Authorization header goes out, the hook's (two before).
    class Rotate(ts.CallHook):
        def before_send(self, op: Any, ctx: ts.CallContext) -> None:
            ctx.headers = {**ctx.headers, "authorization": "Bearer new"}

    seen: list[dict[str, str]] = []

    def recording(op: Any, ctx: ts.CallContext) -> object:
        seen.append(dict(ctx.headers))
        return {"name": "triton"}

    client, _ = connect(recording, hooks=[Rotate()], headers={"Authorization": "Bearer old"})
    await resolve(client.server_metadata())
    assert seen == [{"authorization": "Bearer new"}]


async def test_a_hook_may_change_the_timeout_of_an_attempt(connect: Connect) -> None:
    class ShortTimeout(ts.CallHook):
        def before_send(self, op: Any, ctx: ts.CallContext) -> None:
            ctx.timeout = 0.5

    timeouts: list[float | None] = []

    def handler(op: Any, ctx: ts.CallContext) -> object:
        timeouts.append(ctx.timeout)
        return {"name": "triton"}

    client, _ = connect(handler, hooks=[ShortTimeout()], timeout=5.0)
    await resolve(client.server_metadata())
    assert timeouts == [0.5]


async def test_a_timeout_a_hook_sets_is_cut_to_the_retry_deadline(connect: Connect) -> None:
    class LongTimeout(ts.CallHook):
        def before_send(self, op: Any, ctx: ts.CallContext) -> None:
            ctx.timeout = 10.0

    timeouts: list[float | None] = []

    def handler(op: Any, ctx: ts.CallContext) -> object:
        timeouts.append(ctx.timeout)
        return {"name": "triton"}

    deadline = ts.RetryPolicy(deadline=0.5)
    client, _ = connect(handler, hooks=[LongTimeout()], timeout=5.0, retry=deadline)
    await resolve(client.server_metadata())
    (timeout,) = timeouts
    assert timeout is not None
    assert 0 < timeout <= 0.5  # (was the hook's 10 s: the call outlived its deadline)


async def test_hooks_see_each_response_of_a_stream(connect: Connect) -> None:
    recorder = Recorder()
    client, _ = connect(hooks=[recorder])
    model = await resolve(client.model("talker"))
    recorder.events.clear()
    responses = await resolve(model.stream(X=[[1.0]]))
    assert [event[0] for event in recorder.events] == [
        "before_send",
        *["after_receive"] * 3,
        "on_end",
    ]
    assert isinstance(recorder.events[0][1], ops.StreamInfer)
    assert [event[2] for event in recorder.events[1:-1]] == responses


async def test_hooks_see_the_error_that_ends_a_stream(connect: Connect) -> None:
    recorder = Recorder()
    error = ts.InferenceError("model crashed", status="INTERNAL")

    def handler(op: Any, ctx: ts.CallContext) -> object:
        def responses() -> Iterator[ts.InferResult]:
            yield result_of("talker", {"Y": [[1.0]]})
            raise error

        return responses()

    client, _ = connect(handler, hooks=[recorder])
    model = await resolve(client.model("talker"))
    recorder.events.clear()
    with pytest.raises(ts.InferenceError) as info:
        await resolve(model.stream(X=[[1.0]]))
    assert info.value.message == error.message
    assert info.value.model == "talker"  # (filled in by the mock, as a server names it)
    assert [event[0] for event in recorder.events] == [
        "before_send",
        "after_receive",
        "on_error",
        "on_end",
    ]
    assert recorder.events[-2][2] is info.value


async def test_hooks_see_the_end_of_a_stream_without_responses(connect: Connect) -> None:
    # Neither after_receive nor on_error comes: on_end closes the attempt (a tracing
    # span, a log line), also when the stream is left before its first response.
    recorder = Recorder()
    client, _ = connect(lambda op, ctx: iter(()), hooks=[recorder])
    model = await resolve(client.model("talker"))
    recorder.events.clear()
    assert await resolve(model.stream(X=[[1.0]])) == []
    assert [event[0] for event in recorder.events] == ["before_send", "on_end"]


async def test_every_hook_sees_the_end_when_an_on_end_raises(connect: Connect) -> None:
    class Failing(ts.CallHook):
        def on_end(self, op: Any, ctx: ts.CallContext) -> None:
            raise RuntimeError("the exporter is down")

    last = Recorder()
    client, _ = connect(hooks=[Failing(), last])
    with pytest.raises(RuntimeError, match="exporter"):
        await resolve(client.server_metadata())
    assert [event[0] for event in last.events] == ["before_send", "after_receive", "on_end"]


@pytest.mark.parametrize("outcome", ["after_receive", "on_error"])
async def test_every_hook_sees_the_outcome_when_one_raises_on_it(
    connect: Connect, outcome: str
) -> None:
    # The hooks after the failing one were not told: a tracing span ended "not answered".
    class Failing(ts.CallHook):
        def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
            raise RuntimeError("the metrics hook has a bug")

        def on_error(self, op: Any, ctx: ts.CallContext, error: ts.TritonError) -> None:
            raise RuntimeError("the metrics hook has a bug")

    def handler(op: Any, ctx: ts.CallContext) -> object:
        return ts.InferenceError("the model failed") if outcome == "on_error" else answer(op, ctx)

    last = Recorder()
    client, _ = connect(handler, hooks=[Failing(), last])
    with pytest.raises(RuntimeError, match="metrics hook") as caught:
        await resolve(client.server_metadata())
    assert [event[0] for event in last.events] == ["before_send", outcome, "on_end"]
    if outcome == "on_error":  # (the call's own error stays in sight)
        assert isinstance(caught.value.__context__, ts.InferenceError)


async def test_every_hook_sees_the_end_when_a_before_send_raises(connect: Connect) -> None:
    class Failing(ts.CallHook):
        def before_send(self, op: Any, ctx: ts.CallContext) -> None:
            raise RuntimeError("the token service is down")

    first, last = Recorder(), Recorder()
    client, mock = connect(hooks=[first, Failing(), last])
    with pytest.raises(RuntimeError):
        await resolve(client.server_metadata())
    assert [event[0] for event in first.events] == ["before_send", "on_end"]
    assert [event[0] for event in last.events] == ["on_end"]
    assert mock.calls == []


# 5. Closed clients


class KeepsOpen(MockTransport):
    """A transport that stays open when the client closes, to see what the client sends."""

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_closing_the_client_closes_its_transport(connect: Connect) -> None:
    client, mock = connect()
    await close(client)
    assert mock.closed
    await close(client)  # closing twice is harmless


async def test_one_client_closed_leaves_the_mock_serving_the_others(connect: Connect) -> None:
    # Every other client on a shared mock refused every call ("MockTransport was closed"),
    # and is_ready() said False.
    first, mock = connect()
    second, _ = connect(transport=mock)
    await close(first)
    assert mock.closed
    assert await resolve(second.is_ready())
    double = await resolve(second.model("double"))
    assert (await resolve(double.infer(X=[[1.0]])))["Y"].tolist() == [[2.0]]


async def test_the_mock_answers_in_the_declared_datatypes(connect: Connect) -> None:
    # A list of Python floats for an FP32 output came back float64, which no server sends.
    client, _ = connect(lambda op, ctx: {"Y": [[2.5]]})
    double = await resolve(client.model("double"))
    result = await resolve(double.infer(X=[[1.0]]))
    assert result["Y"].dtype == np.float32
    assert result.datatype("Y") == "FP32"
    # Cast by the rules inputs are: no value changes on the way (1e300 is no FP32).
    for wrong in ([["x"]], [[1e300]]):
        client, _ = connect(lambda op, ctx, wrong=wrong: {"Y": wrong})
        double = await resolve(client.model("double"))
        with pytest.raises(ValueError, match="answer for model 'double': output 'Y' is FP32"):
            await resolve(double.infer(X=[[1.0]]))


async def test_the_mock_answers_text_with_every_byte(connect: Connect) -> None:
    # numpy's fixed-width text dropped trailing NULs and refused bytes mixed with str.
    sent = [[b"a\x00", "\x00"], ["\u00e9", b"\xff"]]
    for handler in (
        lambda op, ctx: {"TEXT": sent},
        lambda op, ctx: ts.testing.result_of("writer", {"TEXT": sent}),
    ):
        client, _ = connect(handler)
        writer = await resolve(client.model("writer"))
        result = await resolve(writer.infer(PROMPT=["hi"]))
        assert result["TEXT"].tolist() == [[b"a\x00", b"\x00"], ["\u00e9".encode(), b"\xff"]]
        assert result.datatype("TEXT") == "BYTES"
    # Numbers are no answer for a BYTES output (a server could not send them as one).
    client, _ = connect(lambda op, ctx: {"TEXT": [[1, 2]]})
    writer = await resolve(client.model("writer"))
    with pytest.raises(ValueError, match="answer for model 'writer': output 'TEXT' is BYTES"):
        await resolve(writer.infer(PROMPT=["hi"]))


async def test_the_mock_serves_a_spec_made_with_numpy_integers(connect: Connect) -> None:
    # Its dims went into the metadata as numpy ints, which a server never writes and the
    # spec reader refused ("3 is not an integer").
    spec = ts.ModelSpec(
        name="numpy_made",
        inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(np.int64(2),))},
        outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(np.int64(2),))},
        max_batch_size=np.int64(4),  # type: ignore[arg-type]
    )
    mock = MockTransport(lambda op, ctx: {"Y": [[1.0, 2.0]]}, models=[spec])
    client, _ = connect(transport=mock)
    model = await resolve(client.model("numpy_made"))
    assert (model.spec.max_batch_size, model.spec.inputs["X"].shape) == (4, (2,))


async def test_the_mock_config_names_each_tensors_data_type(connect: Connect) -> None:
    client, _ = connect()
    config = await resolve(client.model_config("writer"))
    assert config["input"] == [{"name": "PROMPT", "data_type": "TYPE_STRING", "dims": [1]}]
    config = await resolve(client.model_config("double"))
    assert config["output"] == [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}]


async def test_a_closed_client_raises_and_sends_nothing(connect: Connect) -> None:
    client, mock = connect(transport=KeepsOpen(answer, models=MODELS))
    double = await resolve(client.model("double"))
    talker = await resolve(client.model("talker"))
    counter = await resolve(client.model("counter"))
    sent = len(mock.calls)
    await close(client)
    calls: list[Callable[[], object]] = [
        lambda: client.server_metadata(),
        lambda: client.model("double"),
        lambda: client.is_live(),  # a closed client raises even where health answers False
        lambda: double.infer(X=[[1.0]]),
        lambda: double.infer(X=[[1.0]] * 6),
        lambda: talker.stream(X=[[1.0]]),
        lambda: counter.sequence().infer(X=[[1.0]]),
        lambda: double.map([{"X": [1.0]}]),
    ]
    for call in calls:
        with pytest.raises(ts.TritonError, match="closed"):
            await resolve(call())
    assert len(mock.calls) == sent


# 6. Batches larger than max_batch_size


def slow_first_chunk(mode: str, finished: list[float]) -> Callable[..., object]:
    """Y = 2 * X; the chunk starting at X = 0 answers once the two others have."""

    def double(op: ops.InferRequest) -> object:
        x = op.inputs[0].array
        finished.append(float(x[0, 0]))
        return {"Y": x * 2}

    def is_first(op: ops.InferRequest) -> bool:
        return bool(op.inputs[0].array[0, 0] == 0)

    if mode == "sync":
        others_done = threading.Event()

        def handler(op: Any, ctx: ts.CallContext) -> object:
            if is_first(op):
                others_done.wait(10)
            result = double(op)
            if len(finished) == 2:
                others_done.set()
            return result

        return handler

    async_others_done = asyncio.Event()

    async def ahandler(op: Any, ctx: ts.CallContext) -> object:
        if is_first(op):
            await asyncio.wait_for(async_others_done.wait(), 10)
        result = double(op)
        if len(finished) == 2:
            async_others_done.set()
        return result

    return ahandler


async def test_an_oversized_batch_is_split_and_joined_in_input_order(
    connect: Connect, mode: str
) -> None:
    finished: list[float] = []
    client, mock = connect(slow_first_chunk(mode, finished), headers=CLIENT_HEADERS)
    model = await resolve(client.model("double"))
    mock.calls.clear()
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    result = await resolve(model.infer(X=x, headers=CALL_HEADERS))
    assert batch_sizes(mock) == [2, 4, 4]
    assert finished[-1] == 0.0  # the first chunk answered last...
    assert result["Y"].tolist() == (x * 2).tolist()  # ...and its rows still come first
    assert headers_seen(mock) == [MERGED_HEADERS] * 3


async def test_a_batch_of_max_batch_size_is_sent_whole(shell: Shell) -> None:
    await resolve(shell.double.infer(X=[[1.0]] * DOUBLE.max_batch_size))
    assert len(shell.mock.calls) == 1


async def test_a_failed_chunk_fails_the_call(connect: Connect) -> None:
    def handler(op: Any, ctx: ts.CallContext) -> object:
        if op.inputs[0].array[0, 0] == 4:
            return ts.InferenceError("chunk refused", status="INVALID_ARGUMENT")
        return {"Y": op.inputs[0].array}

    client, _ = connect(handler)
    model = await resolve(client.model("double"))
    with pytest.raises(ts.InferenceError, match="chunk refused"):
        await resolve(model.infer(X=np.arange(10, dtype=np.float32).reshape(10, 1)))


async def test_a_failed_call_sends_none_of_its_chunks_still_waiting(
    connect: Connect, mode: str
) -> None:
    # The second chunk fails at once; the others are still in flight when it does. The
    # chunks left waiting must never be sent.
    release = threading.Event()
    failing = DOUBLE.max_batch_size  # the first row of the second chunk

    def handler(op: Any, ctx: ts.CallContext) -> object:
        if op.inputs[0].array[0, 0] == failing:
            return ts.InferenceError("chunk refused", status="INVALID_ARGUMENT")
        if mode == "sync":
            release.wait(10)  # (until the call has raised: it does not wait for these)
            return {"Y": op.inputs[0].array}

        async def later() -> object:
            # The call waits for these; long before a timer can wake them, the failed
            # chunk's task has woken the call, which drops the chunks still waiting.
            await asyncio.sleep(0.5)
            return {"Y": op.inputs[0].array}

        return later()

    client, mock = connect(handler)
    model = await resolve(client.model("double"))
    mock.calls.clear()
    rows = 50 * DOUBLE.max_batch_size
    try:
        with pytest.raises(ts.InferenceError, match="chunk refused"):
            await resolve(model.infer(X=np.arange(rows, dtype=np.float32).reshape(rows, 1)))
    finally:
        release.set()
    await asyncio.sleep(0.2)  # (what was left of the call would go out now)
    # Those that had a thread, and the one that may take the failed chunk's at once.
    assert len(mock.calls) <= MAX_CHUNKS_IN_FLIGHT + 1


async def test_a_failed_call_waits_for_its_chunks_in_flight_instead_of_cancelling_them() -> None:
    # Cancelling a request as the server answers it can crash older Tritons, so the asyncio
    # client lets the chunks it has sent finish before it raises.
    answered: list[float] = []

    async def handler(op: Any, ctx: ts.CallContext) -> object:
        first = float(op.inputs[0].array[0, 0])
        if first == DOUBLE.max_batch_size:
            return ts.InferenceError("chunk refused", status="INVALID_ARGUMENT")
        await asyncio.sleep(0.05)
        answered.append(first)
        return {"Y": op.inputs[0].array}

    mock = MockTransport(handler, models=MODELS)
    async with ts.AsyncClient("grpc://triton", transport=mock) as client:
        model = await client.model("double")
        rows = 3 * DOUBLE.max_batch_size
        with pytest.raises(ts.InferenceError, match="chunk refused"):
            await model.infer(X=np.arange(rows, dtype=np.float32).reshape(rows, 1))
    assert sorted(answered) == [0.0, 2.0 * DOUBLE.max_batch_size]


async def test_cancelling_a_split_call_cancels_its_chunks() -> None:
    started, cancelled = asyncio.Event(), []

    async def handler(op: Any, ctx: ts.CallContext) -> object:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(float(op.inputs[0].array[0, 0]))
            raise
        return {"Y": op.inputs[0].array}

    mock = MockTransport(handler, models=MODELS)
    async with ts.AsyncClient("grpc://triton", transport=mock) as client:
        model = await client.model("double")
        rows = 3 * DOUBLE.max_batch_size
        call = asyncio.ensure_future(
            model.infer(X=np.arange(rows, dtype=np.float32).reshape(rows, 1))
        )
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    assert sorted(cancelled) == [0.0, 4.0, 8.0]


async def test_a_chunk_answered_with_other_rows_fails_the_call(connect: Connect) -> None:
    # One row per chunk, whatever was sent: joining them would misplace every row.
    def handler(op: Any, ctx: ts.CallContext) -> object:
        return {"Y": op.inputs[0].array[:1]}

    client, _ = connect(handler)
    model = await resolve(client.model("double"))
    with pytest.raises(ts.InferenceError, match=r"shape \[1, 1\]: the answer to a batch of 4"):
        await resolve(model.infer(X=np.arange(10, dtype=np.float32).reshape(10, 1)))


# 7. Timeouts


async def test_the_calls_timeout_wins_over_the_clients(connect: Connect) -> None:
    client, mock = connect(timeout=5.0)
    await resolve(client.server_metadata(timeout=1.5))
    await resolve(client.server_metadata(timeout=None))
    await resolve(client.server_metadata(timeout=ts.NOT_GIVEN))
    await resolve(client.server_metadata())
    assert [call.ctx.timeout for call in mock.calls] == [1.5, None, 5.0, 5.0]


async def test_a_client_without_timeout_sets_no_limit(connect: Connect) -> None:
    client, mock = connect(timeout=None)
    await resolve(client.server_metadata())
    await resolve(client.server_metadata(timeout=2.0))
    assert [call.ctx.timeout for call in mock.calls] == [None, 2.0]


async def test_the_timeout_of_a_model_call_reaches_each_request(shell: Shell) -> None:
    await resolve(shell.double.infer(X=[[1.0]] * 6, timeout=0.25))
    await resolve(shell.talker.stream(X=[[1.0]], timeout=0.5))
    assert [call.ctx.timeout for call in shell.mock.calls] == [0.25, 0.25, 0.5]


@pytest.mark.parametrize("timeout", [0, -1.0])
async def test_a_timeout_that_is_not_positive_raises_and_sends_nothing(
    shell: Shell, timeout: float
) -> None:
    with pytest.raises(ts.InvalidInputError):
        await resolve(shell.client.server_metadata(timeout=timeout))
    with pytest.raises(ts.InvalidInputError):
        await resolve(shell.double.infer(X=[[1.0]], timeout=timeout))
    assert shell.mock.calls == []


# 8. Model handles


async def test_model_reads_metadata_then_config_with_the_same_headers(shell: Shell) -> None:
    model = await resolve(shell.client.model("double", "3", headers=CALL_HEADERS))
    assert ops_sent(shell.mock) == [
        ops.GetModelMetadata("double", "3"),
        ops.GetModelConfig("double", "3"),
    ]
    assert headers_seen(shell.mock) == [MERGED_HEADERS] * 2
    assert [call.ctx.call for call in shell.mock.calls] == ["model_metadata", "model_config"]
    assert [call.ctx.model for call in shell.mock.calls] == ["double", "double"]
    assert (model.name, model.version, model.spec) == ("double", "3", DOUBLE)


async def test_an_unknown_model_raises_model_not_found(shell: Shell) -> None:
    with pytest.raises(ts.ModelNotFoundError) as info:
        await resolve(shell.client.model("doubel"))
    assert info.value.model == "doubel"
    # The repository is listed to name what there is: models= answers it.
    assert ops_sent(shell.mock) == [ops.GetModelMetadata("doubel"), ops.ListModels()]
    assert "did you mean 'double'?" in str(info.value)


async def test_a_masked_array_is_refused_and_nothing_sent(shell: Shell) -> None:
    # gRPC sent the fill value where HTTP and shared memory sent the data underneath.
    masked = np.ma.masked_array(np.array([[1.0], [2.0]], np.float32), mask=[[0], [1]])
    with pytest.raises(ts.InvalidInputError, match="'X' is a masked array"):
        await resolve(shell.double.infer(X=masked))
    assert shell.mock.calls == []


def test_the_blocking_map_refuses_an_async_iterable_at_the_call() -> None:
    # A raw TypeError came from the first next() instead.
    async def samples() -> AsyncIterator[dict[str, list[float]]]:
        yield {"X": [1.0]}

    with ts.Client("grpc://test", transport=MockTransport(answer, models=MODELS)) as client:
        unread = samples()
        with pytest.raises(ts.InvalidInputError, match=r"async iterable goes to AsyncModel\.map"):
            client.model("double").map(unread)
        asyncio.run(unread.aclose())


async def test_a_mock_server_that_is_not_ready(connect: Connect) -> None:
    # Health was always answered True: a test could not see its code wait, or time out.
    client, mock = connect()
    mock.ready = False
    assert await resolve(client.is_live())
    assert not await resolve(client.is_ready())
    with pytest.raises(ts.TritonTimeoutError):
        await resolve(client.wait_until_ready(timeout=0.2))
    mock.live = False
    assert not await resolve(client.is_live())


class ProbeTimes(ts.CallHook):
    def __init__(self) -> None:
        self.sent: list[float] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        self.sent.append(time.monotonic())


async def test_waiting_for_readiness_probes_once_more_at_the_deadline(connect: Connect) -> None:
    # It gave up at the last poll that would end past the deadline, up to 0.1 s early,
    # and said it had waited the whole time: a server ready in that stretch was missed.
    probes = ProbeTimes()
    client, mock = connect(hooks=[probes])
    mock.ready = False
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError, match=r"not ready after 0\.35s"):
        await resolve(client.wait_until_ready(timeout=0.35))
    assert probes.sent[-1] >= started + 0.35


async def test_without_models_the_handler_serves_the_models_metadata(connect: Connect) -> None:
    # models=() answered "not found" for every name without asking the handler.
    metadata = {
        "name": "m",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [-1, 1]}],
        "outputs": [{"name": "Y", "datatype": "FP32", "shape": [-1, 1]}],
    }

    def handler(op: Any, ctx: ts.CallContext) -> object:
        if isinstance(op, ops.GetModelMetadata) and op.name == "m":
            return metadata
        if isinstance(op, ops.GetModelConfig) and op.name == "m":
            return {"name": "m", "max_batch_size": 4}
        if isinstance(op, ops.IsModelReady):
            return op.name == "m"
        raise NotImplementedError(op)

    client, _ = connect(handler, models=())
    spec = await resolve(client.model_spec("m"))
    assert list(spec.inputs) == ["X"]
    assert spec.max_batch_size == 4
    assert await resolve(client.is_model_ready("m"))
    with pytest.raises(ts.ModelNotFoundError):  # NotImplementedError: an unknown model
        await resolve(client.model_spec("other"))


# 9. Sequences


async def test_a_sequence_request_is_never_retried(connect: Connect) -> None:
    def handler(op: Any, ctx: ts.CallContext) -> object:
        return unavailable(1)

    client, mock = connect(handler, retry=FAST)
    model = await resolve(client.model("counter"))
    mock.calls.clear()
    with pytest.raises(ts.TritonConnectionError):
        await resolve(model.sequence().infer(X=[[1.0]]))
    assert len(mock.calls) == 1
    # The same request to a stateless model is retried: the policy would have allowed it.
    double = await resolve(client.model("double"))
    mock.calls.clear()
    with pytest.raises(ts.TritonConnectionError):
        await resolve(double.infer(X=[[1.0]]))
    assert len(mock.calls) == FAST.max_attempts


async def test_a_stateful_model_takes_requests_only_within_a_sequence(shell: Shell) -> None:
    # Triton refused them ("must specify a non-zero or non-empty correlation ID").
    for call in (
        lambda: shell.counter.infer(X=[[1.0]]),
        lambda: shell.counter.infer_sample(X=[1.0]),
        lambda: shell.counter.stream(X=[[1.0]]),
        lambda: shell.counter.map([{"X": [1.0]}]),
        # A generate request cannot carry a sequence (its fields are reserved parameters).
        lambda: shell.counter.generate(X=1.0),
        lambda: shell.counter.generate_stream(X=1.0),
    ):
        with pytest.raises(ts.InvalidInputError, match=r"stateful .* use model.sequence"):
            await resolve(call())
    assert shell.mock.calls == []


async def test_a_sequence_flags_its_first_and_last_requests(shell: Shell) -> None:
    sequence = shell.counter.sequence(42)
    await resolve(sequence.infer(X=[[1.0]]))
    await resolve(sequence.infer_sample(X=[2.0]))
    await resolve(sequence.infer(X=[[3.0]], end=True))
    requests = requests_sent(shell.mock)
    assert [(r.sequence_id, r.sequence_start, r.sequence_end) for r in requests] == [
        (42, True, False),
        (42, False, False),
        (42, False, True),
    ]
    assert sequence.sequence_id == 42
    assert sequence.ended


async def test_an_ended_sequence_raises_and_sends_nothing(shell: Shell) -> None:
    sequence = shell.counter.sequence()
    await resolve(sequence.infer(X=[[1.0]], end=True))
    with pytest.raises(ts.TritonError, match="ended"):
        await resolve(sequence.infer(X=[[1.0]]))
    assert len(shell.mock.calls) == 1


async def test_a_failed_first_request_is_not_sent_with_start_again(connect: Connect) -> None:
    # Connections that broke after the request went out: it may have run.
    broken = [
        ts.TritonConnectionError(f"connection reset #{n}", retryable=True, may_have_run=True)
        for n in (1, 2)
    ]

    def handler(op: Any, ctx: ts.CallContext) -> object:
        if broken:
            raise broken.pop(0)
        return {"Y": [[0.0]]}

    client, mock = connect(handler, models=MODELS)
    model = await resolve(client.model("counter"))
    mock.calls.clear()
    sequence = model.sequence()
    with pytest.raises(ts.TritonConnectionError):
        await resolve(sequence.infer(X=[[1.0]]))
    with pytest.raises(ts.TritonConnectionError):
        await resolve(sequence.infer(X=[[1.0]]))
    await resolve(sequence.infer(X=[[1.0]], end=True))
    assert [r.sequence_start for r in requests_sent(mock)] == [True, False, False]


# 10. Streams


def counting_stream(log: list[object], count: int = 5) -> Callable[..., object]:
    """A stream handler that logs each response as it is pulled, and its closing."""

    def handler(op: Any, ctx: ts.CallContext) -> object:
        def responses() -> Iterator[ts.InferResult]:
            try:
                for step in range(count):
                    log.append(step)
                    yield result_of(op.model, {"Y": [[float(step)]]})
            finally:
                log.append("closed")

        return responses()

    return handler


async def test_a_stream_yields_the_responses_in_order(shell: Shell) -> None:
    responses = await resolve(shell.talker.stream(X=[[1.0]]))
    assert [response["Y"].tolist() for response in responses] == [[[1.0]], [[2.0]], [[3.0]]]
    (call,) = shell.mock.calls
    assert isinstance(call.op, ops.StreamInfer)
    assert call.op.request.model == "talker"


async def test_streams_and_sequences_refuse_to_be_copied(shell: Shell) -> None:
    # A copied stream shared the request, and cancelled it when the copy was collected:
    # the original then ended without a word. A sequence copied shared its state.
    import copy
    import pickle

    stream = shell.talker.stream(X=[[1.0]])
    sequence = shell.counter.sequence()
    for copier in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match=r"a stream \(\w*ResponseStream\) cannot be"):
            copier(stream)
        with pytest.raises(TypeError, match=r"a sequence handle \(\w*ModelSequence\) cannot"):
            copier(sequence)
    responses = await resolve(stream)
    assert [response["Y"].tolist() for response in responses] == [[[1.0]], [[2.0]], [[3.0]]]


async def test_closing_a_stream_early_stops_pulling_and_closes_the_transports_stream(
    connect: Connect,
) -> None:
    log: list[object] = []
    client, _ = connect(counting_stream(log))
    model = await resolve(client.model("talker"))
    stream = model.stream(X=[[1.0]])
    first = await next_item(stream)
    second = await next_item(stream)
    assert (first["Y"].tolist(), second["Y"].tolist()) == ([[0.0]], [[1.0]])
    await close(stream)
    assert log == [0, 1, "closed"]
    assert await next_item(stream) is END
    assert log == [0, 1, "closed"]


class TrackedStream:
    """A transport's stream that says whether the client closed it (which is how a real
    transport learns to cancel the request on the server)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.closed = False

    def __iter__(self) -> TrackedStream:
        return self

    def __next__(self) -> Any:
        return next(self.inner)

    def close(self) -> None:
        self.closed = True
        self.inner.close()

    def __aiter__(self) -> TrackedStream:
        return self

    async def __anext__(self) -> Any:
        return await anext(self.inner)

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


class TrackingTransport(MockTransport):
    """A MockTransport whose streams are TrackedStreams, kept in ``streams``."""

    def __init__(self, handler: Any, *, models: tuple[ts.ModelSpec, ...]) -> None:
        super().__init__(handler, models=models)
        self.streams: list[TrackedStream] = []

    def stream(self, op: Any, ctx: ts.CallContext) -> Any:
        self.streams.append(TrackedStream(super().stream(op, ctx)))
        return self.streams[-1]

    def astream(self, op: Any, ctx: ts.CallContext) -> Any:
        self.streams.append(TrackedStream(super().astream(op, ctx)))
        return self.streams[-1]


@pytest.mark.parametrize("read", [2, 5], ids=["left-early", "read-to-the-end"])
async def test_the_client_closes_the_transports_stream(connect: Connect, read: int) -> None:
    transport = TrackingTransport(counting_stream([], count=5), models=MODELS)
    client, _ = connect(transport=transport)
    model = await resolve(client.model("talker"))
    stream = model.stream(X=[[1.0]])
    for _ in range(read):
        await next_item(stream)
    (tracked,) = transport.streams
    assert not tracked.closed
    if read == 5:
        assert await next_item(stream) is END
    else:
        await close(stream)
    assert tracked.closed


async def test_a_stream_is_sent_when_first_read(connect: Connect) -> None:
    log: list[object] = []
    client, mock = connect(counting_stream(log))
    model = await resolve(client.model("talker"))
    mock.calls.clear()
    stream = model.stream(X=[[1.0]])
    assert mock.calls == []
    await next_item(stream)
    assert len(mock.calls) == 1
    await close(stream)


async def test_a_stream_may_answer_nothing(connect: Connect) -> None:
    client, _ = connect(lambda op, ctx: [])
    model = await resolve(client.model("talker"))
    assert await resolve(model.stream(X=[[1.0]])) == []


async def test_generate_stream_yields_each_responses_fields(shell: Shell) -> None:
    assert await resolve(shell.talker.generate_stream(X=1.0, max_tokens=3)) == [
        {"text": "a"},
        {"text": "b"},
    ]
    (call,) = shell.mock.calls
    assert isinstance(call.op, ops.GenerateStream)
    assert call.op.fields == {"X": 1.0, "max_tokens": 3}


@pytest.mark.parametrize("key", [1, None, ("a",), ""])
async def test_generate_fields_named_by_no_str_are_refused_at_the_call(
    shell: Shell, key: Any
) -> None:
    # generate blamed "the server's answer" (an AttributeError inside), and generate_stream
    # raised a bare AttributeError.
    for call in (shell.double.generate, shell.talker.generate_stream):
        with pytest.raises(ts.InvalidInputError, match="field names are non-empty str"):
            await resolve(call({key: 2}))
    assert shell.mock.calls == []


async def test_numpy_scalar_parameters_reach_generate_as_plain_values(shell: Shell) -> None:
    await resolve(shell.double.generate(X=1.0, parameters={"k": np.float32(0.5)}))
    (call,) = shell.mock.calls
    assert call.op.parameters == {"k": 0.5}
    assert type(call.op.parameters["k"]) is float


async def test_a_decoupled_model_refuses_infer_and_sends_nothing(shell: Shell) -> None:
    with pytest.raises(ts.InvalidInputError, match="decoupled"):
        await resolve(shell.talker.infer(X=[[1.0]]))
    assert shell.mock.calls == []


async def test_a_stream_batch_larger_than_max_batch_size_raises(shell: Shell) -> None:
    with pytest.raises(ts.InvalidInputError, match="cannot be split"):
        await resolve(shell.talker.stream(X=[[1.0]] * 6))
    assert shell.mock.calls == []


# 11. MockTransport


async def test_a_coroutine_handler_serves_the_async_client() -> None:
    async def handler(op: Any, ctx: ts.CallContext) -> object:
        await asyncio.sleep(0)
        return {"Y": op.inputs[0].array + 1}

    async with ts.AsyncClient("grpc://test", transport=MockTransport(handler, models=MODELS)) as c:
        model = await c.model("double")
        assert (await model.infer(X=[[1.0]]))["Y"].tolist() == [[2.0]]


def test_a_coroutine_handler_with_the_blocking_client_raises_type_error() -> None:
    async def handler(op: Any, ctx: ts.CallContext) -> object:
        return {"Y": op.inputs[0].array + 1}

    with ts.Client("grpc://test", transport=MockTransport(handler, models=MODELS)) as client:
        model = client.model("double")  # served by models=, without the handler
        with pytest.raises(TypeError, match="AsyncClient"):
            model.infer(X=[[1.0]])


async def test_models_answer_an_unknown_name_without_the_handler(connect: Connect) -> None:
    """The docs' handler raises NotImplementedError for every op but inference: an
    unknown model still raises ModelNotFoundError, as a server would."""

    def handler(op: Any, ctx: ts.CallContext) -> object:
        raise NotImplementedError(op)

    client, _ = connect(handler, models=(DOUBLE, TALKER))
    with pytest.raises(ts.ModelNotFoundError, match="The repository has 'double', 'talker'"):
        await resolve(client.model("nope"))
    index = await resolve(client.models())
    assert [(entry.name, entry.state) for entry in index] == [
        ("double", "READY"),
        ("talker", "READY"),
    ]


async def test_an_op_without_answer_raises_unimplemented(connect: Connect) -> None:
    # As a server without the endpoint: an UnsupportedError naming the op (it was an
    # InferenceError, which no real server's missing endpoint gives).
    client, _ = connect(None)
    with pytest.raises(ts.UnsupportedError) as info:
        await resolve(client.server_metadata())
    assert not isinstance(info.value, ts.InferenceError)
    assert info.value.status == "UNIMPLEMENTED"
    assert "does not support server_metadata" in str(info.value)
    assert "GetServerMetadata" in str(info.value)


async def test_models_are_served_without_the_handler(connect: Connect) -> None:
    client, _ = connect(None)
    assert await resolve(client.is_live())
    assert await resolve(client.is_ready())
    assert await resolve(client.is_model_ready("double"))
    assert not await resolve(client.is_model_ready("nope"))


@pytest.mark.parametrize(
    "served",
    [
        DOUBLE,
        TALKER,
        COUNTER,
        ts.ModelSpec(
            name="rich",
            versions=("1", "2"),
            platform="python",
            backend="python",
            max_batch_size=8,
            inputs={
                "TEXT": ts.TensorSpec(name="TEXT", datatype="BYTES", shape=(-1,)),
                "MASK": ts.TensorSpec(name="MASK", datatype="INT64", shape=(2, 3), optional=True),
            },
            outputs={
                "SCORES": ts.TensorSpec(
                    name="SCORES", datatype="FP16", shape=(10,), label_filename="labels.txt"
                )
            },
            sequence=True,
            string_sequence_ids=True,
            dynamic_batching=True,
            preferred_batch_sizes=(4, 8),
            parameters={"chat_template": TEMPLATE, "note": ""},  # (they were dropped)
        ),
        ts.ModelSpec(
            name="unbatched",
            platform="onnxruntime_onnx",
            backend="onnxruntime",
            inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(3, 4))},
            outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=())},
        ),
    ],
    ids=lambda served: served.name,
)
async def test_models_are_served_so_that_the_client_reads_back_the_same_spec(
    connect: Connect, served: ts.ModelSpec
) -> None:
    client, _ = connect(None, models=(served,))
    model = await resolve(client.model(served.name))
    assert model.spec == served


async def test_a_mock_answers_as_a_server_does(connect: Connect) -> None:
    # Text came back as str (a server sends bytes), outputs not asked for came back, and
    # a stream's mappings reached the caller as dicts.
    pair = ts.ModelSpec(
        name="pair",
        versions=("1", "2"),
        max_batch_size=4,
        inputs={"X": tensor("X")},
        outputs={
            "Y": tensor("Y"),
            "NAME": ts.TensorSpec(name="NAME", datatype="BYTES", shape=(1,)),
        },
    )
    talker = attrs.evolve(pair, name="talker", decoupled=True)

    def handler(op: Any, ctx: ts.CallContext) -> object:
        request = op.request if isinstance(op, ops.StreamInfer) else op
        answer = {"Y": request.inputs[0].array * 2, "NAME": np.array([["안녕"]])}
        return [answer, answer] if isinstance(op, ops.StreamInfer) else answer

    client, _ = connect(handler, models=(pair, talker))
    model = await resolve(client.model("pair", version="2"))
    result = await resolve(model.infer(X=[1.0]))
    assert result["NAME"].tolist() == [["안녕".encode()]]
    assert result.as_strings("NAME").tolist() == [["안녕"]]
    assert result.model_version == "2"
    only = await resolve(model.infer(X=[1.0], outputs=["Y"]))
    assert list(only) == ["Y"]
    talking = await resolve(client.model("talker"))
    streamed = await resolve(talking.stream(X=[[3.0]]))
    assert [type(item) for item in streamed] == [ts.InferResult, ts.InferResult]
    assert [item["Y"].tolist() for item in streamed] == [[[6.0]], [[6.0]]]
    assert not await resolve(client.is_model_ready("pair", "9"))  # a version it lacks
    with pytest.raises(ts.ModelNotFoundError):
        await resolve(client.model("pair", version="9"))


async def test_a_mock_fills_in_what_a_server_would(connect: Connect) -> None:
    # Results had no id, handler errors no model or request id, and a classification
    # asked of a handler's scores failed to read.
    def handler(op: Any, ctx: ts.CallContext) -> object:
        request = op.request if isinstance(op, ops.StreamInfer) else op
        x = request.inputs[0].array
        if isinstance(op, ops.StreamInfer):
            return [{"Y": x}, ts.InferenceError("the model failed at 2", status="INTERNAL")]
        if x[0, 0] < 0:
            raise ts.InferenceError("negative", status="INTERNAL")
        return {"Y": np.array([[0.1, 0.7, 0.2]] * len(x), np.float32)}

    classes = attrs.evolve(
        DOUBLE,
        versions=("1",),
        outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(3,))},
    )
    client, _ = connect(handler, models=(classes, TALKER))
    model = await resolve(client.model("double"))
    assert (await resolve(model.infer(X=[1.0], request_id="r1"))).id == "r1"
    with pytest.raises(ts.InferenceError) as caught:
        await resolve(model.infer(X=[-1.0], request_id="r2"))
    assert (caught.value.model, caught.value.request_id) == ("double", "r2")
    assert await resolve(model.classify(X=[[1.0]], top_k=2)) == [
        [ts.Classification(0.7, 1, None), ts.Classification(0.2, 2, None)]
    ]
    talker = await resolve(client.model("talker"))
    with pytest.raises(ts.InferenceError, match="failed at 2") as failed:
        await resolve(talker.stream(X=[[3.0]], request_id="s1"))
    assert (failed.value.model, failed.value.request_id) == ("talker", "s1")
    with pytest.raises(ts.ModelNotFoundError, match="'double' version 7 is not found"):
        await resolve(client.model("double", version="7"))
    assert [status.name for status in await resolve(client.models())] == ["double", "talker"]


@pytest.mark.parametrize(
    ("datatype", "scores", "expected"),
    [
        # -row wrapped unsigned scores (0 ranked first) and rounded big integers.
        ("UINT64", [0, 5, 2**64 - 1], [(2**64 - 1, 2), (5, 1), (0, 0)]),
        ("INT64", [2**53 + 1, 2**53, -1], [(2**53 + 1, 0), (2**53, 1), (-1, 2)]),
        # Triton ranked a leading NaN first; the mock put it last.
        ("FP32", [float("nan"), -1.0, 3.0], [(None, 0), (3.0, 2), (-1.0, 1)]),
    ],
)
async def test_a_mock_ranks_classes_as_triton_does(
    connect: Connect, datatype: str, scores: list[Any], expected: list[tuple[Any, int]]
) -> None:
    model = attrs.evolve(
        DOUBLE,
        versions=("1",),
        outputs={"Y": ts.TensorSpec(name="Y", datatype=datatype, shape=(3,))},
    )
    client, _ = connect(lambda op, ctx: {"Y": [scores]}, models=(model,))
    handle = await resolve(client.model("double"))
    (classes,) = await resolve(handle.classify(X=[[1.0]], top_k=3))
    assert [c.index for c in classes] == [index for _, index in expected]
    for c, (score, _) in zip(classes, expected, strict=True):
        assert c.score != c.score if score is None else c.score == score
        assert type(c.score) is type(score) or score is None


async def metadata(client: Any) -> object:
    return await resolve(client.server_metadata())


async def infer(client: Any) -> object:
    return await resolve((await resolve(client.model("double"))).infer(X=[1.0]))


async def stream(client: Any) -> object:
    return await resolve((await resolve(client.model("talker"))).stream(X=[[1.0]]))


@pytest.mark.parametrize(
    ("answer_of", "call", "refusal"),
    [
        (lambda op: 42 if isinstance(op, ops.InferRequest) else NotImplemented, infer, "mapping"),
        (lambda op: {"Y": np.ones((1, 1))}, stream, "iterable of items"),
        (lambda op: None, metadata, "answered None to GetServerMetadata"),
    ],
    ids=["infer-42", "stream-mapping", "metadata-none"],
)
async def test_a_mock_refuses_answers_of_the_wrong_kind(
    connect: Connect, answer_of: Any, call: Any, refusal: str
) -> None:
    def handler(op: Any, ctx: ts.CallContext) -> object:
        answer = answer_of(op)
        if answer is NotImplemented:
            raise NotImplementedError(op)
        return answer

    client, _ = connect(handler)
    with pytest.raises(TypeError, match=refusal):
        await call(client)


SHARED_ERROR = ts.ServerOverloadedError("the queue is full", status="UNAVAILABLE")


async def test_a_mock_leaves_the_handlers_error_as_it_was(connect: Connect) -> None:
    # (It wrote the first call's model and id into the handler's object: every later
    # call raised them.)
    def handler(op: Any, ctx: ts.CallContext) -> object:
        if isinstance(op, ops.InferRequest):
            raise SHARED_ERROR
        raise NotImplementedError(op)

    client, _ = connect(handler, retry=None)
    model = await resolve(client.model("double"))
    for request_id in ("r1", "r2"):
        with pytest.raises(ts.ServerOverloadedError) as caught:
            await resolve(model.infer(X=[1.0], request_id=request_id))
        assert (caught.value.model, caught.value.request_id) == ("double", request_id)
    assert (SHARED_ERROR.model, SHARED_ERROR.request_id) == (None, None)


@pytest.mark.parametrize("make", [ts.Client, ts.AsyncClient])
def test_a_transport_class_instead_of_an_instance_is_refused(make: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match=r"the class MockTransport \(make one"):
        make("grpc://test", transport=MockTransport)


async def test_an_async_generator_handler_streams_to_the_asyncio_client() -> None:
    async def handler(op: Any, ctx: ts.CallContext) -> object:
        if not isinstance(op, ops.StreamInfer):
            raise NotImplementedError(op)

        async def responses() -> AsyncIterator[object]:
            for step in range(2):
                yield {"Y": op.request.inputs[0].array + step}

        return responses()

    async with ts.AsyncClient(
        "grpc://test", transport=MockTransport(handler, models=MODELS)
    ) as client:
        talker = await client.model("talker")
        got = [result["Y"].tolist() async for result in talker.stream(X=[[1.0]])]
    assert got == [[[1.0]], [[2.0]]]


async def test_mock_records_every_attempt(connect: Connect) -> None:
    client, mock = connect(failing_twice({"name": "triton"})[0], retry=FAST)
    await resolve(client.server_metadata(timeout=3.0))
    assert [type(call) for call in mock.calls] == [testing.RecordedCall] * 3
    assert {(call.ctx.call, call.ctx.model, call.ctx.timeout) for call in mock.calls} == {
        ("server_metadata", None, 3.0)
    }


# 12. model_config


async def test_model_config_returns_the_config_json(shell: Shell) -> None:
    config = await resolve(shell.client.model_config("counter", headers=CALL_HEADERS))
    assert config == testing.model_config(COUNTER)
    assert "sequence_batching" in config
    assert ops_sent(shell.mock) == [ops.GetModelConfig("counter")]
    assert headers_seen(shell.mock) == [MERGED_HEADERS]


async def test_model_config_of_an_unknown_model_raises_model_not_found(shell: Shell) -> None:
    with pytest.raises(ts.ModelNotFoundError):
        await resolve(shell.client.model_config("nope"))


# Other calls, as users see their answers


async def test_classify_returns_the_top_classes_of_each_sample(shell: Shell) -> None:
    classes = await resolve(shell.double.classify(X=[[1.0], [2.0]], top_k=1))
    assert classes == [[ts.Classification(0.9, 1, "cat")]] * 2
    (request,) = requests_sent(shell.mock)
    assert [(o.name, o.class_count) for o in request.outputs or ()] == [("Y", 1)]


def short_of_a_row(op: Any, ctx: ts.CallContext) -> object:
    """Y = 2 * X, one row short for a batch that holds 777 (a model that breaks its batch)."""
    x = op.inputs[0].array
    return {"Y": x[:-1] * 2 if 777 in x and len(x) > 1 else x * 2}


async def test_an_answer_with_other_rows_may_have_run_and_map_sends_it_no_more(
    connect: Connect,
) -> None:
    # It said may_have_run=False, so map(errors="collect") sent the batch again sample by
    # sample: they ran twice, and the broken answer was hidden.
    client, mock = connect(short_of_a_row)
    model = await resolve(client.model("double"))
    sent_before = len(mock.calls)
    samples = [{"X": [float(n)]} for n in (1, 777, 3, 4)]
    outcomes = await resolve(model.map(samples, batch_size=4, errors="collect"))
    assert all(isinstance(outcome, ts.InferenceError) for outcome in outcomes)
    assert "should have 4 along its first axis" in str(outcomes[0])
    assert all(outcome.may_have_run for outcome in outcomes)
    assert len(mock.calls) == sent_before + 1  # the batch, once


async def test_a_chunk_answered_with_other_rows_names_its_rows_once(connect: Connect) -> None:
    client, _ = connect(short_of_a_row)
    model = await resolve(client.model("double"))
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    x[5] = 777
    with pytest.raises(ts.InferenceError, match="should have 4 along its first axis") as caught:
        await resolve(model.infer(X=x))
    assert str(caught.value).count("(rows 4-7 of a batch of 10") == 1
    assert caught.value.may_have_run


def y_for_positive_rows(op: Any, ctx: ts.CallContext) -> object:
    """Y = 2 * X, left out (as Triton lets a model do) when no X of the request is > 0."""
    x = op.inputs[0].array
    return {"Y": x * 2} if (x > 0).any() else {}


@pytest.mark.parametrize("first", [-1.0, 1.0])
async def test_chunks_that_answer_different_outputs_are_not_joined(
    connect: Connect, first: float
) -> None:
    # The first chunk's outputs alone were joined: the others' Y was dropped (an empty
    # result), or a chunk without it raised UnknownOutputError, may_have_run=False.
    client, _ = connect(y_for_positive_rows)
    model = await resolve(client.model("double"))
    x = np.array([[first]] * 4 + [[-first]] * 4, dtype=np.float32)
    with pytest.raises(ts.InferenceError, match="answered different outputs") as caught:
        await resolve(model.infer(X=x))
    assert caught.value.may_have_run
    assert "['Y']" in str(caught.value)


async def test_a_test_transport_on_an_http_url_gets_the_streams_it_answers(
    connect: Connect, mode: str
) -> None:
    # The early check of what the generate extension carries is the HTTP transport's: a
    # test double answers any stream (here a batch of 2, which the extension cannot carry).
    mock = MockTransport(answer, models=MODELS)
    kind = ts.Client if mode == "sync" else ts.AsyncClient
    client = kind("http://test", transport=mock)
    try:
        talker = await resolve(client.model("talker"))
        assert len(await resolve(talker.stream(X=[[1.0], [2.0]]))) == 3
    finally:
        await close(client)


def failing_rows(op: Any, ctx: ts.CallContext) -> object:
    x = op.inputs[0].array
    if (x < 0).any():
        raise ts.ServerOverloadedError("the queue is full", status="UNAVAILABLE", retryable=True)
    return {"Y": x * 2}


async def test_a_failed_request_of_a_split_batch_names_its_rows_and_may_have_run(
    connect: Connect,
) -> None:
    # The error was the server's alone, with may_have_run=False (and retryable): a retry of
    # the whole call would run again the requests that had run.
    client, _ = connect(failing_rows, retry=None)
    model = await resolve(client.model("double"))
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    x[6] = -1
    with pytest.raises(ts.ServerOverloadedError) as caught:
        await resolve(model.infer(X=x))
    assert "the queue is full (rows 4-7 of a batch of 10 sent as 3 requests" in str(caught.value)
    assert caught.value.may_have_run


async def test_map_yields_one_result_per_sample_in_order(shell: Shell) -> None:
    samples = [{"X": [float(n)]} for n in range(7)]
    results = await resolve(shell.double.map(samples, batch_size=3))
    assert [result["Y"].tolist() for result in results] == [[2.0 * n] for n in range(7)]
    assert batch_sizes(shell.mock) == [1, 3, 3]


async def test_leaving_map_early_waits_for_the_batches_in_flight(
    connect: Connect, mode: str
) -> None:
    # They are not cancelled (a request cancelled as the server answers it can crash older
    # Tritons): the first request answers once three are out, and the two others are
    # answered after the caller has left.
    sent: list[float] = []
    answered: list[float] = []
    three_out, three_out_async = threading.Event(), asyncio.Event()

    def handler(op: Any, ctx: ts.CallContext) -> object:
        x = op.inputs[0].array
        first = x[0, 0] == 0
        sent.append(float(x[0, 0]))
        if len(sent) == 3:
            three_out.set()
            three_out_async.set()

        def done() -> object:
            if not first:
                answered.append(float(x[0, 0]))
            return {"Y": x * 2}

        if mode == "sync":
            if first:
                three_out.wait(10)
            else:
                threading.Event().wait(0.05)
            return done()

        async def later() -> object:
            if first:
                await asyncio.wait_for(three_out_async.wait(), 10)
            else:
                await asyncio.sleep(0.05)
            return done()

        return later()

    client, _ = connect(handler)
    model = await resolve(client.model("double"))
    mapped = model.map([{"X": [float(n)]} for n in range(10)], batch_size=1, concurrency=3)
    result = await next_item(mapped)
    await close(mapped)
    assert result["Y"].tolist() == [0.0]
    assert sorted(sent) == [0.0, 1.0, 2.0]
    assert sorted(answered) == [1.0, 2.0]


async def test_cancelling_the_task_that_iterates_map_cancels_its_batches() -> None:
    running: list[float] = []
    cancelled: list[float] = []
    two_running = asyncio.Event()

    async def handler(op: Any, ctx: ts.CallContext) -> object:
        x = float(op.inputs[0].array[0, 0])
        running.append(x)
        if len(running) == 2:
            two_running.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return {"Y": op.inputs[0].array}

    mock = MockTransport(handler, models=MODELS)
    async with ts.AsyncClient("grpc://triton", transport=mock) as client:
        model = await client.model("double")
        samples = [{"X": [float(n)]} for n in range(5)]

        async def consume() -> list[ts.InferResult]:
            return [result async for result in model.map(samples, batch_size=1, concurrency=2)]

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(two_running.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sorted(cancelled) == [0.0, 1.0]


def test_closing_a_blocking_client_drops_the_chunks_not_started_without_waiting() -> None:
    # close() waited for every chunk's thread; chunks still waiting for one went out after.
    release = threading.Event()

    def handler(op: Any, ctx: ts.CallContext) -> object:
        release.wait(10)
        return {"Y": op.inputs[0].array}

    mock = MockTransport(handler, models=MODELS)
    client = ts.Client("grpc://triton", transport=mock)
    model = client.model("double")
    mock.calls.clear()
    rows = 3 * MAX_CHUNKS_IN_FLIGHT * DOUBLE.max_batch_size
    batch = np.zeros((rows, 1), np.float32)
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(model.infer, X=batch)
        while len(mock.calls) < MAX_CHUNKS_IN_FLIGHT:
            time.sleep(0.01)
        started = time.monotonic()
        client.close()
        assert time.monotonic() - started < 1
        release.set()
        error = call.exception(timeout=10)
    assert isinstance(error, ts.TritonError)
    assert "closed" in str(error), error
    assert len(mock.calls) == MAX_CHUNKS_IN_FLIGHT


def test_result_of_reads_text_of_any_shape_as_bytes() -> None:
    assert result_of("m", {"Y": "hello"})["Y"] == np.array(b"hello", dtype=object)
    assert result_of("m", {"Y": [["a", b"b"]]})["Y"].tolist() == [[b"a", b"b"]]
    assert result_of("m", {"Y": [1.5]})["Y"].dtype == np.float64


class Through:
    """An iterator of another, as typed stubs' and frontends' streams wrap the model's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Through:
        return self

    def __next__(self) -> Any:
        return next(self.inner)

    def __aiter__(self) -> Through:
        return self

    async def __anext__(self) -> Any:
        return await anext(self.inner)


def test_a_second_thread_reading_a_wrapped_stream_is_refused_and_leaves_it() -> None:
    # The inner stream refused the second reader, and the outer one kept that refusal as
    # its end, so the first reader's next read failed too.
    def slowly() -> Iterator[str]:
        for word in ("a", "b", "c"):
            time.sleep(0.1)
            yield word

    stream = ts.ResponseStream(Through(ts.ResponseStream(slowly())))
    words: list[str] = []
    reader = threading.Thread(target=lambda: words.extend(stream))
    reader.start()
    time.sleep(0.05)  # (the reader waits inside the stream now)
    with pytest.raises(ts.TritonError, match="being read by another thread"):
        next(stream)
    reader.join(5)
    assert words == ["a", "b", "c"]


async def test_a_second_task_reading_a_wrapped_stream_is_refused_and_leaves_it() -> None:
    async def slowly() -> AsyncIterator[str]:
        for word in ("a", "b", "c"):
            await asyncio.sleep(0.05)
            yield word

    stream = ts.AsyncResponseStream(Through(ts.AsyncResponseStream(slowly())))
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.01)
    with pytest.raises(ts.TritonError, match="being read by another task"):
        await anext(stream)
    assert [await first] + [word async for word in stream] == ["a", "b", "c"]
