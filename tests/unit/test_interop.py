"""Inputs from other libraries: DLPack producers, pandas and pyarrow columns, tensors
that numpy cannot take (a clear InvalidInputError, not the library's own error)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk._shaping import to_array

SPEC = ts.TensorSpec(name="X", datatype="FP32", shape=(2,))


class DLPackOnly:
    """A producer with the DLPack protocol and no __array__ (as cupy or jax arrays on
    some devices, or a framework's CPU tensor type)."""

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self._array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()


class NeedsDetach:
    """What a torch tensor that requires grad does when numpy asks for it."""

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy()"
        )


def test_a_dlpack_producer_is_read_without_a_copy_when_it_can_be() -> None:
    source = np.arange(4, dtype=np.float32).reshape(2, 2)
    array = to_array(DLPackOnly(source), SPEC, "m")
    assert np.array_equal(array, source)
    assert np.shares_memory(array, source)


def test_a_tensor_that_needs_detach_says_so() -> None:
    with pytest.raises(ts.InvalidInputError, match=r"input 'X'.*call \.detach\(\)"):
        to_array(NeedsDetach(), SPEC, "m")


def test_a_pandas_column_of_arrays_is_one_batch() -> None:
    pd = pytest.importorskip("pandas")
    column = pd.Series([np.array([1, 2], np.float32), np.array([3, 4], np.float32)])
    array = to_array(column, SPEC, "m")
    assert array.shape == (2, 2)
    assert array.dtype == np.float32
    assert array.tolist() == [[1, 2], [3, 4]]


def test_a_pyarrow_array_is_read() -> None:
    pa = pytest.importorskip("pyarrow")
    array = to_array(
        pa.array([1.5, 2.5]), ts.TensorSpec(name="X", datatype="FP32", shape=(1,)), "m"
    )
    assert array.tolist() == [1.5, 2.5]
