"""Small gRPC infer answers read through a learned layout: the same results as parsing
them, for every answer, whether or not it matches the layout."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2 as pb

import triton_sdk as ts
from triton_sdk import _grpc_codec
from triton_sdk._dtypes import wire_dtype
from triton_sdk._grpc_codec import _MAX_LESSONS, GrpcCall, _PlainInfer, decode_infer_response
from triton_sdk._grpc_codec import encode as grpc_encode
from triton_sdk._request import InferRequest
from triton_sdk._result import InferResult
from triton_sdk._shaping import Tensor

Array = np.ndarray[Any, Any]

NUMERIC = ["BOOL", "UINT8", "UINT16", "UINT64", "INT8", "INT32", "INT64", "FP16", "FP32", "FP64"]


def answer(
    outputs: dict[str, tuple[str, Array]], *, version: str = "1", **fields: Any
) -> pb.ModelInferResponse:
    """An infer answer with numeric outputs ``name: (datatype, array)`` as raw contents."""
    return pb.ModelInferResponse(
        model_name="m",
        model_version=version,
        outputs=[
            pb.ModelInferResponse.InferOutputTensor(
                name=name, datatype=datatype, shape=list(array.shape)
            )
            for name, (datatype, array) in outputs.items()
        ],
        raw_output_contents=[
            array.astype(wire_dtype(datatype)).tobytes() for datatype, array in outputs.values()
        ],
        **fields,
    )


def parsed(data: bytes) -> InferResult:
    return decode_infer_response(pb.ModelInferResponse.FromString(data))


def assert_same(result: InferResult, expected: InferResult) -> None:
    assert list(result) == list(expected)
    for name in expected:
        np.testing.assert_array_equal(result[name], expected[name])
        assert result[name].dtype == expected[name].dtype
        assert result.datatype(name) == expected.datatype(name)
    assert (result.model_name, result.model_version, result.id, result.parameters) == (
        expected.model_name,
        expected.model_version,
        expected.id,
        expected.parameters,
    )


@contextlib.contextmanager
def unparsed() -> Iterator[None]:
    """Answers read inside can only go through a layout: parsing one fails."""

    def refuse(*_: Any) -> Any:
        raise AssertionError("the answer was parsed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_grpc_codec, "_parse_response", refuse)
        patch.setattr(_grpc_codec, "split_infer_response", refuse)
        yield


def learned(data: bytes) -> _PlainInfer:
    plain = _PlainInfer(b"")
    assert_same(plain.read(data), parsed(data))
    assert plain.answer is not None
    return plain


def test_an_answer_like_the_last_is_read_without_parsing() -> None:
    first = answer({"Y": ("FP32", np.arange(4.0)), "Z": ("INT64", np.array([[7, 8]]))})
    plain = learned(first.SerializeToString())
    second = answer({"Y": ("FP32", -np.arange(4.0)), "Z": ("INT64", np.array([[9, -1]]))})
    data = second.SerializeToString()
    with unparsed():
        result = plain.read(data)
    assert_same(result, parsed(data))
    assert backing(result["Y"]) is data
    assert not result["Y"].flags.writeable
    np.testing.assert_array_equal(result.as_numpy("Y", writable=True), -np.arange(4.0))


outputs_strategy = st.dictionaries(
    st.text("ABCYZ_é", min_size=1, max_size=3),
    st.tuples(
        st.sampled_from(NUMERIC),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None, database=None)
@given(outputs=outputs_strategy, data=st.data())
def test_every_answer_reads_as_parsing_it_would(
    outputs: dict[str, tuple[str, tuple[int, ...]]], data: st.DataObject
) -> None:
    def contents() -> dict[str, tuple[str, Array]]:
        return {
            name: (
                datatype,
                data.draw(hnp.arrays(wire_dtype(datatype), shape, elements={"allow_nan": False})),
            )
            for name, (datatype, shape) in outputs.items()
        }

    plain = learned(answer(contents()).SerializeToString())
    for _ in range(3):
        sent = answer(contents()).SerializeToString()
        with unparsed():
            result = plain.read(sent)
        assert_same(result, parsed(sent))


def other_answers() -> dict[str, pb.ModelInferResponse]:
    floats = ("FP32", np.arange(4.0))
    extra_raw = answer({"Y": floats})
    extra_raw.raw_output_contents.append(np.ones(4, np.float32).tobytes())
    return {
        "another shape": answer({"Y": ("FP32", np.arange(4.0).reshape(2, 2))}),
        "another datatype": answer({"Y": ("INT32", np.arange(4))}),
        "another version": answer({"Y": floats}, version="2"),
        "another output": answer({"Y": floats, "Z": floats}),
        "an id": answer({"Y": floats}, id="r1"),
        "parameters": answer({"Y": floats}, parameters={"p": pb.InferParameter(int64_param=3)}),
        "no raw contents": pb.ModelInferResponse(
            model_name="m",
            model_version="1",
            outputs=[
                pb.ModelInferResponse.InferOutputTensor(
                    name="Y",
                    datatype="FP32",
                    shape=[4],
                    contents=pb.InferTensorContents(fp32_contents=[1, 2, 3, 4]),
                )
            ],
        ),
        "raw and typed contents": pb.ModelInferResponse(
            model_name="m",
            model_version="1",
            outputs=[
                pb.ModelInferResponse.InferOutputTensor(name="Y", datatype="FP32", shape=[4]),
                pb.ModelInferResponse.InferOutputTensor(
                    name="Z",
                    datatype="INT32",
                    shape=[2],
                    contents=pb.InferTensorContents(int_contents=[5, 6]),
                ),
            ],
            raw_output_contents=[np.arange(4, dtype=np.float32).tobytes()],
        ),
        "raw contents of no output": extra_raw,
        "a BYTES output": pb.ModelInferResponse(
            model_name="m",
            model_version="1",
            outputs=[
                pb.ModelInferResponse.InferOutputTensor(name="Y", datatype="BYTES", shape=[1])
            ],
            raw_output_contents=[b"\x02\x00\x00\x00hi"],
        ),
    }


@pytest.mark.parametrize("kind", list(other_answers()))
def test_an_answer_unlike_the_last_is_parsed(kind: str) -> None:
    plain = learned(answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString())
    data = other_answers()[kind].SerializeToString()
    for _ in range(2):  # the second time, against what the first taught
        assert_same(plain.read(data), parsed(data))
    again = answer({"Y": ("FP32", np.ones(4))}).SerializeToString()  # the first layout again
    assert_same(plain.read(again), parsed(again))


def test_answers_that_keep_changing_are_parsed_once_learning_gave_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = _PlainInfer(b"")
    for count in range(1, _MAX_LESSONS + 1):  # a varying shape: no layout is read twice
        data = answer({"Y": ("FP32", np.arange(float(count)))}).SerializeToString()
        assert_same(plain.read(data), parsed(data))
    assert plain.lessons == _MAX_LESSONS

    def refuse(*_: Any) -> Any:
        raise AssertionError("still learning")

    with monkeypatch.context() as patch:
        patch.setattr(_grpc_codec, "split_infer_response", refuse)
        data = answer({"Y": ("FP32", np.arange(50.0))}).SerializeToString()
        assert_same(plain.read(data), parsed(data))
    assert plain.lessons == _MAX_LESSONS
    large = answer({"Y": ("FP32", np.arange(300_000.0))}).SerializeToString()
    result = plain.read(large)  # split still, so that the outputs are views, not copies
    assert_same(result, parsed(large))
    assert backing(result["Y"]) is large
    assert plain.lessons == _MAX_LESSONS

    # An answer that fits the last layout learned starts learning over.
    last = answer({"Y": ("FP32", np.ones(_MAX_LESSONS))}).SerializeToString()
    with unparsed():
        assert_same(plain.read(last), parsed(last))
    assert plain.lessons == 0
    changed = answer({"Y": ("FP32", np.ones(3))}).SerializeToString()
    assert_same(plain.read(changed), parsed(changed))
    with unparsed():
        assert_same(plain.read(changed), parsed(changed))


def test_an_answer_of_no_fixed_layout_leaves_the_last_layout_in_place() -> None:
    first = answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString()
    plain = learned(first)
    for kind in ("a BYTES output", "parameters", "an id"):
        data = other_answers()[kind].SerializeToString()
        assert_same(plain.read(data), parsed(data))
    with unparsed():
        assert_same(plain.read(first), parsed(first))


def backing(array: Array) -> object:
    """The object whose memory ``array`` shows."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


