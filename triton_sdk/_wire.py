"""The bytes a tensor travels as, with the last check before they leave the client.

A request whose declared shape disagrees with its data can crash a server (an HTTP
request declaring 2**40 elements takes tritonserver 2.51 down), so every payload is
measured against its shape here, with overflow-checked arithmetic, on both protocols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from ._dtypes import encode_bytes, numpy_dtype
from ._errors import InvalidInputError
from ._shaping import Tensor

__all__ = ["declared_count", "tensor_payload"]

MAX_ELEMENTS: Final = 2**63 - 1


def declared_count(shape: Sequence[int], name: str) -> int:
    """The element count a shape declares; refuses negative dims and int64 overflow."""
    count = 1
    for dim in shape:
        if dim < 0:
            raise InvalidInputError(f"input {name!r}: negative dimension in shape {tuple(shape)}")
        count *= dim
        if count > MAX_ELEMENTS:
            raise InvalidInputError(f"input {name!r}: shape {tuple(shape)} overflows int64")
    return count


def tensor_payload(tensor: Tensor) -> bytes | memoryview:
    """Little-endian raw data, or length-prefixed BYTES elements, checked against the shape."""
    array = tensor.array
    count = declared_count(array.shape, tensor.name)
    if tensor.datatype == "BYTES":
        items = array.reshape(-1).tolist()
        if len(items) != count:
            raise InvalidInputError(
                f"input {tensor.name!r}: shape {array.shape} declares {count} elements, "
                f"the data has {len(items)}"
            )
        try:
            return encode_bytes(items, tensor.name)
        except TypeError as exc:
            raise InvalidInputError(str(exc)) from exc
    dtype = numpy_dtype(tensor.datatype)
    if array.dtype.newbyteorder("=") != dtype:
        raise InvalidInputError(
            f"input {tensor.name!r} is {tensor.datatype} but its data is {array.dtype}"
        )
    little_endian = array.dtype.newbyteorder("<")
    if array.dtype != little_endian:
        array = array.astype(little_endian)
    payload = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
    if payload.nbytes != count * dtype.itemsize:
        raise InvalidInputError(
            f"input {tensor.name!r}: shape {array.shape} of {tensor.datatype} declares "
            f"{count * dtype.itemsize} bytes, the data has {payload.nbytes}"
        )
    return payload
