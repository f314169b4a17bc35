"""The bytes a tensor travels as, with the last check before they leave the client.

A request whose declared shape disagrees with its data can crash a server (an HTTP
request declaring 2**40 elements takes tritonserver 2.51 down), so every payload is
measured against its shape here, with overflow-checked arithmetic, on both protocols.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ._dtypes import DATATYPES, encode_bytes, encoded_payload
from ._errors import InvalidInputError
from ._shaping import Tensor

if TYPE_CHECKING:
    from ._request import InferRequest

__all__ = ["declared_count", "payload_size", "tensor_bytes", "tensor_payload"]

MAX_ELEMENTS: Final = 2**63 - 1
_BIG_ENDIAN_HOST: Final = sys.byteorder == "big"


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


def payload_size(request: InferRequest) -> int:
    """About how many bytes the payloads of the request's inputs that go on the socket
    take, counted without making them: a BYTES tensor's encoded payload when shaping
    remembered it, else 8 bytes an element."""
    placement = request.shared_memory
    size = 0
    for tensor in request.inputs:
        if placement is not None and tensor.name in placement.inputs:
            continue
        array = tensor.array
        encoded = encoded_payload(array) if tensor.datatype == "BYTES" else None
        size += array.nbytes if encoded is None else len(encoded)
    return size


def _bytes_payload(tensor: Tensor) -> bytes:
    """The BYTES payload: the one shaping encoded when it checked the elements, or (for a
    tensor built otherwise, such as a batch joined from samples) checked and encoded here."""
    array = tensor.array
    count = declared_count(array.shape, tensor.name)
    payload = encoded_payload(array)
    if payload is not None:
        return payload
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


def _numeric_array(tensor: Tensor) -> tuple[np.ndarray[Any, Any], int]:
    """The array to send, of the input's dtype and little-endian, and its byte size."""
    array = tensor.array
    dtype = DATATYPES.get(tensor.datatype)
    if array.dtype != dtype and (dtype is None or array.dtype.newbyteorder("=") != dtype):
        raise InvalidInputError(
            f"input {tensor.name!r} is {tensor.datatype} but its data is {array.dtype}"
        )
    if array.dtype.byteorder == ">" or (_BIG_ENDIAN_HOST and array.dtype.byteorder == "="):
        array = array.astype(array.dtype.newbyteorder("<"))
    # numpy sizes are computed without overflow and never negative: the count the shape
    # declares is the array's size.
    return array, array.size * array.dtype.itemsize


def _check_size(tensor: Tensor, declared: int, actual: int) -> None:
    if declared != actual:
        raise InvalidInputError(
            f"input {tensor.name!r}: shape {tensor.array.shape} of {tensor.datatype} declares "
            f"{declared} bytes, the data has {actual}"
        )


def tensor_bytes(tensor: Tensor) -> bytes:
    """The payload as one ``bytes`` object (what protobuf needs), checked against the shape."""
    if tensor.datatype == "BYTES":
        return _bytes_payload(tensor)
    array, size = _numeric_array(tensor)
    payload = array.tobytes()
    _check_size(tensor, size, len(payload))
    return payload


def tensor_payload(tensor: Tensor) -> bytes | memoryview:
    """The payload without copying numeric data (for HTTP bodies), checked against the shape."""
    if tensor.datatype == "BYTES":
        return _bytes_payload(tensor)
    array, size = _numeric_array(tensor)
    payload = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
    _check_size(tensor, size, payload.nbytes)
    return payload