@pytest.mark.parametrize("kind", ["BYTES", "parameters"])
def test_answers_of_no_fixed_layout_are_never_learned(kind: str) -> None:
    data = other_answers()["a BYTES output" if kind == "BYTES" else "parameters"]
    plain = _PlainInfer(b"")
    for _ in range(3):
        assert_same(plain.read(data.SerializeToString()), parsed(data.SerializeToString()))
        assert plain.answer is None


def key(field: int, length: int) -> bytes:
    assert length < 0x80
    return bytes([field << 3 | 2, length])


def test_raw_contents_followed_by_other_fields_are_not_learned() -> None:
    # protobuf may write fields in any order; the layout holds only a head then raw contents
    contents = np.arange(4, dtype=np.float32).tobytes()
    tensor = pb.ModelInferResponse.InferOutputTensor(
        name="Y", datatype="FP32", shape=[4]
    ).SerializeToString()
    data = key(6, len(contents)) + contents + key(5, len(tensor)) + tensor + key(1, 1) + b"m"
    plain = _PlainInfer(b"")
    result = plain.read(data)
    assert_same(result, parsed(data))
    assert result.model_name == "m"
    assert plain.answer is None


def test_raw_contents_of_a_longer_length_key_are_parsed() -> None:
    # the same length written in two bytes (0x90 0x00 for 16): valid, not the layout's key
    plain = learned(answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString())
    head = pb.ModelInferResponse(
        model_name="m",
        model_version="1",
        outputs=[pb.ModelInferResponse.InferOutputTensor(name="Y", datatype="FP32", shape=[4])],
    ).SerializeToString()
    contents = np.full(4, 2.5, dtype=np.float32).tobytes()
    data = head + bytes([6 << 3 | 2, 0x90, 0x00]) + contents
    assert_same(plain.read(data), parsed(data))
    assert plain.lessons == 2  # parsed, not read through the layout


