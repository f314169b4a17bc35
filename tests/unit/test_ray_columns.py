"""How triton_sdk.ray reads a batch's columns (no Ray needed: the module imports none)."""

from __future__ import annotations

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.ray import _columns


def column_of(*rows: object) -> np.ndarray:  # type: ignore[type-arg]
    column = np.empty(len(rows), dtype=object)
    for index, row in enumerate(rows):
        column[index] = row
    return column


def test_rows_that_are_lists_of_bytes_keep_their_bytes() -> None:
    # numpy's stacking made fixed-width bytes: trailing NULs were dropped.
    (data,) = _columns(
        {"data": column_of([b"ab\x00", b"c"], [b"d", b"e\x00\x00"])}, ["data"]
    ).values()
    assert data.shape == (2, 2)
    assert data.tolist() == [[b"ab\x00", b"c"], [b"d", b"e\x00\x00"]]


def test_rows_that_mix_numbers_and_text_are_not_made_text() -> None:
    (data,) = _columns({"data": column_of([1, "a"], [2.5, "b"])}, ["data"]).values()
    assert data.dtype == object
    assert data.tolist() == [[1, "a"], [2.5, "b"]]  # (refused by a BYTES input's check)


def test_rows_that_are_lists_of_numbers_are_stacked() -> None:
    (data,) = _columns({"data": column_of([1.0, 2.0], [3.0, 4.0])}, ["data"]).values()
    assert data.dtype == np.float64
    assert data.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_a_missing_column_is_named() -> None:
    with pytest.raises(ts.InvalidInputError, match="no column 'x'"):
        _columns({"data": column_of([1.0])}, ["x"])
