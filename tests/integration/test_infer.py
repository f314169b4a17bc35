"""Inference against the real server: shaping, casting, optional inputs, results."""

from __future__ import annotations

import json
import time
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from .conftest import MODES, close_client, inference_count, open_client


def test_readme_example(client: Any) -> None:
    result = client.model("text_embed").infer(TEXT=["안녕하세요", "hello"])
    embeddings = result["OUTPUT"]
    assert embeddings.shape == (2, 768)
    assert embeddings.dtype == np.float32
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    assert result.as_numpy("OUTPUT") is embeddings
    assert result.model_name == "text_embed"
    assert result.model_version == "1"


def test_mapping_and_keywords_are_the_same_call(client: Any) -> None:
    model = client.model("text_embed")
    by_keyword = model.infer(TEXT=["hello"])["OUTPUT"]
    by_mapping = model.infer({"TEXT": ["hello"]})["OUTPUT"]
    assert np.array_equal(by_keyword, by_mapping)
    with pytest.raises(ts.InvalidInputError, match="both"):
        model.infer({"TEXT": ["a"]}, TEXT=["b"])


def test_the_three_readings_of_a_batched_input(client: Any) -> None:
    model = client.model("text_embed")
    batched = model.infer(TEXT=np.array([["a"], ["b"]], dtype=object))["OUTPUT"]
    trailing_axis_added = model.infer(TEXT=["a", "b"])["OUTPUT"]
    single_sample = model.infer(TEXT=["b"])["OUTPUT"]
    assert batched.shape == trailing_axis_added.shape == (2, 768)
    assert np.array_equal(batched, trailing_axis_added)
    assert single_sample.shape == (1, 768)
    assert np.array_equal(single_sample[0], batched[1])


def test_infer_sample_has_no_batch_axis(client: Any) -> None:
    model = client.model("text_embed")
    sample = model.infer_sample(TEXT="hello")
    assert sample["OUTPUT"].shape == (768,)
    assert np.array_equal(sample["OUTPUT"], model.infer(TEXT=["hello"])["OUTPUT"][0])
    image = np.arange(4, dtype=np.uint8).reshape(2, 2)
    scaled = client.model("scale").infer_sample(IMAGE=image, SCALE=2.0)
    assert scaled["OUT"].shape == (2, 2)
    assert np.array_equal(scaled["OUT"], image * 2.0)


def test_ambiguous_shape_is_refused_and_nothing_sent(client: Any, server: LocalServer) -> None:
    model = client.model("ragged")
    before = inference_count(server, "ragged")
    with pytest.raises(ts.InvalidInputError, match=r"ambiguous.*infer_sample"):
        model.infer(X=np.ones((3, 1), dtype=np.float32))
    assert inference_count(server, "ragged") == before
    batch = model.infer(X=np.ones((3, 5, 1), dtype=np.float32))["Y"]
    assert batch.shape == (3, 5, 1)
    sample = model.infer_sample(X=np.ones((3, 1), dtype=np.float32))["Y"]
    assert sample.shape == (3, 1)
    assert np.all(sample == 2.0)


def test_shape_mismatch_names_input_expected_and_given(client: Any, server: LocalServer) -> None:
    model = client.model("scale")
    before = inference_count(server, "scale")
    with pytest.raises(ts.InvalidInputError) as caught:
        model.infer(IMAGE=np.zeros((2, 3, 3), dtype=np.uint8), SCALE=[[1.0], [1.0]])
    message = str(caught.value)
    assert "'IMAGE'" in message
    assert "[2, 2]" in message
    assert "(2, 3, 3)" in message
    assert inference_count(server, "scale") == before


