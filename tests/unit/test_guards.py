"""Guards found by review: what hooks set, header names, secrets in URLs and reprs,
argument types of every call, gateway errors, stream timeouts, hook context."""

from __future__ import annotations

import contextvars
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk._errors import classify_status
from triton_sdk.testing import MockTransport

from .._regions import region_files
from ._both import resolve

DOUBLE = ts.ModelSpec(
    name="double",
    max_batch_size=2,
    inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
    outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(1,))},
)
TALKER = ts.ModelSpec(
    name="talker",
    max_batch_size=0,
    inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
    outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(1,))},
    decoupled=True,
)


def answer(op: Any, ctx: Any) -> Any:
    if isinstance(op, ops.InferRequest):
        return {"Y": op.inputs[0].array * 2}
    if isinstance(op, ops.StreamInfer):
        return [ts.testing.result_of("talker", {"Y": np.ones(1, np.float32)})]
    return None


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def client_of(mode: str, **options: Any) -> Any:
    kind = ts.Client if mode == "sync" else ts.AsyncClient
    options.setdefault("transport", MockTransport(answer, models=[DOUBLE, TALKER]))
    return kind("grpc://test", **options)


class SetsHeader(ts.CallHook):
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        ctx.headers = {**ctx.headers, self.name: self.value}


@pytest.mark.parametrize(
    ("name", "value"), [("authorization", "Bearer SECRET\r\nX: y"), ("x~y", "1"), ("x-bin", "1")]
)
async def test_headers_a_hook_sets_are_checked_before_sending(
    mode: str, name: str, value: str
) -> None:
    client = client_of(mode, hooks=[SetsHeader(name, value)])
    mock = client._transport
    with pytest.raises(ts.InvalidInputError) as caught:
        await resolve(client.server_metadata())
    assert mock.calls == []
    assert "SECRET" not in str(caught.value)


async def test_a_timeout_a_hook_sets_is_checked(mode: str) -> None:
    class BadTimeout(ts.CallHook):
        def before_send(self, op: Any, ctx: ts.CallContext) -> None:
            ctx.timeout = "5"  # type: ignore[assignment]

    client = client_of(mode, hooks=[BadTimeout()])
    with pytest.raises(ts.InvalidInputError, match="timeout"):
        await resolve(client.server_metadata())


@pytest.mark.parametrize(
    "name",
    ["x~token", "x-bin", "grpc-timeout", "Content-Length", "inference-header-content-length"],
)
def test_header_names_the_transports_own_or_grpc_refuses_are_refused(name: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="header"):
        ts.Client("grpc://test", headers={name: "1"}, transport=MockTransport())


def test_reprs_of_call_contexts_hide_header_values() -> None:
    ctx = ts.CallContext("infer", "m", {"authorization": "Bearer SECRET"}, 1.0)
    assert "SECRET" not in repr(ctx)


@pytest.mark.parametrize(
    "url",
    [
        "http://user:1234/SECRET@host:8000",
        "http://user:abc/SECRET@host",
        "grpc://tok:SECRET@host:8001",
        # An "@" in the query or fragment showed all that followed it.
        "http://127.0.0.1:8000/?user=me@corp.com&api_key=SECRET",
        "grpc://h:8001?x=a@b&token=SECRET",
        "http://h:8000#k=a@SECRET",
        "http://user:pa?SECRET@host:8000",
        "http://user:SECRET/s?x@host:8000/v",
    ],
)
def test_credentials_in_urls_are_refused_and_never_shown(url: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="headers") as caught:
        ts.Client(url)
    assert "SECRET" not in str(caught.value)


def test_a_query_is_named_as_a_query() -> None:
    with pytest.raises(ts.InvalidInputError, match="cannot have a query") as caught:
        ts.Client("http://127.0.0.1:8000/?user=me@corp.com&api_key=SECRET")
    assert "SECRET" not in str(caught.value)
    with pytest.raises(ts.InvalidInputError, match="cannot have a query") as caught:
        ts.Client("http://127.0.0.1:8000/v2?api_key=SECRET")
    assert "'http://127.0.0.1:8000/v2?***'" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://u:SECRET@127.0.0.1:1/metrics",
        "http://127.0.0.1:1/metrics?token=SECRET",
        "http://127.0.0.1:1/metrics?x=a@b&token=SECRET",
    ],
)
async def test_metrics_urls_with_credentials_are_refused_and_never_shown(
    mode: str, url: str
) -> None:
    with pytest.raises(ts.InvalidInputError) as made:
        client_of(mode, metrics_url=url)
    assert "SECRET" not in str(made.value)
    client = client_of(mode)
    with pytest.raises(ts.InvalidInputError) as called:
        await resolve(client.metrics(url=url))
    assert "SECRET" not in str(called.value)
    assert client._transport.calls == []


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: ts.RetryPolicy(max_attempts="3"), "max_attempts"),  # type: ignore[arg-type]
        (lambda: ts.RetryPolicy(initial_backoff="0.1"), "initial_backoff"),  # type: ignore[arg-type]
        (lambda: ts.RetryPolicy(max_attempts=2.5), "max_attempts"),  # type: ignore[arg-type]
        (lambda: ts.RetryPolicy(deadline="5"), "deadline"),  # type: ignore[arg-type]
        (lambda: ts.TLSConfig(ca_file=123), "paths"),  # type: ignore[arg-type]
        (lambda: ts.TLSConfig(server_hostname=1), "server_hostname"),  # type: ignore[arg-type]
        (lambda: client_of("sync", hooks=ts.CallHook()), "hooks"),
        (lambda: ts.Client("grpc://t", transport=object()), "transport"),  # type: ignore[arg-type]
    ],
)
def test_configuration_of_the_wrong_type_is_refused_naming_it(make: Any, argument: str) -> None:
    with pytest.raises(ts.InvalidInputError, match=argument):
        make()


