"""The pure parts of the model kinds: classification, generate, map, sequences, streams."""

from __future__ import annotations

import array
import asyncio
import gc
import json
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import Classification, InferResult, ModelSpec, TensorSpec
from triton_sdk._base import ModelCore, SequenceFlags
from triton_sdk._classify import parse_classifications
from triton_sdk._concurrency import Gate
from triton_sdk._dtypes import encode_bytes, encoded_payload
from triton_sdk._generate import (
    ServerSentEvents,
    event_to_result,
    generate_body,
    generate_request,
    response_fields,
    result_fields,
    single_response,
    tensors_to_fields,
)
from triton_sdk._http_codec import EventDecoder
from triton_sdk._map import (
    BatchBuilder,
    MapPlan,
    PreparedSample,
    check_batch_size,
    default_batch_size,
    join_samples,
)
from triton_sdk._request import RequestedOutput, check_parameters
from triton_sdk._sequence import (
    Delivery,
    SequenceNotEndedWarning,
    SequenceState,
    new_sequence_id,
)
from triton_sdk._shaping import Tensor
from triton_sdk._streams import AsyncResponseStream, ResponseStream
from triton_sdk._wire import payload_size
from triton_sdk.testing import MockTransport

from ._both import resolve


def tensor(name: str, datatype: str, *shape: int, optional: bool = False) -> TensorSpec:
    return TensorSpec(name=name, datatype=datatype, shape=shape, optional=optional)


def make_spec(
    inputs: list[TensorSpec],
    outputs: list[TensorSpec] | None = None,
    *,
    name: str = "m",
    max_batch_size: int = 4,
    **options: Any,
) -> ModelSpec:
    outputs = outputs if outputs is not None else [tensor("OUT", "FP32", -1)]
    return ModelSpec(
        name=name,
        max_batch_size=max_batch_size,
        inputs={spec.name: spec for spec in inputs},
        outputs={spec.name: spec for spec in outputs},
        **options,
    )


def result_of(arrays: dict[str, np.ndarray[Any, Any]], **metadata: Any) -> InferResult:
    datatypes = {
        name: "BYTES" if array.dtype == np.object_ else "FP32" for name, array in arrays.items()
    }
    return InferResult(
        arrays,
        datatypes=datatypes,
        model_name=metadata.get("model_name", "m"),
        model_version=metadata.get("model_version", "1"),
        id=metadata.get("id", ""),
        parameters=metadata.get("parameters"),
    )


def bytes_array(*items: bytes, shape: tuple[int, ...] | None = None) -> np.ndarray[Any, Any]:
    array = np.empty(len(items), dtype=np.object_)
    for index, item in enumerate(items):
        array[index] = item
    return array.reshape(shape if shape is not None else (len(items),))


# Classification


def test_classification_with_label() -> None:
    assert Classification.parse("0.9:2:bird") == Classification(0.9, 2, "bird")
    parsed = Classification.parse("0.9:2:bird")
    assert parsed.score == pytest.approx(0.9)
    assert parsed.index == 2
    assert parsed.label == "bird"
    assert isinstance(parsed.index, int)


def test_classification_without_label() -> None:
    assert Classification.parse("0.25:7") == Classification(0.25, 7, None)
    assert Classification.parse("-1.5:0").score == -1.5


def test_an_integer_score_stays_an_exact_int() -> None:
    assert Classification.parse("9007199254740993:0").score == 2**53 + 1
    assert Classification.parse("-9223372036854775808:1").score == -(2**63)
    assert type(Classification.parse("3:0").score) is int
    assert type(Classification.parse("3.000000:0").score) is float
    assert Classification.parse("inf:0").score == float("inf")


def test_classification_label_may_contain_colons() -> None:
    assert Classification.parse("1:3:http://x:80/a") == Classification(1.0, 3, "http://x:80/a")
    assert Classification.parse("0.5:1:").label == ""


def test_classification_from_bytes() -> None:
    assert Classification.parse(b"0.75:1:cat") == Classification(0.75, 1, "cat")
    assert Classification.parse("0.5:0:고양이".encode()) == Classification(0.5, 0, "고양이")


@pytest.mark.parametrize(
    "text", ["", "bird", "0.9", "x:1:bird", "0.9:two:bird", "0.9:1.5", b"0.9:1:\xff"]
)
def test_malformed_classification_is_an_inference_error(text: str | bytes) -> None:
    with pytest.raises(ts.InferenceError, match="classification"):
        Classification.parse(text)


def test_parse_classifications_batched() -> None:
    array = bytes_array(b"0.9:2:bird", b"0.1:0:cat", b"0.8:1:dog", b"0.2:2:bird", shape=(2, 2))
    assert parse_classifications(array, batched=True) == [
        [Classification(0.9, 2, "bird"), Classification(0.1, 0, "cat")],
        [Classification(0.8, 1, "dog"), Classification(0.2, 2, "bird")],
    ]


def test_parse_classifications_batched_with_trailing_axis() -> None:
    array = bytes_array(b"0.9:2", b"0.8:1", shape=(2, 1, 1))
    assert parse_classifications(array, batched=True) == [
        [Classification(0.9, 2)],
        [Classification(0.8, 1)],
    ]


def test_parse_classifications_unbatched_is_one_sample() -> None:
    array = bytes_array(b"3:1:b", b"2:0:a", b"1:2:c")
    assert parse_classifications(array, batched=False) == [
        [Classification(3.0, 1, "b"), Classification(2.0, 0, "a"), Classification(1.0, 2, "c")]
    ]


# Server-sent events


def test_sse_event_data_arrives_over_several_feeds() -> None:
    parser = ServerSentEvents()
    assert parser.feed(b'data: {"a":') == []
    assert parser.feed(b"1}\n") == []
    assert parser.feed(b"\n") == ['{"a":1}']
    # The next event starts clean.
    assert parser.feed(b"data: sec") == []
    assert parser.feed(b"ond\n\n") == ["second"]


def test_sse_chunks_of_any_size_give_the_same_events() -> None:
    stream = b'data: {"n": 1}\n\ndata: {"n": 2}\r\n\r\n: comment\ndata: multi\ndata: line\n\n'
    expected = ['{"n": 1}', '{"n": 2}', "multi\nline"]
    for size in (1, 2, 3, 7, len(stream)):
        chunks = [stream[start : start + size] for start in range(0, len(stream), size)]
        assert list(ServerSentEvents().events(chunks)) == expected, size


def test_sse_multi_line_data_joined_with_newlines() -> None:
    parser = ServerSentEvents()
    assert parser.feed(b"data: one\ndata: two\ndata:three\n") == []
    assert parser.feed(b"\n") == ["one\ntwo\nthree"]


def test_sse_only_one_leading_space_is_removed() -> None:
    assert ServerSentEvents().feed(b"data:   indented\n\n") == ["  indented"]


def test_sse_comments_and_other_fields_are_ignored() -> None:
    parser = ServerSentEvents()
    assert parser.feed(b": keep-alive\n\n") == []  # a comment alone is no event
    assert parser.feed(b"event: message\nid: 7\nretry: 100\n") == []
    assert parser.feed(b"data: payload\n: in the middle\n\n") == ["payload"]


def test_sse_crlf_line_endings() -> None:
    assert ServerSentEvents().feed(b"data: first\r\ndata: second\r\n\r\n") == ["first\nsecond"]


def test_events_before_a_failing_one_in_the_same_chunk_are_delivered() -> None:
    # An error event read in one chunk with the responses before it raises after them.
    def convert(data: str) -> str:
        if data == "error":
            raise ts.InferenceError("the model failed")
        return data

    items = EventDecoder(convert).feed(b"data: one\n\ndata: two\n\ndata: error\n\n")
    assert next(items) == "one"
    assert next(items) == "two"
    with pytest.raises(ts.InferenceError, match="the model failed"):
        next(items)


