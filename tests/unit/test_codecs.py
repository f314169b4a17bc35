"""Wire formats without I/O: every op through the HTTP and the gRPC codec."""

from __future__ import annotations

import base64
import gc
import gzip
import json
import zlib
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import serialize_byte_tensor

import triton_sdk as ts
from triton_sdk import _ops as ops
from triton_sdk._compression import decompress
from triton_sdk._grpc_codec import (
    GrpcCall,
    build_infer_request,
    decode_infer_response,
    serialize_large_infer,
    split_infer_response,
)
from triton_sdk._grpc_codec import encode as grpc_encode
from triton_sdk._http_codec import (
    HEADER_LENGTH,
    HttpCodec,
    decode_infer,
    encode_infer,
    error_from_response,
)
from triton_sdk._request import InferRequest, RequestedOutput
from triton_sdk._result import decode_json_output
from triton_sdk._shaping import Tensor
from triton_sdk._transports._grpc import channel_options
from triton_sdk._wire import declared_count, tensor_payload

FLOATS = np.array([[1.5, -2.0, 3.25]], dtype=np.float32)
TEXTS = np.array([["안녕"], [""], ["a\x00b"]], dtype=np.object_)
RAW = np.array([[b"\x00\xff"]], dtype=np.object_)


def serialized(items: list[Any]) -> bytes:
    return bytes(serialize_byte_tensor(np.array(items, dtype=np.object_)).item())


def request(**overrides: Any) -> InferRequest:
    kwargs: dict[str, Any] = {
        "model": "m",
        "inputs": [Tensor("F", "FP32", FLOATS), Tensor("T", "BYTES", TEXTS)],
    }
    kwargs.update(overrides)
    return InferRequest(**kwargs)


def header_of(parts: list[bytes | memoryview], length: int) -> dict[str, Any]:
    assert length == len(parts[0])
    decoded: dict[str, Any] = json.loads(bytes(parts[0]))
    return decoded


# HTTP: encode_infer


def test_encode_infer_inputs() -> None:
    parts, length = encode_infer(request())
    header = header_of(parts, length)
    text_bytes = serialized(["안녕", "", "a\x00b"])
    assert header["inputs"] == [
        {
            "name": "F",
            "shape": [1, 3],
            "datatype": "FP32",
            "parameters": {"binary_data_size": 12},
        },
        {
            "name": "T",
            "shape": [3, 1],
            "datatype": "BYTES",
            "parameters": {"binary_data_size": len(text_bytes)},
        },
    ]
    assert len(parts) == 3
    assert bytes(parts[1]) == FLOATS.astype("<f4").tobytes()
    assert bytes(parts[2]) == text_bytes


def test_encode_infer_without_outputs_asks_for_all_as_binary() -> None:
    header = header_of(*encode_infer(request()))
    assert "outputs" not in header
    assert "id" not in header
    assert header["parameters"] == {"binary_data_output": True}


def test_encode_infer_with_outputs_and_classification() -> None:
    outputs = (RequestedOutput("SCORES"), RequestedOutput("LABELS", class_count=3))
    header = header_of(*encode_infer(request(outputs=outputs)))
    assert header["outputs"] == [
        {"name": "SCORES", "parameters": {"binary_data": True}},
        {"name": "LABELS", "parameters": {"binary_data": True, "classification": 3}},
    ]
    assert "binary_data_output" not in header.get("parameters", {})


def test_encode_infer_id_parameters_sequence_and_priority() -> None:
    header = header_of(
        *encode_infer(
            request(
                request_id="r1",
                parameters={"flag": True, "count": 2, "ratio": 0.5, "mode": "fast"},
                priority=3,
                sequence_id=42,
                sequence_start=True,
                outputs=(),
            )
        )
    )
    assert header["id"] == "r1"
    assert header["parameters"] == {
        "flag": True,
        "count": 2,
        "ratio": 0.5,
        "mode": "fast",
        "sequence_id": 42,
        "sequence_start": True,
        "sequence_end": False,
        "priority": 3,
    }


def test_encode_infer_string_sequence_id() -> None:
    header = header_of(*encode_infer(request(sequence_id="abc", sequence_end=True, outputs=())))
    assert header["parameters"]["sequence_id"] == "abc"
    assert header["parameters"]["sequence_end"] is True


def test_body_is_header_then_inputs_in_order() -> None:
    parts, length = encode_infer(request())
    body = b"".join(bytes(part) for part in parts)
    header = json.loads(body[:length])
    offset = length
    sizes = [item["parameters"]["binary_data_size"] for item in header["inputs"]]
    assert np.frombuffer(body[offset : offset + sizes[0]], "<f4").tolist() == [1.5, -2.0, 3.25]
    offset += sizes[0]
    assert body[offset:] == serialized(["안녕", "", "a\x00b"])


@pytest.mark.parametrize(
    ("array", "datatype"),
    [
        (np.array([1, -2, 300], dtype=np.int32), "INT32"),
        (np.array([1, 2], dtype=np.uint64), "UINT64"),
        (np.array([True, False]), "BOOL"),
        (np.array([0.5, 1.0], dtype=np.float16), "FP16"),
        (np.arange(6, dtype=np.float64).reshape(2, 3)[:, ::2], "FP64"),  # not contiguous
        (np.array([[1.5, 2.0]], dtype=">f4"), "FP32"),  # big-endian data
        (np.array([1, 258], dtype=">i8"), "INT64"),
    ],
    ids=["int32", "uint64", "bool", "fp16", "strided", "big-endian-fp32", "big-endian-int64"],
)
def test_payload_is_little_endian_row_major(array: np.ndarray[Any, Any], datatype: str) -> None:
    expected = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    assert bytes(tensor_payload(Tensor("X", datatype, array))) == expected


