"""The error table, against the real server: every failure arrives as a TritonError subclass.

Each test runs on grpc/http x sync/async unless it says otherwise. The exception types
checked here are the public contract (API.md, "Errors"); the messages are Triton's own.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import grpc
import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk._request import InferRequest, RequestedOutput
from triton_sdk._shaping import Tensor
from triton_sdk.local import LocalServer

from ._blocking import Blocking, LoopThread
from .conftest import EXAMPLE_MODELS, client_for, close_client, inference_count, open_client

ADD_SUB_INPUTS: dict[str, Any] = {"INPUT0": [1.0, 2.0, 3.0, 4.0], "INPUT1": [1.0, 1.0, 1.0, 1.0]}


def _is_sdk_error(error: BaseException) -> bool:
    return isinstance(error, ts.TritonError) and type(error).__module__.startswith("triton_sdk")


def closed_port() -> int:
    """A loopback port nobody listens on: bound once by a fresh socket, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def send_raw(client: Any, loop_thread: LoopThread, request: InferRequest, timeout: float) -> Any:
    """Send a request through the client's transport, skipping client-side checks.

    The public ``infer`` refuses unknown outputs and wrong shapes before sending (that is
    tested below), so the only way to see how the *server's* refusal is mapped is to hand
    a hand-built request to the transport, which is where the mapping happens.
    """
    ctx = ts.CallContext("infer", request.model, {}, timeout)
    if isinstance(client, Blocking):
        return loop_thread.run(client.target._transport.acall(request, ctx))
    return client._transport.call(request, ctx)


def settled_count(server: LocalServer, model: str) -> int:
    """The model's inference count once no earlier request is still being counted."""
    previous = inference_count(server, model)
    for _ in range(40):
        time.sleep(0.05)
        current = inference_count(server, model)
        if current == previous:
            return current
        previous = current
    return previous