def test_sse_blank_lines_without_data_yield_nothing() -> None:
    parser = ServerSentEvents()
    assert parser.feed(b"\n\n") == []
    assert parser.feed(b"") == []
    assert parser.finish() == []


def test_sse_final_event_without_blank_line() -> None:
    parser = ServerSentEvents()
    assert parser.feed(b"data: last") == []
    assert parser.finish() == ["last"]
    assert parser.finish() == []


def test_sse_utf8_payload_split_inside_a_character() -> None:
    encoded = 'data: {"text_output": "안녕"}\n\n'.encode()
    parser = ServerSentEvents()
    assert parser.feed(encoded[:20]) == []
    (event,) = parser.feed(encoded[20:])
    assert json.loads(event) == {"text_output": "안녕"}


# generate: JSON bodies and answers


def test_generate_body_turns_numpy_bytes_and_scalars_into_json() -> None:
    body = json.loads(
        generate_body(
            {
                "text_input": "hi",
                "raw": b"bytes",
                "max_tokens": np.int64(3),
                "temperature": np.float32(0.5),
                "ids": np.array([1, 2, 3], dtype=np.int32),
                "one": np.array([7], dtype=np.int64),
                "matrix": np.array([[1.5, 2.5], [3.5, 4.5]]),
                "names": bytes_array(b"a", b"b"),
                "flag": True,
                "nothing": None,
                "nested": {"k": np.array([1.0])},
            },
            None,
        )
    )
    assert body == {
        "text_input": "hi",
        "raw": "bytes",
        "max_tokens": 3,
        "temperature": 0.5,
        "ids": [1, 2, 3],
        "one": 7,
        "matrix": [[1.5, 2.5], [3.5, 4.5]],
        "names": ["a", "b"],
        "flag": True,
        "nothing": None,
        "nested": {"k": 1.0},
    }
    assert "parameters" not in body


def test_generate_body_puts_parameters_under_parameters() -> None:
    body = json.loads(
        generate_body({"text_input": "hi"}, {"temperature": 0.1, "stream": True, "n": 2})
    )
    assert body == {"text_input": "hi", "parameters": {"temperature": 0.1, "stream": True, "n": 2}}
    assert "parameters" not in json.loads(generate_body({"x": 1}, {}))


def test_generate_body_sends_buffers_and_arrays_as_grpc_reads_them() -> None:
    # Over HTTP a bytearray, a memoryview or an array.array was "cannot send as JSON",
    # where gRPC sends them.
    spec = make_spec(
        [tensor("TEXT", "BYTES", 1), tensor("IDS", "INT32", -1)], max_batch_size=4, has_config=True
    )
    for text, ids in [
        (bytearray(b"hi"), array.array("i", [1, 2])),
        (memoryview(b"hi"), array.array("h", [1, 2])),
        (b"hi", [1, 2]),
    ]:
        body = json.loads(generate_body({"TEXT": text, "IDS": ids, "n": 1}, None, spec=spec))
        assert body == {"TEXT": "hi", "IDS": [1, 2], "n": 1}


@pytest.mark.parametrize("name", ["id", "parameters"])
def test_inputs_named_like_the_generate_body_s_own_keys_are_refused_over_http(name: str) -> None:
    # Triton read such an input as the request's id (or its parameters).
    spec = make_spec([tensor(name, "INT32", 1)], max_batch_size=4, has_config=True)
    with pytest.raises(ts.InvalidInputError, match=rf"input '{name}'.*own.*gRPC"):
        generate_body({name: 5}, None, spec=spec)
    with pytest.raises(ts.InvalidInputError, match=rf"input '{name}'.*own.*gRPC"):
        tensors_to_fields([Tensor(name, "INT32", np.array([[5]], np.int32))], spec)


def test_generate_body_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(ts.InvalidInputError, match="object"):
        generate_body({"x": object()}, None)


def test_response_fields_drop_the_metadata() -> None:
    document = {
        "model_name": "gen",
        "model_version": "1",
        "id": "r1",
        "text_output": "hello",
        "tokens": [1, 2],
        "score": [0.5],
    }
    assert response_fields(document, "gen") == {
        "text_output": "hello",
        "tokens": [1, 2],
        "score": 0.5,
    }


def test_an_output_named_error_is_an_output_not_a_failure() -> None:
    # Over HTTP a good answer with an output named "error" was raised as that error.
    outputs = ["error", "INFO"]
    document = {"error": "none really", "INFO": "x", "model_name": "m", "model_version": "1"}
    assert response_fields(document, "m", outputs=outputs) == {"error": "none really", "INFO": "x"}
    with pytest.raises(ts.InferenceError, match="boom"):  # Triton's error: the field alone
        response_fields({"error": "boom"}, "m", outputs=outputs)


def test_response_fields_error_is_an_inference_error_with_status_200() -> None:
    with pytest.raises(ts.InferenceError, match="out of tokens") as caught:
        response_fields({"error": "out of tokens"}, "gen")
    assert caught.value.status == 200
    assert caught.value.model == "gen"


def test_response_fields_of_a_non_object() -> None:
    with pytest.raises(ts.InferenceError, match="non-object"):
        response_fields(["not", "an", "object"], "gen")


def test_result_fields_batched_drop_the_batch_axis() -> None:
    result = result_of(
        {
            "text_output": bytes_array(b"hello", shape=(1, 1)),
            "tokens": np.array([[1.0, 2.0, 3.0]], dtype=np.float32),
            "score": np.array([[0.25]], dtype=np.float32),
        }
    )
    assert result_fields(result, BATCHED) == {
        "text_output": "hello",
        "tokens": [1.0, 2.0, 3.0],
        "score": 0.25,
    }


def test_result_fields_are_flat_like_the_http_extension() -> None:
    result = result_of(
        {
            "text_output": bytes_array(b"hi"),
            "pair": np.array([[1.0, 2.0]], dtype=np.float32),
            "many": bytes_array(b"a", b"b"),
        }
    )
    assert result_fields(result, FLAT) == {
        "text_output": "hi",
        "pair": [1.0, 2.0],
        "many": ["a", "b"],
    }


def test_result_fields_bytes_become_str() -> None:
    fields = result_fields(result_of({"t": bytes_array("한국어".encode())}), FLAT)
    assert fields == {"t": "한국어"}
    assert isinstance(fields["t"], str)


def test_result_fields_of_a_batch_of_scalar_samples() -> None:
    # Metadata [-1] on a batched model (as MLServer and KServe give it): each sample is
    # a scalar, and a BYTES one is a bare bytes object inside the array.
    result = result_of({"text": bytes_array(b"AB"), "score": np.array([0.5], dtype=np.float32)})
    assert result_fields(result, BATCHED_FROM_METADATA) == {"text": "AB", "score": 0.5}


def test_result_fields_of_a_triton_model_are_each_output_whole() -> None:
    # As Triton's HTTP extension writes them: the row check of a model known from its
    # metadata alone refused a batched model's 0-d output, and its [3] one.
    result = result_of({"Y": np.array(5, np.int32), "Z": np.array([1, 2, 3], np.int32)})
    assert result_fields(result, BATCHED) == {"Y": 5, "Z": [1, 2, 3]}
    with pytest.raises(ts.InferenceError, match="came back with shape"):
        result_fields(result, BATCHED_FROM_METADATA)


