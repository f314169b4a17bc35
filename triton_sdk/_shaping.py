"""Turning what the caller passes into tensors the model accepts, or refusing it.

Everything here is pure and runs before anything is sent: a request that leaves the
client always declares the shape and datatype of the data it carries.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping, MappingView, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final, NamedTuple, NoReturn, TypeAlias

import numpy as np
import numpy.typing as npt

from ._checks import numpy_number
from ._dtypes import BF16, DATATYPES, TEXT_KINDS, datatype_of, remember_encoding, serialize_bytes
from ._errors import InvalidInputError
from ._spec import ModelSpec, TensorSpec

__all__ = [
    "InputValue",
    "PreparedInputs",
    "Tensor",
    "prepare_inputs",
    "rows_of_numbers",
    "split_batch",
]

InputValue: TypeAlias = npt.ArrayLike
"""What an input accepts: numpy arrays, Python scalars, ``str``/``bytes``, nested lists.
Where inputs are given by name, ``None`` leaves an optional input out."""

Shape: TypeAlias = tuple[int, ...]


class Tensor(NamedTuple):
    """An input ready to send: its data already has the model's dtype and final shape."""

    name: str
    datatype: str
    array: np.ndarray[Any, Any]


class PreparedInputs(NamedTuple):
    tensors: list[Tensor]
    batch_size: int | None
    """The size of axis 0 for batched models; None for models without a batch axis."""


_NUMERIC: Final = {name: dtype for name, dtype in DATATYPES.items() if name != "BYTES"}
_INTEGER_KINDS: Final = frozenset("iu")
_MISSING: Final = object()
# The keyword options of the calls that take inputs by keyword: one that a call lacks
# lands among its inputs.
_OPTIONS_OF_OTHER_CALLS: Final = frozenset(
    {
        "outputs", "output", "top_k", "timeout", "parameters", "priority", "request_id",
        "retry", "headers", "shared_memory", "end",
    }
)  # fmt: skip


def prepare_inputs(
    spec: ModelSpec,
    values: Mapping[str, object],
    *,
    sample: bool = False,
    keywords: bool | AbstractSet[str] = True,
) -> PreparedInputs:
    """Check, cast and shape every input of a call, following the rules of the docs.

    ``sample=True`` reads each value as one sample (``infer_sample``): the batch axis is
    added here for batched models. ``keywords``: whether the values came as a call's
    keywords (or the names that did), where an unknown name may be an option of another
    call; one in a mapping is an option put among the inputs.
    """
    specs = spec.inputs
    if not isinstance(values, Mapping):
        raise InvalidInputError(
            f"inputs are given by name (a mapping or keywords), got {type(values).__name__}",
            model=spec.name,
        )
    if not specs and not spec.has_config and values:
        # (None leaves an input out: nothing declares the inputs to say it is optional)
        values = {name: value for name, value in values.items() if value is not None}
        specs, values = _undeclared(spec, values, sample)
    if not values.keys() <= specs.keys():
        _refuse_unknown(spec, sorted(set(values) - set(specs), key=repr), keywords)
    batched = spec.max_batch_size > 0
    tensors: list[Tensor] = []
    missing: list[str] = []
    batch_size: int | None = None
    batch_owner = ""
    for name, tensor_spec in specs.items():
        value = values.get(name, _MISSING)
        if value is _MISSING or value is None:  # (None: left out, as stubs take it)
            if tensor_spec.optional:
                continue
            if value is None:
                raise InvalidInputError(
                    f"input {name!r} of model {spec.name!r} is None; it is required "
                    "(only an optional input may be left out)",
                    model=spec.name,
                )
            missing.append(name)
            continue
        dims = tensor_spec.shape
        numeric = _NUMERIC.get(tensor_spec.datatype)
        if (
            numeric is not None
            and type(value) is np.ndarray
            and value.dtype == numeric
            and 0 < value.nbytes <= MAX_TENSOR_BYTES
        ):
            array = value  # the common case: nothing to cast, no size to check
        else:
            array = to_array(value, tensor_spec, spec.name)
        if not batched or sample:
            if array.shape != dims:
                array = _reshape_sample(array, tensor_spec, spec.name)
            if batched:
                array = array[np.newaxis]
        elif array.ndim != len(dims) + 1 or array.shape[1:] != dims:
            array = _reshape_batch(array, tensor_spec, spec.name)
        if batched:
            size = array.shape[0]
            if batch_size is None:
                batch_size, batch_owner = size, name
            elif size != batch_size:
                raise InvalidInputError(
                    f"inputs of one call must have the same batch size: {batch_owner!r} has "
                    f"{batch_size}, {name!r} has {size}",
                    model=spec.name,
                )
        tensors.append(Tensor(name, tensor_spec.datatype, array))
    if missing:
        # An input named like a call's option: its keyword set the option instead.
        shadowed = [name for name in missing if name in _OPTIONS_OF_OTHER_CALLS]
        hint = (
            f" ({', '.join(map(repr, shadowed))} as a keyword is the call's option: give "
            "such inputs in a mapping, model.infer({...}))"
            if shadowed
            else ""
        )
        raise InvalidInputError(
            f"model {spec.name!r} needs input {', '.join(map(repr, missing))}; "
            f"its inputs are {_names(specs)}{hint}",
            model=spec.name,
        )
    if batched and not tensors and specs:
        # Triton reads a request's batch size from its first input; without one it
        # refuses the request ("out of bounds index 0: request has 0 inputs").
        raise InvalidInputError(
            f"model {spec.name!r} is batched and takes its batch size from the inputs: "
            f"give at least one of {_names(specs)}",
            model=spec.name,
        )
    if batch_size == 0:
        raise InvalidInputError(f"an empty batch cannot be sent to {spec.name!r}", model=spec.name)
    return PreparedInputs(tensors, batch_size)