def test_tls_files_may_be_paths() -> None:
    assert ts.TLSConfig(ca_file=Path("/etc/ca.pem")).ca_file == "/etc/ca.pem"


@pytest.mark.parametrize(
    "call",
    [
        lambda c, m: c.load_model("double", config={"a": object()}),
        lambda c, m: c.load_model("double", config=[1]),
        lambda c, m: c.load_model("double", files={"file:a": "text, not bytes"}),
        # The server's answers to these said only that the load failed:
        lambda c, m: c.load_model("double", config="{not json"),
        lambda c, m: c.load_model("double", config="{}", files={"1/model.py": b"x"}),
        lambda c, m: c.load_model("double", files={"file:1/model.py": b"x"}),
        lambda c, m: c.model_statistics(None, "1"),  # (the server ignored the version)
        lambda c, m: c.unload_model("double", unload_dependents="yes"),
        lambda c, m: c.update_trace_settings(level=[1]),
        lambda c, m: m.generate([1, 2]),
        lambda c, m: c.metrics(url=123),
    ],
    ids=[
        "config-object",
        "config-list",
        "files-str",
        "config-not-json",
        "files-without-prefix",
        "files-without-config",
        "statistics-version-without-name",
        "dependents-str",
        "level-int",
        "fields",
        "url",
    ],
)
async def test_operation_arguments_of_the_wrong_type_are_refused(mode: str, call: Any) -> None:
    client = client_of(mode)
    model = await resolve(client.model("double"))
    sent = len(client._transport.calls)
    with pytest.raises(ts.InvalidInputError):
        await resolve(call(client, model))
    assert len(client._transport.calls) == sent


@pytest.mark.parametrize("status", [502, 504])
def test_a_gateway_that_lost_the_answer_may_have_run_the_request(status: int) -> None:
    error = classify_status(status, "Bad Gateway")
    assert error.retryable
    assert error.may_have_run


async def test_a_stream_waits_per_response_beyond_the_retry_deadline(mode: str) -> None:
    client = client_of(mode, retry=ts.RetryPolicy.resilient())
    model = await resolve(client.model("talker"))
    await resolve(model.stream(X=[1.0], timeout=120))
    (stream_call,) = [c for c in client._transport.calls if c.op.call == "stream"]
    assert stream_call.ctx.timeout == 120
    assert stream_call.ctx.deadline_at is None


TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="none")


async def test_hooks_see_the_callers_context_in_every_chunk(mode: str) -> None:
    seen: list[str] = []

    class Tracer(ts.CallHook):
        def before_send(self, op: Any, ctx: ts.CallContext) -> None:
            seen.append(TRACE.get())

    client = client_of(mode, hooks=[Tracer()])
    model = await resolve(client.model("double"))
    TRACE.set("span-1")
    await resolve(model.infer(X=[[1.0]] * 5))  # 3 chunks of at most 2
    samples = [{"X": [float(i)]} for i in range(5)]
    await resolve(model.map(samples, batch_size=2))
    assert seen[-6:] == ["span-1"] * 6


def test_no_region_files_are_left_by_these_tests() -> None:
    assert region_files() == []


@pytest.mark.parametrize("status", ["UNIMPLEMENTED", 404])
async def test_a_stream_the_server_has_no_endpoint_for_names_the_operation(
    mode: str, status: object
) -> None:
    def refuse(op: Any, ctx: Any) -> Any:
        return ts.UnsupportedError("Not Found", status=status)

    client = client_of(mode, transport=MockTransport(refuse, models=[TALKER]))
    model = await resolve(client.model("talker"))
    with pytest.raises(ts.UnsupportedError) as caught:
        await resolve(model.stream(X=[1.0]))
    assert "does not support stream" in str(caught.value)
    assert "grpc://test" in str(caught.value)  # the server is named
    assert caught.value.status == status
