"""Triton datatypes and numpy dtypes, and the wire format of BYTES tensors."""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import Any, Final, NoReturn, TypeAlias

import ml_dtypes
import numpy as np
import numpy.typing as npt

__all__ = [
    "BF16",
    "DATATYPES",
    "TEXT_KINDS",
    "config_type_to_datatype",
    "datatype_of",
    "decode_bytes",
    "encode_bytes",
    "encoded_payload",
    "numpy_dtype",
    "remember_encoding",
    "serialize_bytes",
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


TEXT_KINDS: Final = frozenset("USOT")
"""The dtype kinds of text arrays (str, bytes, object; T: numpy 2's StringDType)."""


def datatype_of(array: npt.NDArray[Any]) -> str:
    """The Triton datatype of a numpy array (text and bytes arrays are BYTES)."""
    if array.dtype.kind in TEXT_KINDS:
        return "BYTES"
    try:
        return _DATATYPE_OF[array.dtype.newbyteorder("=")]
    except (KeyError, TypeError):  # (TypeError: a new-style dtype has no byte order)
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
_PLACEHOLDER: Final = "\0\0\0\0"
"""Joins str elements, one per length prefix: UTF-8 makes NUL bytes of NUL chars only."""
_PLACEHOLDER_BYTES: Final = b"\0\0\0\0"
_VECTOR_MIN_COUNT: Final = 256
"""Fewer elements than this are encoded by a Python loop: numpy's calls would cost more."""
_VECTOR_MAX_SIZE: Final = 64
"""Elements longer than this on average are joined in Python: numpy's copies cost more."""


class EncodedBytes:
    """A BYTES tensor as it travels, and where each of its elements lies in it."""

    __slots__ = ("_offsets", "count", "payload")

    def __init__(
        self, payload: bytes, count: int, offsets: npt.NDArray[np.int64] | None = None
    ) -> None:
        self.payload = payload
        self.count = count
        self._offsets = offsets

    def offsets(self) -> npt.NDArray[np.int64]:
        """``count + 1`` offsets: element ``i`` (its length prefix, then its bytes) is
        ``payload[offsets[i]:offsets[i + 1]]``, so a run of elements is one slice.

        Read from the length prefixes the first time, if the encoder did not note them.
        """
        if self._offsets is None:
            offsets = [0] * (self.count + 1)
            unpack = _LENGTH.unpack_from
            end = 0
            for index in range(1, self.count + 1):
                end += 4 + unpack(self.payload, end)[0]
                offsets[index] = end
            self._offsets = np.array(offsets, dtype=np.int64)
        return self._offsets


def encode_bytes(items: Sequence[object], input_name: str) -> bytes:
    """Serialise BYTES elements: each one as a 4-byte little-endian length, then its bytes.

    ``str`` elements are encoded as UTF-8. Anything but ``str`` and ``bytes`` raises
    ``TypeError`` naming the input, so the caller can refuse the request before sending.
    """
    return serialize_bytes(items, input_name).payload


def serialize_bytes(items: Sequence[object], input_name: str) -> EncodedBytes:
    """:func:`encode_bytes`, noting where the elements lie in the payload.

    Many short elements (all ``str`` or all ``bytes``) are checked and encoded by C loops:
    ``str.join`` and ``map``, then numpy. Anything else takes one Python loop: a few
    elements, long ones, a mix of ``str`` and ``bytes``, ``str`` holding NUL, and a refused
    element, which the error names.
    """
    count = len(items)
    if count >= _VECTOR_MIN_COUNT:
        kind = _probe(items, count)
        if kind is str:
            text = _joined_text(items)
            if text is not None and len(text) <= (_VECTOR_MAX_SIZE + 4) * count:
                layout = _text_layout(text, count)
                if layout is not None:
                    return _with_prefixes(*layout, count, input_name)
        elif kind is bytes and set(map(type, items)) == {bytes}:
            lengths: list[int] = list(map(len, items))  # type: ignore[arg-type]
            if sum(lengths) <= _VECTOR_MAX_SIZE * count:
                return _with_prefixes(*_bytes_layout(items, lengths), count, input_name)
    return EncodedBytes(_encode_each(items, input_name), count)


def _encode_each(items: Sequence[object], input_name: str) -> bytes:
    """The elements encoded one by one: each checked, encoded, measured and prefixed."""
    parts: list[bytes] = [b""] * (2 * len(items))
    pack = _LENGTH.pack
    for index, item in enumerate(items):
        if type(item) is bytes:
            data = item
        elif type(item) is str:
            try:
                data = item.encode("utf-8")
            except UnicodeEncodeError:
                _refuse_surrogate(input_name, index)
        else:
            data = _element(item, index, input_name)
        if len(data) > _MAX_ELEMENT:
            _refuse_long(input_name, index)
        parts[2 * index] = pack(len(data))
        parts[2 * index + 1] = data
    return b"".join(parts)


def _element(item: object, index: int, input_name: str) -> bytes:
    """A subclass of ``str`` or ``bytes`` as plain bytes, or ``TypeError`` for the rest."""
    if isinstance(item, bytes):
        return bytes(item)  # its own bytes, whatever the subclass says
    if isinstance(item, str):
        try:
            return str.encode(item, "utf-8")
        except UnicodeEncodeError:
            _refuse_surrogate(input_name, index)
    raise TypeError(
        f"input {input_name!r} is BYTES: its elements must be str or bytes, "
        f"got {type(item).__name__} at flat index {index}"
    )


def _refuse_surrogate(input_name: str, index: int) -> NoReturn:
    raise TypeError(
        f"input {input_name!r}: the str at flat index {index} is not valid text "
        "(it has a lone surrogate, which UTF-8 cannot carry)"
    ) from None


def _refuse_long(input_name: str, index: int) -> NoReturn:
    raise TypeError(f"input {input_name!r}: element {index} is larger than 4 GiB")


def _probe(items: Sequence[object], count: int) -> type | None:
    """``str`` or ``bytes`` if about 16 elements spread over ``items`` are all short and of
    that type (then the vectorised encoders are worth trying), else None."""
    probe = items[:: max(1, count // 16)]
    kinds = set(map(type, probe))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is not str and kind is not bytes:
        return None
    if sum(map(len, probe)) > _VECTOR_MAX_SIZE * len(probe):  # type: ignore[arg-type]
        return None
    return kind


def _joined_text(items: Sequence[object]) -> str | None:
    """All elements joined by placeholders if they are all ``str``, else None."""
    try:
        return _PLACEHOLDER.join(items)  # type: ignore[arg-type]
    except TypeError:
        return None


_Layout: TypeAlias = tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]
"""A payload with room for the length prefixes (not yet written), and the offsets."""


def _text_layout(text: str, count: int) -> _Layout | None:
    """Placeholder-joined text without NUL and lone surrogates: encoded at once, and the
    placeholders found again in the bytes."""
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        return None  # a lone surrogate: the loop names its element
    out = np.empty(len(body) + 4, dtype=np.uint8)
    out[:4] = 0
    out[4:] = np.frombuffer(body, dtype=np.uint8)
    zeros = np.flatnonzero(out == 0)
    if len(zeros) != 4 * count:
        return None  # an element holds NUL, so NUL bytes are not all placeholders
    offsets = np.empty(count + 1, dtype=np.int64)
    offsets[:-1] = zeros[::4]
    offsets[-1] = len(out)
    return out, offsets


def _bytes_layout(elements: Sequence[object], lengths: list[int]) -> _Layout:
    """``bytes`` elements joined by placeholders; their lengths give the offsets."""
    body = _PLACEHOLDER_BYTES.join(elements)  # type: ignore[arg-type]  # all bytes
    out = np.empty(len(body) + 4, dtype=np.uint8)
    out[4:] = np.frombuffer(body, dtype=np.uint8)
    # struct turns a list of ints into an array faster than numpy does
    sizes = np.frombuffer(struct.pack(f"<{len(lengths)}Q", *lengths), dtype="<u8")
    offsets = np.empty(len(lengths) + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(sizes + 4, out=offsets[1:])
    return out, offsets


def _with_prefixes(
    out: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], count: int, input_name: str
) -> EncodedBytes:
    """Write the length prefixes into a layout's placeholders."""
    lengths = np.diff(offsets) - 4
    if int(lengths.max()) > _MAX_ELEMENT:
        _refuse_long(input_name, int(np.flatnonzero(lengths > _MAX_ELEMENT)[0]))
    starts = offsets[:-1]
    prefixes = lengths.astype("<u4").view(np.uint8).reshape(count, 4)
    for byte in range(4):
        out[starts + byte] = prefixes[:, byte]
    return EncodedBytes(out.tobytes(), count, offsets)


_ENCODED: dict[int, tuple[weakref.ref[npt.NDArray[Any]], EncodedBytes]] = {}
"""id(array) -> (the array, its encoding): what shaping checked and encoded, for the wire."""


def remember_encoding(array: npt.NDArray[Any], encoded: EncodedBytes) -> None:
    """Keep ``encoded`` (the BYTES elements of ``array`` in C order) for :func:`encoded_payload`.

    ``array`` must not be changed afterwards; the entry goes when it does. Only an array
    that owns its data in C order is remembered (views of it are recognised by their base).
    """
    if array.base is not None or not array.flags.c_contiguous:
        return
    key = id(array)

    def forget(_: object) -> None:
        _ENCODED.pop(key, None)

    _ENCODED[key] = (weakref.ref(array, forget), encoded)


def encoded_payload(array: npt.NDArray[Any]) -> bytes | None:
    """The payload of ``array`` if it is, or is a C-contiguous view into, a remembered array.

    Reshaped arrays and row slices (batches split into chunks) are such views; anything
    else (a copy, a concatenation, a strided view) gives None and is encoded afresh.
    """
    entry = _ENCODED.get(id(array))
    owner = array
    if entry is None and array.base is not None:
        owner = array.base
        entry = _ENCODED.get(id(owner))
    if entry is None or entry[0]() is not owner:
        return None
    encoded = entry[1]
    size = array.size
    if owner is array:
        return encoded.payload
    if size == 0:
        return b""
    if not array.flags.c_contiguous:
        return None
    start, remainder = divmod(
        array.__array_interface__["data"][0] - owner.__array_interface__["data"][0],
        owner.itemsize,
    )
    if remainder or start < 0 or start + size > owner.size:
        return None
    if size == owner.size:
        return encoded.payload
    offsets = encoded.offsets()
    return encoded.payload[offsets[start] : offsets[start + size]]


def decode_bytes(buffer: bytes | memoryview, count: int) -> npt.NDArray[np.object_]:
    """Parse ``count`` length-prefixed BYTES elements into a flat object array of ``bytes``."""
    data = buffer if type(buffer) is bytes else bytes(buffer)  # one copy: slices are bytes
    if 4 * count > len(data):  # not even the length prefixes: before allocating for count
        _raise_malformed(data, count)
    elements = _split_uniform(data, count) or _split(data, count)
    if elements is None:
        _raise_malformed(data, count)
    if count >= _VECTOR_MIN_COUNT // 4:
        return np.fromiter(elements, dtype=np.object_, count=count)
    out = np.empty(count, dtype=np.object_)  # a few: cheaper than fromiter
    out[:] = elements
    return out


def _split_uniform(data: bytes, count: int) -> list[bytes] | None:
    """The elements when they all have the same length, read by numpy; else None."""
    if count < _VECTOR_MIN_COUNT // 4 or len(data) < 4:
        return None  # a few: numpy's calls would cost more than the loop
    (length,) = _LENGTH.unpack_from(data, 0)
    if len(data) != count * (length + 4):
        return None
    prefixes: npt.NDArray[np.uint32] = np.ndarray(
        (count,), dtype="<u4", buffer=data, strides=(length + 4,)
    )
    if not (prefixes == length).all():
        return None
    if length == 0:
        return [b""] * count
    records = np.frombuffer(data, dtype=np.dtype([("n", "<u4"), ("data", f"V{length}")]))
    elements: list[bytes] = records["data"].tolist()
    return elements


def _split(data: bytes, count: int) -> list[bytes] | None:
    """The elements, one by one; None if the buffer is malformed (checked after the loop)."""
    elements: list[bytes] = [b""] * count
    unpack = _LENGTH.unpack_from
    end = 0
    try:
        for index in range(count):
            start = end + 4
            end = start + unpack(data, end)[0]
            elements[index] = data[start:end]
    except struct.error:  # a length prefix past the end
        return None
    return elements if end == len(data) else None


def _raise_malformed(data: bytes, count: int) -> NoReturn:
    """Raise ``ValueError`` saying where a malformed BYTES buffer goes wrong."""
    offset = 0
    end = len(data)
    for index in range(count):
        if offset + 4 > end:
            raise ValueError(f"BYTES tensor truncated: element {index} of {count} missing")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        if offset + length > end:
            raise ValueError(f"BYTES tensor truncated inside element {index} of {count}")
        offset += length
    raise ValueError(f"BYTES tensor has {end - offset} bytes after its {count} elements")
