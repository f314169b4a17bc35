"""The core surface on Open Inference Protocol servers other than Triton: real MLServer
and KServe servers, gRPC and HTTP, blocking and asyncio (see conftest.py).

The models (mlserver_models/oip_models.py, kserve_server.py): add_sub (FP32 rows of 4,
two inputs, two outputs), upper (BYTES), vector (a fixed [3]: no batch axis), bare
(vector, its metadata declaring no tensors), params (the request's parameters, as JSON);
on MLServer also repeat, which streams one
response per element of its input.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts

from ..integration._blocking import Blocking, LoopThread
from .conftest import OIPServer


def test_health_and_server_metadata(client: Any, server: OIPServer) -> None:
    assert client.is_live()
    assert client.is_ready()
    assert client.is_model_ready("add_sub")
    assert client.server_metadata().name == server.name


def test_a_model_handle_from_metadata_alone(client: Any) -> None:
    spec = client.model("add_sub").spec
    assert spec.source == "metadata"
    assert spec.batched
    assert not spec.batch_limit_known  # a leading -1 everywhere: batched, no known limit
    assert spec.inputs["INPUT0"].shape == (4,)
    assert set(spec.outputs) == {"OUTPUT0", "OUTPUT1"}
    vector = client.model("vector").spec
    assert not vector.batched  # a fixed shape: no batch axis
    assert vector.inputs["X"].shape == (3,)


def test_infer_two_inputs_two_outputs(client: Any) -> None:
    first = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = client.model("add_sub").infer(INPUT0=first, INPUT1=np.ones((2, 4), np.float32))
    assert np.array_equal(result["OUTPUT0"], first + 1)
    assert np.array_equal(result["OUTPUT1"], first - 1)
    assert result["OUTPUT0"].dtype == np.float32


def test_infer_sample_adds_and_removes_the_batch_axis(client: Any) -> None:
    result = client.model("add_sub").infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert result["OUTPUT0"].tolist() == [2, 3, 4, 5]


def test_bytes_and_as_strings(client: Any) -> None:
    model = client.model("upper")
    assert model.infer(TEXT=["abc", "안녕"]).as_strings("UPPER").tolist() == ["ABC", "안녕"]
    one = model.infer_sample(TEXT="hello")
    assert one.as_strings("UPPER") == "HELLO"  # a 0-d array, not bare bytes


def test_map_batches_and_keeps_order(client: Any) -> None:
    samples = [{"TEXT": f"s{i}"} for i in range(10)]
    results = list(client.model("upper").map(samples, batch_size=4))
    assert [str(result.as_strings("UPPER")) for result in results] == [f"S{i}" for i in range(10)]


def test_outputs_limit_the_result(client: Any, server: OIPServer) -> None:
    # These servers answer every output whatever the request asks for: the client keeps
    # those asked for, as Triton answers.
    model = client.model("add_sub")
    ones = np.ones((2, 4), np.float32)
    assert list(model.infer(INPUT0=ones, INPUT1=ones, outputs=["OUTPUT1"])) == ["OUTPUT1"]
    samples = [{"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}] * 3
    assert [list(result) for result in model.map(samples, outputs=["OUTPUT0"])] == [["OUTPUT0"]] * 3
    if server.name == "mlserver":
        stream = client.model("repeat").stream(IN=[5, 6], outputs=["IDX"])
        assert [(list(result), result["IDX"].tolist()) for result in stream] == [
            (["IDX"], [0]),
            (["IDX"], [1]),
        ]


def test_a_model_without_a_batch_axis(client: Any) -> None:
    assert client.model("vector").infer(X=[1, 2, 3])["Y"].tolist() == [2, 4, 6]


def test_max_batch_size_overrides_the_spec(client: Any) -> None:
    unbatched = client.model("add_sub", max_batch_size=0)
    assert unbatched.spec.source == "override"
    assert not unbatched.spec.batched
    assert unbatched.spec.inputs["INPUT0"].shape == (-1, 4)
    limited = client.model("upper", max_batch_size=2)
    assert limited.spec.max_batch_size == 2
    result = limited.infer(TEXT=["a", "b", "c", "d", "e"])  # split into 2 + 2 + 1, joined
    assert result.as_strings("UPPER").tolist() == ["A", "B", "C", "D", "E"]
    with pytest.raises(ts.InvalidInputError, match="leading -1"):
        client.model("vector", max_batch_size=4)


def test_parameters_and_priority_reach_the_model(client: Any, protocol: str) -> None:
    model = client.model("params")
    result = model.infer(TEXT=["x"], parameters={"n": 7, "s": "a", "b": True}, priority=3)
    assert json.loads(result.as_strings("SEEN")[0]) == {"b": True, "n": 7, "priority": 3, "s": "a"}
    if protocol == "http":
        result = model.infer(TEXT=["x"], parameters={"temperature": 0.5})
        assert json.loads(result.as_strings("SEEN")[0]) == {"temperature": 0.5}
        return
    # Their gRPC parameters have no doubles: the server would drop it without a word.
    for call in (
        lambda: model.infer(TEXT=["x"], parameters={"temperature": 0.5}),
        lambda: model.generate(TEXT="x", temperature=0.5),
    ):
        with pytest.raises(ts.InvalidInputError, match=r"'temperature' is a float.*HTTP URL"):
            call()
    with pytest.raises(ts.InvalidInputError, match=r"below 2\*\*63"):
        model.infer(TEXT=["x"], priority=2**63)


def test_a_fleet_names_the_server_that_lacks_an_operation(
    mlserver: OIPServer, kserve: OIPServer, protocol: str, mode: str
) -> None:
    # MLServer lists its models, KServe has no repository index: the error of a call that
    # went to KServe names KServe, not the client's first URL.
    urls = [getattr(server, f"{protocol}_url") for server in (mlserver, kserve)]
    loop = LoopThread()
    client: Any = ts.Client(urls) if mode == "sync" else Blocking(ts.AsyncClient(urls), loop)
    try:
        refusals = []
        for _ in range(20):
            try:
                assert "add_sub" in {model.name for model in client.models()}
            except ts.UnsupportedError as error:
                refusals.append(str(error))
        assert refusals
        assert all(message.startswith(f"the server at {urls[1]} ") for message in refusals)
    finally:
        if mode == "sync":
            client.close()
        else:
            loop.run(client.target.aclose())
        loop.close()


def test_the_call_after_a_server_error_finds_its_connection_good(client: Any) -> None:
    # uvicorn closes a kept-alive connection after a 500 without saying so: the next call
    # on the same client was reset (and resent, "the server may run it twice").
    params, add_sub = client.model("params"), client.model("add_sub")
    once = ts.RetryPolicy.none()
    for _ in range(3):
        with pytest.raises(ts.InferenceError):
            params.infer(TEXT=["a"], parameters={"fail": True}, retry=once)
        result = add_sub.infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[0, 0, 0, 1], retry=once)
        assert result["OUTPUT0"].tolist() == [1, 2, 3, 5]


def test_an_unknown_model_is_model_not_found(client: Any) -> None:
    with pytest.raises(ts.ModelNotFoundError):
        client.model("no_such_model")
    assert not client.is_model_ready("no_such_model")


def test_bad_input_is_refused_before_sending(client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="INPUT0"):
        client.model("add_sub").infer(INPUT0=np.ones((2, 3), np.float32), INPUT1=[[1] * 4] * 2)


def test_what_the_server_lacks_is_unsupported(client: Any, server: OIPServer) -> None:
    with pytest.raises(ts.UnsupportedError, match="does not support model_statistics") as caught:
        client.model_statistics("add_sub")
    assert client.url in str(caught.value)  # the server is named
    # Every model's: over HTTP its path reads as the metadata of a model named "stats".
    with pytest.raises(ts.UnsupportedError, match="does not support model_statistics"):
        client.model_statistics()
    with pytest.raises(ts.UnsupportedError, match="does not support trace_settings"):
        client.trace_settings()
    with pytest.raises(ts.UnsupportedError, match="does not support log_settings"):
        client.log_settings()
    with pytest.raises(ts.UnsupportedError, match="classification extension"):
        client.model("vector").classify(X=[0.1, 0.9, 0.3])  # (refused before sending)
    if server.name == "kserve":
        with pytest.raises(ts.UnsupportedError, match="does not support models"):
            client.models()
        if client.url.startswith("grpc"):
            # Its RPCs read the name from another field than Triton's: "Model with name
            # does not exist" for a model it has (which stayed loaded).
            for call in (lambda: client.unload_model("vector"), lambda: client.load_model("x")):
                with pytest.raises(ts.UnsupportedError, match="use the server's HTTP URL"):
                    call()
            assert client.is_model_ready("vector")
        else:
            with pytest.raises(ts.ModelNotFoundError):
                client.unload_model("nope")
    else:  # MLServer has the repository index
        states = {status.name: status.state for status in client.models()}
        # Over gRPC it said "State.READY", and stubgen found no ready model to write.
        assert states["add_sub"] == "READY"
    if server.name == "kserve" and client.url.startswith("http"):
        # Its 501 "Model versioning not supported yet": the server cannot serve this
        # request, so both an UnsupportedError and (a refused request) an InferenceError.
        with pytest.raises(ts.UnsupportedRequestError, match="versioning") as refused:
            client.model("add_sub", "1")
        assert isinstance(refused.value, ts.UnsupportedError)
        assert isinstance(refused.value, ts.InferenceError)


def test_large_tensors_go_over_sockets(client: Any) -> None:
    # shared_memory="auto" finds the server cannot map this host's memory: sockets.
    rows = np.random.default_rng(0).random((40_000, 4), dtype=np.float32)  # 640 KiB each
    result = client.model("add_sub").infer(INPUT0=rows, INPUT1=rows)
    assert np.allclose(result["OUTPUT0"], 2 * rows)


@pytest.mark.parametrize("protocol", ["http"])  # gRPC always carries raw bytes
def test_http_tensor_encoding_is_a_choice(make_client: Any, server: OIPServer) -> None:
    json_client = make_client(http_binary=False)
    result = json_client.model("add_sub").infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[0, 0, 0, 0])
    assert result["OUTPUT0"].tolist() == [1, 2, 3, 4]
    binary = make_client(http_binary=True).model("add_sub")
    if server.name == "mlserver":  # MLServer reads no binary tensors: the choice matters
        with pytest.raises(ts.TritonError):
            binary.infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[0, 0, 0, 0])
    else:  # KServe reads both
        result = binary.infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[0, 0, 0, 0])
        assert result["OUTPUT0"].tolist() == [1, 2, 3, 4]


def test_stream_goes_through_the_servers_streaming_endpoint(client: Any, server: OIPServer) -> None:
    add_sub = client.model("add_sub")
    first = np.arange(4, dtype=np.float32)
    if server.name == "kserve":  # KServe has no streaming endpoint
        with pytest.raises(ts.UnsupportedError, match="does not support stream"):
            list(add_sub.stream(INPUT0=[first], INPUT1=[first]))
        return
    # A model that does not stream answers once (MLServer runs its predict).
    results = list(add_sub.stream(INPUT0=[first], INPUT1=[np.ones(4, np.float32)]))
    assert [result["OUTPUT0"].tolist() for result in results] == [[[1, 2, 3, 4]]]
    repeat = [
        (r["OUT"].tolist(), r["IDX"].tolist()) for r in client.model("repeat").stream(IN=[4, 2, 0])
    ]
    assert repeat == [([4], [0]), ([2], [1]), ([0], [2])]
    texts = [r.as_strings("UPPER").tolist() for r in client.model("upper").stream(TEXT=["ab", "c"])]
    assert texts == [["AB", "C"]]


@pytest.mark.parametrize("server", ["mlserver"], indirect=True)
def test_a_model_failing_mid_stream(client: Any, protocol: str) -> None:
    received = []

    def read() -> None:
        for result in client.model("repeat").stream(IN=[1, 2, -1, 3]):
            received.append(result["OUT"].tolist())

    with pytest.raises(ts.InferenceError) as caught:
        read()
    assert received == [[1], [2]]  # the responses before the failure
    assert type(caught.value) is ts.InferenceError  # not a connection error
    assert not caught.value.retryable
    if protocol == "grpc":  # the model's message comes with the status
        assert "no negative numbers" in str(caught.value)
    else:  # MLServer drops the connection: the reason is only in its log
        assert "closed the stream before its end" in str(caught.value)


def test_generate_is_an_inference(client: Any) -> None:
    # Fields named like inputs are one sample, outputs come back flat (as from Triton).
    fields = client.model("add_sub").generate(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert fields == {"OUTPUT0": [2.0, 3.0, 4.0, 5.0], "OUTPUT1": [0.0, 1.0, 2.0, 3.0]}
    assert client.model("upper").generate(TEXT="안녕 hi") == {"UPPER": "안녕 HI"}


def test_generate_refuses_an_answer_of_more_rows_than_the_one_sample(
    client: Any, server: OIPServer
) -> None:
    # The leading -1 of "words" reads as a batch axis, but the model answers a row per
    # word: generate, complete and chat kept the first word and dropped the rest.
    words = client.model("words")
    calls = [
        lambda: words.generate(TEXT="hello big world"),
        lambda: words.complete("hello big world"),
        lambda: words.chat([{"role": "user", "content": "a b"}], chat_template="{{ 1 }} {{ 2 }}"),
    ]
    if server.name == "mlserver":  # (KServe streams nothing)
        calls.append(lambda: list(words.generate_stream(TEXT="hello big world")))
    for call in calls:
        with pytest.raises(
            ts.InferenceError, match=r"'WORDS' came back with shape \[\d\]"
        ) as caught:
            call()
        assert caught.value.may_have_run
    # Read without a batch axis, the answer is whole.
    whole = client.model("words", max_batch_size=0).generate(TEXT="hello big world")
    assert whole == {"WORDS": ["hello", "big", "world"]}


def test_generate_stream(client: Any, server: OIPServer) -> None:
    upper = client.model("upper")
    if server.name == "kserve":
        with pytest.raises(ts.UnsupportedError, match="does not support generate_stream"):
            list(upper.generate_stream(TEXT="ab"))
        return
    assert list(upper.generate_stream(TEXT="ab")) == [{"UPPER": "AB"}]
    events = list(client.model("repeat").generate_stream(IN=[7, 5]))
    assert events == [{"OUT": 7, "IDX": 0}, {"OUT": 5, "IDX": 1}]


def test_chat_through_a_text_model(client: Any) -> None:
    completion = client.model("upper").chat(
        [{"role": "user", "content": "hello"}], chat_template="<{{ messages[0].content }}>"
    )
    assert completion.choices[0].message.content == "<HELLO>"


def test_sequences_need_a_sequence_batcher(client: Any) -> None:
    # Without a config nothing says the model keeps state: refused before anything is sent.
    with pytest.raises(ts.InvalidInputError, match="not stateful"):
        client.model("add_sub").sequence()


def test_names_that_uvicorn_reads_apart_are_missing_models(client: Any) -> None:
    # It decodes the %2F of "a/b" into a path no route has ("does not support
    # model_metadata"), and FastAPI redirects "upper/" (a redirect, "give the client the
    # URL of the server itself"); gRPC said the model is not found.
    for name in ("a/b", "upper/"):
        with pytest.raises(ts.ModelNotFoundError) as caught:
            client.model(name)
        assert caught.value.model == name


def test_a_model_that_declares_no_tensors_takes_the_inputs_as_given(client: Any) -> None:
    """MLServer's runtimes (sklearn, xgboost...) declare no tensors unless their settings
    list them: the values given are sent with their own datatypes, for the server to check."""
    model = client.model("bare")
    assert model.spec.inputs == {}
    assert model.spec.outputs == {}
    assert not model.spec.batched
    result = model.infer(X=np.array([1.0, 2.0, 3.0], dtype=np.float32))
    assert result["Y"].tolist() == [2.0, 4.0, 6.0]
    assert model.infer(X=[1.0, 2.0, 3.0], outputs=["Y"])["Y"].tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(ts.InvalidInputError, match="input 'X'"):
        model.infer(X=np.array([1 + 2j]))  # no datatype carries it: nothing is sent
    with pytest.raises(ts.InvalidInputError, match="booleans among numbers"):
        model.infer(X=[1.0, True, 3.0])
    # generate: every field is an input (none is known to be one)
    assert model.generate(X=np.array([1.0, 2.0, 3.0], np.float32)) == {"Y": [2.0, 4.0, 6.0]}
    # None leaves an input out (it was read as a BYTES value, and refused as one).
    assert model.infer(X=[1.0, 2.0], Z=None)["Y"].tolist() == [2.0, 4.0]
    assert model.generate(X=np.array([1.0, 2.0], np.float32), Z=None) == {"Y": [2.0, 4.0]}


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_a_compressing_client_works_on_these_servers(make_client: Any, compression: str) -> None:
    """Over HTTP their requests go uncompressed (KServe reads none compressed, MLServer no
    deflate); the answers are still asked for compressed."""
    model = make_client(compression=compression).model("add_sub")
    result = model.infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[0, 0, 0, 1])
    assert result["OUTPUT0"].tolist() == [1, 2, 3, 5]
    assert model.generate(INPUT0=[1, 2, 3, 4], INPUT1=[0, 0, 0, 1])["OUTPUT0"] == [1, 2, 3, 5]


@pytest.mark.parametrize("protocol", ["http"])
def test_the_cli_unloads_on_a_server_without_a_repository_index(
    server: OIPServer, protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It refused at once ("does not support models"), as the index is KServe's to lack;
    # the server itself now answers the unload (here: no such model).
    from triton_sdk._cli import main

    assert main(["unload", server.http_url, "nope"]) == 2
    said = capsys.readouterr().err
    assert "does not support models" not in said
    assert "nope" in said


def test_waiting_for_a_model_the_server_lacks_says_so(client: Any, server: OIPServer) -> None:
    # On KServe (no repository index) over HTTP: "its state could not be read: ... does
    # not support models", though the server had said the model does not exist.
    with pytest.raises(ts.TritonError) as caught:
        client.wait_until_ready(model="nope", timeout=0.5)
    said = str(caught.value)
    assert "does not support models" not in said
    if server.name == "kserve":
        assert "Model with name nope does not exist" in said