BATCHED = make_spec([], max_batch_size=4)
FLAT = make_spec([], max_batch_size=0)
BATCHED_FROM_METADATA = make_spec([], max_batch_size=4, has_config=False)


GEN_SPEC = make_spec(
    [tensor("text_input", "BYTES", 1), tensor("max_tokens", "INT32", 1, optional=True)],
    [tensor("text_output", "BYTES", 1), tensor("tokens", "INT32", -1)],
    name="gen",
    max_batch_size=4,
    decoupled=True,
)


def test_tensors_to_fields_one_sample_of_a_batched_model() -> None:
    tensors = [
        Tensor("text_input", "BYTES", bytes_array(b"hi", shape=(1, 1))),
        Tensor("ids", "INT32", np.array([[1, 2, 3]], dtype=np.int32)),
    ]
    assert tensors_to_fields(tensors, GEN_SPEC) == {"text_input": "hi", "ids": [1, 2, 3]}


def test_tensors_to_fields_a_scalar_sample() -> None:
    spec = make_spec([tensor("text_input", "BYTES")], max_batch_size=4)
    tensors = [Tensor("text_input", "BYTES", np.array(["hi"], dtype=object))]
    assert tensors_to_fields(tensors, spec) == {"text_input": "hi"}


def test_tensors_to_fields_refuse_a_batch_of_several_and_point_to_grpc() -> None:
    tensors = [Tensor("text_input", "BYTES", bytes_array(b"a", b"b", shape=(2, 1)))]
    with pytest.raises(ts.InvalidInputError, match=r"batch of 2.*gRPC"):
        tensors_to_fields(tensors, GEN_SPEC)


def test_tensors_to_fields_refuse_rank_above_one_and_point_to_grpc() -> None:
    tensors = [Tensor("X", "FP32", np.zeros((1, 2, 2), dtype=np.float32))]
    with pytest.raises(ts.InvalidInputError, match=r"'X'.*\(2, 2\).*gRPC"):
        tensors_to_fields(tensors, GEN_SPEC)
    unbatched = make_spec([tensor("X", "FP32", 2, 2)], max_batch_size=0)
    with pytest.raises(ts.InvalidInputError, match="gRPC"):
        tensors_to_fields([Tensor("X", "FP32", np.zeros((2, 2), np.float32))], unbatched)


def test_tensors_to_fields_unbatched_model() -> None:
    spec = make_spec([tensor("X", "FP32", 3)], max_batch_size=0)
    fields = tensors_to_fields([Tensor("X", "FP32", np.array([1, 2, 3], np.float32))], spec)
    assert fields == {"X": [1.0, 2.0, 3.0]}


def test_event_to_result_batched_adds_the_batch_axis() -> None:
    event = {
        "model_name": "gen",
        "model_version": "1",
        "id": "r1",
        "text_output": "hello",
        "tokens": [4, 5, 6],
        "not_an_output": 1,
    }
    result = event_to_result(event, GEN_SPEC)
    assert list(result) == ["text_output", "tokens"]
    assert result["text_output"].shape == (1, 1)
    assert result["text_output"][0, 0] == b"hello"
    assert result.as_strings("text_output").tolist() == [["hello"]]
    assert result["tokens"].shape == (1, 3)
    assert result["tokens"].dtype == np.int32
    assert result["tokens"].tolist() == [[4, 5, 6]]
    assert result.datatype("tokens") == "INT32"
    assert (result.model_name, result.model_version, result.id) == ("gen", "1", "r1")


def test_event_to_result_unbatched_follows_the_output_shape() -> None:
    spec = make_spec(
        [tensor("X", "FP32", 1)],
        [tensor("GRID", "FP32", 2, 2), tensor("ODD", "FP32", 2, 2)],
        name="u",
        max_batch_size=0,
    )
    result = event_to_result({"GRID": [1, 2, 3, 4], "ODD": [1, 2, 3]}, spec)
    assert result["GRID"].shape == (2, 2)
    assert result["GRID"].tolist() == [[1, 2], [3, 4]]
    # Values that do not fill the declared shape stay flat.
    assert result["ODD"].shape == (3,)
    # Metadata the event lacks: the model's name, no version or id.
    assert (result.model_name, result.model_version, result.id) == ("u", "", "")


@pytest.mark.parametrize(
    ("dims", "count", "shape"),
    [
        ((-1, 3), 6, (2, 3)),
        ((2, -1), 0, (2, 0)),
        ((2, -1, 2), 8, (2, 2, 2)),
        ((-1, 4), 6, (6,)),  # no whole number of rows: flat
        ((-1, -1), 6, (6,)),  # two open dimensions: flat
        ((0, -1), 0, (0,)),  # any length would do: flat
    ],
)
def test_event_to_result_fills_in_one_open_dimension(
    dims: tuple[int, ...], count: int, shape: tuple[int, ...]
) -> None:
    # The events carry values without shapes; gRPC answers (2, 3) where this was (6,).
    spec = make_spec(
        [tensor("X", "FP32", 1)], [tensor("M", "INT32", *dims)], name="u", max_batch_size=0
    )
    result = event_to_result({"M": list(range(count))}, spec)
    assert result["M"].shape == shape
    assert result["M"].reshape(-1).tolist() == list(range(count))
    batched = make_spec([tensor("X", "FP32", 1)], [tensor("M", "INT32", *dims)], name="b")
    assert event_to_result({"M": list(range(count))}, batched)["M"].shape == (1, *shape)


def test_event_to_result_scalar_into_variable_shape() -> None:
    result = event_to_result({"tokens": 9}, GEN_SPEC)
    assert result["tokens"].shape == (1, 1)
    assert result["tokens"].tolist() == [[9]]


def test_generate_request_splits_inputs_from_parameters() -> None:
    request = generate_request(
        GEN_SPEC,
        "2",
        {"text_input": "hi", "max_tokens": 3, "temperature": 0.5, "stop": "\n"},
        {"seed": 7},
    )
    assert request.model == "gen"
    assert request.version == "2"
    assert [t.name for t in request.inputs] == ["text_input", "max_tokens"]
    text = request.inputs[0]
    assert text.datatype == "BYTES"
    assert text.array.shape == (1, 1)
    assert text.array[0, 0] in ("hi", b"hi")  # str is encoded on the wire
    assert request.inputs[1].array.dtype == np.int32
    assert request.inputs[1].array.tolist() == [[3]]
    assert request.parameters == {"temperature": 0.5, "stop": "\n", "seed": 7}
    assert request.sequence_id == 0


def test_generate_request_without_parameters_or_version() -> None:
    request = generate_request(GEN_SPEC, None, {"text_input": "hi"}, None)
    assert request.version == ""
    assert request.parameters is None


@pytest.mark.parametrize("name", ["sequence_id", "priority", "binary_data", "triton_anything"])
def test_generate_request_refuses_reserved_parameter_names(name: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="reserved"):
        generate_request(GEN_SPEC, None, {"text_input": "hi", name: 1}, None)
    with pytest.raises(ts.InvalidInputError, match="reserved"):
        generate_request(GEN_SPEC, None, {"text_input": "hi"}, {name: 1})


def test_generate_request_refuses_non_scalar_parameters() -> None:
    with pytest.raises(ts.InvalidInputError, match="'stop'"):
        generate_request(GEN_SPEC, None, {"text_input": "hi", "stop": ["a", "b"]}, None)


