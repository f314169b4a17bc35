"""BYTES tensors: the SDK's wire bytes are tritonclient's, element for element.

The inputs go through the public path (shaping, then the wire payload) and are compared
with ``tritonclient.utils.serialize_byte_tensor``; outputs are compared with
``deserialize_bytes_tensor``. Every refusal of the old two-pass path still happens.
"""

from __future__ import annotations

import gc
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from triton_sdk import InvalidInputError, ModelSpec, TensorSpec, _dtypes
from triton_sdk._dtypes import decode_bytes, encode_bytes, encoded_payload, serialize_bytes
from triton_sdk._result import decode_output
from triton_sdk._shaping import Tensor, prepare_inputs, split_batch
from triton_sdk._wire import tensor_bytes, tensor_payload

Array = np.ndarray[Any, Any]

MANY = _dtypes._VECTOR_MIN_COUNT
"""From this many elements on, the encoders try their vectorised paths."""

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Elements: what tritonclient and the SDK both take


SPECIAL_TEXT = ["", "\x00", "a\x00b", "\x00\x00\x00\x00", "é", "안녕하세요", "🙂", "\U0010ffff"]
SPECIAL_BYTES = [b"", b"\x00", b"\x00\x00\x00\x00", b"\xff\xfe", bytes(range(256))]

texts = st.one_of(
    st.text(max_size=12),  # any code point but lone surrogates, NUL included
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12),
    st.sampled_from(SPECIAL_TEXT),
)
binaries = st.one_of(st.binary(max_size=12), st.sampled_from(SPECIAL_BYTES))
long_elements = st.one_of(
    st.builds(lambda n: b"\x00x" * n, st.integers(30_000, 40_000)),
    st.builds(lambda n: "é🙂" * n, st.integers(10_000, 20_000)),
)
elements = st.one_of(texts, binaries)


@st.composite
def element_lists(draw: st.DrawFn, size: int | None = None) -> list[object]:
    """All str, all bytes, or mixed; now and then a long element."""
    kind = draw(st.sampled_from(["text", "text-without-nul", "bytes", "mixed"]))
    base = {
        "text": texts,
        "text-without-nul": texts.filter(lambda text: "\x00" not in text),
        "bytes": binaries,
        "mixed": elements,
    }[kind]
    if size is None:  # a few, or enough for the vectorised encoders
        size = draw(st.one_of(st.integers(0, 40), st.integers(MANY, MANY + 150)))
    items: list[object] = draw(st.lists(base, min_size=size, max_size=size))
    if items and draw(st.integers(0, 9)) == 0:
        long = draw(long_elements)
        if kind != "mixed" and not isinstance(long, type(items[0])):
            long = _other_kind(long)
        items[draw(st.integers(0, len(items) - 1))] = long
    return items


def _other_kind(value: str | bytes) -> str | bytes:
    return value.encode() if isinstance(value, str) else value.decode("latin-1")


@st.composite
def object_arrays(draw: st.DrawFn) -> Array:
    """Object arrays of str/bytes of any shape, 0-d and 0-size included."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=7))
    size = int(np.prod(shape, dtype=np.int64))
    items = draw(element_lists(size))
    return object_array(items, shape)


def object_array(items: list[Any], shape: tuple[int, ...] | None = None) -> Array:
    array: Array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array.reshape(shape if shape is not None else (len(items),))


def tritonclient_bytes(array: Array) -> bytes:
    """What tritonclient's ``set_data_from_numpy`` puts in the request for ``array``."""
    serialized = serialize_byte_tensor(array)
    return serialized.item() if serialized.size > 0 else b""


def bytes_model(
    ndim: int, max_batch_size: int = 0, dims: tuple[int, ...] | None = None
) -> ModelSpec:
    dims = (-1,) * ndim if dims is None else dims
    return ModelSpec(
        name="m",
        max_batch_size=max_batch_size,
        inputs={"X": TensorSpec(name="X", datatype="BYTES", shape=dims)},
        outputs={"Y": TensorSpec(name="Y", datatype="BYTES", shape=(-1,))},
    )


def shaped(value: object, ndim: int, dims: tuple[int, ...] | None = None) -> Tensor:
    return prepare_inputs(bytes_model(ndim, dims=dims), {"X": value}).tensors[0]


# Encoding: the public path against tritonclient