def _undeclared(
    spec: ModelSpec, values: Mapping[str, object], sample: bool
) -> tuple[dict[str, TensorSpec], dict[str, object]]:
    """Specs read off the values given, for a model whose server declares no tensors
    (MLServer's runtimes without inputs in model-settings.json, a KServe model without
    input types): each value's own datatype, any shape. The server checks them."""
    batch_axis = 1 if spec.max_batch_size > 0 and not sample else 0
    specs: dict[str, TensorSpec] = {}
    arrays: dict[str, object] = {}
    for name, value in values.items():
        any_type = TensorSpec(name, datatype="BYTES", shape=())  # (names it in errors)
        if isinstance(value, np.ndarray):
            array = value
        else:
            array = _foreign_array(value, any_type, spec.name)
            if array.dtype.kind in "iuf" and _holds_bools(value):  # (numpy reads True as 1)
                raise InvalidInputError(
                    f"input {name!r}: got booleans among numbers; cast them explicitly",
                    model=spec.name,
                )
        try:
            datatype = datatype_of(array)
        except ValueError as exc:
            raise InvalidInputError(f"input {name!r}: {exc}", model=spec.name) from None
        rank = max(array.ndim - batch_axis, 0)
        specs[name] = TensorSpec(name, datatype=datatype, shape=(-1,) * rank)
        arrays[name] = array
    return specs, arrays


def split_batch(tensors: Sequence[Tensor], max_batch_size: int) -> list[list[Tensor]]:
    """Cut batched tensors along axis 0 into chunks of at most ``max_batch_size``."""
    total = tensors[0].array.shape[0]
    return [
        [
            Tensor(tensor.name, tensor.datatype, tensor.array[start : start + max_batch_size])
            for tensor in tensors
        ]
        for start in range(0, total, max_batch_size)
    ]


def _refuse_unknown(
    spec: ModelSpec, unknown: list[str], keywords: bool | AbstractSet[str]
) -> NoReturn:
    options = [name for name in unknown if name in _OPTIONS_OF_OTHER_CALLS]
    given = [name for name in options if keywords is True or (keywords and name in keywords)]
    if given and len(given) == len(unknown):
        # e.g. retry= on a stream, which is never retried
        raise InvalidInputError(
            f"this call takes no {', '.join(map(repr, given))} option (other calls do), and "
            f"model {spec.name!r} has no input of that name; its inputs are "
            f"{_names(spec.inputs)}",
            model=spec.name,
        )
    among = [name for name in options if name not in given]
    hints = []
    if among:
        hints.append(
            f"{', '.join(map(repr, among))}: an option, not an input; give it to the call "
            "as a keyword argument, not among the inputs"
        )
    if given:
        hints.append(f"this call takes no {', '.join(map(repr, given))} option")
    hint = f" ({'; '.join(hints)})" if hints else ""
    raise InvalidInputError(
        f"model {spec.name!r} has no input named {', '.join(map(repr, unknown))}; "
        f"its inputs are {_names(spec.inputs)}{hint}",
        model=spec.name,
    )