@pytest.mark.parametrize(
    "change", ["cut short", "one byte more", "another field after", "another field instead"]
)
def test_an_answer_that_only_begins_like_the_layout_is_parsed(change: str) -> None:
    plain = learned(answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString())
    data = answer({"Y": ("FP32", np.ones(4))}).SerializeToString()
    raw_key = data.rindex(bytes([6 << 3 | 2, 16]))
    changed = {
        "cut short": data[:-1],
        "one byte more": data + b"\x00",
        "another field after": data + key(3, 2) + b"r9",  # the id, after the raw contents
        "another field instead": data[:raw_key] + bytes([7 << 3 | 2]) + data[raw_key + 1 :],
    }[change]
    if change in ("cut short", "one byte more"):
        with pytest.raises(ts.InferenceError, match="malformed infer answer"):
            plain.read(changed)
    elif change == "another field after":
        assert_same(plain.read(changed), parsed(changed))
        assert plain.read(changed).id == "r9"
    else:  # an unknown field and no raw contents: Y has no values
        with pytest.raises(ts.InferenceError, match="'Y'"):
            parsed(changed)
        with pytest.raises(ts.InferenceError, match="'Y'"):
            plain.read(changed)


def test_plain_infer_calls_of_one_shape_share_the_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    def call(values: Array) -> GrpcCall[InferResult]:
        request = InferRequest(model="layout", inputs=[Tensor("A", "FP32", values)])
        encoded = grpc_encode(request)
        assert isinstance(encoded, GrpcCall)
        return encoded

    first = call(np.zeros(4, np.float32))
    data = answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString()
    assert_same(first.read(data), parsed(data))
    second = call(np.ones(4, np.float32))
    monkeypatch.setattr(_grpc_codec, "_parse_response", None)
    monkeypatch.setattr(_grpc_codec, "split_infer_response", None)
    data = answer({"Y": ("FP32", -np.arange(4.0))}).SerializeToString()
    np.testing.assert_array_equal(second.read(data)["Y"], -np.arange(4.0))


def test_a_result_read_through_the_layout_pickles_and_copies() -> None:
    import copy

    plain = learned(answer({"Y": ("FP64", np.arange(3.0))}).SerializeToString())
    data = answer({"Y": ("FP64", np.arange(3.0) + 0.5)}).SerializeToString()
    with unparsed():
        result = plain.read(data)
    for copied in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert_same(copied, result)


def test_fields_protobuf_does_not_know_are_read_as_it_reads_them() -> None:
    unknown = key(15, 3) + b"xyz"  # an unknown field in the head
    group = bytes([14 << 3 | 3, 1 << 3 | 0, 7, 14 << 3 | 4])  # a group holding a varint
    contents = key(6, 16) + np.arange(4, dtype=np.float32).tobytes()
    for extra in (unknown, group):
        data = answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString()
        data = data.replace(contents, extra + contents)  # before the raw contents
        plain = _PlainInfer(b"")
        assert_same(plain.read(data), parsed(data))
        assert plain.answer is not None
        again = data.replace(contents, key(6, 16) + np.ones(4, np.float32).tobytes())
        with unparsed():
            assert_same(plain.read(again), parsed(again))


def test_a_raw_contents_key_longer_than_protobuf_reads_is_refused() -> None:
    contents = np.arange(4, dtype=np.float32).tobytes()
    data = answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString()
    data = data.replace(key(6, 16), bytes([0xB2, 0x80, 0x80, 0x80, 0x80, 0x00, 16]))
    assert data.endswith(contents)
    with pytest.raises(DecodeError):
        parsed(data)
    with pytest.raises(ts.InferenceError, match="malformed"):
        _PlainInfer(b"").read(data)


def test_a_malformed_small_answer_is_an_inference_error_once_learning_gave_up() -> None:
    plain = _PlainInfer(b"")
    plain.lessons = _MAX_LESSONS
    data = answer({"Y": ("FP32", np.arange(4.0))}).SerializeToString()
    assert_same(plain.read(data), parsed(data))
    with pytest.raises(ts.InferenceError, match="malformed infer answer"):
        plain.read(data[:-1])


def test_an_answer_with_two_outputs_of_one_name_is_refused() -> None:
    # The last one was kept without a word (tritonclient's as_numpy takes the first).
    answer = pb.ModelInferResponse(model_name="m", model_version="1")
    for value in (1.0, 2.0):
        answer.outputs.add(name="Y", datatype="FP32", shape=[1])
        answer.raw_output_contents.append(np.float32(value).tobytes())
    with pytest.raises(ts.InferenceError, match="sent output 'Y' twice"):
        decode_infer_response(answer)