@PROPERTY_SETTINGS
@given(object_arrays())
def test_shaped_input_is_sent_as_tritonclient_sends_it(array: Array) -> None:
    expected = tritonclient_bytes(array)
    tensor = shaped(array, array.ndim)
    assert tensor.array.shape == array.shape
    assert tensor.array.tolist() == array.tolist()  # the elements stay as given
    assert bytes(tensor_payload(tensor)) == expected
    assert tensor_bytes(tensor) == expected


@PROPERTY_SETTINGS
@given(element_lists())
def test_lists_are_sent_as_tritonclient_sends_them(items: list[object]) -> None:
    expected = tritonclient_bytes(object_array(items))
    assert tensor_bytes(shaped(items, 1)) == expected
    assert encode_bytes(items, "X") == expected


@PROPERTY_SETTINGS
@given(element_lists())
def test_offsets_frame_each_element(items: list[object]) -> None:
    encoded = serialize_bytes(items, "X")
    offsets = encoded.offsets().tolist()
    assert len(offsets) == len(items) + 1
    assert offsets[0] == 0
    assert offsets[-1] == len(encoded.payload)
    for index, item in enumerate(items):
        one = encoded.payload[offsets[index] : offsets[index + 1]]
        assert one == encode_bytes([item], "X")


@PROPERTY_SETTINGS
@given(element_lists(), st.integers(1, 50), st.integers(1, 3))
def test_split_batches_send_their_own_rows(items: list[object], chunk: int, width: int) -> None:
    rows = len(items) // width
    if rows == 0:
        return
    array = object_array(items[: rows * width], (rows, width))
    spec = bytes_model(1, max_batch_size=chunk)
    tensors = prepare_inputs(spec, {"X": array}).tensors
    payloads = [tensor_bytes(tensor) for (tensor,) in split_batch(tensors, chunk)]
    assert b"".join(payloads) == tritonclient_bytes(array)  # in order, none lost
    expected = array.reshape(-1).tolist()
    start = 0
    for payload in payloads:  # each chunk holds its own rows, framed
        count = min(chunk, rows - start // width) * width
        decoded = decode_bytes(payload, count).tolist()
        assert decoded == [_as_bytes(item) for item in expected[start : start + count]]
        start += count


def _as_bytes(item: object) -> bytes:
    return item.encode() if isinstance(item, str) else item  # type: ignore[return-value]


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a[1:3],
        lambda a: a[:, 1],  # not contiguous
        lambda a: a[::-1],
        lambda a: a.T,
        lambda a: a.reshape(-1)[2:9],
        lambda a: a[np.newaxis],
        lambda a: a[2:2],
        lambda a: np.concatenate([a, a]),
        lambda a: a.copy(),
    ],
    ids=[
        "rows",
        "column",
        "reversed",
        "transposed",
        "flat-run",
        "newaxis",
        "empty",
        "joined",
        "copy",
    ],
)
def test_views_of_a_shaped_array_send_their_own_elements(view: Any) -> None:
    items = ["a", b"bc", "", "é\x00", b"\x00", "🙂", "x" * 300, b"y", "z", "w", "v", "u"]
    tensor = shaped(object_array(items, (4, 3)), 2)
    part: Array = view(tensor.array)
    assert tensor_bytes(Tensor("X", "BYTES", part)) == tritonclient_bytes(part)


def test_the_shaped_payload_is_reused_and_forgotten_with_its_array() -> None:
    tensor = shaped(["a", "b"], 1)
    assert encoded_payload(tensor.array) == tritonclient_bytes(object_array(["a", "b"]))
    key = id(tensor.array)
    assert key in _dtypes._ENCODED
    del tensor
    gc.collect()
    assert key not in _dtypes._ENCODED


def test_what_is_sent_is_what_was_checked() -> None:
    """Shaping copies the caller's array, so changing it afterwards changes nothing sent."""
    mine = object_array(["a", "b"])
    tensor = shaped(mine, 1)
    mine[0] = 3
    assert tensor_bytes(tensor) == tritonclient_bytes(object_array(["a", "b"]))


@pytest.mark.parametrize(
    "value",
    [
        np.array(["a", "é", "", "x\x00y"]),
        np.array([b"ab", b"\x00c", b""]),
        np.array([["a", "bc"], ["d", "e"]], order="F"),
        np.array(["a", "b", "c", "d"])[::2],
    ],
    ids=["unicode-array", "bytes-array", "fortran-order", "strided"],
)
def test_numpy_text_arrays_are_sent_as_their_elements(value: Array) -> None:
    as_objects = value.astype(np.object_)
    assert tensor_bytes(shaped(value, value.ndim)) == tritonclient_bytes(as_objects)


