"""What lets the client work with Open Inference Protocol servers other than Triton,
without a server: specs from metadata alone, their error bodies, JSON tensors over HTTP.
The real servers are in tests/oip."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import attrs
import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk._errors import classify_status
from triton_sdk._grpc_codec import GrpcStream, encode_stream
from triton_sdk._http_codec import HttpCodec, encode_infer_json, error_from_response, is_triton
from triton_sdk._shaping import Tensor
from triton_sdk._spec import NO_KNOWN_LIMIT
from triton_sdk.testing import MockTransport

from .._event_stream import send_json, serving
from ._both import resolve

ROWS = {
    "name": "add_sub",
    "versions": None,  # KServe's answer
    "platform": "",
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}],
}
FIXED = {
    "name": "vector",
    "versions": [],
    "inputs": [{"name": "X", "datatype": "FP32", "shape": [3]}],
    "outputs": [{"name": "Y", "datatype": "FP32", "shape": [-1]}],
}


def test_a_spec_from_metadata_alone() -> None:
    spec = ts.ModelSpec.from_metadata(ROWS, None)
    assert spec.versions == ()  # "versions": null is no versions
    assert spec.source == "metadata"
    assert not spec.has_config
    assert spec.max_batch_size == NO_KNOWN_LIMIT
    assert not spec.batch_limit_known
    assert spec.inputs["INPUT0"].shape == (4,)
    assert "batched, no known limit" in spec.describe()
    fixed = ts.ModelSpec.from_metadata(FIXED, None)
    assert not fixed.batched  # one tensor without a leading -1: no batch axis
    assert fixed.outputs["Y"].shape == (-1,)


def test_max_batch_size_overrides() -> None:
    spec = ts.ModelSpec.from_metadata(ROWS, None, max_batch_size=8)
    assert (spec.source, spec.max_batch_size, spec.inputs["INPUT0"].shape) == ("override", 8, (4,))
    assert not spec.has_config  # the override says nothing of the server
    with_config = ts.ModelSpec.from_metadata(ROWS, {"max_batch_size": 4}, max_batch_size=8)
    assert with_config.source == "override"
    assert with_config.has_config
    flat = ts.ModelSpec.from_metadata(ROWS, None, max_batch_size=0)
    assert not flat.batched
    assert flat.inputs["INPUT0"].shape == (-1, 4)
    with pytest.raises(ts.InvalidInputError, match=r"'X' has shape \[3\]"):
        ts.ModelSpec.from_metadata(FIXED, None, max_batch_size=2)
    with pytest.raises(ts.InvalidInputError, match="0 or more"):
        ts.ModelSpec.from_metadata(ROWS, None, max_batch_size=-1)


def test_a_split_row_of_a_one_dimensional_bytes_output_is_an_array() -> None:
    result = ts.InferResult(
        {"S": np.array([b"a", b"b"], dtype=object)},
        datatypes={"S": "BYTES"},
        model_name="m",
        model_version="1",
    )
    rows = result.split_rows(2)
    assert [row.as_strings("S") for row in rows] == ["a", "b"]
    assert rows[0]["S"].shape == ()
    sample = ts.InferResult(
        {"S": np.array([b"a"], dtype=object)},
        datatypes={"S": "BYTES"},
        model_name="m",
        model_version="1",
    )
    assert sample.without_batch_axis().as_strings("S") == "a"


@pytest.mark.parametrize(
    "body",
    [
        b'{"error":"Not Found"}',  # Triton
        b'{"detail":"Not Found"}',  # FastAPI: MLServer, KServe
        b"404 page not found\n",  # Go's net/http
        b"<html><head><title>404 Not Found</title></head><body>nginx</body></html>",
    ],
)
def test_a_path_the_server_has_no_route_for_is_unsupported(body: bytes) -> None:
    error = error_from_response(404, body)
    assert type(error) is ts.UnsupportedError
    assert error.status == 404
    assert "not found" in str(error).lower()
    assert "<" not in str(error)


@pytest.mark.parametrize("status", ["NOT_FOUND", 404])
def test_kserve_naming_no_model_is_still_a_missing_model(status: ts.Status) -> None:
    # KServe's gRPC unload of an unknown model leaves its name out of the message.
    error = classify_status(status, "Model with name  does not exist.")
    assert type(error) is ts.ModelNotFoundError


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (404, {"error": "Model iris with version 2 not found"}, ts.ModelNotFoundError, "iris"),
        (404, {"error": "Model with name iris does not exist."}, ts.ModelNotFoundError, "iris"),
        (404, {"detail": "Not Found"}, ts.UnsupportedError, "Not Found"),
        (404, {"error": "Model iris not found"}, ts.ModelNotFoundError, "iris"),
        # A name with spaces was an InferenceError (MLServer's and KServe's wording).
        (404, {"error": "Model no such not found"}, ts.ModelNotFoundError, "no such"),
        (404, {"error": "Model with name no such does not exist."}, ts.ModelNotFoundError, "no"),
        (
            404,
            {"error": "failed to find the output 'y' of model 'm': not found"},
            ts.InferenceError,  # about a tensor, not a missing model
            "output 'y'",
        ),
        (400, {"detail": "Unknown model: x"}, ts.ModelNotFoundError, "Unknown model: x"),
        (
            422,
            {"detail": [{"loc": ["body", "inputs", 0, "data"], "msg": "Field required"}]},
            ts.InferenceError,
            "body.inputs.0.data: Field required",
        ),
    ],
)
def test_error_bodies_of_other_servers(
    status: int, body: object, kind: type[ts.TritonError], message: str
) -> None:
    error = error_from_response(status, json.dumps(body).encode())
    assert type(error) is kind
    assert message in str(error)
    assert "detail" not in str(error)  # unwrapped, not shown raw


def test_a_server_that_decodes_the_path_has_its_message_left_alone() -> None:
    # MLServer and KServe decode %-escapes and echo the name as given; Triton does not.
    decoded = error_from_response(404, b'{"detail": "Model my model not found"}', model="my model")
    assert str(decoded) == "Model my model not found"
    escaped = error_from_response(
        400,
        b'{"error": "Request for unknown model: \'my%20model\' is not found"}',
        model="my model",
    )
    assert str(escaped).startswith("Request for unknown model: 'my model' is not found (over HTTP")


def request(*tensors: Tensor, **fields: object) -> ops.InferRequest:
    return ops.InferRequest(model="m", version="", inputs=list(tensors), **fields)  # type: ignore[arg-type]


def test_tensors_as_json_data() -> None:
    body = json.loads(
        encode_infer_json(
            request(
                Tensor("T", "BYTES", np.array([[b"a"], ["안녕".encode()]], dtype=object)),
                Tensor("X", "FP32", np.array([[1.5, 2.0]], dtype=np.float32)),
                Tensor("B", "BOOL", np.array([True, False])),
                request_id="r1",
            )
        )
    )
    assert body == {
        "id": "r1",
        "inputs": [
            {"name": "T", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "안녕"]},
            {"name": "X", "shape": [1, 2], "datatype": "FP32", "data": [1.5, 2.0]},
            {"name": "B", "shape": [2], "datatype": "BOOL", "data": [True, False]},
        ],
    }


def test_bytes_that_are_not_utf8_cannot_travel_as_json() -> None:
    with pytest.raises(ts.InvalidInputError, match="http_binary=True"):
        encode_infer_json(request(Tensor("T", "BYTES", np.array([b"\xff"], dtype=object))))


def test_a_stream_s_json_refusal_does_not_suggest_binary_tensors() -> None:
    """Streams and generate on these servers are JSON whatever http_binary says."""
    bad = request(Tensor("T", "BYTES", np.array([b"\xff"], dtype=object)))
    with pytest.raises(ts.InvalidInputError) as caught:
        encode_infer_json(bad, binary_possible=False)
    assert str(caught.value).endswith("cannot travel as JSON; use a gRPC client")
    nan = request(Tensor("X", "FP32", np.array([np.nan], dtype=np.float32)))
    with pytest.raises(ts.InvalidInputError) as caught:
        encode_infer_json(nan, binary_possible=False)
    assert "http_binary" not in str(caught.value)


def test_only_triton_is_sent_binary_tensors() -> None:
    assert is_triton({"name": "triton", "version": "2.51.0"})
    assert not is_triton({"name": "mlserver", "version": "1.7.1"})
    assert not is_triton({"name": "kserve"})


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_http_binary_takes_three_values(value: object) -> None:
    with pytest.raises(ts.InvalidInputError, match="http_binary"):
        ts.Client("http://localhost:8000", http_binary=value)  # type: ignore[arg-type]


def test_nan_cannot_travel_as_json_and_the_refusal_names_where_it_is() -> None:
    # It named neither the input nor the parameter.
    finite = Tensor("A", "FP64", np.array([1.0]))
    nan = Tensor("X", "FP32", np.array([np.nan], dtype=np.float32))
    with pytest.raises(ts.InvalidInputError, match="input 'X' holds NaN or infinite values"):
        encode_infer_json(request(finite, nan))
    bf16 = Tensor("H", "BF16", np.array([np.inf]).astype(ml_dtypes.bfloat16))
    with pytest.raises(ts.InvalidInputError, match="input 'H' holds NaN or infinite values"):
        encode_infer_json(request(finite, bf16))
    with pytest.raises(ts.InvalidInputError, match=r"parameter 't' is NaN.*send it as a str"):
        encode_infer_json(request(finite, parameters={"t": float("-inf"), "u": 1.5}))


@pytest.mark.parametrize(
    ("given", "remedy"),
    [(False, "use a gRPC client or http_binary=True"), (None, "use a gRPC client")],
)
def test_a_json_refusal_suggests_binary_tensors_only_where_the_user_chose_json(
    given: bool | None, remedy: str
) -> None:
    # "auto" that found no Triton suggested http_binary=True, which such a server cannot read.
    codec = HttpCodec("", binary=given)
    codec.binary = False  # (as "auto" decides for a server that is not Triton)
    bad = request(Tensor("T", "BYTES", np.array([b"\xff"], dtype=object)))
    with pytest.raises(ts.InvalidInputError) as caught:
        codec.encode(bad)
    assert str(caught.value).endswith(remedy)
    assert caught.value.model == "m"  # (it named no model)


# Streams and generate on a server that gave no config (MLServer, KServe)

UPPER = ts.ModelSpec.from_metadata(
    {
        "name": "upper",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [{"name": "UPPER", "datatype": "BYTES", "shape": [-1]}],
    },
    None,
)
TRITON_UPPER = attrs.evolve(UPPER, has_config=True)
ANSWER = {
    "model_name": "upper",
    "model_version": None,  # MLServer's events write what is unset as null
    "id": "1",
    "parameters": None,
    "outputs": [
        {"name": "UPPER", "datatype": "BYTES", "shape": [1], "parameters": None, "data": ["AB"]}
    ],
}


def text_request(*texts: str) -> ops.InferRequest:
    array = np.array([text.encode() for text in texts], dtype=object)
    return ops.InferRequest(model="upper", inputs=[Tensor("TEXT", "BYTES", array)])


@pytest.mark.parametrize("binary", [None, True, False])
def test_http_generate_without_a_config_is_an_inference_in_json(binary: bool | None) -> None:
    call = HttpCodec("", binary).encode(ops.Generate(UPPER, None, {"TEXT": "ab"}))
    assert (call.method, call.path) == ("POST", "/v2/models/upper/infer")
    body = json.loads(b"".join(call.body or ()))
    assert body["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["ab"]}]
    assert call.read(200, None, json.dumps(ANSWER).encode()) == {"UPPER": "AB"}
    triton = HttpCodec("", None).encode(ops.Generate(TRITON_UPPER, None, {"TEXT": "ab"}))
    assert triton.path == "/v2/models/upper/generate"


def test_http_streams_without_a_config_go_to_infer_stream() -> None:
    codec = HttpCodec("", True)  # JSON all the same: MLServer's infer_stream reads no other
    event = b"data: " + json.dumps(ANSWER).encode() + b"\n\n"
    stream = codec.encode_stream(ops.StreamInfer(text_request("ab"), UPPER))
    assert (stream.method, stream.path) == ("POST", "/v2/models/upper/infer_stream")
    assert stream.headers["Accept"] == "text/event-stream"
    assert json.loads(b"".join(stream.body))["inputs"][0]["data"] == ["ab"]
    [result] = stream.decoder().feed(event)
    assert result.as_strings("UPPER").tolist() == ["AB"]
    assert result.model_version == ""  # not "None"
    assert stream.cut_off_error(None) is not None  # MLServer drops a failing stream
    versioned = ops.InferRequest(model="upper", version="2", inputs=text_request("a").inputs)
    path = codec.encode_stream(ops.StreamInfer(versioned, UPPER)).path
    assert path == "/v2/models/upper/versions/2/infer_stream"
    fields = codec.encode_stream(ops.GenerateStream(UPPER, None, {"TEXT": "ab"}))
    assert fields.path == "/v2/models/upper/infer_stream"
    assert list(fields.decoder().feed(event)) == [{"UPPER": "AB"}]
    triton = codec.encode_stream(ops.StreamInfer(text_request("ab"), TRITON_UPPER))
    assert triton.path == "/v2/models/upper/generate_stream"
    assert triton.cut_off_error(None) is None  # Triton sends its errors as events


def test_grpc_streams_without_a_config_read_bare_infer_responses() -> None:
    stream = encode_stream(ops.StreamInfer(text_request("ab"), UPPER))
    assert isinstance(stream, GrpcStream)
    assert stream.bare
    # Triton's flag for an empty last response means nothing to another server.
    assert "triton_enable_empty_final_response" not in stream.message.parameters
    answer = pb.ModelInferResponse(model_name="upper", id="1")
    output = answer.outputs.add(name="UPPER", datatype="BYTES", shape=[1])
    output.contents.bytes_contents.append(b"AB")
    assert not stream.is_last(answer)  # the stream ends when the server closes it
    result = stream.read(answer)
    assert result is not None
    assert result.as_strings("UPPER").tolist() == ["AB"]
    generated = encode_stream(ops.GenerateStream(UPPER, None, {"TEXT": "ab"}))
    assert isinstance(generated, GrpcStream)
    assert generated.read(answer) == {"UPPER": "AB"}
    triton = encode_stream(ops.StreamInfer(text_request("ab"), TRITON_UPPER))
    assert isinstance(triton, GrpcStream)
    assert not triton.bare


def test_a_mock_model_without_a_config_is_seen_as_on_another_server() -> None:
    client = ts.Client("http://test", transport=MockTransport(models=[UPPER]))
    spec = client.model("upper").spec
    assert (spec.source, spec.has_config) == ("metadata", False)


def test_a_mock_serves_specs_of_one_kind_of_server() -> None:
    with pytest.raises(ValueError, match="has_config"):
        MockTransport(models=[UPPER, attrs.evolve(TRITON_UPPER, name="other")])


class BrieflyDown(BaseHTTPRequestHandler):
    """A JSON-only server (MLServer's answers) whose metadata answers 503 once: binary
    tensors it refuses."""

    protocol_version = "HTTP/1.1"
    probes: ClassVar[list[int]] = []
    binary: ClassVar[list[bool]] = []

    def reply(self, status: int, answer: object) -> None:
        send_json(self, status, answer)

    def do_GET(self) -> None:
        if self.path == "/v2":
            self.probes.append(1)
            up = len(self.probes) > 1
            metadata = {"name": "mlserver", "version": "1.7.1", "extensions": []}
            self.reply(200, metadata) if up else self.reply(503, {"error": "starting"})
        elif self.path == "/v2/models/add_sub":
            self.reply(200, ROWS)
        else:  # (no config endpoint, as on MLServer)
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        binary = "Inference-Header-Content-Length" in self.headers
        self.binary.append(binary)
        output = {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [2.0] * 4}
        if binary:
            self.reply(400, {"error": "binary tensors are not supported"})
        else:
            self.reply(200, {"model_name": "add_sub", "outputs": [output]})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_auto_binary_is_not_settled_by_a_server_briefly_down(mode: str) -> None:
    # The 503 made it binary for the client's life: every later call was refused.
    BrieflyDown.probes.clear()
    BrieflyDown.binary.clear()
    rows = np.ones((1, 4), np.float32)
    with serving(BrieflyDown) as url:

        async def calls() -> list[object]:
            options: Any = {"retry": ts.RetryPolicy.none(), "shared_memory": "off"}
            outcomes: list[object] = []
            kind = ts.Client if mode == "sync" else ts.AsyncClient
            client = kind(url, **options)
            try:
                model = await resolve(client.model("add_sub"))
                for _ in range(3):
                    try:
                        result = await resolve(model.infer(INPUT0=rows))
                        outcomes.append(result["OUTPUT0"].tolist())
                    except ts.TritonError as error:
                        outcomes.append(error.status)
            finally:
                await resolve(client.close() if mode == "sync" else client.aclose())
            return outcomes

        outcomes = asyncio.run(calls())
    assert outcomes == [503, [[2.0] * 4], [[2.0] * 4]]  # (the 503 is retried by default)
    assert BrieflyDown.binary == [False, False]  # (the first call was not sent)
    assert len(BrieflyDown.probes) == 2