def test_payload_refuses_non_text_in_bytes_input() -> None:
    with pytest.raises(ts.InvalidInputError, match="'X'"):
        tensor_payload(Tensor("X", "BYTES", np.array([b"a", 3], dtype=np.object_)))


def test_payload_refuses_data_of_another_dtype() -> None:
    with pytest.raises(ts.InvalidInputError, match="'X'"):
        tensor_payload(Tensor("X", "FP32", np.array([1.0, 2.0], dtype=np.float64)))


@pytest.mark.parametrize(
    ("shape", "count"), [((), 1), ((0, 5), 0), ((2, 3, 4), 24), ((2**31, 2**31), 2**62)]
)
def test_declared_count(shape: tuple[int, ...], count: int) -> None:
    assert declared_count(shape, "X") == count


@pytest.mark.parametrize("shape", [(-1, 3), (3, -2), (2**32, 2**32), (2**63,)])
def test_declared_count_refuses_negative_and_overflowing_shapes(
    shape: tuple[int, ...],
) -> None:
    with pytest.raises(ts.InvalidInputError, match="'X'"):
        declared_count(shape, "X")


# HTTP: decode_infer


def binary_response(
    outputs: list[tuple[dict[str, Any], bytes]], **fields: Any
) -> tuple[bytes, int]:
    """A response body (JSON header, then binary outputs) and its header length."""
    header = {**fields, "outputs": [description for description, _ in outputs]}
    encoded = json.dumps(header).encode()
    return encoded + b"".join(data for _, data in outputs), len(encoded)


def test_a_negative_binary_data_size_is_refused() -> None:
    data = np.arange(4, dtype="<f4").tobytes()
    described = {"datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}
    body, length = binary_response(
        [
            ({"name": "A", **described}, data[:8]),
            ({"name": "B", **described, "parameters": {"binary_data_size": -8}}, data[8:]),
        ]
    )
    with pytest.raises(ts.InferenceError, match="'B': binary_data_size -8 is not a size"):
        decode_infer(body, length)


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("INT8", [300], "not all INT8 integers"),
        ("UINT8", [-1], "not all UINT8 integers"),
        ("INT32", [1.5], "not all INT32 integers"),
        ("INT64", [2**70], "not all INT64 integers"),
        ("BYTES", [3], "hold the int 3, not a string"),
        ("BYTES", [None], "hold the NoneType None"),
    ],
)
def test_json_data_that_would_change_on_the_way_in_is_refused(
    datatype: str, data: list[Any], message: str
) -> None:
    with pytest.raises(ts.InferenceError, match=message):
        decode_json_output("OUT", datatype, [1], data)


@pytest.mark.parametrize(
    ("datatype", "data"),
    [
        ("UINT64", [1, 2**63 + 1, 2**64 - 1]),  # numpy alone reads these as float64
        ("UINT64", [0, 2**64 - 1]),
        ("INT64", [-(2**63), 2**63 - 1, 1]),
        ("UINT64", [2.0, 2**63]),
    ],
)
def test_json_integers_past_float_precision_are_read_exactly(
    datatype: str, data: list[Any]
) -> None:
    assert decode_json_output("OUT", datatype, [len(data)], data).tolist() == [
        int(value) for value in data
    ]


@pytest.mark.parametrize("data", [[1, 2**64], [-1, 2**63], [1.5, 2**63], [float(2**60), 2**63]])
def test_json_integers_past_float_precision_that_do_not_fit_are_refused(
    data: list[Any],
) -> None:
    with pytest.raises(ts.InferenceError, match="not all UINT64 integers"):
        decode_json_output("OUT", "UINT64", [len(data)], data)


def test_json_data_that_fits_is_read() -> None:
    assert decode_json_output("OUT", "INT8", [2], [-128, 127]).tolist() == [-128, 127]
    assert decode_json_output("OUT", "UINT64", [1], [2**64 - 1]).tolist() == [2**64 - 1]
    assert decode_json_output("OUT", "INT32", [1], [2.0]).tolist() == [2]
    assert decode_json_output("OUT", "FP32", [1], [0.5]).tolist() == [0.5]


def test_decode_infer_binary_outputs() -> None:
    scores = np.array([[0.5, 1.5], [2.5, -1.0]], dtype="<f4")
    labels = serialized([b"cat", "chat\u00e9"])
    body, length = binary_response(
        [
            (
                {
                    "name": "SCORES",
                    "datatype": "FP32",
                    "shape": [2, 2],
                    "parameters": {"binary_data_size": scores.nbytes},
                },
                scores.tobytes(),
            ),
            (
                {
                    "name": "LABELS",
                    "datatype": "BYTES",
                    "shape": [2, 1],
                    "parameters": {"binary_data_size": len(labels)},
                },
                labels,
            ),
        ],
        model_name="m",
        model_version="1",
        id="r1",
        parameters={"sequence_end": False, "count": 2},
    )
    result = decode_infer(body, length)
    assert list(result) == ["SCORES", "LABELS"]
    np.testing.assert_array_equal(result["SCORES"], scores)
    assert result["SCORES"].dtype == np.float32
    assert result["LABELS"].shape == (2, 1)
    assert result["LABELS"].tolist() == [[b"cat"], ["chat\u00e9".encode()]]
    assert result.as_strings("LABELS").tolist() == [["cat"], ["chat\u00e9"]]
    assert result.datatype("LABELS") == "BYTES"
    assert result.model_name == "m"
    assert result.model_version == "1"
    assert result.id == "r1"
    assert result.parameters == {"sequence_end": False, "count": 2}


def test_decode_infer_json_data_outputs() -> None:
    header = {
        "model_name": "m",
        "model_version": "2",
        "outputs": [
            {"name": "I", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]},
            {"name": "B", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["안녕", "x"]},
            {"name": "F", "datatype": "FP64", "shape": [1], "data": [0.25]},
        ],
    }
    result = decode_infer(json.dumps(header).encode(), None)
    assert result["I"].tolist() == [[1, 2], [3, 4]]
    assert result["I"].dtype == np.int32
    assert result["B"].tolist() == [True, False]
    assert result["S"].tolist() == ["안녕".encode(), b"x"]
    assert result.as_strings("S").tolist() == ["안녕", "x"]
    assert result["F"].tolist() == [0.25]
    assert result.model_version == "2"
    assert result.id == ""