def _names(specs: Mapping[str, TensorSpec]) -> str:
    return ", ".join(
        f"{name!r}{' (optional)' if spec.optional else ''}" for name, spec in specs.items()
    )


def to_array(value: object, spec: TensorSpec, model: str) -> np.ndarray[Any, Any]:
    """Convert a value to an array of the input's dtype, refusing lossy or senseless casts."""
    if isinstance(value, np.ma.MaskedArray):
        # Its masked elements have no value: gRPC sent the fill value, HTTP and shared
        # memory the data underneath.
        raise InvalidInputError(
            f"input {spec.name!r} is a masked array: its masked elements have no value to "
            "send; fill them first (array.filled(value))",
            model=model,
        )
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        value = np.asarray(value)  # a subclass may not reshape as asked (np.matrix stays 2-D)
    elif not isinstance(value, np.ndarray):
        value = _plain_value(value, spec, model)
    if spec.datatype == "BYTES":
        if isinstance(value, np.ndarray):
            _check_size(value, np.dtype(np.object_), spec, model)
            if value.dtype.kind in "SU":
                _check_text_size(value, spec, model)
        return _to_bytes_array(value, spec, model)
    target = spec.dtype
    if isinstance(value, np.ndarray):
        array: np.ndarray[Any, Any] = value
    elif isinstance(value, str | bytes):
        raw = " (raw bytes of numbers: np.frombuffer(data, dtype))" if type(value) is bytes else ""
        raise InvalidInputError(
            f"input {spec.name!r} is {spec.datatype}: a {type(value).__name__} does not fit "
            f"it{raw}",
            model=model,
        )
    else:
        array = _foreign_array(value, spec, model)
        if (
            isinstance(value, list | tuple)
            and array.dtype.kind in "iuf"
            and target.kind != "b"
            and _holds_bools(value)
        ):
            # numpy reads True as 1: the mistake would reach the model unseen.
            among = "integers" if target.kind in _INTEGER_KINDS else "numbers"
            raise InvalidInputError(
                f"input {spec.name!r} is {spec.datatype}: got booleans among {among}; "
                f"cast them explicitly (e.g. array.astype(np.{target.name}))",
                model=model,
            )
    _check_size(array, target, spec, model)
    if array.dtype == target:
        return array
    kind = array.dtype.kind
    if kind == "O" or (
        kind == "f"
        and target.kind in _EXACT_KINDS
        and isinstance(value, list | tuple)
        and array.dtype == _GUESSED
    ):
        # numpy's guess for a Python sequence says nothing of what the caller gave: an
        # empty list is float64, and ints past int64 or mixing int64 with uint64 become
        # float64 or object. Those are read again, exactly (a slow path, for them only).
        if not array.size:
            return array.astype(target)  # no element, no dtype: the cast is exact
        if target.kind != "b":
            exact = _python_integers(array if kind == "O" else value, array.shape, spec, model)
            if exact is not None:
                cast = _cast_python_integers(exact, target, spec, model)
                if cast is not None:
                    return cast
        if kind == "O" and target.kind == "f":
            floats = _python_floats(array)
            if floats is not None:  # (pd.Series([1.5, 2.0], dtype=object), say)
                return _cast(floats, target, spec, model)
        if kind == "O" and target.kind == "b":
            flat = array.reshape(-1).tolist()
            if all(isinstance(item, _BOOLS) for item in flat):
                booleans: np.ndarray[Any, Any] = np.array(flat, dtype=np.bool_).reshape(array.shape)
                return booleans
    return _cast(array, target, spec, model)


_BYTE_FORMATS: Final = frozenset("Bbc")
_SEQUENCES: Final = (list, tuple)


_BYTE_BUFFERS: Final = (bytearray, mmap.mmap, memoryview)
_SHAPELESS: Final = (AbstractSet, Iterator, Mapping, MappingView)
_ONE_BYTE_TARGETS: Final = frozenset({"UINT8", "INT8"})