def test_numpy_scalar_parameters_become_python_values() -> None:
    request = generate_request(
        GEN_SPEC,
        None,
        {"text_input": "hi", "temperature": np.float32(0.5)},
        {"seed": np.uint32(7), "greedy": np.bool_(False)},
    )
    assert request.parameters == {"temperature": 0.5, "seed": 7, "greedy": False}
    assert [type(value) for value in request.parameters.values()] == [float, int, bool]
    given = {"mode": "fast", "top_k": 3}
    assert check_parameters(given, "gen") is given  # nothing to convert: no copy
    with pytest.raises(ts.InvalidInputError, match="'seed' must be bool, int, float or str"):
        check_parameters({"seed": np.complex64(1)}, "gen")


def test_generate_request_checks_the_inputs() -> None:
    with pytest.raises(ts.InvalidInputError, match="'text_input'"):
        generate_request(GEN_SPEC, None, {"max_tokens": 3}, None)


def test_single_response() -> None:
    only = result_of({"OUT": np.zeros(1, np.float32)})
    assert single_response([only], "gen") is only
    for results, count in (([], "none"), ([only, only], "more than one")):
        with pytest.raises(ts.InferenceError, match="generate_stream") as caught:
            single_response(results, "gen")
        assert caught.value.model == "gen"
        assert f"it sent {count};" in str(caught.value)


# map: batching of samples


MAP_SPEC = make_spec([tensor("X", "FP32", -1)], max_batch_size=8)


def sizes(batches: list[list[PreparedSample]]) -> list[int]:
    return [len(batch) for batch in batches]


def test_batch_builder_cuts_at_batch_size() -> None:
    builder = BatchBuilder(MAP_SPEC, 2)
    done: list[list[PreparedSample]] = []
    counts = []
    for value in range(5):
        completed = builder.add({"X": [float(value), 0.0]})
        counts.append(len(completed))
        done += completed
    assert counts == [0, 1, 0, 1, 0]
    assert sizes(done) == [2, 2]
    last = builder.flush()
    assert sizes(last) == [1]
    assert builder.flush() == []
    batches = done + last
    firsts = [
        sample.tensors[0].array[0, 0] for batch in batches for sample in batch if sample.tensors
    ]
    assert firsts == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert all(sample.error is None for batch in batches for sample in batch)


def test_batch_builder_cuts_when_the_signature_changes() -> None:
    builder = BatchBuilder(MAP_SPEC, 8)
    assert builder.add({"X": [1.0, 2.0]}) == []
    assert builder.add({"X": [3.0, 4.0]}) == []
    completed = builder.add({"X": [1.0, 2.0, 3.0]})
    assert sizes(completed) == [2]
    assert [s.signature for s in completed[0]] == [(("X", (2,)),)] * 2
    flushed = builder.flush()
    assert sizes(flushed) == [1]
    assert flushed[0][0].signature == (("X", (3,)),)


def test_batch_builder_optional_inputs_change_the_signature() -> None:
    spec = make_spec([tensor("A", "FP32", 1), tensor("B", "FP32", 1, optional=True)])
    builder = BatchBuilder(spec, 4)
    assert builder.add({"A": 1.0}) == []
    assert sizes(builder.add({"A": 2.0, "B": 3.0})) == [1]
    assert sizes(builder.flush()) == [1]


def test_batch_builder_refused_samples_travel_alone_and_name_their_position() -> None:
    builder = BatchBuilder(MAP_SPEC, 4)
    assert builder.add({"X": [1.0]}) == []
    completed = builder.add({"Y": [1.0]})  # unknown input
    assert sizes(completed) == [1, 1]
    assert completed[0][0].error is None
    error_batch = completed[1]
    assert error_batch[0].tensors is None
    assert isinstance(error_batch[0].error, ts.InvalidInputError)
    assert "sample 1:" in str(error_batch[0].error)
    assert "'Y'" in str(error_batch[0].error)
    # An error with nothing pending is one batch of its own.
    (alone,) = builder.add(["not", "a", "mapping"])
    assert isinstance(alone[0].error, ts.InvalidInputError)
    assert "sample 2:" in str(alone[0].error)
    assert "mapping" in str(alone[0].error)
    assert builder.add({"X": [2.0]}) == []
    assert sizes(builder.flush()) == [1]


def test_map_plan_raises_errors_in_order_unless_collecting() -> None:
    error = ts.InvalidInputError("sample 3: bad")
    raising = MapPlan(MAP_SPEC, None, None, 2, "raise", None)
    with pytest.raises(ts.InvalidInputError, match="sample 3"):
        raising.emit(error)
    assert MapPlan(MAP_SPEC, None, None, 2, "collect", None).emit(error) is error


def test_map_plan_isolates_only_batches_the_server_refused() -> None:
    plan = MapPlan(MAP_SPEC, None, None, 2, "collect", None)
    two = prepared([1.0], [2.0])
    assert plan.isolate(two, ts.InferenceError("model failed", status=500))
    # What the model cannot do for one sample (Triton's UNSUPPORTED: 501, UNIMPLEMENTED).
    assert plan.isolate(two, ts.UnsupportedRequestError("not for negatives", status=501))
    assert not plan.isolate(two, ts.UnsupportedError("Not Found", status=404))  # no endpoint
    assert not plan.isolate(two, ts.UnsupportedError("n > 1 on a one-choice backend"))
    # A timed-out or cut-off batch may still run: it is not sent again sample by sample.
    assert not plan.isolate(two, ts.TritonTimeoutError("timed out"))
    assert not plan.isolate(two, ts.TritonConnectionError("reset"))
    assert not plan.isolate(two[:1], ts.InferenceError("model failed"))
    assert not MapPlan(MAP_SPEC, None, None, 2, "raise", None).isolate(
        two, ts.InferenceError("model failed")
    )


@pytest.mark.parametrize(
    ("concurrency", "errors", "pattern"),
    [(0, "raise", "concurrency"), (2, "ignore", "errors")],
)
def test_map_plan_refuses_bad_options(concurrency: int, errors: str, pattern: str) -> None:
    with pytest.raises(ts.InvalidInputError, match=pattern):
        MapPlan(MAP_SPEC, None, None, concurrency, errors, None)


def test_default_batch_size_prefers_the_largest_preferred_size() -> None:
    assert default_batch_size(make_spec([], max_batch_size=8, preferred_batch_sizes=(4, 8))) == 8
    assert default_batch_size(make_spec([], max_batch_size=8, preferred_batch_sizes=(2, 4))) == 4
    # Preferred sizes above max_batch_size are not usable.
    assert default_batch_size(make_spec([], max_batch_size=8, preferred_batch_sizes=(2, 16))) == 2
    assert default_batch_size(make_spec([], max_batch_size=6)) == 6
    assert default_batch_size(make_spec([], max_batch_size=0)) == 1


def test_check_batch_size() -> None:
    spec = make_spec([], max_batch_size=8, preferred_batch_sizes=(4,))
    assert check_batch_size(spec, None) == 4
    assert check_batch_size(spec, 3) == 3
    assert check_batch_size(spec, 8) == 8
    assert check_batch_size(spec, 100) == 8
    for wrong in (0, -1):
        with pytest.raises(ts.InvalidInputError, match="batch_size"):
            check_batch_size(spec, wrong)
    unbatched = make_spec([], max_batch_size=0)
    assert check_batch_size(unbatched, None) == 1
    assert check_batch_size(unbatched, 16) == 1
    with pytest.raises(ts.InvalidInputError, match="batch_size"):
        check_batch_size(unbatched, 0)


def prepared(*values: list[float]) -> list[PreparedSample]:
    return [PreparedSample([Tensor("X", "FP32", np.array([v], np.float32))]) for v in values]