def test_model_without_batch_axis(client: Any) -> None:
    model = client.model("add_sub")
    result = model.infer(INPUT0=[1, 2, 3, 4], INPUT1=np.full(4, 0.5))
    assert result["OUTPUT0"].shape == (4,)
    assert result["OUTPUT0"].tolist() == [1.5, 2.5, 3.5, 4.5]
    assert result["OUTPUT1"].tolist() == [0.5, 1.5, 2.5, 3.5]
    with pytest.raises(ts.InvalidInputError, match=r"'INPUT0' expects shape \[4\], got \(1, 4\)"):
        model.infer(INPUT0=[[1, 2, 3, 4]], INPUT1=[0, 0, 0, 0])
    sample = model.infer_sample(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert sample["OUTPUT1"].tolist() == [0, 1, 2, 3]


def test_batch_sizes_must_agree(client: Any, server: LocalServer) -> None:
    model = client.model("scale")
    before = inference_count(server, "scale")
    with pytest.raises(ts.InvalidInputError, match=r"same batch size.*'IMAGE'.*3.*'SCALE'.*2"):
        model.infer(IMAGE=np.zeros((3, 2, 2), dtype=np.uint8), SCALE=[[1.0], [2.0]])
    assert inference_count(server, "scale") == before


def test_optional_input_may_be_left_out_or_given(client: Any) -> None:
    model = client.model("scale")
    images = np.arange(8, dtype=np.uint8).reshape(2, 2, 2)
    without = model.infer(IMAGE=images, SCALE=[1.0, 3.0])["OUT"]
    assert np.array_equal(without, images * np.array([1.0, 3.0])[:, None, None])
    with_bias = model.infer(IMAGE=images, SCALE=[1.0, 3.0], BIAS=[10.0, 20.0])["OUT"]
    assert np.array_equal(with_bias - without, np.array([10.0, 20.0])[:, None, None] + 0 * images)


def test_missing_and_unknown_inputs_list_the_model_inputs(client: Any, server: LocalServer) -> None:
    model = client.model("scale")
    before = inference_count(server, "scale")
    with pytest.raises(
        ts.InvalidInputError, match=r"needs input 'SCALE'.*'IMAGE', 'SCALE', 'BIAS'"
    ):
        model.infer(IMAGE=np.zeros((1, 2, 2), dtype=np.uint8))
    with pytest.raises(ts.InvalidInputError, match=r"no input named 'SCAL'.*'IMAGE'"):
        model.infer(IMAGE=np.zeros((1, 2, 2), dtype=np.uint8), SCAL=[1.0])
    assert inference_count(server, "scale") == before


INTEGERS = ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
FLOATS = ["FP16", "FP32", "FP64"]


@pytest.mark.parametrize("datatype", INTEGERS + FLOATS + ["BOOL"])
def test_every_numeric_datatype_round_trips(client: Any, datatype: str) -> None:
    model = client.model("all_dtypes")
    dtype = model.spec.inputs[f"IN_{datatype}"].dtype
    values = np.array([[0, 1, 1], [1, 0, 1]]).astype(dtype)
    result = model.infer({f"IN_{datatype}": values}, outputs=[f"OUT_{datatype}"])
    out = result[f"OUT_{datatype}"]
    assert out.dtype == dtype
    assert np.array_equal(out, values)
    assert result.datatype(f"OUT_{datatype}") == datatype


def test_integer_extremes_round_trip(client: Any) -> None:
    model = client.model("all_dtypes")
    for datatype in INTEGERS:
        info = np.iinfo(model.spec.inputs[f"IN_{datatype}"].dtype)
        values = np.array([[info.min, info.max]], dtype=info.dtype)
        out = model.infer({f"IN_{datatype}": values}, outputs=[f"OUT_{datatype}"])
        assert np.array_equal(out[f"OUT_{datatype}"], values), datatype


@pytest.mark.parametrize("mode", MODES)
def test_integer_extremes_round_trip_in_json(
    server: LocalServer, loop_thread: LoopThread, mode: str
) -> None:
    # JSON carries integers as numbers: a list mixing small ones with ones past 2**63
    # must not go through float64 on the way back (2**64 - 1 would come back 0).
    client = open_client(server.http_url, mode, loop_thread, http_binary=False)
    try:
        model = client.model("all_dtypes")
        for datatype in INTEGERS:
            info = np.iinfo(model.spec.inputs[f"IN_{datatype}"].dtype)
            values = np.array([[info.min, 1, info.max, info.max // 2 + 2]], dtype=info.dtype)
            out = model.infer({f"IN_{datatype}": values}, outputs=[f"OUT_{datatype}"])
            assert out[f"OUT_{datatype}"].tolist() == values.tolist(), datatype
    finally:
        close_client(client, loop_thread)


def test_python_values_are_cast_when_safe(client: Any) -> None:
    model = client.model("all_dtypes")
    result = model.infer(
        IN_UINT8=[[0, 255]],
        IN_FP16=[[0.5, 1.5]],
        IN_FP32=np.array([[1.25, 2.5]], dtype=np.float64),
        IN_INT64=np.array([[7, 8]], dtype=np.int8),
        IN_BOOL=[[True, False]],
        outputs=["OUT_UINT8", "OUT_FP16", "OUT_FP32", "OUT_INT64", "OUT_BOOL"],
    )
    assert result["OUT_UINT8"].dtype == np.uint8
    assert result["OUT_UINT8"].tolist() == [[0, 255]]
    assert result["OUT_FP16"].tolist() == [[0.5, 1.5]]
    assert result["OUT_FP32"].dtype == np.float32
    assert result["OUT_INT64"].tolist() == [[7, 8]]
    assert result["OUT_BOOL"].tolist() == [[True, False]]


@pytest.mark.parametrize(
    ("name", "value", "pattern"),
    [
        ("IN_INT32", [[1.5, 2.0]], r"'IN_INT32' is INT32.*float64"),
        ("IN_UINT8", [[256]], r"'IN_UINT8' is UINT8: value 256 is outside \[0, 255\]"),
        ("IN_INT8", [[-129]], r"value -129 is outside \[-128, 127\]"),
        ("IN_FP32", [["1.0"]], r"'IN_FP32' is FP32"),
        ("IN_FP32", "1.0", r"'IN_FP32' is FP32: a str does not fit"),
        ("IN_BOOL", [[0, 1]], r"'IN_BOOL' is BOOL"),
        ("IN_BYTES", [[1, 2]], r"'IN_BYTES' is BYTES"),
    ],
)
def test_unsafe_casts_are_refused_and_nothing_sent(
    client: Any, server: LocalServer, name: str, value: Any, pattern: str
) -> None:
    model = client.model("all_dtypes")
    before = inference_count(server, "all_dtypes")
    with pytest.raises(ts.InvalidInputError, match=pattern):
        model.infer({name: value})
    assert inference_count(server, "all_dtypes") == before


def test_bytes_and_strings(client: Any) -> None:
    model = client.model("all_dtypes")
    texts = [["안녕하세요", "", "tab\tand\x00nul"], ["a", "bb", "ccc"]]
    result = model.infer(IN_BYTES=texts, outputs=["OUT_BYTES"])
    raw = result["OUT_BYTES"]
    assert raw.dtype == np.object_
    assert raw[0, 0] == "안녕하세요".encode()
    strings = result.as_strings("OUT_BYTES")
    assert strings.shape == (2, 3)
    assert strings.tolist() == texts
    as_bytes = model.infer(IN_BYTES=[[b"\xff\x00raw"]], outputs=["OUT_BYTES"])["OUT_BYTES"]
    assert as_bytes.tolist() == [[b"\xff\x00raw"]]
    numpy_strings = model.infer(IN_BYTES=np.array([["x", "yy"]]))["OUT_BYTES"]
    assert numpy_strings.tolist() == [[b"x", b"yy"]]


def test_bf16(client: Any) -> None:
    model = client.model("all_dtypes")
    values = np.array([[1.5, -2.25, 3.0]], dtype=np.float32)
    result = model.infer(IN_BF16=values, outputs=["OUT_BF16"])
    out = result["OUT_BF16"]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(out.astype(np.float32), values)
    assert result.datatype("OUT_BF16") == "BF16"


def test_outputs_selects_and_unknown_output_is_refused(client: Any, server: LocalServer) -> None:
    model = client.model("add_sub")
    result = model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1], outputs=["OUTPUT1"])
    assert list(result) == ["OUTPUT1"]
    before = inference_count(server, "add_sub")
    with pytest.raises(ts.InvalidInputError, match=r"no output named 'OUTPUT9'.*'OUTPUT0'"):
        model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1], outputs=["OUTPUT9"])
    assert inference_count(server, "add_sub") == before