def wait_for_count(server: LocalServer, model: str, expected: int, within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    count = inference_count(server, model)
    while count < expected and time.monotonic() < deadline:
        time.sleep(0.05)
        count = inference_count(server, model)
    return count


# Unknown model


def test_unknown_model_handle(client: Any) -> None:
    with pytest.raises(ts.ModelNotFoundError, match="no_such_model") as caught:
        client.model("no_such_model")
    assert caught.value.model == "no_such_model"
    assert caught.value.status in ("NOT_FOUND", 404)


def test_a_model_name_with_a_nul_reaches_no_model(client: Any) -> None:
    # gRPC carried the whole name and the server cut it at the NUL: this ran 'classifier'.
    name = "classifier\x00junk"
    for call in (
        lambda: client.model(name),
        lambda: client.is_model_ready(name),
        lambda: client.model_statistics(name),
    ):
        with pytest.raises(ts.InvalidInputError, match="model name has a NUL character"):
            call()


def test_an_unknown_model_is_named_as_given_not_as_the_http_path_carried_it(
    client: Any, protocol: str
) -> None:
    # Triton's HTTP endpoint echoed the path's escapes: "'no%20such%2Fmodel%20%C3%A9'".
    name = "no such/model é"
    for call in (lambda: client.model(name), lambda: client.model_statistics(name)):
        with pytest.raises(ts.ModelNotFoundError) as caught:
            call()
        message = str(caught.value)
        assert repr(name) in message
        # The escaped name is shown once, in what says what happened.
        assert message.count("no%20such") == (1 if protocol == "http" else 0), message
        if protocol == "http":
            assert "over HTTP the name travels as 'no%20such%2Fmodel%20%C3%A9'" in message


def test_an_unknown_model_names_the_close_ones_and_the_repository(
    client: Any, protocol: str
) -> None:
    with pytest.raises(ts.ModelNotFoundError) as caught:
        client.model("text_embd")
    message = str(caught.value)
    assert "did you mean 'text_embed'?" in message
    assert "The repository has 'accumulate'" in message
    assert caught.value.model == "text_embd"
    # The suggestions replace the error, not its cause: gRPC's failure stays reachable.
    if protocol == "grpc":
        assert isinstance(caught.value.__cause__, grpc.RpcError)
    else:
        assert caught.value.__cause__ is None  # an HTTP error answer has no exception


def test_unknown_model_infer(client: Any, loop_thread: LoopThread) -> None:
    # A request for a model the server does not know, as a stale handle would send it.
    request = InferRequest(
        model="no_such_model",
        inputs=[Tensor("INPUT0", "FP32", np.zeros(4, dtype=np.float32))],
    )
    with pytest.raises(ts.ModelNotFoundError) as caught:
        send_raw(client, loop_thread, request, 10.0)
    assert caught.value.model == "no_such_model"


# Unloaded model: a server of its own, so that unloading does not disturb other tests


@pytest.fixture(scope="module")
def unload_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repository = tmp_path_factory.mktemp("unload_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    # A model named as "a b" travels in an HTTP path (see the test of escaped names).
    escaped = repository / ESCAPED_TWIN
    shutil.copytree(EXAMPLE_MODELS / "add_sub", escaped, ignore=shutil.ignore_patterns("__py*"))
    config = escaped / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', f'name: "{ESCAPED_TWIN}"'))
    with LocalServer(repository) as running:
        yield running


@pytest.fixture
def unload_client(
    unload_server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    with client_for(unload_server, protocol, mode, loop_thread) as client:
        yield client


ESCAPED_TWIN = "a%20b"


def test_a_model_named_as_another_name_travels_over_http_is_not_taken_for_it(
    unload_client: Any,
) -> None:
    # Triton's HTTP endpoint looks up "a%20b" as it travels: the handle of "a b" was that
    # model's (named "a%20b"), and its statistics were too.
    for call in (
        lambda: unload_client.model("a b"),
        lambda: unload_client.model_config("a b"),
        lambda: unload_client.model_statistics("a b"),
    ):
        with pytest.raises(ts.ModelNotFoundError) as caught:
            call()
        assert caught.value.model == "a b"
    if unload_client.url.startswith("http"):
        assert "the model 'a%20b' answered" in str(caught.value)
    else:
        assert unload_client.model(ESCAPED_TWIN).name == ESCAPED_TWIN


def test_unloaded_model(unload_client: Any) -> None:
    client = unload_client
    model = client.model("add_sub")
    pinned = client.model("add_sub", "1")
    assert model.infer(**ADD_SUB_INPUTS)["OUTPUT0"].tolist() == [2.0, 3.0, 4.0, 5.0]
    client.unload_model("add_sub")
    try:
        assert not client.is_model_ready("add_sub")
        with pytest.raises(ts.ModelNotReadyError) as caught:
            model.infer(**ADD_SUB_INPUTS)
        assert caught.value.model == "add_sub"
        with pytest.raises(ts.ModelNotReadyError):
            client.model("add_sub")
        # A version asked for by number: "version 1 is not at ready state", which was a
        # retried connection error over gRPC and a retried 503 over HTTP.
        for call in (lambda: pinned.infer(**ADD_SUB_INPUTS), lambda: client.model("add_sub", "1")):
            with pytest.raises(ts.ModelNotReadyError, match="not at ready state") as caught:
                call()
            assert not caught.value.retryable
            assert not caught.value.may_have_run
    finally:
        client.load_model("add_sub")
    assert client.is_model_ready("add_sub")
    assert model.infer(**ADD_SUB_INPUTS)["OUTPUT1"].tolist() == [0.0, 1.0, 2.0, 3.0]


# Requests the server refuses (sent raw, past the client-side checks)


def _add_sub_tensors(shape: tuple[int, ...] = (4,)) -> list[Tensor]:
    return [
        Tensor("INPUT0", "FP32", np.arange(4, dtype=np.float32).reshape(shape)),
        Tensor("INPUT1", "FP32", np.ones(4, dtype=np.float32).reshape(shape)),
    ]


def _expected_status(protocol: str) -> str | int:
    return "INVALID_ARGUMENT" if protocol == "grpc" else 400


def test_raw_request_is_accepted(client: Any, loop_thread: LoopThread) -> None:
    # The control for the two tests below: the same raw path with a valid request works.
    request = InferRequest(model="add_sub", inputs=_add_sub_tensors())
    result = send_raw(client, loop_thread, request, 10.0)
    assert result["OUTPUT0"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_unknown_output_refused_by_server(
    client: Any, loop_thread: LoopThread, protocol: str
) -> None:
    request = InferRequest(
        model="add_sub",
        inputs=_add_sub_tensors(),
        outputs=[RequestedOutput("NO_SUCH_OUTPUT")],
        request_id="unknown-output-1",
    )
    with pytest.raises(ts.InferenceError) as caught:
        send_raw(client, loop_thread, request, 10.0)
    error = caught.value
    assert error.status == _expected_status(protocol)
    assert error.model == "add_sub"
    assert error.request_id == "unknown-output-1"
    assert not error.retryable
    assert "NO_SUCH_OUTPUT" in str(error)


def test_wrong_shape_refused_by_server(client: Any, loop_thread: LoopThread, protocol: str) -> None:
    # The data agrees with the declared shape [2, 2]; only the model wants [4].
    request = InferRequest(model="add_sub", inputs=_add_sub_tensors((2, 2)))
    _assert_refused_for_its_shape(client, loop_thread, protocol, request, 10.0)


def _assert_refused_for_its_shape(
    client: Any, loop_thread: LoopThread, protocol: str, request: InferRequest, timeout: float
) -> None:
    """The server refuses ``request``'s shape: InvalidArgument / 400, not retryable."""
    with pytest.raises(ts.InferenceError) as caught:
        send_raw(client, loop_thread, request, timeout)
    error = caught.value
    assert error.status == _expected_status(protocol)
    assert error.model == request.model
    assert not error.retryable
    assert "shape" in str(error)


def test_a_large_request_refused_by_the_server_keeps_its_status(
    client: Any, loop_thread: LoopThread, protocol: str
) -> None:
    # Over gRPC, a request of 1 MiB or more goes as a stream of one message; the server
    # answers it as the unary call it is, so its refusal keeps its status code.
    too_long = np.zeros((1, 262144 + 1), dtype=np.float32)  # big_fixed wants [-1, 262144]
    request = InferRequest(model="big_fixed", inputs=[Tensor("X", "FP32", too_long)])
    _assert_refused_for_its_shape(client, loop_thread, protocol, request, 30.0)
    unknown = InferRequest(model="no_such_model", inputs=request.inputs)
    with pytest.raises(ts.ModelNotFoundError):
        send_raw(client, loop_thread, unknown, 30.0)


# Inputs refused on the client: InvalidInputError, and nothing reaches the server

REFUSED: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "missing_input": ("add_sub", {"INPUT0": [1.0, 2.0, 3.0, 4.0]}, ["INPUT1", "INPUT0"]),
    "unknown_input": ("add_sub", {**ADD_SUB_INPUTS, "INPUT9": [1.0]}, ["INPUT9", "INPUT0"]),
    "float_into_int32": ("all_dtypes", {"IN_INT32": np.array([[1.5, 2.5]])}, ["IN_INT32"]),
    "wrong_shape": ("add_sub", {"INPUT0": [1.0, 2.0, 3.0], "INPUT1": [1.0] * 4}, ["INPUT0"]),
    "unknown_output": ("add_sub", {**ADD_SUB_INPUTS, "outputs": ["NOPE"]}, ["NOPE"]),
    # Every input optional and none given: the server refused it ("request has 0 inputs").
    "no_input_of_a_batched_model": ("all_dtypes", {}, ["batch size", "IN_BOOL"]),
}
VALID: dict[str, dict[str, Any]] = {
    "add_sub": ADD_SUB_INPUTS,
    "all_dtypes": {"IN_INT32": np.array([[1, 2]], dtype=np.int32)},
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_on_client_sends_nothing(client: Any, server: LocalServer, case: str) -> None:
    name, arguments, mentioned = REFUSED[case]
    model = client.model(name)
    before = settled_count(server, name)
    with pytest.raises(ts.InvalidInputError) as caught:
        model.infer(**arguments)
    assert isinstance(caught.value, ValueError)
    for word in mentioned:
        assert word in str(caught.value)
    time.sleep(0.1)
    assert inference_count(server, name) == before
    # The control: a valid request is counted, exactly once.
    model.infer(**VALID[name])
    assert wait_for_count(server, name, before + 1) == before + 1
    assert settled_count(server, name) == before + 1


# Unreachable server


@pytest.fixture
def dead_client(protocol: str, mode: str, loop_thread: LoopThread) -> Iterator[Any]:
    scheme = "grpc" if protocol == "grpc" else "http"
    url = f"{scheme}://127.0.0.1:{closed_port()}"
    client = open_client(url, mode, loop_thread, retry=ts.RetryPolicy.none(), timeout=5.0)
    yield client
    close_client(client, loop_thread)


DEAD_CALLS: dict[str, Callable[[Any], Any]] = {
    "server_metadata": lambda client: client.server_metadata(),
    "models": lambda client: client.models(),
    "model": lambda client: client.model("add_sub"),
    "load_model": lambda client: client.load_model("add_sub"),
    "unload_model": lambda client: client.unload_model("add_sub"),
}


@pytest.mark.parametrize("call", list(DEAD_CALLS))
def test_unreachable_server(dead_client: Any, protocol: str, call: str) -> None:
    with pytest.raises(ts.TritonConnectionError) as caught:
        DEAD_CALLS[call](dead_client)
    error = caught.value
    assert _is_sdk_error(error)
    assert isinstance(error, ConnectionError)
    cause = error.__cause__
    if protocol == "grpc":
        assert isinstance(cause, grpc.RpcError)
    else:
        assert isinstance(cause, ConnectionRefusedError | aiohttp.ClientConnectorError)


def test_an_unreachable_server_is_named(dead_client: Any, protocol: str) -> None:
    with pytest.raises(ts.TritonConnectionError) as caught:
        dead_client.server_metadata()
    assert dead_client.url.split("//")[1] in str(caught.value)


def test_the_wrong_protocol_for_a_port_says_which_to_use(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    # http:// on the gRPC port, and gRPC on the HTTP port (a URL without a scheme).
    url = (
        f"127.0.0.1:{server.http_port}"
        if protocol == "grpc"
        else f"http://127.0.0.1:{server.grpc_port}"
    )
    client = open_client(url, mode, loop_thread)  # the default retry policy
    try:
        started = time.monotonic()
        with pytest.raises(ts.TritonConnectionError) as caught:
            client.server_metadata()
        assert not caught.value.retryable
        assert time.monotonic() - started < 0.1 + 0.5  # not retried with backoff
        expected = "Triton's HTTP port (use http://)" if protocol == "grpc" else "use grpc://"
        assert expected in str(caught.value)
        assert not caught.value.may_have_run  # (grpc sends nothing before the server's SETTINGS)
    finally:
        close_client(client, loop_thread)


def test_a_timeout_names_the_model_and_the_time(client: Any) -> None:
    with pytest.raises(ts.TritonTimeoutError) as caught:
        client.model("sleep").infer(SECONDS=[2.0], timeout=0.3)
    assert str(caught.value).startswith("no answer from model 'sleep' within 0.3 s")
    assert "may still run" in str(caught.value)


def test_health_of_unreachable_server_is_false(dead_client: Any) -> None:
    assert dead_client.is_live() is False
    assert dead_client.is_ready() is False
    assert dead_client.is_model_ready("add_sub") is False


def test_health_of_running_server_is_true(client: Any) -> None:
    assert client.is_live() is True
    assert client.is_ready() is True
    assert client.is_model_ready("add_sub") is True
    assert client.is_model_ready("no_such_model") is False


# Decoupled model called with plain infer


@pytest.mark.timeout(60)
def test_decoupled_model_with_plain_infer(client: Any) -> None:
    model = client.model("repeat")
    started = time.monotonic()
    with pytest.raises(ts.TritonError) as caught:
        model.infer(IN=np.array([1, 2, 3], dtype=np.int32), timeout=10.0)
    assert _is_sdk_error(caught.value)
    # An answer, not a hang ended by the timeout.
    assert not isinstance(caught.value, ts.TritonTimeoutError)
    assert "decoupled" in str(caught.value)
    assert time.monotonic() - started < 10.0


def test_an_error_of_a_request_without_an_id_has_request_id_none(client: Any) -> None:
    """The same on every transport: gRPC and timeouts gave "", HTTP None."""
    model = client.model("sleep")
    with pytest.raises(ts.InferenceError) as failed:
        model.infer(SECONDS=[-0.01])  # the model refuses a negative time
    with pytest.raises(ts.TritonTimeoutError) as timed_out:
        model.infer(SECONDS=[1.0], timeout=0.2)
    assert failed.value.request_id is None
    assert timed_out.value.request_id is None
    with pytest.raises(ts.InferenceError) as named:
        model.infer(SECONDS=[-0.01], request_id="r-7")
    assert named.value.request_id == "r-7"