def test_decode_infer_json_bytes_that_are_not_utf8() -> None:
    # Triton writes a BYTES output's bytes into the JSON string as they are (checked
    # against tritonserver 2.51: b"\xff\xfeok" comes as those four bytes between quotes).
    body = (
        b'{"model_name":"m","outputs":[{"name":"S","datatype":"BYTES","shape":[2],'
        b'"data":["\xff\xfeok","fine"]}]}'
    )
    result = decode_infer(body, None)  # (was "the server sent a body that is not JSON")
    assert result["S"].tolist() == [b"\xff\xfeok", b"fine"]
    with pytest.raises(ts.InferenceError, match="not JSON"):
        decode_infer(b'{"outputs": [\xff', None)


def test_decode_infer_mixes_binary_and_json_outputs() -> None:
    values = np.array([7, 8], dtype="<i8")
    body, length = binary_response(
        [
            ({"name": "J", "datatype": "INT32", "shape": [1], "data": [5]}, b""),
            (
                {
                    "name": "R",
                    "datatype": "INT64",
                    "shape": [2],
                    "parameters": {"binary_data_size": 16},
                },
                values.tobytes(),
            ),
        ],
        model_name="m",
        model_version="1",
    )
    result = decode_infer(body, length)
    assert result["J"].tolist() == [5]
    assert result["R"].tolist() == [7, 8]


def test_decode_infer_error_in_a_200_body() -> None:
    body = json.dumps({"error": "Failed to process the request(s) for model 'm'"}).encode()
    with pytest.raises(ts.InferenceError, match="Failed to process"):
        decode_infer(body, None)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        json.dumps(
            {"outputs": [{"name": "O", "datatype": "FP32", "shape": [4], "data": [1.0]}]}
        ).encode(),
    ],
)
def test_decode_infer_refuses_malformed_answers(body: bytes) -> None:
    with pytest.raises(ts.InferenceError):
        decode_infer(body, None)


def test_decode_infer_refuses_a_short_binary_output() -> None:
    body, length = binary_response(
        [
            (
                {
                    "name": "O",
                    "datatype": "FP32",
                    "shape": [4],
                    "parameters": {"binary_data_size": 8},
                },
                b"\x00" * 8,
            )
        ]
    )
    with pytest.raises(ts.InferenceError, match="'O'"):
        decode_infer(body, length)


# HTTP: errors


@pytest.mark.parametrize(
    ("status", "body", "error_class", "message", "retryable"),
    [
        (
            400,
            b"{\"error\":\"unexpected shape for input 'IN' for model 'm'\"}",
            ts.InferenceError,
            "unexpected shape for input 'IN' for model 'm'",
            False,
        ),
        (
            404,
            b'{"error":"Request for unknown model: \'nope\' is not found"}',
            ts.ModelNotFoundError,
            "Request for unknown model: 'nope' is not found",
            False,
        ),
        (
            404,
            b'{"error":"Request for unknown model: \'m\' has no available versions"}',
            ts.ModelNotReadyError,
            "Request for unknown model: 'm' has no available versions",
            False,
        ),
        (
            503,
            b'{"error":"Exceeds maximum queue size"}',
            ts.ServerOverloadedError,
            "Exceeds maximum queue size",
            True,
        ),
        (
            500,
            b'{"error":"Failed to process the request(s) for model \'m\'"}',
            ts.InferenceError,
            "Failed to process the request(s) for model 'm'",
            False,
        ),
        (
            502,
            b"<html>502 Bad Gateway</html>\n",
            ts.InferenceError,
            "<html>502 Bad Gateway</html>",
            True,
        ),
        (503, b"", ts.InferenceError, "HTTP 503", True),
    ],
)
def test_error_from_response(
    status: int,
    body: bytes,
    error_class: type[ts.TritonError],
    message: str,
    retryable: bool,
) -> None:
    error = error_from_response(status, body, model="m", request_id="r1")
    assert type(error) is error_class
    assert str(error) == message
    assert error.status == status
    assert error.retryable is retryable
    assert error.model == "m"
    assert error.request_id == "r1"


def test_infer_route_reads_errors_with_model_and_request_id() -> None:
    call = HttpCodec("").encode(request(request_id="r9"))
    with pytest.raises(ts.InferenceError) as info:
        call.read(400, None, b'{"error":"bad input"}')
    assert info.value.model == "m"
    assert info.value.request_id == "r9"
    assert info.value.status == 400


def test_infer_route_reads_a_result() -> None:
    call = HttpCodec("").encode(request())
    body = json.dumps(
        {
            "model_name": "m",
            "model_version": "1",
            "outputs": [{"name": "O", "datatype": "INT32", "shape": [1], "data": [3]}],
        }
    ).encode()
    assert call.read(200, None, body)["O"].tolist() == [3]


# HTTP: routes


def test_infer_route() -> None:
    call = HttpCodec("").encode(request(version="2"))
    assert call.method == "POST"
    assert call.path == "/v2/models/m/versions/2/infer"
    assert call.body is not None
    parts = list(call.body)
    assert call.headers[HEADER_LENGTH] == str(len(parts[0]))
    assert json.loads(bytes(parts[0]))["inputs"][0]["name"] == "F"