def test_result_helpers(client: Any) -> None:
    model = client.model("add_sub")
    result = model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1], request_id="req-42")
    assert result.id == "req-42"
    assert set(result.to_dict()) == {"OUTPUT0", "OUTPUT1"}
    assert np.array_equal(result.to_dict()["OUTPUT0"], result["OUTPUT0"])
    assert "OUTPUT0" in result
    assert len(result) == 2
    with pytest.raises(ts.UnknownOutputError, match=r"'NOPE'.*'OUTPUT0', 'OUTPUT1'"):
        result["NOPE"]
    with pytest.raises(ts.UnknownOutputError):
        result.as_numpy("NOPE")
    with pytest.raises(KeyError):
        result["NOPE"]
    with pytest.raises(ts.InvalidInputError, match="not BYTES"):
        result.as_strings("OUTPUT0")


def test_a_writable_output_goes_through_dlpack(client: Any) -> None:
    result = client.model("add_sub").infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    view = result["OUTPUT0"]
    assert not view.flags.writeable
    with pytest.raises(BufferError, match="readonly"):
        view.__dlpack__()  # what a consumer of DLPack before 1.0 (older torch) calls

    writable = result.as_numpy("OUTPUT0", writable=True)
    assert writable.flags.writeable
    assert result.as_numpy("OUTPUT0", writable=True) is writable  # copied once
    assert result["OUTPUT0"] is writable
    shared = np.from_dlpack(writable)
    assert np.array_equal(shared, [2, 3, 4, 5])
    assert np.shares_memory(shared, writable)  # the consumer shares the copy, no second one