def test_scalars_are_one_element() -> None:
    assert tensor_bytes(shaped("é", 1, dims=(1,))) == b"\x02\x00\x00\x00\xc3\xa9"
    assert tensor_bytes(shaped(b"\x00", 0, dims=())) == b"\x01\x00\x00\x00\x00"


# Decoding against tritonclient


@st.composite
def uniform_lists(draw: st.DrawFn) -> list[bytes]:
    """Elements of one length: the decoder's numpy path (from MANY // 4 of them)."""
    length = draw(st.integers(0, 20))
    count = draw(st.one_of(st.integers(0, 10), st.integers(MANY // 4, MANY)))
    return draw(
        st.lists(st.binary(min_size=length, max_size=length), min_size=count, max_size=count)
    )


@PROPERTY_SETTINGS
@given(st.one_of(element_lists(), uniform_lists()))
def test_decoding_matches_tritonclient(items: list[object]) -> None:
    payload = tritonclient_bytes(object_array(items))
    expected = deserialize_bytes_tensor(payload).tolist()
    for buffer in (payload, memoryview(payload), memoryview(b"??" + payload)[2:]):
        decoded = decode_bytes(buffer, len(items))
        assert decoded.dtype == np.object_
        assert decoded.shape == (len(items),)
        assert decoded.tolist() == expected
        assert all(type(element) is bytes for element in decoded.tolist())


@PROPERTY_SETTINGS
@given(object_arrays())
def test_decoded_outputs_take_their_shape(array: Array) -> None:
    payload = tritonclient_bytes(array)
    decoded = decode_output("Y", "BYTES", array.shape, payload)
    assert decoded.shape == array.shape
    expected = [_as_bytes(item) for item in array.flat]
    assert decoded.reshape(-1).tolist() == expected


@PROPERTY_SETTINGS
@given(st.one_of(element_lists(), uniform_lists()), st.data())
def test_cut_or_padded_buffers_are_refused(items: list[object], data: st.DataObject) -> None:
    payload = tritonclient_bytes(object_array(items))
    if payload:
        cut = data.draw(st.integers(0, len(payload) - 1))
        with pytest.raises(ValueError, match="BYTES tensor"):
            decode_bytes(payload[:cut], len(items))
    extra = data.draw(st.binary(min_size=1, max_size=8))
    with pytest.raises(ValueError, match="BYTES tensor"):
        decode_bytes(payload + extra, len(items))


@pytest.mark.parametrize(
    ("buffer", "count", "message"),
    [
        (b"\x02\x00\x00\x00ab\x02\x00\x00\x00c", 2, "truncated inside element 1 of 2"),
        (b"\x02\x00\x00\x00ab\x02\x00", 2, "truncated: element 1 of 2 missing"),
        (b"\x02\x00\x00\x00ab\x02\x00\x00\x00cd", 1, "6 bytes after its 1 elements"),
        # one length: the numpy path must notice the prefix that differs
        (b"\x01\x00\x00\x00a\x02\x00\x00\x00b", 2, "truncated inside element 1 of 2"),
        (b"\x01\x00\x00\x00a", 0, "5 bytes after its 0 elements"),
        (b"\xff\xff\xff\xff", 1, "truncated inside element 0 of 1"),
        (b"\x01\x00\x00\x00a", 2**50, "element 1 of 1125899906842624 missing"),  # no 2**50 list
    ],
)
def test_malformed_buffers_say_where(buffer: bytes, count: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_bytes(buffer, count)


def test_decoding_nothing() -> None:
    assert decode_bytes(b"", 0).shape == (0,)
    assert decode_bytes(b"", 0).dtype == np.object_


# Refusals: each one still happens, once, naming the input and the element


@pytest.mark.parametrize(
    ("value", "index", "got"),
    [
        (["a", 3], 1, "int"),
        ([b"a", b"b", None], 2, "NoneType"),
        ([1.5], 0, "float"),
        ([b"a", memoryview(np.arange(2, dtype=np.int32))], 1, "memoryview"),  # (not bytes)
        (object_array(["a", "b", "c", np.float32(1)], (2, 2)), 3, "float32"),
        (object_array([b"x"] * 5 + [["nested"]]), 5, "list"),
    ],
)
def test_elements_other_than_str_or_bytes_are_refused(value: Any, index: int, got: str) -> None:
    ndim = value.ndim if isinstance(value, np.ndarray) else 1
    with pytest.raises(InvalidInputError) as info:
        shaped(value, ndim)
    text = str(info.value)
    assert "'X'" in text
    assert f"got {got} at flat index {index}" in text


@pytest.mark.parametrize(
    ("value", "index"),
    [
        (["ok", "\ud800"], 1),
        (["\udfff"], 0),
        ([b"ok", "a\ud83d"], 1),  # half an emoji
        (object_array(["a", "b", "c", "x\udc00y"], (2, 2)), 3),
        (["\x00", "b", "c\ud800"], 2),  # NUL takes another path to the same refusal
    ],
)
def test_lone_surrogates_are_refused(value: Any, index: int) -> None:
    ndim = value.ndim if isinstance(value, np.ndarray) else 1
    with pytest.raises(InvalidInputError) as info:
        shaped(value, ndim)
    text = str(info.value)
    assert "'X'" in text
    assert f"str at flat index {index} is not valid text" in text
    assert "lone surrogate" in text


def test_the_first_bad_element_is_named() -> None:
    with pytest.raises(InvalidInputError, match=r"flat index 1 .*surrogate"):
        shaped(["a", "\ud800", 3], 1)
    with pytest.raises(InvalidInputError, match="got int at flat index 1"):
        shaped(["a", 3, "\ud800"], 1)


def test_refusals_name_the_model() -> None:
    with pytest.raises(InvalidInputError) as info:
        shaped(["a", 3], 1)
    assert info.value.model == "m"


def test_numbers_are_not_text() -> None:
    with pytest.raises(InvalidInputError, match="takes str or bytes, got an array of int64"):
        shaped(np.array([1, 2], dtype=np.int64), 1)


LONG_AT_1 = [
    [b"ab", b"abcd", b"abc"],
    ["ab", "abcd", "abc"],
    ["ab", b"abcd", "abc"],
    ["ab", "a\x00cd"],
]


@pytest.mark.parametrize(
    ("items", "index"),
    [
        *((items, 1) for items in LONG_AT_1),
        ([b"ab"] * MANY + [b"abcd"], MANY),  # many: the vectorised paths
        (["ab"] * MANY + ["abcd", "abcde"], MANY),
        (["é"] * MANY + ["éé"], MANY),
    ],
    ids=["bytes", "text", "mixed", "text-with-nul", "many-bytes", "many-text", "many-utf8"],
)
def test_elements_too_long_for_their_prefix_are_refused(
    items: list[object], index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2**32 - 1 bytes is the most a length prefix holds (lowered here to 3)."""
    monkeypatch.setattr(_dtypes, "_MAX_ELEMENT", 3)
    message = f"'X': element {index} is larger than 4 GiB"
    with pytest.raises(InvalidInputError, match=message):
        shaped(items, 1)
    with pytest.raises(TypeError, match=message):
        encode_bytes(items, "X")


def test_subclasses_of_str_and_bytes_are_their_contents() -> None:
    class Lying(bytes):
        def __len__(self) -> int:
            return 2**32

    items = [np.str_("é"), np.bytes_(b"a\x00"), Lying(b"xyz"), "b"]
    expected = tritonclient_bytes(object_array(["é", b"a\x00", b"xyz", "b"]))
    assert tensor_bytes(shaped(object_array(items), 1)) == expected
    assert encode_bytes([np.str_("é"), np.str_("")], "X") == b"\x02\x00\x00\x00\xc3\xa9" + bytes(4)


@pytest.mark.parametrize(
    "array",
    [object_array(["a", 3]), object_array(["a", "\ud800"]), np.array([1, 2], dtype=np.int64)],
    ids=["int", "surrogate", "int-array"],
)
def test_the_wire_refuses_tensors_that_were_not_shaped(array: Array) -> None:
    with pytest.raises(InvalidInputError, match="'X'"):
        tensor_bytes(Tensor("X", "BYTES", array))


def test_the_length_prefix_is_little_endian() -> None:
    payload = encode_bytes(["x" * 258], "X")
    assert struct.unpack_from("<I", payload)[0] == 258
    assert payload[:4] == b"\x02\x01\x00\x00"
