"""Request headers against the real server: client headers, per-call headers on every kind
of call, which of the two wins, and invalid headers.

The session server forwards headers named x-... to the models as request parameters, and
`echo_headers` / `echo_headers_stream` send their parameters back. Triton forwards no
headers on the HTTP generate extension (which carries model.stream over HTTP), and
`accumulate` cannot echo: those calls are checked on a guarded server of their own that
refuses inference without a key header.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from .conftest import FIXTURE_MODELS, client_for, inference_count
from .test_sequences import sequence


def forwarded(result: ts.InferResult) -> dict[str, str]:
    """The x-... headers the model saw, names lower-cased (HTTP keeps the case sent)."""
    parameters = json.loads(result.as_strings("HEADERS").reshape(-1)[0])
    headers = {name.lower(): value for name, value in parameters.items()}
    assert len(headers) == len(parameters), f"one name arrived twice: {parameters}"
    return {name: value for name, value in headers.items() if name.startswith("x-")}


# Echoed by the model, on the session server


def test_client_headers_reach_infer(make_client: Any) -> None:
    client = make_client(headers={"x-client": "c"})
    result = client.model("echo_headers").infer(INPUT=[[1]])
    assert forwarded(result) == {"x-client": "c"}


def test_per_call_headers_reach_infer_with_the_clients(make_client: Any) -> None:
    client = make_client(headers={"x-client": "c"})
    result = client.model("echo_headers").infer(INPUT=[[1]], headers={"x-call": "1"})
    assert forwarded(result) == {"x-client": "c", "x-call": "1"}


def test_per_call_headers_reach_infer_sample(client: Any) -> None:
    result = client.model("echo_headers").infer_sample(INPUT=[1], headers={"x-call": "2"})
    assert forwarded(result) == {"x-call": "2"}


def test_per_call_headers_reach_every_batch_of_map(client: Any) -> None:
    samples = [{"INPUT": [index]} for index in range(7)]  # batches of 3, 3 and 1
    results = list(client.model("echo_headers").map(samples, batch_size=3, headers={"x-map": "3"}))
    assert len(results) == 7
    assert all(forwarded(result) == {"x-map": "3"} for result in results)


@pytest.mark.parametrize("protocol", ["grpc"])  # HTTP: see test_per_call_headers_reach_streams
def test_per_call_headers_reach_a_stream(client: Any) -> None:
    (result,) = client.model("echo_headers_stream").stream(INPUT=[1], headers={"x-call": "4"})
    assert forwarded(result) == {"x-call": "4"}


def test_a_per_call_header_wins_over_the_clients_whatever_the_case(make_client: Any) -> None:
    client = make_client(headers={"X-Token": "client", "x-other": "kept"})
    result = client.model("echo_headers").infer(INPUT=[[1]], headers={"x-token": "call"})
    assert forwarded(result) == {"x-token": "call", "x-other": "kept"}


def test_per_call_headers_do_not_leak_into_the_next_call(make_client: Any) -> None:
    model = make_client(headers={"x-client": "c"}).model("echo_headers")
    model.infer(INPUT=[[1]], headers={"x-once": "1", "x-client": "call"})
    assert forwarded(model.infer(INPUT=[[1]])) == {"x-client": "c"}


@pytest.mark.parametrize(
    ("name", "value"),
    [("bad name", "v"), ("x-a", "line\nbreak"), ("x-b", "a\ttab")],
    ids=["name", "value", "tab"],
)
def test_invalid_per_call_headers_are_refused_before_sending(
    client: Any, server: LocalServer, name: str, value: str
) -> None:
    model = client.model("echo_headers")
    before = inference_count(server, "echo_headers")
    with pytest.raises(ts.InvalidInputError, match=re.escape(name)):
        model.infer(INPUT=[[1]], headers={name: value})
    assert inference_count(server, "echo_headers") == before


# On a server that refuses inference without a key header


# Over gRPC, Triton expects the key under its "triton-grpc-protocol-" prefix.
KEYS = {"grpc": {"triton-grpc-protocol-x-key": "open"}, "http": {"x-key": "open"}}


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repository = tmp_path_factory.mktemp("guarded_repository")
    for name in ("echo_headers_stream", "accumulate"):
        (repository / name).symlink_to(FIXTURE_MODELS / name, target_is_directory=True)
    guard = [
        "--grpc-restricted-protocol=inference,health:x-key=open",
        "--http-restricted-api=inference:x-key=open",
    ]
    with LocalServer(repository, extra_args=guard) as running:
        yield running


@pytest.fixture
def key(protocol: str) -> dict[str, str]:
    return KEYS[protocol]


@pytest.fixture
def guarded_client(
    guarded_server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    with client_for(guarded_server, protocol, mode, loop_thread) as client:
        yield client


@pytest.mark.parametrize("protocol", ["grpc"])  # (a LocalServer needs HTTP's health open)
def test_waiting_for_a_server_whose_health_wants_a_key_raises_at_once(
    guarded_client: Any, key: dict[str, str]
) -> None:
    # It polled until the timeout: no wait gives the probe the key it lacks.
    started = time.monotonic()
    with pytest.raises(ts.InferenceError, match="restricted"):
        guarded_client.wait_until_ready(timeout=30)
    assert time.monotonic() - started < 10
    guarded_client.wait_until_ready(timeout=30, headers=key)


@pytest.mark.parametrize("protocol", ["grpc"])
def test_a_user_agent_is_refused_over_grpc_which_sends_its_own(
    client: Any, server: LocalServer
) -> None:
    # gRPC put "grpc-python/..." in its place: the server never saw the one given.
    model = client.model("echo_headers")
    before = inference_count(server, "echo_headers")
    # (the blocking client said "gRPC refused the request: ...": it was the SDK's refusal)
    with pytest.raises(ts.InvalidInputError, match=r"^header 'user-agent' cannot be sent over"):
        model.infer(INPUT=[[1]], headers={"User-Agent": "me/1"})
    with pytest.raises(ts.InvalidInputError, match=r"^header 'user-agent' cannot be sent over"):
        list(client.model("echo_headers_stream").stream(INPUT=[1], headers={"user-agent": "x"}))
    assert inference_count(server, "echo_headers") == before


def test_the_guard_refuses_a_stream_without_the_key(guarded_client: Any) -> None:
    with pytest.raises(ts.TritonError):
        list(guarded_client.model("echo_headers_stream").stream(INPUT=[1]))


def test_client_headers_reach_streams(
    guarded_server: LocalServer,
    protocol: str,
    mode: str,
    loop_thread: LoopThread,
    key: dict[str, str],
) -> None:
    with client_for(guarded_server, protocol, mode, loop_thread, headers=key) as client:
        assert len(list(client.model("echo_headers_stream").stream(INPUT=[1]))) == 1


def test_per_call_headers_reach_streams(guarded_client: Any, key: dict[str, str]) -> None:
    results = list(guarded_client.model("echo_headers_stream").stream(INPUT=[1], headers=key))
    assert len(results) == 1


def test_per_call_headers_reach_sequences(
    guarded_client: Any, loop_thread: LoopThread, key: dict[str, str]
) -> None:
    with sequence(guarded_client.model("accumulate"), loop_thread) as seq:
        assert int(seq.infer(INPUT=[[2]], headers=key)["OUTPUT"].sum()) == 2
        assert int(seq.infer_sample(INPUT=[3], end=True, headers=key)["OUTPUT"].sum()) == 5
