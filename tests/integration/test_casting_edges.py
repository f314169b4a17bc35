"""Casts at the edges of a dtype, against a real server: Python ints numpy cannot type,
integers too large for FP16, and empty lists (docs/shaping.md "Numeric inputs")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import inference_count


def test_python_ints_numpy_reads_as_float64_reach_the_model_exactly(client: Any) -> None:
    model = client.model("all_dtypes")
    # numpy makes [1, 2**64 - 1] float64, which would be refused (or would round).
    result = model.infer(IN_UINT64=[[1, 2**64 - 1]], IN_INT64=[[-1, 2**63 - 1]])
    assert result["OUT_UINT64"].dtype == np.uint64
    assert result["OUT_UINT64"].tolist() == [[1, 2**64 - 1]]
    assert result["OUT_INT64"].tolist() == [[-1, 2**63 - 1]]


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("IN_FP16", [[70000]], "70000"),
        ("IN_FP16", np.array([[2**64 - 1]], np.uint64), str(2**64 - 1)),
        ("IN_UINT64", [[-1, 2**64 - 1]], "-1"),
        ("IN_INT64", [[-1, 2**63]], str(2**63)),
    ],
)
def test_integers_that_do_not_fit_are_refused_and_nothing_sent(
    client: Any, server: LocalServer, name: str, value: Any, shown: str
) -> None:
    model = client.model("all_dtypes")
    before = inference_count(server, "all_dtypes")
    with pytest.raises(ts.InvalidInputError, match=f"'{name}' is .*: value {shown} is outside"):
        model.infer({name: value})
    assert inference_count(server, "all_dtypes") == before


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IN_FP32", [[float("nan"), 1e300]]),
        ("IN_FP16", np.array([[np.nan, 1e5]], np.float32)),
        ("IN_BF16", np.array([[1e300, np.nan]])),
    ],
)
def test_a_nan_does_not_let_values_too_large_through(
    client: Any, server: LocalServer, name: str, value: Any
) -> None:
    # The largest magnitude was found with max(), which a NaN turns into NaN: the values
    # went as inf.
    before = inference_count(server, "all_dtypes")
    with pytest.raises(ts.InvalidInputError, match=f"'{name}' is .*: value .* is outside"):
        client.model("all_dtypes").infer({name: value})
    assert inference_count(server, "all_dtypes") == before
    nan_kept = client.model("all_dtypes").infer(IN_FP32=[[float("nan"), 1.0]])["OUT_FP32"]
    assert np.isnan(nan_kept[0, 0])
    assert nan_kept[0, 1] == 1.0


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_a_matrix_is_shaped_as_an_array(client: Any) -> None:
    # np.matrix reshapes to 2-D whatever it is asked: the batch axis was lost.
    result = client.model("double").infer(X=np.matrix([[1.0, 2.0], [3.0, 4.0]]))
    assert type(result["Y"]) is np.ndarray
    assert result["Y"].tolist() == [[[2.0, 4.0], [6.0, 8.0]]]


def test_a_request_larger_than_2_gib_is_refused_before_it_is_made(client: Any) -> None:
    # Views of one value: nothing is allocated unless the request is built. Over HTTP the
    # body went, and Triton answered "header size should be in range (0, -1894967006)".
    floats = np.broadcast_to(np.float32(1), (1, 300_000_000))
    ints = np.broadcast_to(np.int32(1), (1, 300_000_000))
    model = client.model("all_dtypes")
    with pytest.raises(ts.InvalidInputError, match=r"larger than .* \(2 GiB\): split the batch"):
        model.infer(IN_FP32=floats, IN_INT32=ints, shared_memory="off")


def test_integers_within_fp16_range_arrive_as_rounded_floats(client: Any) -> None:
    out = client.model("all_dtypes").infer(IN_FP16=[[-65504, 2049, 7]])["OUT_FP16"]
    assert out.dtype == np.float16
    assert out.tolist() == [[-65504.0, 2048.0, 7.0]]


def test_an_empty_list_is_an_empty_input_of_any_dtype(client: Any) -> None:
    result = client.model("all_dtypes").infer(IN_INT32=[], IN_UINT8=[])
    assert result["OUT_INT32"].dtype == np.int32
    assert result["OUT_INT32"].shape == (1, 0)
    assert result["OUT_UINT8"].shape == (1, 0)


def test_an_empty_list_streams_zero_responses(client: Any) -> None:
    assert list(client.model("repeat").stream(IN=[])) == []
