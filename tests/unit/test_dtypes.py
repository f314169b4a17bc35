"""Triton datatypes, numpy dtypes and the BYTES wire format."""

from __future__ import annotations

import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

from triton_sdk import TensorSpec
from triton_sdk._dtypes import (
    DATATYPES,
    config_type_to_datatype,
    decode_bytes,
    encode_bytes,
    numpy_dtype,
    wire_dtype,
)

ALL_DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
]


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("BOOL", np.bool_),
        ("UINT8", np.uint8),
        ("UINT16", np.uint16),
        ("UINT32", np.uint32),
        ("UINT64", np.uint64),
        ("INT8", np.int8),
        ("INT16", np.int16),
        ("INT32", np.int32),
        ("INT64", np.int64),
        ("FP16", np.float16),
        ("FP32", np.float32),
        ("FP64", np.float64),
        ("BYTES", np.object_),
        ("BF16", ml_dtypes.bfloat16),
    ],
)
def test_datatype_table(datatype: str, dtype: Any) -> None:
    assert DATATYPES[datatype] == np.dtype(dtype)
    assert numpy_dtype(datatype) == np.dtype(dtype)
    assert TensorSpec(name="x", datatype=datatype, shape=(1,)).dtype == np.dtype(dtype)


def test_table_covers_every_triton_datatype() -> None:
    assert sorted(DATATYPES) == sorted(ALL_DATATYPES)


@pytest.mark.parametrize("datatype", sorted(set(ALL_DATATYPES) - {"BF16", "BYTES"}))
def test_table_agrees_with_tritonclient(datatype: str) -> None:
    assert numpy_dtype(datatype) == np.dtype(triton_to_np_dtype(datatype))


def test_unknown_datatype() -> None:
    with pytest.raises(ValueError, match="FP8"):
        numpy_dtype("FP8")


@pytest.mark.parametrize(
    ("datatype", "value"),
    [("INT32", -7), ("UINT16", 513), ("INT64", -(2**40)), ("FP32", 1.5), ("FP64", -2.25)],
)
def test_wire_dtype_reads_little_endian_bytes(datatype: str, value: float) -> None:
    code = {"INT32": "i", "UINT16": "H", "INT64": "q", "FP32": "f", "FP64": "d"}[datatype]
    raw = struct.pack("<" + code, value)
    decoded = np.frombuffer(raw, dtype=wire_dtype(datatype))
    assert decoded.tolist() == [value]
    assert decoded.astype(numpy_dtype(datatype)).dtype == numpy_dtype(datatype)


@pytest.mark.parametrize(
    ("config_type", "datatype"),
    [
        ("TYPE_FP32", "FP32"),
        ("TYPE_FP16", "FP16"),
        ("TYPE_BF16", "BF16"),
        ("TYPE_INT64", "INT64"),
        ("TYPE_UINT8", "UINT8"),
        ("TYPE_BOOL", "BOOL"),
        ("TYPE_STRING", "BYTES"),
    ],
)
def test_config_type_to_datatype(config_type: str, datatype: str) -> None:
    assert config_type_to_datatype(config_type) == datatype


BYTES_CASES = [
    pytest.param([b"hello", b"world"], id="ascii"),
    pytest.param([b""], id="one-empty"),
    pytest.param([b"", b"", b"x", b""], id="empties"),
    pytest.param([b"\x00", b"a\x00b", b"\x00\x00"], id="nul"),
    pytest.param(["안녕하세요".encode(), "é".encode(), "🙂".encode()], id="utf8"),
    pytest.param([bytes(range(256))], id="all-byte-values"),
    pytest.param([b"x" * 70_000], id="long"),
]


@pytest.mark.parametrize("items", BYTES_CASES)
def test_bytes_round_trip(items: list[bytes]) -> None:
    encoded = encode_bytes(items, "IN")
    decoded = decode_bytes(encoded, len(items))
    assert decoded.dtype == np.object_
    assert decoded.shape == (len(items),)
    assert decoded.tolist() == items
    assert all(type(item) is bytes for item in decoded.tolist())


@pytest.mark.parametrize("items", BYTES_CASES)
def test_bytes_match_tritonclient(items: list[bytes]) -> None:
    tensor = np.empty(len(items), dtype=np.object_)
    tensor[:] = items
    assert encode_bytes(items, "IN") == serialize_byte_tensor(tensor).item()


def test_str_elements_are_utf8_like_tritonclient() -> None:
    items = ["안녕하세요", "hello", "", "a\x00b"]
    encoded = encode_bytes(items, "IN")
    assert decode_bytes(encoded, len(items)).tolist() == [item.encode() for item in items]
    assert encoded == serialize_byte_tensor(np.array(items, dtype=np.object_)).item()


def test_encoding_layout() -> None:
    assert encode_bytes([b"ab", "é", b""], "IN") == (
        b"\x02\x00\x00\x00ab" + b"\x02\x00\x00\x00\xc3\xa9" + b"\x00\x00\x00\x00"
    )


def test_empty_tensor() -> None:
    assert encode_bytes([], "IN") == b""
    assert decode_bytes(b"", 0).shape == (0,)


def test_decode_accepts_memoryview() -> None:
    encoded = encode_bytes([b"a", b"bc"], "IN")
    assert decode_bytes(memoryview(encoded), 2).tolist() == [b"a", b"bc"]


@pytest.mark.parametrize("value", [1, 1.5, None, np.float32(1.0), ["a"]])
def test_encode_refuses_non_text_elements(value: object) -> None:
    with pytest.raises(TypeError) as info:
        encode_bytes([b"ok", value], "TEXT")
    assert "'TEXT'" in str(info.value)


@pytest.mark.parametrize(
    ("buffer", "count"),
    [
        (b"\x05\x00\x00\x00abc", 1),  # element shorter than its length
        (b"\x01\x00", 1),  # length prefix cut
        (b"\x01\x00\x00\x00a", 2),  # second element missing
        (b"", 1),
        (b"\x01\x00\x00\x00ab", 1),  # bytes after the last element
    ],
)
def test_decode_refuses_malformed_buffers(buffer: bytes, count: int) -> None:
    with pytest.raises(ValueError, match="BYTES"):
        decode_bytes(buffer, count)