def test_a_one_dimensional_bytes_output_splits_into_rows_as_arrays(client: Any) -> None:
    # "upper" has no batch axis in its config; the override makes its leading -1 one, so
    # each sample's output is a 0-d slice of a 1-D BYTES array (it was bare bytes).
    model = client.model("upper", max_batch_size=8)
    assert model.spec.source == "override"
    assert model.spec.inputs["TEXT"].shape == ()
    one = model.infer_sample(TEXT="ab")
    assert one["UPPER"].shape == ()
    assert one.as_strings("UPPER") == "AB"
    rows = list(model.map([{"TEXT": "x"}, {"TEXT": "안녕"}], batch_size=2))
    assert [str(row.as_strings("UPPER")) for row in rows] == ["X", "안녕"]
    assert client.model("upper").spec.source == "config"


def test_parameters_reach_the_model_and_come_back(client: Any) -> None:
    model = client.model("all_dtypes")
    parameters = {"temperature": 0.5, "top_k": 3, "greedy": True, "mode": "fast"}
    result = model.infer(IN_INT32=[[1]], parameters=parameters, outputs=["PARAMETERS"])
    assert json.loads(result.as_strings("PARAMETERS")[0, 0]) == parameters
    with pytest.raises(ts.InvalidInputError, match="reserved"):
        model.infer(IN_INT32=[[1]], parameters={"sequence_id": 3})


def test_numpy_scalar_parameters_arrive_as_their_values(client: Any) -> None:
    model = client.model("all_dtypes")
    parameters = {"temperature": np.float32(0.5), "top_k": np.int64(3), "greedy": np.bool_(True)}
    result = model.infer(IN_INT32=[[1]], parameters=parameters, outputs=["PARAMETERS"])
    sent = json.loads(result.as_strings("PARAMETERS")[0, 0])
    assert sent == {"temperature": 0.5, "top_k": 3, "greedy": True}
    assert type(sent["greedy"]) is bool  # a bool parameter, not the integer 1
    with pytest.raises(ts.InvalidInputError, match="does not fit a 64-bit integer"):
        model.infer(IN_INT32=[[1]], parameters={"seed": np.uint64(2**64 - 1)})


def test_large_batch_is_split_and_joined_in_order(client: Any, server: LocalServer) -> None:
    model = client.model("text_embed")
    texts = [f"sentence number {index}" for index in range(21)]
    before = inference_count(server, "text_embed")
    batch = model.infer(TEXT=texts)["OUTPUT"]
    assert batch.shape == (21, 768)
    # Three requests (8 + 8 + 5): the server bumps its counters just after answering.
    deadline = time.monotonic() + 5
    while inference_count(server, "text_embed") - before < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inference_count(server, "text_embed") - before == 3
    for index in (0, 7, 8, 15, 20):
        alone = model.infer_sample(TEXT=texts[index])["OUTPUT"]
        assert np.array_equal(batch[index], alone), index


def test_split_batch_with_several_inputs(client: Any) -> None:
    model = client.model("scale")
    images = np.arange(10 * 4, dtype=np.uint8).reshape(10, 2, 2)
    scales = np.arange(10, dtype=np.float32)
    out = model.infer(IMAGE=images, SCALE=scales)["OUT"]
    assert out.shape == (10, 2, 2)
    assert np.array_equal(out, images * scales[:, None, None])


def test_priority_and_version_are_accepted(client: Any) -> None:
    model = client.model("text_embed", "1")
    assert model.infer(TEXT=["x"], priority=0)["OUTPUT"].shape == (1, 768)


def test_empty_batch_is_refused(client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="empty batch"):
        client.model("text_embed").infer(TEXT=np.empty((0, 1), dtype=object))


def test_answers_to_one_shape_of_request_may_change_shape(client: Any) -> None:
    # The same request (COUNT, INT64 [1]) gets answers of other lengths; gRPC reads an
    # answer like the last one without parsing it, and must notice when one is not.
    model = client.model("zeros")
    for count in (3, 3, 5, 0, 5, 3):
        out = model.infer(COUNT=[count])["OUT"]
        assert out.shape == (count,)
        assert out.dtype == np.float32
        assert not out.any()
    add_sub = client.model("add_sub")
    for value in (1.0, 2.0, -3.5):
        a = np.full(4, value, dtype=np.float32)
        result = add_sub.infer(INPUT0=a, INPUT1=a)
        np.testing.assert_array_equal(result["OUTPUT0"], a + a)
        np.testing.assert_array_equal(result["OUTPUT1"], a - a)
        assert not result["OUTPUT0"].flags.writeable