def test_join_samples_concatenates_along_the_batch_axis() -> None:
    samples = prepared([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    (joined,) = join_samples(samples, batched=True)
    assert joined.name == "X"
    assert joined.datatype == "FP32"
    assert joined.array.shape == (3, 2)
    assert joined.array.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_a_joined_text_batch_carries_its_encoded_size() -> None:
    # np.concatenate lost the samples' encodings: the batch counted 8 bytes an element
    # (a >2 GiB map batch of text went unrefused over gRPC) and was encoded again.
    spec = make_spec([tensor("T", "BYTES", 1)])
    builder = BatchBuilder(spec, 2)
    builder.add({"T": "a" * 100})
    (batch,) = builder.add({"T": "é" * 50})
    (joined,) = join_samples(batch, batched=True)
    payload = encoded_payload(joined.array)
    assert payload == encode_bytes([("a" * 100).encode(), ("é" * 50).encode()], "T")
    request = MapPlan(spec, None, 2, 1, "raise", None).request(batch)
    assert payload_size(request) == len(payload) == 2 * 4 + 200


def test_join_samples_of_one_or_unbatched_are_the_first() -> None:
    one = prepared([1.0])
    assert join_samples(one, batched=True) == one[0].tensors
    unbatched = prepared([1.0], [2.0])
    assert join_samples(unbatched, batched=False) == unbatched[0].tensors


def test_join_samples_keeps_the_input_order() -> None:
    spec = make_spec([tensor("A", "FP32", 1), tensor("B", "INT32", 1)])
    builder = BatchBuilder(spec, 2)
    builder.add({"B": 1, "A": 1.5})
    (batch,) = builder.add({"A": 2.5, "B": 2})
    joined = join_samples(batch, batched=True)
    assert [t.name for t in joined] == ["A", "B"]
    assert joined[0].array.tolist() == [[1.5], [2.5]]
    assert joined[1].array.tolist() == [[1], [2]]
    request = MapPlan(spec, "3", 2, 1, "raise", ["OUT"]).request(batch)
    assert request.version == "3"
    assert request.outputs == (RequestedOutput("OUT"),)
    assert request.inputs[0].array.shape == (2, 1)
    with pytest.raises(ts.InvalidInputError, match="'NOPE'"):
        MapPlan(spec, None, 2, 1, "raise", ["NOPE"])


# Sequences


SEQ_SPEC = make_spec([tensor("X", "INT32", 1)], name="acc", sequence=True)
STR_SEQ_SPEC = make_spec(
    [tensor("X", "INT32", 1)], name="acc_str", sequence=True, string_sequence_ids=True
)


def claimed(state: SequenceState[Gate], *, end: bool = False) -> Delivery:
    delivery = Delivery()
    state.claim(delivery, end)
    return delivery


def flags(delivery: Delivery) -> tuple[bool, bool]:
    return delivery.start, delivery.end


def test_sequence_flags_start_first_then_end_when_asked() -> None:
    state = SequenceState(SEQ_SPEC, 42, Gate)
    assert flags(claimed(state)) == (True, False)
    assert flags(claimed(state)) == (False, False)
    assert not state.ended
    assert flags(claimed(state, end=True)) == (False, True)
    assert state.ended
    assert state.sent == 3


def test_sequence_of_one_request_has_start_and_end() -> None:
    state = SequenceState(SEQ_SPEC, 5, Gate)
    assert flags(claimed(state, end=True)) == (True, True)


def test_ended_sequence_refuses_more_requests() -> None:
    state = SequenceState(SEQ_SPEC, 7, Gate)
    claimed(state, end=True)
    refused = Delivery()
    with pytest.raises(ts.TritonError, match="ended"):
        state.claim(refused, end=False)
    assert not refused.counted
    with pytest.raises(ts.TritonError, match="ended"):
        state.check_open()


def test_an_end_that_never_went_out_leaves_the_sequence_open() -> None:
    state = SequenceState(SEQ_SPEC, 8, Gate)
    state.settle(claimed(state), went_out=True)
    state.settle(claimed(state, end=True), went_out=False)  # cancelled before it went out
    assert not state.ended
    assert state.sent == 1
    assert flags(claimed(state, end=True)) == (False, True)


def test_a_start_that_never_went_out_passes_to_the_next_request() -> None:
    state = SequenceState(SEQ_SPEC, 8, Gate)
    first = claimed(state)
    assert first.start
    state.settle(first, went_out=False)
    assert state.sent == 0
    assert flags(claimed(state)) == (True, False)


def test_requests_waiting_for_start_go_on_its_fate() -> None:
    state = SequenceState(SEQ_SPEC, 8, Gate)
    first = claimed(state)
    waiting = [claimed(state), claimed(state, end=True)]
    assert not any(delivery.start for delivery in waiting)
    assert state.ready(first) is None  # it carries START: it goes
    gate = state.ready(waiting[0])
    assert gate is not None  # START is on its way: wait
    state.settle(first, went_out=False)
    assert gate._opened.is_set()  # the waiters ask again...
    # It never went out: the first to ask carries START, the others wait for that one.
    assert state.ready(waiting[0]) is None
    assert flags(waiting[0]) == (True, False)
    new_gate = state.ready(waiting[1])
    assert new_gate is not None
    assert new_gate is not gate
    assert not new_gate._opened.is_set()
    state.settle(waiting[0], went_out=True)
    assert new_gate._opened.is_set()
    assert state.ready(waiting[1]) is None
    assert flags(waiting[1]) == (False, True)
    assert state.sent == 2
    assert state.ended


def test_a_start_that_failed_after_going_out_is_never_sent_again() -> None:
    state = SequenceState(SEQ_SPEC, 8, Gate)
    first = claimed(state)
    waiting = claimed(state)
    state.settle(first, went_out=True)  # it may have run
    assert state.ready(waiting) is None
    assert not waiting.start
    assert not claimed(state).start


def test_a_request_that_took_start_over_and_stopped_gives_it_back() -> None:
    # The START it was handed by ready() is its own to give back, whatever stops it
    # before it goes out (a KeyboardInterrupt just after ready() returned).
    state = SequenceState(SEQ_SPEC, 8, Gate)
    first = claimed(state)
    waiting = claimed(state)
    state.settle(first, went_out=False)
    assert state.ready(waiting) is None
    assert waiting.start
    state.settle(waiting, went_out=False)
    assert state.sent == 0
    assert flags(claimed(state)) == (True, False)


def test_settling_counts_back_once_and_only_what_was_counted() -> None:
    state = SequenceState(SEQ_SPEC, 8, Gate)
    state.settle(Delivery(), went_out=False)  # stopped before it was counted
    assert state.sent == 0
    first = claimed(state)
    second = claimed(state, end=True)
    state.settle(second, went_out=False)
    state.settle(second, went_out=False)
    assert state.sent == 1
    assert not state.ended
    assert not claimed(state).start
    state.settle(first, went_out=True)


def _connection_error(*, may_have_run: bool) -> ts.TritonConnectionError:
    return ts.TritonConnectionError(
        "connection refused", status="UNAVAILABLE", retryable=True, may_have_run=may_have_run
    )


@pytest.mark.parametrize(
    ("error", "went_out"),
    [
        (ts.InvalidInputError("gRPC refused the request: metadata"), False),
        (_connection_error(may_have_run=False), False),  # never connected
        (_connection_error(may_have_run=True), True),  # broke after it went out
        (ts.TritonConnectionError("TLS handshake failed", status="UNAVAILABLE"), True),
        (ts.InferenceError("model failed", status="INTERNAL"), True),
        (ts.TritonTimeoutError("no answer", may_have_run=True), True),
        (RuntimeError("a hook's after_receive failed"), True),
    ],
)
def test_a_request_that_reached_the_transport_went_out_unless_the_error_proves_not(
    error: BaseException, went_out: bool
) -> None:
    delivery = Delivery()
    assert not delivery.went_out(error)  # it never reached the transport
    delivery.reached = True
    assert delivery.went_out(error) is went_out


def test_a_claim_waits_for_one_under_way_in_another_thread() -> None:
    # Deciding START and counting the request are one step: a second thread cannot see
    # the sequence unstarted while the first is between the two.
    state = SequenceState(SEQ_SPEC, 9, Gate)
    seen: list[tuple[bool, bool]] = []
    with state._lock:  # (a claim under way)
        other = threading.Thread(target=lambda: seen.append(flags(claimed(state))))
        other.start()
        other.join(0.2)
        assert other.is_alive()
        assert seen == []
    other.join(5)
    assert seen == [(True, False)]
    assert not claimed(state).start


def test_failed_request_still_counts_so_start_is_not_resent() -> None:
    state = SequenceState(SEQ_SPEC, 7, Gate)
    claimed(state)  # then it fails: it may have reached the model
    assert not claimed(state).start


def test_leaving_a_started_open_sequence_warns() -> None:
    state = SequenceState(SEQ_SPEC, 9, Gate)
    claimed(state)
    with pytest.warns(SequenceNotEndedWarning, match="end=True"):
        state.leave()


def test_leaving_an_unstarted_or_ended_sequence_is_silent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SequenceState(SEQ_SPEC, 9, Gate).leave()
        ended = SequenceState(SEQ_SPEC, 10, Gate)
        claimed(ended, end=True)
        ended.leave()


def test_sequence_not_ended_warning_is_public_and_a_user_warning() -> None:
    assert ts.SequenceNotEndedWarning is SequenceNotEndedWarning
    assert issubclass(SequenceNotEndedWarning, UserWarning)


def test_non_sequence_model_is_refused() -> None:
    with pytest.raises(ts.InvalidInputError, match="stateful"):
        SequenceState(make_spec([tensor("X", "INT32", 1)], name="plain"), None, Gate)


def test_explicit_sequence_ids() -> None:
    assert SequenceState(SEQ_SPEC, 2**63 - 1, Gate).sequence_id == 2**63 - 1
    assert SequenceState(STR_SEQ_SPEC, "conversation-1", Gate).sequence_id == "conversation-1"
    assert SequenceState(SEQ_SPEC, None, Gate).sequence_id != 0


@pytest.mark.parametrize("wrong", [True, False, 0, "", -5, 2**63, 1.5])
def test_falsy_or_bool_sequence_ids_are_refused(wrong: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="sequence id"):
        SequenceState(SEQ_SPEC, wrong, Gate)


def test_new_sequence_ids_are_positive_int64() -> None:
    ids = [new_sequence_id(SEQ_SPEC) for _ in range(2000)]
    assert all(type(value) is int and 1 <= value <= 2**63 - 1 for value in ids)
    assert len(set(ids)) == len(ids)


def test_new_sequence_ids_are_str_for_string_id_models() -> None:
    ids = [new_sequence_id(STR_SEQ_SPEC) for _ in range(2000)]
    assert all(isinstance(value, str) and value for value in ids)
    assert len(set(ids)) == len(ids)
    assert isinstance(SequenceState(STR_SEQ_SPEC, None, Gate).sequence_id, str)


# InferResult.split_rows


def test_split_rows_gives_one_result_per_sample() -> None:
    result = result_of(
        {
            "OUT": np.arange(6, dtype=np.float32).reshape(3, 2),
            "NAMES": bytes_array(b"a", b"b", b"c", shape=(3, 1)),
        },
        model_name="m",
        model_version="2",
        id="r",
        parameters={"p": 1},
    )
    rows = result.split_rows(3)
    assert len(rows) == 3
    for index, row in enumerate(rows):
        assert row["OUT"].shape == (2,)
        assert row["OUT"].tolist() == [2 * index, 2 * index + 1]
        assert row.as_strings("NAMES").tolist() == ["abc"[index]]
        assert row.datatype("NAMES") == "BYTES"
        assert (row.model_name, row.model_version, row.id) == ("m", "2", "r")
        assert row.parameters == {"p": 1}


@pytest.mark.parametrize("count", [2, 5])
def test_split_rows_refuses_an_answer_with_another_batch_size(count: int) -> None:
    result = result_of({"OUT": np.arange(4, dtype=np.float32).reshape(4, 1)})
    with pytest.raises(ts.InferenceError, match=r"shape \[4, 1\]: the answer to a batch of"):
        result.split_rows(count)


@pytest.mark.parametrize("shape", [(2,), (), (0, 2)])
def test_a_sample_answer_without_its_batch_axis_is_refused(shape: tuple[int, ...]) -> None:
    """A batched model's answer to one sample must have one row: taking row 0 of an
    answer that dropped its batch axis would hand out the wrong values."""
    result = result_of({"OUT": np.full(shape, 5.0, dtype=np.float32)})
    with pytest.raises(ts.InferenceError, match="'OUT' came back with shape"):
        result.without_batch_axis()


def test_chunks_that_cannot_be_joined_raise_inference_error() -> None:
    parts = [
        result_of({"OUT": np.zeros((2, 3), dtype=np.float32)}),
        result_of({"OUT": np.zeros((2, 5), dtype=np.float32)}),
    ]
    with pytest.raises(ts.InferenceError, match=r"shapes \[\[2, 3\], \[2, 5\]\]"):
        InferResult.concatenate(parts)
    joined = InferResult.concatenate([parts[0], parts[0]])
    assert joined["OUT"].shape == (4, 3)


def test_classify_answered_with_plain_scores_says_why() -> None:
    """A server without Triton's classification extension answers with the scores."""
    with pytest.raises(ts.InferenceError, match="not Triton's 'score:index:label' text"):
        parse_classifications(np.array([[0.1, 0.9]], dtype=np.float32), batched=True)
    assert parse_classifications(np.zeros((0,), dtype=np.object_), batched=True) == []


# ModelCore._requests


def requests_of(core: ModelCore, inputs: dict[str, Any], **options: Any) -> list[Any]:
    settings: dict[str, Any] = {
        "outputs": None,
        "parameters": None,
        "priority": 0,
        "request_id": "",
        "sample": False,
    }
    settings.update(options)
    return core._requests(inputs, {}, **settings)


def test_decoupled_model_refuses_non_streaming_calls() -> None:
    core = ModelCore(GEN_SPEC, None)
    with pytest.raises(ts.InvalidInputError, match=r"decoupled.*stream"):
        requests_of(core, {"text_input": ["hi"]})
    (request,) = requests_of(core, {"text_input": ["hi"]}, streaming=True)
    assert request.inputs[0].array.shape == (1, 1)


def test_sequence_requests_carry_the_flags_and_one_sample() -> None:
    spec = make_spec([tensor("X", "INT32", 1)], name="acc", max_batch_size=2, sequence=True)
    core = ModelCore(spec, "1")
    (request,) = requests_of(core, {"X": [1]}, sequence=SequenceFlags(11, True, False))
    assert (request.sequence_id, request.sequence_start, request.sequence_end) == (11, True, False)
    assert request.version == "1"
    assert not request.idempotent
    for batch in ([1, 2], [1, 2, 3]):  # (the sequence batcher takes a batch of one)
        with pytest.raises(ts.InvalidInputError, match=f"got a batch of {len(batch)}"):
            requests_of(core, {"X": batch}, sequence=SequenceFlags(11, False, True))


def test_stream_requests_are_never_split() -> None:
    spec = make_spec([tensor("X", "INT32", 1)], name="rep", max_batch_size=2, decoupled=True)
    core = ModelCore(spec, None)
    (request,) = requests_of(core, {"X": [1, 2]}, streaming=True)
    assert request.inputs[0].array.shape == (2, 1)
    with pytest.raises(ts.InvalidInputError, match=r"3.*stream.*split"):
        requests_of(core, {"X": [1, 2, 3]}, streaming=True)


def test_plain_requests_without_sequence_carry_no_flags() -> None:
    core = ModelCore(make_spec([tensor("X", "INT32", 1)], max_batch_size=2), None)
    requests = requests_of(core, {"X": [1, 2, 3]})
    assert [r.inputs[0].array.shape[0] for r in requests] == [2, 1]
    assert all(r.sequence_id == 0 and not r.sequence_start and not r.sequence_end for r in requests)
    assert all(r.idempotent for r in requests)


def test_class_count_reaches_the_requested_output() -> None:
    spec = make_spec(
        [tensor("X", "FP32", 4)], [tensor("SCORES", "FP32", 3), tensor("NAMES", "BYTES", 1)]
    )
    core = ModelCore(spec, None)
    (request,) = requests_of(core, {"X": np.zeros((2, 4))}, outputs=["SCORES"], class_count=3)
    assert request.outputs == (RequestedOutput("SCORES", 3),)
    (plain,) = requests_of(core, {"X": np.zeros((2, 4))}, outputs=["SCORES", "NAMES"])
    assert plain.outputs == (RequestedOutput("SCORES", 0), RequestedOutput("NAMES", 0))
    (every,) = requests_of(core, {"X": np.zeros((2, 4))})
    assert every.outputs is None


def test_class_count_reaches_every_chunk_of_a_split_batch() -> None:
    spec = make_spec([tensor("X", "FP32", 4)], [tensor("SCORES", "FP32", 3)], max_batch_size=2)
    core = ModelCore(spec, None)
    requests = requests_of(core, {"X": np.zeros((5, 4))}, outputs=["SCORES"], class_count=2)
    assert len(requests) == 3
    assert all(r.outputs == (RequestedOutput("SCORES", 2),) for r in requests)


# Response streams


class Tracked:
    """A generator whose finally block records that it ran."""

    def __init__(self) -> None:
        self.finished = False
        self.produced = 0

    def generate(self, count: int) -> Iterator[int]:
        try:
            for value in range(count):
                self.produced += 1
                yield value
        finally:
            self.finished = True

    async def generate_async(self, count: int) -> AsyncIterator[int]:
        try:
            for value in range(count):
                self.produced += 1
                yield value
        finally:
            self.finished = True


def test_response_stream_iterates_in_order() -> None:
    tracked = Tracked()
    assert list(ResponseStream(tracked.generate(3))) == [0, 1, 2]
    assert tracked.finished


def test_response_stream_close_closes_the_generator() -> None:
    tracked = Tracked()
    stream = ResponseStream(tracked.generate(10))
    assert next(stream) == 0
    assert not tracked.finished
    stream.close()
    assert tracked.finished
    assert tracked.produced == 1
    with pytest.raises(StopIteration):
        next(stream)
    stream.close()  # twice is harmless


def test_response_stream_with_block_closes_on_break() -> None:
    tracked = Tracked()
    with ResponseStream(tracked.generate(10)) as stream:
        for value in stream:
            if value == 2:
                break
    assert tracked.finished
    assert tracked.produced == 3


def test_response_stream_closes_when_dropped() -> None:
    tracked = Tracked()
    stream = ResponseStream(tracked.generate(10))
    next(stream)
    del stream
    gc.collect()
    assert tracked.finished


def test_response_stream_close_of_a_plain_iterator() -> None:
    stream = ResponseStream(iter([1, 2]))
    stream.close()  # nothing to close: no error
    assert list(stream) == [1, 2]


async def test_async_response_stream_aclose_closes_the_generator() -> None:
    tracked = Tracked()
    stream = AsyncResponseStream(tracked.generate_async(10))
    assert await stream.__anext__() == 0
    assert not tracked.finished
    await stream.aclose()
    assert tracked.finished
    assert tracked.produced == 1
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_async_response_stream_async_with_closes_on_break() -> None:
    tracked = Tracked()
    async with AsyncResponseStream(tracked.generate_async(10)) as stream:
        async for value in stream:
            if value == 1:
                break
    assert tracked.finished
    assert tracked.produced == 2


async def test_async_response_stream_iterates_in_order() -> None:
    tracked = Tracked()
    assert [value async for value in AsyncResponseStream(tracked.generate_async(3))] == [0, 1, 2]
    assert tracked.finished


def test_a_started_async_stream_read_in_another_loop_is_refused_and_goes_on_in_its_own() -> None:
    # It raised asyncio's RuntimeError (a future attached to a different loop).
    tracked = Tracked()
    stream = AsyncResponseStream(tracked.generate_async(3))
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(stream.__anext__()) == 0

        async def read_elsewhere() -> None:
            with pytest.raises(ts.TritonError, match="first used in another event loop"):
                await stream.__anext__()

        asyncio.run(read_elsewhere())

        async def read_on() -> list[int]:
            return [value async for value in stream]

        assert first.run_until_complete(read_on()) == [1, 2]
    finally:
        first.close()


def test_an_error_after_a_first_response_may_have_run() -> None:
    def responses() -> Iterator[int]:
        yield 1
        raise ts.InferenceError("the model failed its second response")

    stream = ResponseStream(responses())
    assert next(stream) == 1
    with pytest.raises(ts.InferenceError) as caught:
        next(stream)
    assert caught.value.may_have_run


def test_event_to_result_keeps_only_the_requested_outputs() -> None:
    event = {"text_output": "hello", "tokens": [4, 5, 6]}
    assert list(event_to_result(event, GEN_SPEC, {"tokens"})) == ["tokens"]


def test_generate_body_refuses_bytes_that_are_not_utf8() -> None:
    with pytest.raises(ts.InvalidInputError, match="UTF-8"):
        generate_body({"text_input": b"\xff\xfe"}, None)


def test_event_stream_error_bodies_give_the_server_message() -> None:
    from triton_sdk._http_codec import error_from_response

    body = b'data: {"error":"Failed to process the request: negative dimensions"}\n\n'
    error = error_from_response(400, body, model="generator")
    assert isinstance(error, ts.InferenceError)
    assert error.message == "Failed to process the request: negative dimensions"
    assert error.status == 400


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
async def test_a_request_the_client_refuses_leaves_the_sequence_where_it_was(kind: Any) -> None:
    sent: list[tuple[bool, bool]] = []

    def answer(op: Any, ctx: Any) -> Any:
        sent.append((op.sequence_start, op.sequence_end))
        return {"OUT": np.zeros((1, 1), np.float32)}

    client = kind("grpc://test", transport=MockTransport(answer, models=[SEQ_SPEC]))
    model = await resolve(client.model("acc"))
    sequence = model.sequence()
    with pytest.raises(ts.InvalidInputError):
        await resolve(sequence.infer(X=[[1]], shared_memory="sytem"))  # a misspelt mode
    await resolve(sequence.infer(X=[[1]]))
    with pytest.raises(ts.InvalidInputError):
        await resolve(sequence.infer(X=[[2]], end=True, shared_memory="bogus"))
    assert not sequence.ended
    await resolve(sequence.infer(X=[[2]], end=True))
    assert sequence.ended
    assert sent == [(True, False), (False, True)]


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
async def test_end_is_a_bool_checked_before_anything_is_sent(kind: Any) -> None:
    sent: list[tuple[bool, bool]] = []

    def answer(op: Any, ctx: Any) -> Any:
        sent.append((op.sequence_start, op.sequence_end))
        assert type(op.sequence_end) is bool  # (np.False_ broke the JSON of HTTP)
        return {"OUT": np.zeros((1, 1), np.float32)}

    client = kind("grpc://test", transport=MockTransport(answer, models=[SEQ_SPEC]))
    model = await resolve(client.model("acc"))
    sequence = model.sequence()
    for wrong in ("no", 1, None, [True], 0.0):
        with pytest.raises(ts.InvalidInputError, match="end is a bool"):
            await resolve(sequence.infer(X=[[1]], end=wrong))
    assert sent == []  # (a refusal was taken for a request that went out: START was lost)
    await resolve(sequence.infer(X=[[1]], end=np.False_))
    assert sequence.ended is False
    await resolve(sequence.infer_sample(X=[2], end=np.True_))
    assert sequence.ended is True
    assert sent == [(True, False), (False, True)]


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
async def test_a_decoupled_stateful_model_is_refused_as_unsupported(kind: Any) -> None:
    spec = make_spec([tensor("X", "INT32", 1)], name="seqdec", sequence=True, decoupled=True)
    client = kind("grpc://test", transport=MockTransport(lambda op, ctx: {}, models=[spec]))
    model = await resolve(client.model("seqdec"))
    # Each refusal pointed to another call that was refused as well.
    calls = [
        lambda: model.sequence().infer(X=[[1]]),
        lambda: model.stream(X=[[1]]),
        lambda: model.generate_stream(X=1),
    ]
    for call in calls:
        with pytest.raises(ts.UnsupportedError, match="does not do yet"):
            await resolve(call())


def test_a_str_sequence_id_is_at_most_128_bytes() -> None:
    assert SequenceState(STR_SEQ_SPEC, "é" * 64, Gate).sequence_id == "é" * 64
    with pytest.raises(ts.InvalidInputError, match="at most 128 bytes"):
        SequenceState(STR_SEQ_SPEC, "é" * 65, Gate)


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
@pytest.mark.parametrize(
    ("failure", "went_out"),
    [
        (lambda: _connection_error(may_have_run=False), False),
        (lambda: _connection_error(may_have_run=True), True),
        (lambda: ts.InferenceError("model failed", status="INTERNAL"), True),
    ],
)
async def test_the_next_request_carries_start_when_the_first_never_reached_the_server(
    kind: Any, failure: Any, went_out: bool
) -> None:
    sent: list[tuple[bool, bool]] = []

    def answer(op: Any, ctx: Any) -> Any:
        sent.append((op.sequence_start, op.sequence_end))
        if len(sent) == 1:
            raise failure()
        return {"OUT": np.zeros((1, 1), np.float32)}

    client = kind("grpc://test", transport=MockTransport(answer, models=[SEQ_SPEC]))
    model = await resolve(client.model("acc"))
    sequence = model.sequence()
    with pytest.raises(ts.TritonError):
        await resolve(sequence.infer(X=[[1]]))
    await resolve(sequence.infer(X=[[2]], end=True))
    # START is never sent twice to a server that may have seen it.
    assert sent == [(True, False), (not went_out, True)]


async def test_tasks_waiting_for_a_start_that_never_reached_the_server_carry_it_themselves() -> (
    None
):
    sent: list[tuple[bool, bool]] = []

    async def answer(op: Any, ctx: Any) -> Any:
        sent.append((op.sequence_start, op.sequence_end))
        if len(sent) == 1:
            await asyncio.sleep(0.05)  # the others are waiting for START meanwhile
            raise _connection_error(may_have_run=False)
        return {"OUT": np.zeros((1, 1), np.float32)}

    async with ts.AsyncClient(
        "grpc://test", transport=MockTransport(answer, models=[SEQ_SPEC])
    ) as client:
        model = await client.model("acc")
        async with model.sequence() as sequence:
            answers = await asyncio.gather(
                *(sequence.infer(X=[[value]]) for value in (1, 2, 3)), return_exceptions=True
            )
            assert isinstance(answers[0], ts.TritonConnectionError)
            assert all(isinstance(answer, InferResult) for answer in answers[1:])
            await sequence.infer(X=[[4]], end=True)
    # The first never reached the server: one of the two that waited carries START.
    assert sent[0] == (True, False)
    assert sorted(sent[1:3]) == [(False, False), (True, False)]
    assert sent[3] == (False, True)


class FailsAfterTheAnswer(ts.CallHook):
    """A hook whose after_receive raises InvalidInputError (a check of its own)."""

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        if op.call == "infer":
            raise ts.InvalidInputError("the hook did not like the answer")


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
async def test_a_request_answered_before_a_hook_failed_counts_as_sent(kind: Any) -> None:
    sent: list[tuple[bool, bool]] = []

    def answer(op: Any, ctx: Any) -> Any:
        sent.append((op.sequence_start, op.sequence_end))
        return {"OUT": np.zeros((1, 1), np.float32)}

    client = kind(
        "grpc://test",
        transport=MockTransport(answer, models=[SEQ_SPEC]),
        hooks=[FailsAfterTheAnswer()],
    )
    model = await resolve(client.model("acc"))
    sequence = model.sequence()
    with pytest.raises(ts.InvalidInputError, match="did not like"):
        await resolve(sequence.infer(X=[[1]]))
    with pytest.raises(ts.InvalidInputError, match="did not like"):
        await resolve(sequence.infer(X=[[2]], end=True))
    assert sequence.ended
    # The server ran the first: a second START would have reset the sequence's state.
    assert sent == [(True, False), (False, True)]


def test_streamed_text_joins_characters_cut_between_responses() -> None:
    """TextOutputs: bytes (gRPC) and strings with surrogate escapes (HTTP) alike."""
    from triton_sdk._generate import TextOutputs, loads_event

    data = "안녕 👋".encode()
    text = TextOutputs()
    pieces = [text.fields({"t": data[i : i + 2]})["t"] for i in range(0, len(data), 2)]
    assert "".join(map(str, pieces)) == "안녕 👋"
    assert text.finish() is None
    over_http = TextOutputs()
    events = [loads_event(b'{"t": "' + data[i : i + 3] + b'"}', "e") for i in range(0, 9, 3)]
    assert "".join(str(over_http.fields(event)["t"]) for event in events) == "안녕 👋"[:3]
    cut = TextOutputs()
    assert cut.fields({"t": b"a\xe4\xb8"}) == {"t": "a"}
    assert cut.finish() == {"t": "\ufffd"}
    # A lone surrogate written as a JSON escape reads as U+FFFD, not as an error.
    assert TextOutputs(streamed=False).fields(loads_event(b'{"t": "x\\ud800"}', "e")) == {
        "t": "x\ufffd\ufffd\ufffd"
    }


@pytest.mark.parametrize(
    "error",
    [
        ts.ModelNotFoundError("Request for unknown model: 'm' is not found", status=404),
        ts.ModelNotReadyError("'m' has no available versions", status="NOT_FOUND"),
        ts.ServerOverloadedError("Exceeds maximum queue size", status=503, retryable=True),
    ],
)
def test_a_request_the_server_turned_away_unrun_did_not_go_out(error: ts.TritonError) -> None:
    # START refused so (on one replica of a fleet, say) counted as sent: the next request
    # went without START, and the server refused it.
    delivery = Delivery()
    delivery.reached = True
    assert not delivery.went_out(error)
    error.may_have_run = True
    assert delivery.went_out(error)
    # A model's own failure whose words read alike (another status) may have run.
    error.may_have_run = False
    error.status = "INTERNAL"
    assert delivery.went_out(error)