def _plain_value(value: object, spec: TensorSpec, model: str) -> object:
    """``value`` as shaping reads it: a flat bytes-like buffer (a bytearray, a memoryview
    or mmap of bytes) as ``bytes``, except for 8-bit inputs, where numpy's one number a
    byte is right (other inputs got a float a byte); refusing what has no order or shape
    (a set, a generator, a mapping)."""
    if type(value) in _SEQUENCES:
        return value  # (the common case, first: ABC checks cost a microsecond)
    if isinstance(value, _BYTE_BUFFERS):
        try:
            view = memoryview(value)
        except ValueError as exc:  # (a released memoryview, a closed mmap)
            raise InvalidInputError(
                f"input {spec.name!r}: cannot read the buffer given ({exc})", model=model
            ) from exc
        flat_bytes = view.format in _BYTE_FORMATS and view.ndim <= 1
        if flat_bytes and spec.datatype not in _ONE_BYTE_TARGETS:
            return view.tobytes()
        return value
    if isinstance(value, _SHAPELESS):
        kind = type(value).__name__
        raise InvalidInputError(
            f"input {spec.name!r}: a {kind} has no order or shape to read values from; "
            "give a list or an array",
            model=model,
        )
    return value


_REAL_NUMBERS = (float, int, np.floating, np.integer)
_BOOLS = (bool, np.bool_)