@pytest.mark.parametrize(
    ("base", "model", "version", "expected"),
    [
        ("", "m", None, "/v2/models/m/infer"),
        ("", "m", "", "/v2/models/m/infer"),
        ("", "m", "3", "/v2/models/m/versions/3/infer"),
        ("", "my model", None, "/v2/models/my%20model/infer"),
        ("", "a/b", "1", "/v2/models/a%2Fb/versions/1/infer"),
        ("", "ü?#", None, "/v2/models/%C3%BC%3F%23/infer"),
        ("/triton", "m", "1", "/triton/v2/models/m/versions/1/infer"),
    ],
)
def test_infer_paths(base: str, model: str, version: str | None, expected: str) -> None:
    call = HttpCodec(base).encode(request(model=model, version=version or ""))
    assert call.path == expected


@pytest.mark.parametrize(
    ("op", "method", "path"),
    [
        (ops.IsServerLive(), "GET", "/base/v2/health/live"),
        (ops.IsServerReady(), "GET", "/base/v2/health/ready"),
        (ops.IsModelReady("m x", "2"), "GET", "/base/v2/models/m%20x/versions/2/ready"),
        (ops.IsModelReady("m", None), "GET", "/base/v2/models/m/ready"),
        (ops.GetServerMetadata(), "GET", "/base/v2"),
        (ops.GetModelMetadata("m", None), "GET", "/base/v2/models/m"),
        (ops.GetModelMetadata("m", "1"), "GET", "/base/v2/models/m/versions/1"),
        (ops.GetModelConfig("m", None), "GET", "/base/v2/models/m/config"),
        (ops.GetModelConfig("a/b", "1"), "GET", "/base/v2/models/a%2Fb/versions/1/config"),
        (ops.ListModels(), "POST", "/base/v2/repository/index"),
        (ops.LoadModel("a/b"), "POST", "/base/v2/repository/models/a%2Fb/load"),
        (ops.UnloadModel("m"), "POST", "/base/v2/repository/models/m/unload"),
        (ops.GetModelStatistics(), "GET", "/base/v2/models/stats"),
        (ops.GetModelStatistics("m", "2"), "GET", "/base/v2/models/m/versions/2/stats"),
        (ops.GetTraceSettings(), "GET", "/base/v2/trace/setting"),
        (ops.GetTraceSettings("m"), "GET", "/base/v2/models/m/trace/setting"),
        (ops.UpdateTraceSettings(None, {"trace_rate": ["2"]}), "POST", "/base/v2/trace/setting"),
        (ops.GetLogSettings(), "GET", "/base/v2/logging"),
        (ops.UpdateLogSettings({"log_info": True}), "POST", "/base/v2/logging"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, ops.Op) else None,
)
def test_http_paths_of_every_op(op: ops.Op[Any], method: str, path: str) -> None:
    call = HttpCodec("/base").encode(op)
    assert call.method == method
    assert call.path == path


@pytest.mark.parametrize(
    ("op", "rpc", "fields"),
    [
        (ops.IsServerLive(), "ServerLive", {}),
        (ops.IsServerReady(), "ServerReady", {}),
        (ops.IsModelReady("m", "2"), "ModelReady", {"name": "m", "version": "2"}),
        (ops.GetServerMetadata(), "ServerMetadata", {}),
        (ops.GetModelMetadata("m", None), "ModelMetadata", {"name": "m"}),
        (ops.GetModelConfig("m", "1"), "ModelConfig", {"name": "m", "version": "1"}),
        (ops.ListModels(), "RepositoryIndex", {}),
        (ops.LoadModel("m"), "RepositoryModelLoad", {"model_name": "m"}),
        (ops.GetModelStatistics("m"), "ModelStatistics", {"name": "m"}),
        (ops.GetTraceSettings("m"), "TraceSetting", {"model_name": "m"}),
        (ops.GetLogSettings(), "LogSettings", {}),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, ops.Op) else None,
)
def test_grpc_rpcs_of_every_op(op: ops.Op[Any], rpc: str, fields: dict[str, str]) -> None:
    call = grpc_encode(op)
    assert isinstance(call, GrpcCall)
    assert call.rpc == rpc
    assert type(call.message).__name__ == f"{rpc}Request"
    for name, value in fields.items():
        assert getattr(call.message, name) == value


def test_plain_grpc_answers_are_read_like_http_ones() -> None:
    ready = grpc_encode(ops.IsModelReady("m"))
    assert isinstance(ready, GrpcCall)
    assert ready.read(pb.ModelReadyResponse(ready=True)) is True
    config = grpc_encode(ops.GetModelConfig("m"))
    assert isinstance(config, GrpcCall)
    answer = pb.ModelConfigResponse()
    answer.config.name = "m"
    answer.config.max_batch_size = 4
    assert config.read(answer) == {"name": "m", "max_batch_size": 4}


def test_load_and_unload_bodies() -> None:
    load = HttpCodec("").encode(
        ops.LoadModel("m", '{"max_batch_size": 4}', {"file:1/model.py": b"\x00x"})
    )
    assert load.body is not None
    assert json.loads(bytes(load.body[0])) == {
        "parameters": {"config": '{"max_batch_size": 4}', "file:1/model.py": "AHg="}
    }
    plain = HttpCodec("").encode(ops.LoadModel("m"))
    assert plain.body is not None
    assert json.loads(bytes(plain.body[0])) == {}
    unload = HttpCodec("").encode(ops.UnloadModel("m", True))
    assert unload.body is not None
    assert json.loads(bytes(unload.body[0])) == {"parameters": {"unload_dependents": True}}


def test_cuda_shared_memory_ops_carry_the_handle_as_each_protocol_wants() -> None:
    handle = bytes(range(64))  # the raw cudaIpcMemHandle_t
    register = ops.RegisterCudaSharedMemory("r 1", handle, 2, 4096)
    http = HttpCodec("/base").encode(register)
    assert (http.method, http.path) == ("POST", "/base/v2/cudasharedmemory/region/r%201/register")
    assert http.body is not None
    body = json.loads(bytes(http.body[0]))
    assert body == {
        "raw_handle": {"b64": base64.b64encode(handle).decode()},
        "device_id": 2,
        "byte_size": 4096,
    }
    grpc = grpc_encode(register)
    assert isinstance(grpc, GrpcCall)
    assert grpc.rpc == "CudaSharedMemoryRegister"
    assert grpc.message == pb.CudaSharedMemoryRegisterRequest(
        name="r 1", raw_handle=handle, device_id=2, byte_size=4096
    )  # the bytes themselves: gRPC carries bytes
    assert HttpCodec("").encode(ops.UnregisterCudaSharedMemory("r")).path == (
        "/v2/cudasharedmemory/region/r/unregister"
    )
    assert HttpCodec("").encode(ops.GetCudaSharedMemoryStatus()).path == (
        "/v2/cudasharedmemory/status"
    )
    status = grpc_encode(ops.GetCudaSharedMemoryStatus())
    assert isinstance(status, GrpcCall)
    answer = pb.CudaSharedMemoryStatusResponse()
    answer.regions["r"].name = "r"
    answer.regions["r"].device_id = 1
    answer.regions["r"].byte_size = 64
    (entry,) = status.read(answer)  # as JSON: 64-bit integers as strings, as HTTP may
    assert ts.CudaSharedMemoryRegion.from_json(entry) == ts.CudaSharedMemoryRegion(
        name="r", device_id=1, byte_size=64
    )


def test_health_routes_read_status_only() -> None:
    assert HttpCodec("").encode(ops.IsServerLive()).read(200, None, b"") is True
    assert HttpCodec("").encode(ops.IsServerReady()).read(400, None, b"") is False


def test_metadata_route_raises_on_unknown_model() -> None:
    call = HttpCodec("").encode(ops.GetModelMetadata("nope"))
    with pytest.raises(ts.ModelNotFoundError) as info:
        call.read(404, None, b'{"error":"Request for unknown model: \'nope\' is not found"}')
    assert info.value.model == "nope"


# gRPC: build_infer_request


def test_build_infer_request_inputs() -> None:
    message = build_infer_request(request(version="3", request_id="r1"))
    assert message.model_name == "m"
    assert message.model_version == "3"
    assert message.id == "r1"
    assert [(t.name, t.datatype, list(t.shape)) for t in message.inputs] == [
        ("F", "FP32", [1, 3]),
        ("T", "BYTES", [3, 1]),
    ]
    assert list(message.raw_input_contents) == [
        FLOATS.astype("<f4").tobytes(),
        serialized(["안녕", "", "a\x00b"]),
    ]
    assert len(message.outputs) == 0  # every output
    assert not message.parameters


def test_build_infer_request_raw_bytes_stay_bytes() -> None:
    message = build_infer_request(request(inputs=[Tensor("R", "BYTES", RAW)]))
    assert message.raw_input_contents[0] == b"\x02\x00\x00\x00\x00\xff"


def test_build_infer_request_typed_parameters() -> None:
    parameters = {"flag": True, "off": False, "count": 2**40, "ratio": 0.5, "mode": "fast"}
    message = build_infer_request(request(parameters=parameters))
    got = message.parameters
    assert got["flag"].WhichOneof("parameter_choice") == "bool_param"
    assert got["flag"].bool_param is True
    assert got["off"].WhichOneof("parameter_choice") == "bool_param"
    assert got["off"].bool_param is False
    assert got["count"].WhichOneof("parameter_choice") == "int64_param"
    assert got["count"].int64_param == 2**40
    assert got["ratio"].WhichOneof("parameter_choice") == "double_param"
    assert got["ratio"].double_param == 0.5
    assert got["mode"].WhichOneof("parameter_choice") == "string_param"
    assert got["mode"].string_param == "fast"
    assert set(got) == set(parameters)


def test_build_infer_request_sequence_and_priority() -> None:
    message = build_infer_request(
        request(sequence_id=42, sequence_start=True, sequence_end=False, priority=2)
    )
    got = message.parameters
    assert got["sequence_id"].WhichOneof("parameter_choice") == "int64_param"
    assert got["sequence_id"].int64_param == 42
    assert got["sequence_start"].bool_param is True
    assert got["sequence_end"].WhichOneof("parameter_choice") == "bool_param"
    assert got["sequence_end"].bool_param is False
    assert got["priority"].WhichOneof("parameter_choice") == "uint64_param"
    assert got["priority"].uint64_param == 2


def test_build_infer_request_string_sequence_id() -> None:
    message = build_infer_request(request(sequence_id="session-7", sequence_end=True))
    got = message.parameters
    assert got["sequence_id"].WhichOneof("parameter_choice") == "string_param"
    assert got["sequence_id"].string_param == "session-7"
    assert got["sequence_end"].bool_param is True


def test_build_infer_request_without_sequence_or_priority() -> None:
    message = build_infer_request(request())
    for name in ("sequence_id", "sequence_start", "sequence_end", "priority"):
        assert name not in message.parameters


def test_build_infer_request_outputs_with_class_count() -> None:
    outputs = (RequestedOutput("SCORES"), RequestedOutput("LABELS", class_count=3))
    message = build_infer_request(request(outputs=outputs))
    assert [output.name for output in message.outputs] == ["SCORES", "LABELS"]
    assert "classification" not in message.outputs[0].parameters
    classification = message.outputs[1].parameters["classification"]
    assert classification.WhichOneof("parameter_choice") == "int64_param"
    assert classification.int64_param == 3


def test_build_infer_request_round_trips_through_protobuf() -> None:
    message = build_infer_request(request(parameters={"k": 1}, priority=1))
    again = pb.ModelInferRequest.FromString(message.SerializeToString())
    assert again == message


# gRPC: decode_infer_response


def test_decode_infer_response_raw_outputs() -> None:
    scores = np.array([[0.5, 1.5, -1.0]], dtype="<f4")
    response = pb.ModelInferResponse(model_name="m", model_version="1", id="r1")
    response.outputs.add(name="SCORES", datatype="FP32", shape=[1, 3])
    response.outputs.add(name="NAMES", datatype="BYTES", shape=[2])
    response.outputs.add(name="FLAGS", datatype="BOOL", shape=[2, 1])
    response.raw_output_contents.extend(
        [scores.tobytes(), serialized(["안녕", b"\x00"]), b"\x01\x00"]
    )
    response.parameters["sequence_end"].bool_param = True
    response.parameters["count"].int64_param = 3
    response.parameters["note"].string_param = "x"
    response.parameters["ratio"].double_param = 0.5
    result = decode_infer_response(response)
    assert list(result) == ["SCORES", "NAMES", "FLAGS"]
    np.testing.assert_array_equal(result["SCORES"], scores)
    assert result["SCORES"].dtype == np.float32
    assert result["NAMES"].tolist() == ["안녕".encode(), b"\x00"]
    assert result["FLAGS"].tolist() == [[True], [False]]
    assert result.datatype("FLAGS") == "BOOL"
    assert result.model_name == "m"
    assert result.model_version == "1"
    assert result.id == "r1"
    assert result.parameters == {"sequence_end": True, "count": 3, "note": "x", "ratio": 0.5}


def test_decode_infer_response_typed_contents() -> None:
    response = pb.ModelInferResponse(model_name="m", model_version="1")
    ints = response.outputs.add(name="I", datatype="INT32", shape=[2, 2])
    ints.contents.int_contents.extend([1, 2, 3, 4])
    texts = response.outputs.add(name="S", datatype="BYTES", shape=[2])
    texts.contents.bytes_contents.extend([b"a", "é".encode()])
    floats = response.outputs.add(name="F", datatype="FP32", shape=[1])
    floats.contents.fp32_contents.extend([0.25])
    result = decode_infer_response(response)
    assert result["I"].tolist() == [[1, 2], [3, 4]]
    assert result["I"].dtype == np.int32
    assert result.as_strings("S").tolist() == ["a", "é"]
    assert result["F"].tolist() == [0.25]


@pytest.mark.parametrize(
    ("datatype", "field", "values"),
    [
        ("INT8", "int_contents", [300, 1]),
        ("INT16", "int_contents", [-40000]),
        ("UINT8", "uint_contents", [256]),
        ("UINT16", "uint_contents", [2**31]),
    ],
)
def test_typed_contents_out_of_the_output_range_are_refused(
    datatype: str, field: str, values: list[int]
) -> None:
    # The protobuf fields are 32 bits wide: a cast to the narrower output would wrap.
    response = pb.ModelInferResponse(model_name="m")
    output = response.outputs.add(name="O", datatype=datatype, shape=[len(values)])
    getattr(output.contents, field).extend(values)
    with pytest.raises(ts.InferenceError, match=f"'O': its {datatype} values are not all"):
        decode_infer_response(response)


def test_decode_infer_response_refuses_wrong_sizes() -> None:
    response = pb.ModelInferResponse(model_name="m", model_version="1")
    response.outputs.add(name="O", datatype="FP32", shape=[4])
    response.raw_output_contents.append(b"\x00" * 12)
    with pytest.raises(ts.InferenceError, match="'O'"):
        decode_infer_response(response)


def test_grpc_round_trip_of_request_data() -> None:
    """What build_infer_request sends decodes back to the same arrays."""
    message = build_infer_request(request())
    response = pb.ModelInferResponse(model_name="m", model_version="1")
    for tensor, raw in zip(message.inputs, message.raw_input_contents, strict=True):
        response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        response.raw_output_contents.append(raw)
    result = decode_infer_response(response)
    np.testing.assert_array_equal(result["F"], FLOATS)
    assert result.as_strings("T").tolist() == TEXTS.tolist()


# gRPC: channel options


def test_channel_options() -> None:
    options = dict(channel_options())
    assert len(options) == len(channel_options())  # no argument given twice
    assert options["grpc.max_send_message_length"] == 2**31 - 1
    assert options["grpc.max_receive_message_length"] == 2**31 - 1
    for key in (
        "grpc.keepalive_time_ms",
        "grpc.keepalive_timeout_ms",
        "grpc.keepalive_permit_without_calls",
        "grpc.http2.max_pings_without_data",
    ):
        assert key in options
    for key in ("grpc.initial_reconnect_backoff_ms", "grpc.max_reconnect_backoff_ms"):
        assert 0 < options[key] <= 1000
    assert options["grpc.initial_reconnect_backoff_ms"] <= options["grpc.max_reconnect_backoff_ms"]
    # gRPC reads the minimum backoff as the shortest connection attempt too: set low, it
    # abandons handshakes over slow links (a call's timeout bounds the wait instead).
    assert "grpc.min_reconnect_backoff_ms" not in options
    assert "grpc.ssl_target_name_override" not in options


def test_channel_options_with_tls_server_hostname() -> None:
    options = dict(channel_options(ts.TLSConfig(server_hostname="triton.internal")))
    assert options["grpc.ssl_target_name_override"] == "triton.internal"
    assert options["grpc.max_receive_message_length"] == 2**31 - 1
    assert "grpc.ssl_target_name_override" not in dict(channel_options(ts.TLSConfig()))


@pytest.mark.parametrize(
    ("parameters", "priority"),
    [({"k": 2**64}, 0), ({"k": -(2**63) - 1}, 0), ({}, -1), ({}, 2**64), ({}, True)],
)
def test_numbers_the_protocol_cannot_carry_are_refused(
    parameters: dict[str, int], priority: int
) -> None:
    from triton_sdk._base import ModelCore

    spec = ts.ModelSpec(
        name="m",
        max_batch_size=0,
        inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
    )
    with pytest.raises(ts.InvalidInputError):
        ModelCore(spec, None)._requests(
            {"X": [1.0]},
            {},
            outputs=None,
            parameters=parameters,
            priority=priority,
            request_id="",
            sample=False,
        )


def grpc_response(outputs: dict[str, np.ndarray[Any, Any]]) -> pb.ModelInferResponse:
    return pb.ModelInferResponse(
        model_name="m",
        model_version="1",
        outputs=[
            pb.ModelInferResponse.InferOutputTensor(
                name=name,
                datatype="FP32" if array.dtype == np.float32 else "INT64",
                shape=list(array.shape),
            )
            for name, array in outputs.items()
        ],
        raw_output_contents=[array.tobytes() for array in outputs.values()],
    )


def test_numeric_outputs_become_arrays_when_read_and_every_way_of_reading_agrees() -> None:
    sent = {
        "A": np.arange(6, dtype=np.float32).reshape(1, 2, 3),
        "B": np.array([[7, 8]], dtype=np.int64),
    }
    result = decode_infer_response(grpc_response(sent))
    assert "FP32[1, 2, 3]" in repr(result)  # shapes are known before any array is made
    np.testing.assert_array_equal(result["A"], sent["A"])
    assert result["A"] is result["A"]  # made once
    assert set(result.to_dict()) == {"A", "B"}
    np.testing.assert_array_equal(dict(result.items())["B"], sent["B"])
    np.testing.assert_array_equal(result.without_batch_axis()["B"], sent["B"][0])
    joined = ts.InferResult.concatenate([result, decode_infer_response(grpc_response(sent))])
    np.testing.assert_array_equal(joined["B"], np.concatenate([sent["B"], sent["B"]]))
    assert not result["A"].flags.writeable


def test_a_malformed_output_is_refused_when_decoded_not_when_read() -> None:
    response = grpc_response({"A": np.zeros(4, dtype=np.float32)})
    response.outputs[0].shape[:] = [5]  # 16 bytes cannot hold 5 FP32
    with pytest.raises(ts.InferenceError, match="'A'"):
        decode_infer_response(response)


def large_request(*, sequence: bool = False) -> InferRequest:
    return InferRequest(
        model="m",
        version="2",
        inputs=[
            Tensor("A", "FP32", np.arange(300_000, dtype=np.float32)),
            Tensor("B", "BYTES", np.array([b"x", "é".encode()], dtype=np.object_)),
            Tensor("C", "INT64", np.arange(6, dtype=">i8").reshape(2, 3)),  # big-endian
        ],
        outputs=(RequestedOutput("Y"), RequestedOutput("Z", class_count=3)),
        request_id="r1",
        parameters={"k": 1, "s": "v"},
        priority=2,
        sequence_id=7 if sequence else 0,
        sequence_start=sequence,
    )


@pytest.mark.parametrize("sequence", [False, True])
def test_a_large_request_serialized_by_hand_is_the_message_protobuf_would_send(
    sequence: bool,
) -> None:
    request = large_request(sequence=sequence)
    wire = serialize_large_infer(request)
    assert wire is not None
    assert pb.ModelInferRequest.FromString(wire) == build_infer_request(request)


def test_a_small_request_is_left_to_protobuf() -> None:
    small = InferRequest(model="m", inputs=[Tensor("A", "FP32", np.zeros(4, np.float32))])
    assert serialize_large_infer(small) is None


def test_a_large_answer_is_split_into_the_message_and_views_of_its_raw_contents() -> None:
    sent = {
        "A": np.arange(300_000, dtype=np.float32),
        "B": np.array([[7, 8]], dtype=np.int64),
    }
    response = grpc_response(sent)
    response.parameters["p"].int64_param = 5
    response.id = "r1"
    message, raw, _ = split_infer_response(response.SerializeToString())
    assert all(isinstance(part, memoryview) for part in raw)
    assert not message.raw_output_contents
    result = decode_infer_response(message, None, raw)
    np.testing.assert_array_equal(result["A"], sent["A"])
    np.testing.assert_array_equal(result["B"], sent["B"])
    assert (result.id, result.parameters) == ("r1", {"p": 5})


@pytest.mark.parametrize("cut", [1, 5, 100, -3])
def test_a_truncated_large_answer_is_refused(cut: int) -> None:
    wire = grpc_response({"A": np.zeros(1000, dtype=np.float32)}).SerializeToString()
    with pytest.raises(ts.InferenceError, match="malformed"):
        split_infer_response(wire[:cut])


def test_a_result_with_outputs_not_read_yet_pickles_and_copies() -> None:
    import copy
    import pickle

    sent = {"A": np.arange(300_000, dtype=np.float32), "B": np.array([[7, 8]], dtype=np.int64)}
    response = grpc_response(sent)
    message, raw, _ = split_infer_response(response.SerializeToString())
    for result in (decode_infer_response(message, None, raw), decode_infer_response(response)):
        for copied in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
            np.testing.assert_array_equal(copied["A"], sent["A"])
            assert (copied.model_name, copied.datatype("B")) == ("m", "INT64")


def test_a_large_infer_travels_in_wire_form_and_a_small_one_as_a_message() -> None:
    large = grpc_encode(large_request())
    assert isinstance(large, GrpcCall)
    assert (large.rpc, large.wire, large.streamed) == ("ModelInfer", True, True)
    assert isinstance(large.message, bytes)
    sent = {"Y": np.arange(300_000, dtype=np.float32)}
    np.testing.assert_array_equal(
        large.read(grpc_response(sent).SerializeToString())["Y"], sent["Y"]
    )
    small = grpc_encode(
        InferRequest(
            model="m", inputs=[Tensor("A", "FP32", np.zeros(4, np.float32))], request_id="r"
        )
    )
    assert isinstance(small, GrpcCall)
    assert (small.rpc, small.wire, small.streamed) == ("ModelInfer", False, False)
    assert isinstance(small.message, pb.ModelInferRequest)


def test_a_taken_request_is_held_only_by_its_stream_until_read() -> None:
    # grpc frees a streamed message once sent only if nothing else holds it: not the
    # call, and not the iterator once grpc has read the message from it.
    large = grpc_encode(large_request())
    assert isinstance(large, GrpcCall)
    wire = large.message
    stream = large.take()
    assert large.message is None
    assert gc.get_referents(stream) != []
    assert next(stream) is wire
    assert list(stream) == []
    assert gc.get_referents(stream) == []


def test_a_small_plain_infer_is_a_cached_head_and_its_contents_byte_for_byte() -> None:
    def request(a: np.ndarray[Any, Any], words: list[bytes]) -> InferRequest:
        return InferRequest(
            model="m",
            version="2",
            inputs=[
                Tensor("A", "FP32", a),
                Tensor("B", "BYTES", np.array(words, dtype=np.object_)),
            ],
            outputs=(RequestedOutput("Y"), RequestedOutput("Z", class_count=3)),
        )

    for a, words in [
        (np.arange(4, dtype=np.float32), [b"x", b""]),
        (np.ones(4, dtype=np.float32), [b"\0", "안녕".encode()]),  # the same head again
        (np.ones((2, 3), dtype=np.float32), [b"longer"]),  # another shape: another head
    ]:
        sent = request(a, words)
        encoded = grpc_encode(sent)
        assert isinstance(encoded, GrpcCall)
        assert encoded.wire
        assert encoded.message == build_infer_request(sent).SerializeToString()
    answer = {"Y": np.arange(3, dtype=np.float32)}
    np.testing.assert_array_equal(
        encoded.read(grpc_response(answer).SerializeToString())["Y"], answer["Y"]
    )


def test_content_codings_are_read_whatever_their_case() -> None:
    # "GZIP" and "x-gzip" were refused as encodings the client did not ask for.
    body = b"tensors" * 100
    assert decompress(gzip.compress(body), "GZIP", "gzip") == body
    assert decompress(gzip.compress(body), "x-gzip", "gzip") == body
    assert decompress(zlib.compress(body), "Deflate", "deflate") == body
    assert decompress(body, "Identity", None) == body
    with pytest.raises(ts.InferenceError, match="did not ask for: br"):
        decompress(body, "br", "*")


@pytest.mark.parametrize(
    ("accepted", "coding"),
    [
        (None, "gzip"),
        ("identity", "gzip"),
        ("gzip", "deflate"),
        ("deflate", "gzip"),
        ("gzip;q=0, deflate", "gzip"),
        ("gzip;q=0.000, *", "gzip"),
    ],
)
def test_an_encoding_the_request_did_not_accept_is_refused(
    accepted: str | None, coding: str
) -> None:
    # Any gzip or deflate answer was inflated, whatever the request accepted.
    body = (gzip.compress if coding == "gzip" else zlib.compress)(b"x" * 100)
    with pytest.raises(ts.InferenceError, match=f"did not ask for: {coding}"):
        decompress(body, coding, accepted)


def test_encodings_a_request_accepts() -> None:
    body = b"tensors" * 100
    for accepted in ("gzip", "GZIP;q=0.5", "deflate, gzip", "*", "x-gzip", "*;q=0, gzip"):
        assert decompress(gzip.compress(body), "gzip", accepted) == body
    # An empty body is empty in any encoding; gzip members one after another are one body.
    assert decompress(b"", "gzip", "gzip") == b""
    assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", "gzip") == b"abcd"


def test_a_body_that_inflates_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1 MiB gzip body of zeros inflated to 1 GiB in memory (2.1 GB peak).
    from triton_sdk import _compression

    monkeypatch.setattr(_compression, "MOST_INFLATED", 1000)
    assert decompress(gzip.compress(b"\0" * 1000), "gzip", "gzip") == b"\0" * 1000
    with pytest.raises(ts.InferenceError, match="inflates past 1000 bytes"):
        decompress(gzip.compress(b"\0" * 1001), "gzip", "gzip")


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_body_cut_short_or_followed_by_bytes_is_corrupt(coding: str) -> None:
    whole = (gzip.compress if coding == "gzip" else zlib.compress)(b"tensors" * 100)
    with pytest.raises(ts.InferenceError, match="corrupt: it ends early"):
        decompress(whole[:-10], coding, coding)
    with pytest.raises(ts.InferenceError, match="corrupt: bytes follow its end"):
        decompress(whole + b"junk", coding, coding)


def test_grpc_server_metadata_keeps_an_empty_name() -> None:
    # proto3 leaves an empty field out of its JSON form: "name" went missing, and the
    # answer could not be read over gRPC while HTTP read the same one.
    from triton_sdk import _grpc_codec
    from triton_sdk._ops import GetServerMetadata

    call = _grpc_codec.encode(GetServerMetadata())
    assert isinstance(call, _grpc_codec.GrpcCall)
    answer = call.read(pb.ServerMetadataResponse(name="", version="1"))
    assert ts.ServerMetadata.from_json(answer) == ts.ServerMetadata(name="", version="1")


def test_grpc_json_answers_have_ints_where_http_answers_have_them() -> None:
    # protobuf's JSON wrote every 64-bit integer as a str: model_config(...)["input"][0]
    # ["dims"] was ["1", "-1"] over gRPC, [1, -1] over HTTP.
    from tritonclient.grpc import model_config_pb2 as mc

    from triton_sdk._grpc_codec import _to_json

    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.add(name="X", data_type=mc.TYPE_FP32, dims=[1, -1])
    config.dynamic_batching.max_queue_delay_microseconds = 100
    config.parameters["k"].string_value = "123"  # (a str that looks like an int stays one)
    assert _to_json(config) == {
        "name": "m",
        "max_batch_size": 8,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1, -1]}],
        "dynamic_batching": {"max_queue_delay_microseconds": 100},
        "parameters": {"k": {"string_value": "123"}},
    }
