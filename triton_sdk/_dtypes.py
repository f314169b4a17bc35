"""Triton datatypes and numpy dtypes, and the wire format of BYTES tensors."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Final

import ml_dtypes
import numpy as np
import numpy.typing as npt

__all__ = [
    "BF16",
    "DATATYPES",
    "config_type_to_datatype",
    "datatype_of",
    "decode_bytes",
    "encode_bytes",
    "numpy_dtype",
]

BF16: Final = np.dtype(ml_dtypes.bfloat16)

DATATYPES: Final[dict[str, np.dtype[Any]]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": BF16,
}
"""Triton datatype name -> numpy dtype (native byte order; the wire is little-endian)."""

_LITTLE_ENDIAN_WIRE: Final = {
    name: dtype.newbyteorder("<") if dtype.kind in "iuf" else dtype
    for name, dtype in DATATYPES.items()
}


_DATATYPE_OF: Final = {dtype: name for name, dtype in DATATYPES.items()}


def datatype_of(array: npt.NDArray[Any]) -> str:
    """The Triton datatype of a numpy array (text and bytes arrays are BYTES)."""
    if array.dtype.kind in "OUS":
        return "BYTES"
    try:
        return _DATATYPE_OF[array.dtype.newbyteorder("=")]
    except KeyError:
        raise ValueError(f"no Triton datatype for numpy dtype {array.dtype}") from None


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of a Triton datatype (``np.object_`` for BYTES)."""
    try:
        return DATATYPES[datatype]
    except KeyError:
        raise ValueError(f"unknown Triton datatype {datatype!r}") from None


def wire_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype that reads this datatype's raw little-endian bytes."""
    return _LITTLE_ENDIAN_WIRE[datatype]


def config_type_to_datatype(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES`` (the model config's names)."""
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


_LENGTH: Final = struct.Struct("<I")
_MAX_ELEMENT: Final = 2**32 - 1


def encode_bytes(items: Sequence[object], input_name: str) -> bytes:
    """Serialise BYTES elements: each one as a 4-byte little-endian length, then its bytes.

    ``str`` elements are encoded as UTF-8. Anything but ``str`` and ``bytes`` raises
    ``TypeError`` naming the input, so the caller can refuse the request before sending.
    """
    parts: list[bytes] = [b""] * (2 * len(items))
    for index, item in enumerate(items):
        if isinstance(item, bytes):
            data = item
        elif isinstance(item, str):
            try:
                data = item.encode("utf-8")
            except UnicodeEncodeError:
                raise TypeError(
                    f"input {input_name!r}: the str at flat index {index} is not valid text "
                    "(it has a lone surrogate, which UTF-8 cannot carry)"
                ) from None
        else:
            raise TypeError(
                f"input {input_name!r} is BYTES: its elements must be str or bytes, "
                f"got {type(item).__name__} at flat index {index}"
            )
        if len(data) > _MAX_ELEMENT:
            raise TypeError(f"input {input_name!r}: element {index} is larger than 4 GiB")
        parts[2 * index] = _LENGTH.pack(len(data))
        parts[2 * index + 1] = data
    return b"".join(parts)


def decode_bytes(buffer: bytes | memoryview, count: int) -> npt.NDArray[np.object_]:
    """Parse ``count`` length-prefixed BYTES elements into a flat object array of ``bytes``."""
    view = memoryview(buffer)
    out = np.empty(count, dtype=np.object_)
    unpack = _LENGTH.unpack_from
    offset = 0
    end = len(view)
    for index in range(count):
        if offset + 4 > end:
            raise ValueError(f"BYTES tensor truncated: element {index} of {count} missing")
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > end:
            raise ValueError(f"BYTES tensor truncated inside element {index} of {count}")
        out[index] = bytes(view[offset : offset + length])
        offset += length
    if offset != end:
        raise ValueError(f"BYTES tensor has {end - offset} bytes after its {count} elements")
    return out