def _python_floats(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """An object array of numbers (no bool), Python's or numpy's, as float64, or None
    when an element is anything else, or an int too large for a float."""
    flat = array.reshape(-1).tolist()
    if not all(map(_is_number, flat)):
        return None
    try:
        with np.errstate(over="raise"):  # (a longdouble beyond float64 would become inf)
            floats: np.ndarray[Any, Any] = np.array(flat, dtype=np.float64).reshape(array.shape)
    except (OverflowError, FloatingPointError):
        return None
    return floats


_EXACT_KINDS: Final = frozenset("iub")
"""Inputs a float64 list is read again for (into float inputs it is cast as it is)."""
_GUESSED: Final = np.dtype(np.float64)
"""numpy's dtype for an empty list, and for ints that do not share an integer dtype."""


def _python_integers(
    value: object, shape: Shape, spec: TensorSpec, model: str
) -> np.ndarray[Any, Any] | None:
    """An object array of ``value``'s elements as Python ints, or None when one is not an
    integer (a float, a str, anything else) or the nesting differs from ``shape``.

    A bool is refused, as booleans are everywhere but in BOOL inputs.
    """
    try:
        exact = np.array(value, dtype=np.object_, order="C")  # (so reshape(-1) is a view)
    except (ValueError, TypeError, MemoryError, OverflowError, RuntimeError):
        return None
    if exact.shape != shape:
        return None
    flat = exact.reshape(-1)
    for index, item in enumerate(flat):
        if type(item) is not int:
            if isinstance(item, bool | np.bool_):
                raise InvalidInputError(
                    f"input {spec.name!r} is {spec.datatype}: got booleans among integers; "
                    f"cast them explicitly (e.g. array.astype(np.{spec.dtype.name}))",
                    model=model,
                )
            if not numpy_number(item, integer=True):
                return None
            flat[index] = int(item)
    return exact


def _cast_python_integers(
    exact: np.ndarray[Any, Any], target: np.dtype[Any], spec: TensorSpec, model: str
) -> np.ndarray[Any, Any] | None:
    """Python ints cast to an integer or float input, refusing those that do not fit;
    None for other inputs (the ordinary refusal follows)."""
    low, high = int(exact.min()), int(exact.max())
    if target.kind in _INTEGER_KINDS:
        _check_integer_range(low, high, target, spec, model)
        return exact.astype(target)
    if target.kind != "f" and target != BF16:
        return None
    try:
        floats = exact.astype(np.float64)
    except OverflowError:  # past float64 itself
        _refuse_overflow(low if -low > high else high, spec, model)
    return _cast_floats(floats, target, spec, model, given=exact)


_BOOL_TYPES: Final = frozenset({bool, np.bool_})
_NESTED_TYPES: Final = frozenset({list, tuple, np.ndarray})
_PLAIN_NUMBER_TYPES: Final = frozenset({int, float})


def _holds_bools(value: object) -> bool:
    """Whether a (nested) Python sequence holds a bool, or a bool array, anywhere."""
    if isinstance(value, np.ndarray):
        return bool(value.dtype.kind == "b")
    if not isinstance(value, list | tuple):
        return False
    kinds = set(map(type, value))  # (one pass at C speed: lists can be long)
    if kinds <= _PLAIN_NUMBER_TYPES:
        return False
    if kinds & _BOOL_TYPES:
        return True
    if kinds & _NESTED_TYPES or any(issubclass(kind, list | tuple) for kind in kinds):
        return any(_holds_bools(item) for item in value)
    return False


def rows_of_numbers(column: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """An object array whose rows are lists (JSON, ``df.apply``), stacked, when they hold
    numbers or booleans; None for anything else (text, which numpy would make fixed-width
    strings of; booleans among numbers, which stay refused as in a list)."""
    listed = column.tolist()
    rows: np.ndarray[Any, Any] = np.array(listed)
    if rows.dtype.kind not in "biuf" or (rows.dtype.kind != "b" and _holds_bools(listed)):
        return None
    return rows


def _refuse_overflow(bad: object, spec: TensorSpec, model: str) -> NoReturn:
    shown = _shown(bad) if type(bad) is int else repr(bad)
    raise InvalidInputError(
        f"input {spec.name!r} is {spec.datatype}: value {shown} is outside its "
        "range (it would become inf)",
        model=model,
    )


def _foreign_array(value: object, spec: TensorSpec, model: str) -> np.ndarray[Any, Any]:
    """An array from anything else: lists, scalars, torch tensors (``__array__``), DLPack
    producers, pandas and pyarrow columns; a column whose rows are arrays is stacked."""
    try:
        if hasattr(value, "__dlpack__") and not hasattr(value, "__array__"):
            array: np.ndarray[Any, Any] = np.from_dlpack(value)
        else:
            array = np.asarray(value)
        first = first_element(array)
        if isinstance(first, np.ndarray):
            array = np.stack(list(array))  # one array per row, as in a DataFrame column
        elif isinstance(first, list | tuple):
            rows = rows_of_numbers(array)
            if rows is not None:
                array = rows
    except (ValueError, TypeError, MemoryError, OverflowError, RuntimeError, BufferError) as exc:
        hint = " (call .detach() on a tensor that requires grad)" if "grad" in str(exc) else ""
        raise InvalidInputError(
            f"input {spec.name!r}: cannot make an array of the value given ({exc}){hint}",
            model=model,
        ) from exc
    return array


_LARGEST: Final[dict[np.dtype[Any], float]] = {
    np.dtype(kind): float(np.finfo(kind).max) for kind in (np.float16, np.float32, np.float64)
}
_LARGEST[BF16] = 3.3895313892515355e38  # (2 - 2**-7) * 2**127

_INTEGER_PEAK: Final[dict[np.dtype[Any], int]] = {
    np.dtype(kind): max(-int(np.iinfo(kind).min), int(np.iinfo(kind).max))
    for kind in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}
"""The largest magnitude of each integer dtype: one that fits a float target needs no check."""

MAX_TENSOR_BYTES: Final = 2**31 - 1
"""The most one input can carry: a gRPC message's limit, and well past Triton's HTTP one."""

MAX_AXIS: Final = 2**31 - 1


def _check_size(
    array: np.ndarray[Any, Any], target: np.dtype[Any], spec: TensorSpec, model: str
) -> None:
    """Refuse what no request can carry before any copy is made: an array can be a view
    (a stride-0 broadcast) far larger than the memory it takes."""
    itemsize = 4 if target.kind == "O" else target.itemsize  # a BYTES element: 4 or more
    if array.size > 0 and array.size * itemsize <= MAX_TENSOR_BYTES:
        return  # no axis can be longer than the whole
    size = 1
    for dim in array.shape:
        if dim > MAX_AXIS:
            raise InvalidInputError(
                f"input {spec.name!r}: an axis of {dim} in shape {array.shape} is longer than "
                f"a request can carry ({MAX_AXIS})",
                model=model,
            )
        size *= dim
    if size * itemsize > MAX_TENSOR_BYTES:
        raise InvalidInputError(
            f"input {spec.name!r}: shape {array.shape} is {size} elements of {spec.datatype}, "
            f"more than one request can carry ({MAX_TENSOR_BYTES} bytes); split it (model.map)",
            model=model,
        )


def _check_text_size(array: np.ndarray[Any, Any], spec: TensorSpec, model: str) -> None:
    """Refuse a str or bytes array (often a broadcast view of one string) whose elements
    no request can carry, before they are turned into Python objects and encoded: each
    takes its 4-byte length and at least a byte per character."""
    widest = 4 + array.dtype.itemsize // (4 if array.dtype.kind == "U" else 1)
    if array.size * widest <= MAX_TENSOR_BYTES:
        return  # (the common case: no element counted)
    # The elements of a broadcast repeat: each distinct one is measured once.
    distinct = array[tuple(slice(0, 1) if step == 0 else slice(None) for step in array.strides)]
    chars = int(np.char.str_len(distinct).sum(dtype=np.int64)) * (array.size // distinct.size)
    least = 4 * array.size + chars
    if least > MAX_TENSOR_BYTES:
        raise InvalidInputError(
            f"input {spec.name!r}: {array.size} strings of shape {array.shape} take at least "
            f"{least} bytes, more than one request can carry ({MAX_TENSOR_BYTES} bytes); "
            "split it (model.map)",
            model=model,
        )


def _cast(
    array: np.ndarray[Any, Any], target: np.dtype[Any], spec: TensorSpec, model: str
) -> np.ndarray[Any, Any]:
    source = array.dtype
    # Signed and unsigned integers count as one kind here: the range check below is what
    # keeps the cast safe, and it lets [0, 255] (int64 to numpy) feed a UINT8 input.
    integers = source.kind in _INTEGER_KINDS and target.kind in _INTEGER_KINDS
    if source.kind == "b":
        raise InvalidInputError(
            f"input {spec.name!r} is {spec.datatype}: got booleans; cast them explicitly "
            f"(e.g. array.astype(np.{target.name}))",
            model=model,
        )
    # (Complex: no input of Triton's holds it, though ml_dtypes lets it cast to bfloat16.)
    if (
        source.kind in TEXT_KINDS
        or source.kind == "c"
        or not (integers or np.can_cast(source, target, casting="same_kind"))
    ):
        raise InvalidInputError(
            f"input {spec.name!r} is {spec.datatype} ({target}): values of dtype {source} "
            f"cannot be cast to it without loss{_why_not(array, target)}",
            model=model,
        )
    if target.kind in _INTEGER_KINDS and source.kind in _INTEGER_KINDS and array.size:
        _check_integer_range(int(array.min()), int(array.max()), target, spec, model)
    if target.kind == "f" or target == BF16:
        return _cast_floats(array, target, spec, model)
    return array.astype(target)


def _why_not(array: np.ndarray[Any, Any], target: np.dtype[Any]) -> str:
    """What in ``array`` stops the cast, when one element can say it: the first element
    of an object array that is not of the target's kind, or a missing value (NaN:
    pandas' NA)."""
    if array.dtype.kind == "f" and array.size and bool(np.isnan(array).any()):
        return " (it holds missing values: NaN, as pandas and pyarrow give NA)"
    if array.dtype.kind != "O":
        return ""
    booleans = target.kind == "b"
    for index, item in enumerate(array.reshape(-1).tolist()):
        if not (isinstance(item, _BOOLS) if booleans else _is_number(item)):
            shown = repr(item)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            return f" (at flat index {index}: {type(item).__name__} {shown})"
    return ""


def _is_number(item: object) -> bool:
    return isinstance(item, _REAL_NUMBERS) and not isinstance(item, _BOOLS)


def _check_integer_range(
    low: int, high: int, target: np.dtype[Any], spec: TensorSpec, model: str
) -> None:
    """Refuse integers from ``low`` to ``high`` that the integer ``target`` cannot hold."""
    info = np.iinfo(target)
    if low < info.min or high > info.max:
        bad = _shown(low if low < info.min else high)
        raise InvalidInputError(
            f"input {spec.name!r} is {spec.datatype}: value {bad} is outside "
            f"[{info.min}, {info.max}]",
            model=model,
        )


def _shown(number: int) -> str:
    """An integer for a message: whole, unless it has hundreds of digits."""
    digits = str(number)
    if len(digits) <= 40:
        return digits
    return f"{digits[:20]}...{digits[-4:]} ({len(digits.lstrip('-'))} digits)"


def _cast_floats(
    array: np.ndarray[Any, Any],
    target: np.dtype[Any],
    spec: TensorSpec,
    model: str,
    given: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """A float cast that refuses finite values the target cannot hold (they would be inf).

    Integers are rounded to the nearest value the target holds, as floats are; only those
    too large for it (past 65504 for FP16) are refused. ``given``: what the caller gave,
    element for element, to name in the message.
    """
    largest = _LARGEST.get(target)
    source = array.dtype
    if largest is None or not array.size:
        return array.astype(target)  # nothing to check
    if source.kind == "f":
        if _LARGEST.get(source, np.inf) <= largest:
            return array.astype(target)  # a float that widens: nothing overflows
        # fmax passes over NaNs (they stay NaN): one would make max() NaN, and hide the rest.
        if not np.fmax.reduce(np.abs(array), axis=None) > largest:  # (all NaN: a NaN peak)
            return array.astype(target)
    elif source.kind in _INTEGER_KINDS:
        if largest > 2.0**64 or _INTEGER_PEAK.get(source, np.inf) <= largest:
            return array.astype(target)  # every value of the dtype fits: no pass needed
        if int(array.max()) <= largest and (source.kind == "u" or -int(array.min()) <= largest):
            return array.astype(target)
    else:
        return array.astype(target)
    # Something is out of range, or is inf already (which may pass): look closer.
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(target)
    overflowed = np.isinf(cast) & ~np.isinf(array)
    if overflowed.any():
        index = int(np.flatnonzero(overflowed)[0])
        # (an index per axis, not .flat: numpy 2's arrays of 64 axes refuse .flat past 32)
        where = np.unravel_index(index, array.shape)
        if given is not None:
            _refuse_overflow(given[where], spec, model)
        _refuse_overflow(array[where].item(), spec, model)  # 1e+300, not np.float64(...)
    return cast


def _to_bytes_array(value: object, spec: TensorSpec, model: str) -> np.ndarray[Any, Any]:
    """A new object array of the value's str and bytes elements, checked and encoded.

    The one pass over the elements happens here: the wire payload it makes is remembered
    with the array (a private copy, so what is sent is what was checked), and the wire
    reuses it for the array, its reshapes and its row slices.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in TEXT_KINDS:
            raise InvalidInputError(
                f"input {spec.name!r} is BYTES: it takes str or bytes, "
                f"got an array of {value.dtype}",
                model=model,
            )
        array: np.ndarray[Any, Any] = value.astype(np.object_, order="C")
    elif isinstance(value, str | bytes):
        array = np.empty((), dtype=np.object_)
        array[()] = value
    else:
        try:
            array = np.array(value, dtype=np.object_)
        except (ValueError, TypeError, MemoryError, OverflowError, RuntimeError) as exc:
            raise InvalidInputError(
                f"input {spec.name!r}: cannot make an array of the value given ({exc})",
                model=model,
            ) from exc
    try:
        encoded = serialize_bytes(array.reshape(-1).tolist(), spec.name)
    except TypeError as exc:
        if isinstance(value, list | tuple):
            plain = _buffers_as_bytes(value)
            if plain is not None:  # (numpy made each buffer a row of ints)
                return _to_bytes_array(plain, spec, model)
            # (reshape, not .flat: numpy 2 makes arrays of 64 axes that .flat refuses)
            if any(isinstance(item, list | tuple | np.ndarray) for item in array.reshape(-1)):
                raise InvalidInputError(
                    f"input {spec.name!r}: the nested lists given are ragged (rows of "
                    "different lengths), nested deeper than an array's axes go, or hold "
                    "arrays: give rows of one length, of str or bytes",
                    model=model,
                ) from None
        raise InvalidInputError(str(exc), model=model) from None
    remember_encoding(array, encoded)
    return array


def first_element(array: np.ndarray[Any, Any]) -> object:
    """The first element of an object array (None for another dtype, or no elements),
    indexed per axis: numpy 2's arrays of 64 axes refuse ``.flat`` past 32."""
    if array.dtype != object or not array.size:
        return None
    return array[(0,) * array.ndim]


def _buffers_as_bytes(value: list[Any] | tuple[Any, ...]) -> list[Any] | None:
    """``value`` with its byte buffers (a bytearray, a memoryview of bytes: numpy reads
    each as a row of numbers) as ``bytes``, at any depth; None when it holds none."""
    found = False

    def plain(item: Any, depth: int) -> Any:
        nonlocal found
        if isinstance(item, list | tuple):
            if depth > _MAX_DIMS:  # (no array has that many axes: nothing to read)
                raise _TooDeep
            return [plain(inner, depth + 1) for inner in item]
        if isinstance(item, bytearray) or (
            isinstance(item, memoryview) and item.format in _BYTE_FORMATS and item.ndim <= 1
        ):
            found = True
            return bytes(item)
        return item

    try:
        converted = plain(value, 1)
    except _TooDeep:
        return None
    return converted if found else None


class _TooDeep(Exception):
    """Lists nested deeper than an array's axes can go."""


_MAX_DIMS: Final = 64


def _matches(shape: Shape, dims: Shape) -> bool:
    if len(shape) != len(dims):
        return False
    return all(dim == -1 or dim == size for size, dim in zip(shape, dims, strict=True))


def _pattern(dims: Shape) -> str:
    return "[" + ", ".join(str(dim) for dim in dims) + "]"


def _sample_readings(shape: Shape, dims: Shape) -> list[Shape]:
    """Shapes one sample can take: as given, or with size-1 axes of ``dims`` added around it."""
    if _matches(shape, dims):
        return [shape]
    missing = len(dims) - len(shape)
    if missing <= 0:
        return []
    readings: list[Shape] = []
    for leading in range(missing + 1):
        candidate = (1,) * leading + shape + (1,) * (missing - leading)
        added = [*range(leading), *range(leading + len(shape), len(dims))]
        if all(dims[axis] == 1 for axis in added) and _matches(candidate, dims):
            readings.append(candidate)
    return list(dict.fromkeys(readings))


def _reshape_sample(
    array: np.ndarray[Any, Any], spec: TensorSpec, model: str
) -> np.ndarray[Any, Any]:
    if array.shape == spec.shape:
        return array
    readings = _sample_readings(array.shape, spec.shape)
    if len(readings) == 1:
        return array if readings[0] == array.shape else array.reshape(readings[0])
    if not readings:
        raise InvalidInputError(
            f"input {spec.name!r} expects shape {_pattern(spec.shape)}, got {array.shape}",
            model=model,
        )
    raise InvalidInputError(
        f"input {spec.name!r}: shape {array.shape} is ambiguous for {_pattern(spec.shape)}: "
        f"it could be {' or '.join(map(str, readings))}; pass exactly {_pattern(spec.shape)}",
        model=model,
    )


def _reshape_batch(
    array: np.ndarray[Any, Any], spec: TensorSpec, model: str
) -> np.ndarray[Any, Any]:
    shape: Shape = array.shape
    dims = spec.shape
    rank = len(shape)
    # Reading 1: batched as given. It excludes the other two, which need a lower rank.
    if rank == len(dims) + 1 and _matches(shape[1:], dims):
        return array
    readings: dict[Shape, str] = {}
    # Reading 2: batched, with trailing size-1 axes of the sample shape left out.
    if 1 <= rank <= len(dims):
        candidate = shape + (1,) * (len(dims) + 1 - rank)
        if all(dim == 1 for dim in dims[rank - 1 :]) and _matches(candidate[1:], dims):
            readings[candidate] = f"a batch of {shape[0]}"
    # Reading 3: a single sample; a batch axis of 1 is added.
    if rank == len(dims) and _matches(shape, dims):
        readings.setdefault((1, *shape), "one sample")
    if len(readings) == 1:
        return array.reshape(next(iter(readings)))
    expected = f"(n, {_pattern(dims)[1:-1]})" if dims else "(n,)"
    if not readings:
        raise InvalidInputError(
            f"input {spec.name!r} expects a batch of shape {expected} "
            f"(sample shape {_pattern(dims)}), got {shape}",
            model=model,
        )
    described = " or ".join(f"{how} {reading}" for reading, how in readings.items())
    raise InvalidInputError(
        f"input {spec.name!r}: shape {shape} is ambiguous for sample shape {_pattern(dims)}: "
        f"it reads as {described}; use infer_sample or pass shape {expected}",
        model=model,
    )
