"""Automatic shaping and dtype conversion of inputs (API.md "Automatic shaping"/"dtypes")."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import InvalidInputError, ModelSpec, TensorSpec
from triton_sdk._base import ModelCore
from triton_sdk._shaping import Tensor, prepare_inputs, split_batch, to_array

Shape = tuple[int, ...]


def make_spec(*inputs: TensorSpec, max_batch_size: int = 8, name: str = "m") -> ModelSpec:
    return ModelSpec(
        name=name,
        max_batch_size=max_batch_size,
        inputs={tensor.name: tensor for tensor in inputs},
        outputs={"OUT": TensorSpec(name="OUT", datatype="FP32", shape=(-1,))},
    )


def one_input(
    datatype: str, dims: Shape, *, max_batch_size: int = 8, optional: bool = False
) -> ModelSpec:
    tensor = TensorSpec(name="X", datatype=datatype, shape=dims, optional=optional)
    return make_spec(tensor, max_batch_size=max_batch_size)


def shape_of(
    value: Any,
    dims: Shape,
    *,
    max_batch_size: int = 8,
    sample: bool = False,
    datatype: str = "FP32",
) -> Shape:
    spec = one_input(datatype, dims, max_batch_size=max_batch_size)
    prepared = prepare_inputs(spec, {"X": value}, sample=sample)
    return tuple(prepared.tensors[0].array.shape)


def converted(value: Any, datatype: str, dims: Shape = (-1,)) -> np.ndarray[Any, Any]:
    """The array sent for ``value``, on a model without a batch axis (dtype tests)."""
    spec = one_input(datatype, dims, max_batch_size=0)
    return prepare_inputs(spec, {"X": value}).tensors[0].array


# Batched models: the three readings


@pytest.mark.parametrize(
    ("dims", "given", "expected"),
    [
        # 1. batched as given
        ((3,), (2, 3), (2, 3)),
        ((1,), (4, 1), (4, 1)),
        ((-1,), (2, 5), (2, 5)),
        ((-1, 3), (2, 7, 3), (2, 7, 3)),
        ((), (5,), (5,)),
        # 2. batched, trailing size-1 axes missing
        ((1,), (4,), (4, 1)),
        ((2, 1), (5, 2), (5, 2, 1)),
        ((4, 1, 1), (6, 4), (6, 4, 1, 1)),
        ((4, 1, 1), (6, 4, 1), (6, 4, 1, 1)),
        ((1, 1), (3,), (3, 1, 1)),
        # 3. a single sample: a batch axis of 1 is added
        ((3,), (3,), (1, 3)),
        ((-1,), (7,), (1, 7)),
        ((2, 2), (2, 2), (1, 2, 2)),
        ((-1, 3), (7, 3), (1, 7, 3)),
        ((), (), (1,)),
        # readings 2 and 3 agree on the same array: not ambiguous
        ((1,), (1,), (1, 1)),
    ],
)
def test_batched_readings(dims: Shape, given: Shape, expected: Shape) -> None:
    value = np.arange(int(np.prod(given)), dtype=np.float32).reshape(given)
    spec = one_input("FP32", dims)
    prepared = prepare_inputs(spec, {"X": value})
    array = prepared.tensors[0].array
    assert array.shape == expected
    assert prepared.batch_size == expected[0]
    # Only axes are added: the data and its order are untouched.
    np.testing.assert_array_equal(array.reshape(-1), value.reshape(-1))


def test_list_of_strings_for_dims_1_is_a_batch() -> None:
    spec = one_input("BYTES", (1,))
    prepared = prepare_inputs(spec, {"X": ["안녕하세요", "hello", "x"]})
    array = prepared.tensors[0].array
    assert array.shape == (3, 1)
    assert prepared.batch_size == 3
    assert array.dtype == np.object_
    assert array[:, 0].tolist() == ["안녕하세요", "hello", "x"]


def test_python_list_for_vector_input_is_one_sample() -> None:
    assert shape_of([1.0, 2.0, 3.0], (3,)) == (1, 3)
    assert shape_of([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], (3,)) == (2, 3)


def test_ambiguous_readings_are_refused() -> None:
    # (3, 1) is a batch of 3 samples (1, 1)... or one sample (3, 1) of sample shape [-1, 1].
    with pytest.raises(InvalidInputError) as info:
        shape_of(np.zeros((3, 1), np.float32), (-1, 1))
    message = str(info.value)
    assert "ambiguous" in message
    assert "'X'" in message
    assert "infer_sample" in message
    assert info.value.model == "m"


def test_ambiguous_case_is_resolved_by_passing_the_batch_axis() -> None:
    assert shape_of(np.zeros((1, 3, 1), np.float32), (-1, 1)) == (1, 3, 1)
    assert shape_of(np.zeros((3, 1, 1), np.float32), (-1, 1)) == (3, 1, 1)


def test_ambiguous_case_is_resolved_by_infer_sample() -> None:
    assert shape_of(np.zeros((3, 1), np.float32), (-1, 1), sample=True) == (1, 3, 1)


@pytest.mark.parametrize(
    ("dims", "given"),
    [
        ((3,), (2, 4)),
        ((3,), (4,)),
        ((2, 3), (6,)),
        ((4, 1), (5,)),  # only trailing size-1 axes may be missing
        ((3,), (2, 3, 1)),
        ((-1,), (2, 3, 4)),
        ((1,), ()),  # a bare scalar is not a batch; infer_sample takes it
    ],
)
def test_no_reading_matches(dims: Shape, given: Shape) -> None:
    with pytest.raises(InvalidInputError) as info:
        shape_of(np.zeros(given, np.float32), dims)
    message = str(info.value)
    assert "'X'" in message  # the input
    assert str(given) in message  # the shape given
    pattern = ", ".join(map(str, dims))
    assert f"[{pattern}]" in message or f"(n, {pattern})" in message  # the expected shape


# Models without a batch axis


@pytest.mark.parametrize(
    ("dims", "given", "expected"),
    [
        ((3,), (3,), (3,)),
        ((-1,), (7,), (7,)),
        ((2, 3), (2, 3), (2, 3)),
        ((1, 3), (3,), (1, 3)),  # a leading size-1 axis added
        ((3, 1), (3,), (3, 1)),  # a trailing size-1 axis added
        ((1, 3, 1), (3,), (1, 3, 1)),  # both
        ((1, -1), (5,), (1, 5)),
        ((1,), (), (1,)),
        ((1, 1), (), (1, 1)),
        ((), (), ()),
    ],
)
def test_unbatched_model_shapes(dims: Shape, given: Shape, expected: Shape) -> None:
    value = np.arange(int(np.prod(given)), dtype=np.float32).reshape(given)
    spec = one_input("FP32", dims, max_batch_size=0)
    prepared = prepare_inputs(spec, {"X": value})
    assert prepared.tensors[0].array.shape == expected
    assert prepared.batch_size is None


@pytest.mark.parametrize(
    ("dims", "given"),
    [
        ((3,), (1, 3)),  # no batch axis is added or accepted
        ((3,), (2, 3)),
        ((2, 3), (6,)),
        ((2, 3), (3,)),  # the missing axis is not size 1
        ((-1,), ()),  # a wildcard axis is never invented
        ((3,), (4,)),
    ],
)
def test_unbatched_model_refuses_mismatches(dims: Shape, given: Shape) -> None:
    with pytest.raises(InvalidInputError) as info:
        shape_of(np.zeros(given, np.float32), dims, max_batch_size=0)
    assert "'X'" in str(info.value)
    assert str(given) in str(info.value)


def test_unbatched_model_refuses_ambiguous_size_1_axes() -> None:
    # (1, 5, 1) fits [1, -1, -1, 1] as (1, 1, 5, 1) and as (1, 5, 1, 1).
    with pytest.raises(InvalidInputError, match="ambiguous"):
        shape_of(np.zeros((1, 5, 1), np.float32), (1, -1, -1, 1), max_batch_size=0)


def test_unbatched_model_takes_a_str_for_dims_1() -> None:
    array = converted("hello", "BYTES", dims=(1,))
    assert array.shape == (1,)
    assert array[0] == "hello"


# infer_sample: sample=True


@pytest.mark.parametrize(
    ("datatype", "dims", "value", "expected"),
    [
        ("BYTES", (1,), "hello", (1, 1)),
        ("BYTES", (1,), b"hello", (1, 1)),
        ("BYTES", (1,), ["hello"], (1, 1)),
        ("FP32", (3,), [1.0, 2.0, 3.0], (1, 3)),
        ("FP32", (1, 3), [1.0, 2.0, 3.0], (1, 1, 3)),
        ("FP32", (3, 1), [1.0, 2.0, 3.0], (1, 3, 1)),
        ("FP32", (-1,), [1.0, 2.0, 3.0, 4.0], (1, 4)),
        ("FP32", (), 2.0, (1,)),
        ("INT32", (1,), 7, (1, 1)),
    ],
)
def test_infer_sample_adds_the_batch_axis(
    datatype: str, dims: Shape, value: Any, expected: Shape
) -> None:
    spec = one_input(datatype, dims)
    prepared = prepare_inputs(spec, {"X": value}, sample=True)
    assert prepared.tensors[0].array.shape == expected
    assert prepared.batch_size == 1


def test_infer_sample_refuses_a_batch() -> None:
    with pytest.raises(InvalidInputError, match="'X'"):
        shape_of(np.zeros((2, 3), np.float32), (3,), sample=True)


def test_infer_sample_on_unbatched_model_adds_no_batch_axis() -> None:
    assert shape_of([1.0, 2.0, 3.0], (3,), max_batch_size=0, sample=True) == (3,)


# Several inputs: batch agreement, missing, unknown, optional


def two_inputs() -> ModelSpec:
    return make_spec(
        TensorSpec(name="A", datatype="FP32", shape=(3,)),
        TensorSpec(name="B", datatype="INT32", shape=(1,)),
    )


def test_inputs_must_agree_on_batch_size() -> None:
    with pytest.raises(InvalidInputError) as info:
        prepare_inputs(two_inputs(), {"A": np.zeros((2, 3), np.float32), "B": [1, 2, 3]})
    message = str(info.value)
    assert "'A'" in message
    assert "'B'" in message
    assert "batch" in message


def test_inputs_with_the_same_batch_size() -> None:
    prepared = prepare_inputs(two_inputs(), {"A": np.zeros((3, 3), np.float32), "B": [1, 2, 3]})
    assert prepared.batch_size == 3
    assert [tensor.name for tensor in prepared.tensors] == ["A", "B"]
    assert [tensor.array.shape for tensor in prepared.tensors] == [(3, 3), (3, 1)]
    assert [tensor.datatype for tensor in prepared.tensors] == ["FP32", "INT32"]


def test_single_samples_of_several_inputs_agree() -> None:
    prepared = prepare_inputs(two_inputs(), {"A": [1.0, 2.0, 3.0], "B": [5]})
    assert prepared.batch_size == 1
    assert [tensor.array.shape for tensor in prepared.tensors] == [(1, 3), (1, 1)]


def three_inputs() -> ModelSpec:
    return make_spec(
        TensorSpec(name="A", datatype="FP32", shape=(3,)),
        TensorSpec(name="B", datatype="FP32", shape=(3,), optional=True),
        TensorSpec(name="C", datatype="INT32", shape=(1,)),
    )


def test_missing_required_input() -> None:
    with pytest.raises(InvalidInputError) as info:
        prepare_inputs(three_inputs(), {"A": np.zeros((2, 3), np.float32)})
    message = str(info.value)
    assert "'C'" in message
    for name in ("'A'", "'B'", "'C'"):
        assert name in message  # the model's input names are listed
    assert info.value.model == "m"


def test_a_missing_input_named_like_an_option_says_how_to_give_it() -> None:
    # infer(timeout=1.0) set the call's timeout: "needs input 'timeout'" said no more.
    spec = make_spec(
        TensorSpec(name="X", datatype="FP32", shape=(1,)),
        TensorSpec(name="timeout", datatype="FP32", shape=(1,)),
    )
    with pytest.raises(InvalidInputError, match=r"'timeout' as a keyword is the call's option"):
        prepare_inputs(spec, {"X": [[1.0]]})


@pytest.mark.parametrize("datatype", ["FP64", "FP32"])
def test_an_object_array_of_python_floats_is_read_as_floats(datatype: str) -> None:
    # Refused as "values of dtype object cannot be cast to it without loss", while an
    # object array of ints went.
    array = converted(np.array([1.5, 2, -0.25], dtype=object), datatype)
    assert array.dtype == np.dtype(datatype.replace("FP", "float"))
    assert array.tolist() == [1.5, 2.0, -0.25]
    with pytest.raises(InvalidInputError, match="without loss"):
        converted(np.array([1.5, True], dtype=object), datatype)  # (a bool: refused)
    with pytest.raises(InvalidInputError, match="outside its range"):
        converted(np.array([1e300], dtype=object), "FP32")


def test_an_object_array_of_numpy_and_python_numbers_is_read_as_floats() -> None:
    # A pandas object column mixes them; numpy scalars were refused "without loss".
    mixed = np.array([np.float64(1.5), np.float32(2.5), np.int64(3), 4.0], dtype=object)
    assert converted(mixed, "FP32").tolist() == [1.5, 2.5, 3.0, 4.0]
    with pytest.raises(InvalidInputError, match="without loss"):
        converted(np.array([1.5, np.bool_(True)], dtype=object), "FP32")
    if np.finfo(np.longdouble).max > np.finfo(np.float64).max:  # (x86: 80-bit)
        # Beyond float64 it became inf, past the range check.
        with pytest.raises(InvalidInputError):
            converted(np.array([np.longdouble("1e400")], dtype=object), "FP32")


def test_an_integer_of_hundreds_of_digits_is_shown_short() -> None:
    with pytest.raises(InvalidInputError) as info:
        converted([2**2000], "INT64")
    assert len(str(info.value)) < 200
    assert "(603 digits)" in str(info.value)


def test_unknown_input_name() -> None:
    values = {"A": np.zeros((2, 3), np.float32), "C": [1, 2], "TYPO": [1]}
    with pytest.raises(InvalidInputError) as info:
        prepare_inputs(three_inputs(), values)
    message = str(info.value)
    assert "'TYPO'" in message
    for name in ("'A'", "'B'", "'C'"):
        assert name in message


def test_a_batched_model_needs_one_input_even_when_all_are_optional() -> None:
    spec = make_spec(TensorSpec(name="A", datatype="FP32", shape=(1,), optional=True))
    with pytest.raises(InvalidInputError, match="batch size from the inputs: give at least one"):
        prepare_inputs(spec, {})
    unbatched = make_spec(spec.inputs["A"], max_batch_size=0)
    assert prepare_inputs(unbatched, {}).tensors == []  # the server takes it


def test_an_unknown_name_is_called_an_option_only_among_a_calls_keywords() -> None:
    values = {"A": np.zeros((2, 3), np.float32), "C": [1, 2], "B": [1, 2]}
    with pytest.raises(InvalidInputError, match="this call takes no 'retry' option"):
        prepare_inputs(three_inputs(), {**values, "retry": None})
    # With a misspelt input beside it, both are named as unknown inputs.
    with pytest.raises(InvalidInputError, match="no input named 'TXET', 'retry'"):
        prepare_inputs(three_inputs(), {**values, "retry": None, "TXET": 1})
    # A map sample is no call's keywords (map itself takes timeout=).
    with pytest.raises(InvalidInputError, match="no input named 'timeout'"):
        prepare_inputs(three_inputs(), {**values, "timeout": 3}, keywords=False)


def test_optional_input_may_be_left_out() -> None:
    prepared = prepare_inputs(three_inputs(), {"A": np.zeros((2, 3), np.float32), "C": [1, 2]})
    assert [tensor.name for tensor in prepared.tensors] == ["A", "C"]
    assert prepared.batch_size == 2


def test_none_leaves_an_optional_input_out_and_is_refused_for_a_required_one() -> None:
    # Both were "values of dtype object cannot be cast to it without loss"; the typed
    # stubs give None for an optional input left out.
    values = {"A": np.zeros((2, 3), np.float32), "C": [1, 2]}
    prepared = prepare_inputs(three_inputs(), {**values, "B": None})
    assert [tensor.name for tensor in prepared.tensors] == ["A", "C"]
    with pytest.raises(InvalidInputError, match=r"input 'C' of model .* is None; it is required"):
        prepare_inputs(three_inputs(), {**values, "C": None})


def test_optional_input_may_be_given() -> None:
    values = {"A": np.zeros((2, 3)), "B": np.ones((2, 3)), "C": [1, 2]}
    prepared = prepare_inputs(three_inputs(), values)
    assert [tensor.name for tensor in prepared.tensors] == ["A", "B", "C"]


@pytest.mark.parametrize(
    ("datatype", "dims", "value"),
    [
        ("FP32", (3,), np.zeros((0, 3), np.float32)),
        ("BYTES", (1,), []),
        ("INT32", (1,), np.zeros((0,), np.int32)),
    ],
)
def test_empty_batch_is_refused(datatype: str, dims: Shape, value: Any) -> None:
    with pytest.raises(InvalidInputError):
        prepare_inputs(one_input(datatype, dims), {"X": value})


# Splitting oversized batches


def test_split_batch_chunks_in_order() -> None:
    a = np.arange(30, dtype=np.float32).reshape(10, 3)
    b = np.arange(10, dtype=np.int32).reshape(10, 1)
    tensors = [Tensor("A", "FP32", a), Tensor("B", "INT32", b)]
    chunks = split_batch(tensors, 4)
    assert [[t.array.shape[0] for t in chunk] for chunk in chunks] == [[4, 4], [4, 4], [2, 2]]
    for chunk in chunks:
        assert [(t.name, t.datatype) for t in chunk] == [("A", "FP32"), ("B", "INT32")]
    np.testing.assert_array_equal(np.concatenate([chunk[0].array for chunk in chunks]), a)
    np.testing.assert_array_equal(np.concatenate([chunk[1].array for chunk in chunks]), b)


@pytest.mark.parametrize(("total", "limit", "sizes"), [(4, 4, [4]), (3, 8, [3]), (9, 3, [3, 3, 3])])
def test_split_batch_sizes(total: int, limit: int, sizes: list[int]) -> None:
    tensors = [Tensor("A", "FP32", np.zeros((total, 2), np.float32))]
    assert [chunk[0].array.shape[0] for chunk in split_batch(tensors, limit)] == sizes


def test_oversized_batch_becomes_requests_of_at_most_max_batch_size() -> None:
    spec = make_spec(TensorSpec(name="A", datatype="FP32", shape=(2,)), max_batch_size=4)
    a = np.arange(20, dtype=np.float32).reshape(10, 2)
    requests = ModelCore(spec, None)._requests(
        {"A": a},
        {},
        outputs=None,
        parameters={"k": 1},
        priority=2,
        request_id="r",
        sample=False,
    )
    assert [request.inputs[0].array.shape[0] for request in requests] == [4, 4, 2]
    assert all(request.parameters == {"k": 1} for request in requests)
    assert all(request.priority == 2 and request.request_id == "r" for request in requests)
    joined = np.concatenate([request.inputs[0].array for request in requests])
    np.testing.assert_array_equal(joined, a)


def test_batch_within_max_batch_size_is_one_request() -> None:
    spec = make_spec(TensorSpec(name="A", datatype="FP32", shape=(2,)), max_batch_size=4)
    requests = ModelCore(spec, None)._requests(
        None,
        {"A": np.zeros((4, 2))},
        outputs=None,
        parameters=None,
        priority=0,
        request_id="",
        sample=False,
    )
    assert len(requests) == 1


def test_same_input_given_by_mapping_and_keyword_is_refused() -> None:
    spec = make_spec(TensorSpec(name="A", datatype="FP32", shape=(2,)))
    with pytest.raises(InvalidInputError, match="'A'"):
        ModelCore(spec, None)._requests(
            {"A": [1.0, 2.0]},
            {"A": [1.0, 2.0]},
            outputs=None,
            parameters=None,
            priority=0,
            request_id="",
            sample=False,
        )


# Automatic dtypes


@pytest.mark.parametrize(
    "value",
    [
        ["a", "é", ""],
        np.array(["a", "é", ""]),
        np.array(["a", "é", ""], dtype=object),
    ],
)
def test_strings_go_to_bytes_and_stay_str(value: Any) -> None:
    array = converted(value, "BYTES")
    assert array.dtype == np.object_
    assert array.tolist() == ["a", "é", ""]
    assert all(type(item) is str for item in array.tolist())  # encoded as UTF-8 when sent


@pytest.mark.parametrize(
    "value", [[b"a", b"\x00\xff"], np.array([b"a", b"\x00\xff"], dtype=object)]
)
def test_bytes_go_to_bytes_unchanged(value: Any) -> None:
    array = converted(value, "BYTES")
    assert array.dtype == np.object_
    assert array.tolist() == [b"a", b"\x00\xff"]


def test_numpy_bytes_array_goes_to_bytes() -> None:
    array = converted(np.array([b"ab", b"c"]), "BYTES")
    assert array.dtype == np.object_
    assert array.tolist() == [b"ab", b"c"]


@pytest.mark.parametrize(
    ("value", "dims"),
    [
        (np.array([1, 2]), (-1,)),
        (np.array([1.5, 2.5], dtype=np.float32), (-1,)),
        (np.array([True]), (-1,)),
        ([1, 2], (-1,)),
        ([1.5], (-1,)),
        (3, (1,)),
    ],
    ids=["int-array", "float-array", "bool-array", "int-list", "float-list", "int-scalar"],
)
def test_numbers_into_bytes_are_refused(value: Any, dims: Shape) -> None:
    with pytest.raises(InvalidInputError, match="'X'"):
        converted(value, "BYTES", dims)


@pytest.mark.parametrize(
    ("value", "datatype", "expected"),
    [
        ([1.5, 2.5], "FP32", np.array([1.5, 2.5], np.float32)),
        ([1, 2], "FP32", np.array([1, 2], np.float32)),
        ([1.0, 2.0], "FP16", np.array([1, 2], np.float16)),
        ([1.0, 2.0], "FP64", np.array([1, 2], np.float64)),
        ([1, 2], "INT32", np.array([1, 2], np.int32)),
        ([-128, 127], "INT8", np.array([-128, 127], np.int8)),
        ([0, 255], "UINT8", np.array([0, 255], np.uint8)),
        ([0, 65535], "UINT16", np.array([0, 65535], np.uint16)),
        ([True, False], "BOOL", np.array([True, False])),
        ([2**64 - 1], "UINT64", np.array([2**64 - 1], np.uint64)),
    ],
)
def test_python_values_go_through_asarray(
    value: Any, datatype: str, expected: np.ndarray[Any, Any]
) -> None:
    array = converted(value, datatype)
    assert array.dtype == expected.dtype
    np.testing.assert_array_equal(array, expected)


@pytest.mark.parametrize(
    ("source", "datatype"),
    [
        (np.float64, "FP32"),
        (np.float32, "FP16"),
        (np.float16, "FP64"),
        (np.int32, "FP32"),
        (np.int64, "INT32"),
        (np.int8, "INT64"),
        (np.uint8, "INT16"),
        (np.int64, "UINT8"),  # signed to unsigned, in range
        (np.uint64, "INT8"),
    ],
)
def test_same_kind_casts_are_allowed(source: Any, datatype: str) -> None:
    array = converted(np.array([0, 1, 2], dtype=source), datatype)
    assert array.dtype == TensorSpec(name="X", datatype=datatype, shape=(-1,)).dtype
    np.testing.assert_array_equal(array, [0, 1, 2])


def test_array_of_the_right_dtype_is_passed_through() -> None:
    value = np.array([1.0, 2.0], np.float32)
    array = converted(value, "FP32")
    assert array.dtype == np.float32
    np.testing.assert_array_equal(array, value)


@pytest.mark.parametrize(
    ("value", "datatype"),
    [
        (np.array([1.0, 2.0]), "INT32"),  # float to int, even when integral
        (np.array([1.5], np.float32), "INT64"),
        ([1.5], "INT32"),
        ([1.0], "UINT8"),
        (np.array([1.0]), "BOOL"),
        (np.array([1, 0]), "BOOL"),
        (np.array([1 + 2j]), "FP32"),
        (np.array([1 + 2j]), "BF16"),  # (ml_dtypes' can_cast says yes: the real part went)
        ([1 + 2j], "BF16"),
        (np.array([1 + 2j], np.complex64), "FP64"),
        (np.array([1.0]), "BYTES"),
    ],
)
def test_lossy_kind_casts_are_refused(value: Any, datatype: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        converted(value, datatype)
    assert "'X'" in str(info.value)


@pytest.mark.parametrize(
    ("value", "datatype", "dims"),
    [
        ("1", "FP32", (1,)),
        (b"1", "INT32", (1,)),
        (["1", "2"], "FP32", (-1,)),
        ([b"1"], "INT64", (-1,)),
        (np.array(["1"]), "INT32", (-1,)),
        (np.array([b"1"]), "FP64", (-1,)),
        (np.array(["1.5"], dtype=object), "FP32", (-1,)),
    ],
)
def test_strings_into_numeric_inputs_are_refused(value: Any, datatype: str, dims: Shape) -> None:
    with pytest.raises(InvalidInputError, match="'X'"):
        converted(value, datatype, dims)


@pytest.mark.parametrize(
    ("value", "datatype"),
    [
        ([256], "UINT8"),
        ([-1], "UINT8"),
        ([-1], "UINT64"),
        ([128], "INT8"),
        ([-129], "INT8"),
        ([2**31], "INT32"),
        (np.array([2**32], np.int64), "UINT32"),
        (np.array([2**63], np.uint64), "INT64"),
        (np.array([0, 300], np.int16), "UINT8"),
    ],
)
def test_out_of_range_integers_are_refused(value: Any, datatype: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        converted(value, datatype)
    assert "'X'" in str(info.value)


def test_integer_range_error_names_the_value() -> None:
    with pytest.raises(InvalidInputError, match="300"):
        converted(np.array([0, 300]), "UINT8")


def test_in_range_int64_feeds_uint8() -> None:
    # np.asarray([0, 255]) is int64; the range check, not the kind, keeps the cast safe.
    array = converted(np.array([0, 7, 255], dtype=np.int64), "UINT8")
    assert array.dtype == np.uint8
    assert array.tolist() == [0, 7, 255]


def test_ragged_list_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="'X'"):
        converted([[1.0, 2.0], [3.0]], "FP32")


@pytest.mark.parametrize(
    "value",
    [
        np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16),
        np.array([1.5, -2.0], dtype=np.float32),
        [1.5, -2.0],
    ],
)
def test_bf16_uses_ml_dtypes_bfloat16(value: Any) -> None:
    array = converted(value, "BF16")
    assert array.dtype == np.dtype(ml_dtypes.bfloat16)
    assert array.astype(np.float32).tolist() == [1.5, -2.0]


def test_strings_into_bf16_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        converted(np.array(["1.0"]), "BF16")


@pytest.mark.parametrize(
    ("dtype", "datatype"),
    [(">f4", "FP32"), (">f8", "FP64"), (">i4", "INT32"), (">i8", "INT64"), (">u2", "UINT16")],
)
def test_non_native_byte_order_is_converted(dtype: str, datatype: str) -> None:
    value = np.array([1, 2, 300], dtype=dtype)
    array = converted(value, datatype)
    assert array.dtype.isnative
    assert array.dtype == np.dtype(dtype).newbyteorder("=")
    assert array.tolist() == [1, 2, 300]


@pytest.mark.parametrize("datatype", ["INT32", "UINT8", "FP32", "FP16", "BF16"])
def test_booleans_feed_only_bool_inputs(datatype: str) -> None:
    # A mask passed where numbers are expected is a bug more often than a wish.
    spec = ts.TensorSpec(name="X", datatype=datatype, shape=(-1,))
    with pytest.raises(ts.InvalidInputError, match="booleans; cast them explicitly"):
        to_array(np.array([True, False]), spec, "m")
    with pytest.raises(ts.InvalidInputError, match="booleans"):
        to_array([True, False], spec, "m")


@pytest.mark.parametrize(
    ("datatype", "value"),
    [("FP32", 1e300), ("FP32", -3.5e38), ("FP16", 70000.0), ("BF16", 1e39)],
)
def test_finite_floats_out_of_range_are_refused(datatype: str, value: float) -> None:
    spec = ts.TensorSpec(name="X", datatype=datatype, shape=(-1,))
    with pytest.raises(ts.InvalidInputError, match="outside its range"):
        to_array(np.array([1.0, value]), spec, "m")


def test_a_float_out_of_range_is_named_as_written() -> None:
    # As the docs show it, with numpy 2 too (whose repr is np.float64(1e+300)).
    with pytest.raises(InvalidInputError) as info:
        converted(np.array([1.0, 1e300]), "FP32")
    assert (
        str(info.value)
        == "input 'X' is FP32: value 1e+300 is outside its range (it would become inf)"
    )


def test_infinities_and_nans_pass_through_a_float_cast() -> None:
    spec = ts.TensorSpec(name="X", datatype="FP32", shape=(-1,))
    array = to_array(np.array([np.inf, -np.inf, np.nan, 1.0]), spec, "m")
    assert array.dtype == np.float32
    assert np.isinf(array[:2]).all()
    assert np.isnan(array[2])


@pytest.mark.parametrize(
    "shape", [(1, 2**40), (1, 2**58), (2**40, 0)], ids=["2^40", "2^58", "empty-2^40"]
)
@pytest.mark.parametrize("datatype", ["FP32", "BYTES"])
def test_views_larger_than_a_request_are_refused_without_a_copy(
    shape: tuple[int, ...], datatype: str
) -> None:
    spec = ts.TensorSpec(name="X", datatype=datatype, shape=(-1,))
    base = np.zeros(1, np.uint8 if datatype == "FP32" else np.object_)
    view = np.lib.stride_tricks.as_strided(base, shape=shape, strides=(0,) * len(shape))
    with pytest.raises(ts.InvalidInputError, match="input 'X'"):
        to_array(view, spec, "m")


# Integers into float inputs, empty lists, and Python ints numpy cannot type


@pytest.mark.filterwarnings("error")  # no RuntimeWarning, no inf: a refusal
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ([[70000]], "70000"),
        ([[-70000]], "-70000"),
        ([[65520]], "65520"),  # the first integer that rounds to inf
        (np.array([[2**64 - 1]], np.uint64), str(2**64 - 1)),
        (np.array([[-(2**63)]], np.int64), str(-(2**63))),
        (np.array([[1, 65535]], np.uint16), "65535"),
        ([[1, 2**70]], str(2**70)),  # past int64: numpy makes it an object array
    ],
)
def test_integers_too_large_for_fp16_are_refused(value: Any, shown: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        converted(value, "FP16", (-1, -1))
    assert str(info.value) == (
        f"input 'X' is FP16: value {shown} is outside its range (it would become inf)"
    )


@pytest.mark.filterwarnings("error")
def test_integers_within_fp16_range_are_rounded_as_floats_are() -> None:
    array = converted([[-65519, 65519, 2049, 7]], "FP16", (-1, -1))
    assert array.dtype == np.float16
    assert array.tolist() == [[-65504.0, 65504.0, 2048.0, 7.0]]  # nearest, as from floats


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("datatype", ["FP32", "BF16"])
def test_every_int64_and_uint64_fits_fp32_and_bf16(datatype: str) -> None:
    # Their range is past 2**64: integers become floats, rounded (2**24 + 1 into FP32).
    for value in (
        np.array([-(2**63), 2**63 - 1, 2**24 + 1]),
        np.array([2**64 - 1], np.uint64),
        [2**70],
    ):
        array = converted(value, datatype)
        assert np.isfinite(array.astype(np.float64)).all()
    assert converted([2**24 + 1], "FP32").tolist() == [2**24]


def test_python_ints_past_float64_are_refused() -> None:
    with pytest.raises(InvalidInputError) as info:
        converted([1, -(2**1100)], "FP64")
    shown = str(-(2**1100))
    assert str(info.value).startswith(
        f"input 'X' is FP64: value {shown[:20]}...{shown[-4:]} (332 digits) is outside its range"
    )


@pytest.mark.parametrize(
    "datatype", ["INT8", "INT32", "INT64", "UINT8", "UINT64", "BOOL", "FP16", "FP32", "BF16"]
)
@pytest.mark.parametrize(("value", "dims"), [([], (-1,)), ((), (-1,)), ([[]], (-1, -1))])
def test_an_empty_list_fits_any_numeric_input(value: Any, dims: Shape, datatype: str) -> None:
    # np.asarray([]) is float64, but no float was given: zero elements cast exactly.
    array = converted(value, datatype, dims)
    assert array.dtype == TensorSpec(name="X", datatype=datatype, shape=dims).dtype
    assert array.shape == np.asarray(value).shape


def test_an_empty_list_on_a_batched_model() -> None:
    # For [-1] it is one sample of no elements; for [1], a batch of none, which is refused.
    assert shape_of([], (-1,), datatype="INT32") == (1, 0)
    with pytest.raises(InvalidInputError, match="an empty batch cannot be sent"):
        prepare_inputs(one_input("INT32", (1,)), {"X": []})


def test_an_empty_float_array_is_still_refused_for_an_integer_input() -> None:
    # An array carries its dtype: only a list, which has none, is read as any.
    with pytest.raises(InvalidInputError, match="float64 cannot be cast"):
        converted(np.zeros(0), "INT32")


@pytest.mark.parametrize(
    ("value", "datatype"),
    [
        ([[1, 2**64 - 1]], "UINT64"),  # numpy: int64 and uint64 make float64
        ([[2**63, 0]], "UINT64"),
        ([[-(2**63), 2**63 - 1]], "INT64"),
        ([[-1, 2**63 - 1]], "INT64"),
        ([[np.uint64(2**64 - 1), np.int64(1)]], "UINT64"),
        (np.array([[1, 2**64 - 1]], dtype=object), "UINT64"),
        (((1, 2**64 - 1),), "UINT64"),
        ([[1, 2**63 - 1]], "FP64"),
    ],
)
def test_python_ints_that_fit_are_cast_exactly(value: Any, datatype: str) -> None:
    array = converted(value, datatype, (-1, -1))
    expected = [[int(item) for item in row] for row in value]
    assert array.dtype == TensorSpec(name="X", datatype=datatype, shape=(-1,)).dtype
    if datatype == "FP64":
        assert array.tolist() == [[float(item) for item in row] for row in expected]
    else:
        assert array.tolist() == expected


@pytest.mark.parametrize(
    ("value", "datatype", "message"),
    [
        ([1, 2**64], "UINT64", f"'X' is UINT64: value {2**64} is outside [0, {2**64 - 1}]"),
        ([-1, 2**64 - 1], "UINT64", f"'X' is UINT64: value -1 is outside [0, {2**64 - 1}]"),
        ([-1, 2**63], "INT64", f"'X' is INT64: value {2**63} is outside [{-(2**63)}, "),
        ([-(2**63) - 1, 0], "INT64", f"'X' is INT64: value {-(2**63) - 1} is outside"),
        ([1, 2**63], "INT8", f"'X' is INT8: value {2**63} is outside [-128, 127]"),
        ([2**70], "INT64", f"'X' is INT64: value {2**70} is outside"),
    ],
)
def test_python_ints_that_do_not_fit_are_refused_by_value(
    value: Any, datatype: str, message: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        converted(value, datatype)
    assert str(info.value).startswith(f"input {message}")


@pytest.mark.parametrize(
    ("value", "datatype"),
    [
        ([True, -1, 2**64 - 1], "INT64"),
        ([2**70, np.False_], "FP32"),
        (np.array([True, 2], dtype=object), "INT32"),
    ],
)
def test_booleans_among_python_ints_are_refused(value: Any, datatype: str) -> None:
    with pytest.raises(InvalidInputError, match=f"'X' is {datatype}: got booleans among integers"):
        converted(value, datatype)


def test_an_object_array_of_booleans_goes_to_bool_and_one_of_ints_does_not() -> None:
    # A slice of a pandas object column of booleans was refused. The Python-int reading
    # is for integer and float inputs only.
    booleans = converted(np.array([True, np.bool_(False)], dtype=object), "BOOL")
    assert booleans.dtype == np.bool_
    assert booleans.tolist() == [True, False]
    with pytest.raises(InvalidInputError, match=r"'X' is BOOL .* dtype object cannot be cast"):
        converted(np.array([1, 0], dtype=object), "BOOL")


@pytest.mark.parametrize(
    ("value", "datatype", "dtype"),
    [
        ([1.5, 2**64 - 1], "UINT64", "float64"),  # a float was given: refused as before
        ([1.0, 2], "INT32", "float64"),
        ([None, 1], "INT32", "object"),
        (np.array([1, np.timedelta64(5)], dtype=object), "UINT64", "object"),  # not a count
        ([1, 2**64], "BOOL", "object"),
    ],
)
def test_lists_that_are_not_all_ints_keep_the_dtype_refusal(
    value: Any, datatype: str, dtype: str
) -> None:
    with pytest.raises(InvalidInputError, match=f"values of dtype {dtype} cannot be cast"):
        converted(value, datatype)


@pytest.mark.parametrize(
    ("value", "datatype", "among"),
    [
        ([1, True], "INT32", "integers"),
        ((0, 1, False), "INT64", "integers"),
        ([[1, 2], [3, np.True_]], "UINT8", "integers"),
        ([1.5, True], "FP32", "numbers"),
        ([0.5, False], "FP64", "numbers"),
        ([1.5, True], "INT32", "integers"),
        ([np.array([1, 2]), np.array([True, False])], "INT32", "integers"),
    ],
)
def test_booleans_among_numbers_in_a_list_are_refused(
    value: Any, datatype: str, among: str
) -> None:
    """numpy reads True as 1 in a list of numbers; the mistake must not reach the model."""
    with pytest.raises(InvalidInputError, match=f"'X' is {datatype}: got booleans among {among}"):
        converted(value, datatype)


@pytest.mark.parametrize(
    ("value", "datatype"),
    [([1, 2], "INT32"), ([1.5, 2], "FP32"), ((3,), "INT8"), ([True, np.False_], "BOOL")],
)
def test_lists_without_booleans_or_of_booleans_only_where_they_belong_are_taken(
    value: Any, datatype: str
) -> None:
    assert converted(value, datatype).tolist() == np.asarray(value).tolist()


@pytest.mark.parametrize(
    "buffer",
    [bytearray(b"\x00\x00\xc0\x3f"), memoryview(b"\x00\x00\xc0\x3f")],
)
def test_a_bytes_like_buffer_is_read_as_bytes_not_one_number_a_byte(buffer: object) -> None:
    # numpy read it as uint8, and each byte went as one FP32 value: [0, 0, 192, 63].
    with pytest.raises(InvalidInputError, match=r"a bytes does not fit it \(raw bytes"):
        converted(buffer, "FP32")
    assert converted(buffer, "BYTES", ()).tolist() == b"\x00\x00\xc0\x3f"
    numbers = memoryview(np.array([1.5], np.float32))  # (a buffer of floats: its numbers)
    assert converted(numbers, "FP32").tolist() == [1.5]


@pytest.mark.parametrize(
    "value",
    [{1.0, 2.0}, (x for x in [1.0]), iter([1.0]), {"a": 1.0}, {"a": 1.0}.values()],
)
def test_values_without_order_or_shape_are_refused_naming_what_was_given(value: object) -> None:
    with pytest.raises(InvalidInputError, match=r"has no order or shape .* give a list"):
        converted(value, "FP32")


def test_a_refused_object_array_names_the_element_at_fault() -> None:
    # Every refusal read "values of dtype object cannot be cast to it without loss".
    with pytest.raises(InvalidInputError, match=r"at flat index 1: str '2'"):
        converted(np.array([1, "2"], dtype=object), "FP32")
    with pytest.raises(InvalidInputError, match=r"at flat index 1: NoneType None"):
        converted(np.array([1.5, None], dtype=object), "FP32")
    with pytest.raises(InvalidInputError, match="it holds missing values: NaN"):
        converted(np.array([1.0, np.nan]), "INT32")


def test_rows_that_are_lists_are_stacked_as_rows_that_are_arrays() -> None:
    rows = np.empty(2, dtype=object)
    rows[0], rows[1] = [1.0, 2.0], [3.0, 4.0]

    class Column:  # (a pandas column of lists: its __array__ gives such rows)
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
            return rows

    assert converted(Column(), "FP32", (-1, 2)).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_eight_bit_inputs_take_a_buffer_a_number_a_byte_as_numpy_reads_it() -> None:
    image = np.arange(6, dtype=np.uint8).reshape(2, 3)
    assert converted(memoryview(image), "UINT8", (2, 3)).tolist() == image.tolist()
    assert converted(bytearray(b"\x01\x02\x03"), "UINT8").tolist() == [1, 2, 3]
    released = memoryview(b"abc")
    released.release()
    for datatype in ("FP32", "UINT8"):
        with pytest.raises(InvalidInputError, match="cannot read the buffer given"):
            converted(released, datatype)


def test_rows_that_are_lists_keep_booleans_among_numbers_refused() -> None:
    rows = np.empty(2, dtype=object)
    rows[0], rows[1] = [True, 2], [3, 4]

    class Column:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
            return rows

    with pytest.raises(InvalidInputError, match="list"):
        converted(Column(), "INT32", (-1, 2))


def test_a_bool_input_names_the_element_that_is_not_a_bool() -> None:
    with pytest.raises(InvalidInputError, match=r"at flat index 1: int 1"):
        converted(np.array([True, 1], dtype=object), "BOOL")


@pytest.mark.parametrize("text", ["x" * 1100, b"x" * 1100])
def test_a_view_of_one_long_string_too_large_to_send_is_refused_before_any_copy(
    text: str | bytes,
) -> None:
    # 4 KB of memory: the size check counted 4 bytes an element, so all 2**21 strings
    # were made Python objects and encoded (7 GB) before the request's size refused them.
    spec = TensorSpec(name="T", datatype="BYTES", shape=(-1,))
    view = np.broadcast_to(np.array(text), (2**21,))
    with pytest.raises(InvalidInputError, match=r"input 'T': 2097152 strings .* at least"):
        to_array(view, spec, "m")
    short = np.broadcast_to(np.array(text[:2]), (4,))
    assert to_array(short, spec, "m").tolist() == [text[:2]] * 4


def test_byte_buffers_in_a_list_are_bytes_elements() -> None:
    # numpy made each buffer a row of ints: "got int at flat index 0".
    spec = TensorSpec(name="S", datatype="BYTES", shape=(-1, -1))
    given = [["a", bytearray(b"b")], [memoryview(b"c"), b"d"]]
    assert to_array(given, spec, "m").tolist() == [["a", b"b"], [b"c", b"d"]]


def test_a_ragged_list_of_strings_is_refused_as_ragged() -> None:
    # It said "its elements must be str or bytes, got list at flat index 0".
    spec = TensorSpec(name="S", datatype="BYTES", shape=(-1, -1))
    with pytest.raises(InvalidInputError, match=r"input 'S': the nested lists given are ragged"):
        to_array([["a"], ["b", "c"]], spec, "m")


def test_a_broadcast_of_one_short_string_is_measured_once() -> None:
    # Every element was measured: half a billion of them took minutes and gigabytes.
    spec = TensorSpec(name="T", datatype="BYTES", shape=(-1,))
    view = np.broadcast_to(np.array("abcde"), (500_000_000,))
    with pytest.raises(InvalidInputError, match=r"take at least 4500000000 bytes"):
        to_array(view, spec, "m")


def test_bytes_lists_nested_deeper_than_any_array_are_refused_as_such() -> None:
    # A RecursionError escaped, looking for byte buffers in them.
    spec = TensorSpec(name="T", datatype="BYTES", shape=(-1,))
    nested: Any = [b"x"]
    for _ in range(1000):
        nested = [nested]
    with pytest.raises(InvalidInputError, match="nested deeper than an array's axes go"):
        to_array(nested, spec, "m")


# numpy 2's own text arrays

StringDType = getattr(np.dtypes, "StringDType", None)
needs_string_dtype = pytest.mark.skipif(StringDType is None, reason="numpy 2's StringDType")


@needs_string_dtype
def test_numpy_2_string_arrays_are_text() -> None:
    assert StringDType is not None
    text = np.array(["a", "b\u00e9"], dtype=StringDType())
    assert converted(text, "BYTES").tolist() == ["a", "b\u00e9"]
    # They were cast by truth into BOOL ("False" sent as True), and refused as BYTES.
    for numeric in ("BOOL", "INT32", "FP32"):
        with pytest.raises(InvalidInputError, match="cannot be cast to it without loss"):
            converted(np.array(["False", ""], dtype=StringDType()), numeric)
    missing = np.array(["a", None], dtype=StringDType(na_object=None))
    with pytest.raises(InvalidInputError, match="got NoneType at flat index 1"):
        converted(missing, "BYTES")


@needs_string_dtype
def test_numpy_2_string_arrays_to_a_server_that_declares_no_inputs() -> None:
    # Reading their datatype raised numpy's TypeError ("Cannot use DescrNewByteOrder").
    assert StringDType is not None
    spec = ModelSpec(name="m", inputs={}, outputs={}, max_batch_size=0, has_config=False)
    (tensor,) = prepare_inputs(spec, {"X": np.array(["a"], dtype=StringDType())}).tensors
    assert (tensor.datatype, tensor.array.tolist()) == ("BYTES", ["a"])


@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.0.0", reason="numpy 2: 64 axes")
def test_arrays_past_32_axes_are_checked_as_others() -> None:
    # numpy 2 makes arrays of up to 64 axes, whose .flat raised numpy's RuntimeError.
    from triton_sdk._result import data_size

    deep = (1,) * 40
    for value in (np.full(deep, 1e300), np.full(deep, 1e300).tolist()):
        with pytest.raises(InvalidInputError, match="1e\\+300 is outside its range"):
            converted(value, "FP32", (-1,) * 40)
    text = np.empty(deep, dtype=object)
    text[(0,) * 40] = b"ab"
    assert data_size(text) == 6
    from triton_sdk._display import preview

    assert preview(np.arange(2**20).reshape((2,) * 20 + (1,) * 44)) == "[0 1 2 3 ...]"
