"""Inference results, and decoding of output tensors from their wire form."""

from __future__ import annotations

import codecs
import math
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from ._checks import repeated
from ._copy import copied
from ._display import Displayable, Table, preview
from ._dtypes import decode_bytes, wire_dtype
from ._errors import InferenceError, InvalidInputError, UnknownOutputError, unreadable

if TYPE_CHECKING:
    from ._shm import Slot

__all__ = ["InferResult", "Undecoded", "decode_json_output", "decode_output"]

Array = np.ndarray[Any, Any]
ResultParameter = bool | int | float | str


class Undecoded(NamedTuple):
    """A numeric output already checked against its shape, made an array when first read:
    results hold every output the server sent, and callers often read one."""

    buffer: bytes | memoryview
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    def array(self) -> Array:
        return np.frombuffer(self.buffer, self.dtype).reshape(self.shape)


def _size(buffer: bytes | memoryview) -> int:
    return buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)


def data_size(array: np.ndarray[Any, Any]) -> int:
    """The bytes of ``array``'s data as they travel: for BYTES (an object array), each
    element's bytes and its 4-byte length, not the array's pointers."""
    if array.dtype != np.object_:
        return int(array.nbytes)
    return sum(
        4 + (len(item) if isinstance(item, bytes) else len(str(item).encode()))
        for item in array.reshape(-1)  # (not .flat: numpy 2 refuses it past 32 axes)
    )


class InferResult(Displayable, Mapping[str, Array]):
    """The outputs of one inference, as numpy arrays, with the response's metadata.

    ``result["NAME"]`` and ``result.as_numpy("NAME")`` give the same array; an output the
    result does not hold raises :class:`UnknownOutputError`. Numeric outputs of a single
    response are read-only views of its bytes: ``as_numpy(name, writable=True)`` gives one
    you may change, or hand to ``torch.from_dlpack``.

    Attributes:
        model_name: the model that answered.
        model_version: the version that answered.
        id: the request id echoed by the server (``""`` when none was set).
        parameters: the response parameters the server sent.
    """

    __slots__ = ("_datatypes", "_outputs", "id", "model_name", "model_version", "parameters")

    def __init__(
        self,
        outputs: Mapping[str, Array],
        *,
        datatypes: Mapping[str, str],
        model_name: str,
        model_version: str,
        id: str = "",
        parameters: Mapping[str, ResultParameter] | None = None,
    ) -> None:
        self._outputs: dict[str, Array | Undecoded] = dict(outputs)
        self._datatypes = dict(datatypes)
        self.model_name: str = model_name
        self.model_version: str = model_version
        self.id: str = id
        self.parameters: Mapping[str, ResultParameter] = dict(parameters or {})

    @classmethod
    def of(
        cls,
        outputs: dict[str, Array | Undecoded],
        datatypes: dict[str, str],
        *,
        model_name: str,
        model_version: str,
        id: str,
        parameters: dict[str, ResultParameter],
    ) -> InferResult:
        """A result that takes ownership of the dicts it is given (decoders' fast path)."""
        result = cls.__new__(cls)
        result._outputs = outputs
        result._datatypes = datatypes
        result.model_name = model_name
        result.model_version = model_version
        result.id = id
        result.parameters = parameters
        return result

    def __getitem__(self, name: str) -> Array:
        try:
            output = self._outputs[name]
        except KeyError:
            held = ", ".join(map(repr, self._outputs)) or "none (the server sent no output)"
            raise UnknownOutputError(
                f"the result has no output {name!r}; it has {held}", model=self.model_name
            ) from None
        if isinstance(output, Undecoded):
            output = self._outputs[name] = output.array()
        return output

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs)

    def __len__(self) -> int:
        return len(self._outputs)

    def __eq__(self, other: object) -> bool:
        """Equal to a result of the same model, version, id and parameters whose outputs
        have the same names, datatypes, shapes and values (``numpy.array_equal``: NaN is
        not equal to NaN); to another mapping of the same names to equal arrays."""
        if not isinstance(other, Mapping):
            return NotImplemented
        if self.keys() != other.keys():
            return False
        if isinstance(other, InferResult):
            mine = (self.model_name, self.model_version, self.id, self.parameters)
            if mine != (other.model_name, other.model_version, other.id, other.parameters):
                return False
            if any(self.datatype(name) != other.datatype(name) for name in self._outputs):
                return False
        return all(np.array_equal(self[name], np.asarray(other[name])) for name in self._outputs)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}: {self._datatypes.get(name, '?')}{list(array.shape)}"
            for name, array in self._outputs.items()  # an Undecoded has a shape too
        )
        return f"<InferResult {self.model_name!r} v{self.model_version} {{{shown}}}>"

    @property
    def nbytes(self) -> int:
        """The bytes of the outputs' data, as they travel (BYTES elements with their
        4-byte lengths), without reading outputs not read yet."""
        return sum(
            _size(output.buffer) if isinstance(output, Undecoded) else data_size(output)
            for output in self._outputs.values()
        )

    def _byte_size(self, name: str) -> int | None:
        """The bytes of a numeric output's data, without reading it (None: no such output,
        or BYTES)."""
        output = self._outputs.get(name)
        if isinstance(output, Undecoded):
            return _size(output.buffer)
        if output is None or output.dtype == np.object_:
            return None
        return int(output.nbytes)

    def _table(self) -> Table:
        rows = [
            (name, self._datatypes.get(name, "?"), str(list(self[name].shape)), preview(self[name]))
            for name in self._outputs
        ]
        request = f", request {self.id!r}" if self.id else ""
        title = f"InferResult of {self.model_name!r} version {self.model_version}{request}"
        return Table(title, ("output", "datatype", "shape", "values"), rows)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Outputs not read yet are views of the answer's buffer, which cannot be pickled.
        return _restore, (
            self.to_dict(),
            self._datatypes,
            self.model_name,
            self.model_version,
            self.id,
            dict(self.parameters),
        )

    def as_numpy(self, name: str, *, writable: bool = False) -> Array:
        """The output as a numpy array, batch axis first (``result[name]``).

        ``writable=True`` gives an array the caller may change, copying a read-only view
        once (the copy then replaces it in the result). DLPack consumers such as
        ``torch.from_dlpack`` need one: DLPack before 1.0 cannot mark memory read-only,
        so numpy refuses to export a read-only array to them.
        """
        array = self[name]
        if writable and not array.flags.writeable:
            array = self._outputs[name] = array.copy()
        return array

    def as_strings(self, name: str, encoding: str = "utf-8") -> npt.NDArray[np.object_]:
        """A BYTES output decoded to ``str``: an object array of ``str``, same shape."""
        if not isinstance(encoding, str):
            raise InvalidInputError(
                f"as_strings: encoding must be a str such as 'utf-8', got {encoding!r}",
                model=self.model_name,
            )
        try:
            codec = codecs.lookup(encoding)  # (checked even when there is nothing to decode)
        except (LookupError, ValueError):  # (ValueError: a NUL in the name)
            raise InvalidInputError(
                f"as_strings: unknown encoding {encoding!r}", model=self.model_name
            ) from None
        if not getattr(codec, "_is_text_encoding", True):  # base64, rot13, ...
            raise InvalidInputError(
                f"as_strings: {encoding!r} is not a text encoding", model=self.model_name
            )
        array = self[name]
        if array.dtype != np.object_:
            raise InvalidInputError(
                f"output {name!r} is {self.datatype(name)}, not BYTES: use as_numpy",
                model=self.model_name,
            )
        decoded = np.empty(array.shape, dtype=np.object_)
        flat = decoded.reshape(-1)
        items = array.reshape(-1)
        index = 0
        try:
            for index, item in enumerate(items):
                flat[index] = item.decode(encoding) if isinstance(item, bytes) else str(item)
        except UnicodeDecodeError as error:
            raise InvalidInputError(
                f"output {name!r} element {index} is not {encoding} text ({error.reason} at "
                f"byte {error.start}: {items[index][:40]!r}); use as_numpy for its bytes",
                model=self.model_name,
            ) from error
        except (LookupError, UnicodeError) as error:  # ("undefined" raises UnicodeError)
            raise InvalidInputError(f"as_strings: {error}", model=self.model_name) from None
        return decoded

    def datatype(self, name: str) -> str:
        """The Triton datatype of an output, e.g. ``"FP32"``."""
        self[name]
        return self._datatypes[name]

    def to_dict(self) -> dict[str, Array]:
        """Every output, name -> array."""
        return {name: self[name] for name in self._outputs}

    def _map_arrays(self, change: Any) -> InferResult:
        return InferResult(
            {name: change(self[name]) for name in self._outputs},
            datatypes=self._datatypes,
            model_name=self.model_name,
            model_version=self.model_version,
            id=self.id,
            parameters=self.parameters,
        )

    def without_batch_axis(self) -> InferResult:
        """The result of a one-sample batch, with axis 0 removed from every output.

        Raises :class:`InferenceError` (``may_have_run=True``) when an output has another
        first axis than 1: the answer does not fit the request it answers."""
        self._check_rows(1)
        # array[0, ...] keeps a 0-d array where array[0] of a 1-D object array is bare bytes
        return self._map_arrays(lambda array: array[0, ...])

    def split_rows(self, count: int) -> list[InferResult]:
        """One result per sample of a batch of ``count``, axis 0 removed; raises
        :class:`InferenceError` as :meth:`without_batch_axis` does when an output's first
        axis is not ``count``."""
        self._check_rows(count)
        return [self._map_arrays(operator.itemgetter((index, ...))) for index in range(count)]

    def _check_rows(self, count: int) -> None:
        """Refuse an answer to a batch of ``count`` whose outputs have another batch axis
        (taking its first rows would hand out the wrong values)."""
        for name in self._outputs:
            shape = self[name].shape
            if not shape or shape[0] != count:
                raise InferenceError(
                    f"output {name!r} came back with shape {list(shape)}: the answer to a "
                    f"batch of {count} should have {count} along its first axis",
                    model=self.model_name,
                    request_id=self.id,
                    may_have_run=True,  # (it answered: the model ran)
                )

    @classmethod
    def concatenate(
        cls, parts: Sequence[InferResult], *, rows: Sequence[int] | None = None
    ) -> InferResult:
        """Join the results of consecutive batch chunks along axis 0, in order.

        ``rows``, the batch size each chunk was sent with, is checked against each
        answer's first axis before joining: an answer with other rows raises
        :class:`InferenceError` rather than shifting every row after it."""
        first = parts[0]
        if rows is not None:
            for part, count in zip(parts, rows, strict=True):
                part._check_rows(count)
        if len(parts) == 1:
            return first
        names = [sorted(part) for part in parts]
        if any(part_names != names[0] for part_names in names):
            raise InferenceError(
                f"the chunks of a batch larger than max_batch_size answered different "
                f"outputs ({', '.join(map(str, names))}, chunk by chunk): the rows of an "
                "output some chunks left out cannot be known; send at most max_batch_size "
                "samples per call to read each answer as it is",
                model=first.model_name,
                request_id=first.id,
                may_have_run=True,  # (every chunk ran)
            )
        outputs = {}
        for name in first:
            arrays = [part[name] for part in parts]
            shapes = {array.shape[1:] for array in arrays}
            datatypes = {part.datatype(name) for part in parts}
            if len(shapes) > 1 or len(datatypes) > 1 or any(not a.shape for a in arrays):
                raise InferenceError(
                    f"the chunks of a batch larger than max_batch_size answered output "
                    f"{name!r} with shapes {[list(a.shape) for a in arrays]} and datatypes "
                    f"{sorted(datatypes)}, which cannot be joined into one batch; send at "
                    "most max_batch_size samples per call to read each answer as it is",
                    model=first.model_name,
                    request_id=first.id,
                    may_have_run=True,  # (every chunk ran)
                )
            outputs[name] = np.concatenate(arrays)
        return InferResult(
            outputs,
            datatypes=first._datatypes,
            model_name=first.model_name,
            model_version=first.model_version,
            id=first.id,
            parameters=first.parameters,
        )


def keep_outputs(result: InferResult, names: frozenset[str] | None) -> InferResult:
    """``result`` without the outputs not in ``names`` (None: all kept), for servers that
    answer every output whatever the request asked for."""
    if names is not None:
        for name in [name for name in result._outputs if name not in names]:
            del result._outputs[name]
            result._datatypes.pop(name, None)
    return result


def _restore(
    outputs: dict[str, Array],
    datatypes: dict[str, str],
    model_name: str,
    model_version: str,
    id: str,
    parameters: dict[str, ResultParameter],
) -> InferResult:
    return InferResult(
        outputs,
        datatypes=datatypes,
        model_name=model_name,
        model_version=model_version,
        id=id,
        parameters=parameters,
    )


def _count(shape: Sequence[int], name: str) -> int:
    """The number of elements of an output of ``shape`` as the server sent it, checked:
    whole numbers of 0 or more, that numpy can hold (it refuses [0, 2**62] too)."""
    if not all(type(size) is int for size in shape):  # (JSON: 3.0, true)
        raise unreadable(
            f"the server sent output {name!r} with a shape that is not whole numbers: {list(shape)}"
        )
    if shape and min(shape) < 0:
        raise unreadable(f"the server sent output {name!r} with a negative shape {shape}")
    count = math.prod(shape)
    # (a zero axis hides the others from the count: numpy still refuses them too large)
    if count > _LARGEST_ELEMENT_COUNT or (
        not count and math.prod(size for size in shape if size) > _LARGEST_ELEMENT_COUNT
    ):
        raise unreadable(
            f"the server sent output {name!r} with a shape too large to hold: {list(shape)}"
        )
    return count


_LARGEST_ELEMENT_COUNT: Final = (2**63 - 1) // 8
"""The most elements numpy holds of an 8-byte type (its size limit, zero axes aside)."""


def named_twice(names: list[str]) -> InferenceError:
    """The error of an answer that holds outputs of one name (which one is meant?)."""
    return unreadable(f"the server sent output {', '.join(map(repr, repeated(names)))} twice")


def decode_output(
    name: str, datatype: str, shape: Sequence[int], buffer: bytes | memoryview
) -> Array | Undecoded:
    """One output from its raw bytes (gRPC raw contents or the HTTP binary part), checked
    now; numeric ones become arrays when first read (:class:`Undecoded`)."""
    count = _count(shape, name)
    if datatype == "BYTES":
        try:
            return decode_bytes(buffer, count).reshape(shape)
        except ValueError as exc:
            raise unreadable(f"output {name!r}: {exc}") from exc
    try:
        dtype = wire_dtype(datatype)
    except KeyError:
        raise unreadable(f"output {name!r} has unknown datatype {datatype!r}") from None
    if len(buffer) != count * dtype.itemsize:
        raise unreadable(
            f"output {name!r}: {len(buffer)} bytes do not hold {datatype} of shape {list(shape)}"
        )
    return Undecoded(buffer, dtype, tuple(shape))


def read_region(name: str, datatype: str, shape: Sequence[int], slot: Slot) -> Array:
    """An output the server wrote into a shared memory region: a copy, or with
    ``slot.view`` the region's memory itself (recorded in ``slot.lent``, so that the region
    is not reused while the array lives)."""
    if datatype == "BYTES":
        raise unreadable(f"output {name!r}: BYTES outputs do not travel in regions")
    try:
        size = _count(shape, name) * wire_dtype(datatype).itemsize
    except KeyError:
        raise unreadable(f"output {name!r} has unknown datatype {datatype!r}") from None
    if size > slot.byte_size:
        raise unreadable(
            f"output {name!r}: shape {list(shape)} needs {size} bytes, its region has "
            f"{slot.byte_size}"
        )
    data = slot.region.read(size, slot.offset)
    if slot.view and slot.region.mapped:
        # Read-only as an output read from a response's bytes is, and for good: a flag
        # alone could be set back (setflags(write=True)), and writes would reach the region.
        data = data.toreadonly()
    flat = np.frombuffer(data, wire_dtype(datatype))
    if not slot.region.mapped:  # GPU memory: already copied to this process
        return flat.reshape(shape)
    if not slot.view:
        return copied(flat.reshape(shape))
    slot.lent = flat
    return flat.reshape(shape)


_EXACT_FLOAT_LIMIT: Final = 2**53
"""Whole float64 values below this in magnitude are exactly the integers they show."""


def _fits(values: np.ndarray[Any, Any], target: np.dtype[Any]) -> bool:
    """Whether JSON numbers are whole and within an integer dtype's range (a cast would
    wrap them silently)."""
    if values.dtype.kind not in "iubf":
        return False
    if values.dtype.kind == "f" and not np.all(np.mod(values, 1) == 0):
        return False
    limits = np.iinfo(target)
    return bool(values.min() >= limits.min and values.max() <= limits.max)


def _exact_integers(data: object, target: np.dtype[Any]) -> Array | None:
    """JSON numbers read one by one into an integer dtype; None unless every one is a
    whole number within its range. numpy reads a list that mixes integers below and
    above 2**63 as float64, which rounds the large ones (2**64 - 1 would come back 0)."""
    values = np.array(data, dtype=np.object_).reshape(-1)
    limits = np.iinfo(target)
    out = np.empty(values.size, dtype=target)
    for index, value in enumerate(values):
        if isinstance(value, float) and value.is_integer() and abs(value) < _EXACT_FLOAT_LIMIT:
            value = int(value)
        if type(value) is not int or not limits.min <= value <= limits.max:
            return None
        out[index] = value
    return out


def _inexact(raw: np.ndarray[Any, Any]) -> bool:
    """Whether numpy's reading of JSON numbers may have lost integers: Python objects
    (beyond 64 bits, or of mixed kinds), or floats too large to be exact."""
    if raw.dtype.kind == "O":
        return True
    return raw.dtype.kind == "f" and float(np.max(np.abs(raw))) >= _EXACT_FLOAT_LIMIT


def decode_json_output(name: str, datatype: str, shape: Sequence[int], data: object) -> Array:
    """Decode one output sent as values rather than raw bytes: JSON ``data`` (an HTTP
    response without binary parts) or a gRPC answer's typed contents."""
    count = _count(shape, name)
    if datatype == "BYTES":
        items = data if isinstance(data, list) else [data]
        array = np.empty(len(items), dtype=np.object_)
        for index, item in enumerate(items):
            if isinstance(item, str):
                # (bytes that are not UTF-8 may come as surrogate escapes: see loads_event)
                array[index] = item.encode("utf-8", "surrogateescape")
            elif isinstance(item, bytes):
                array[index] = item
            else:
                raise unreadable(
                    f"output {name!r}: its BYTES values hold the {type(item).__name__} {item!r}, "
                    "not a string"
                )
    else:
        try:
            target = wire_dtype(datatype)
            raw = np.asarray(data)
            if target.kind in "iu" and raw.size and _inexact(raw):
                exact = _exact_integers(data, target)
                if exact is None:
                    raise unreadable(
                        f"output {name!r}: its {datatype} values are not all {datatype} integers"
                    )
                array = exact
            elif target.kind in "iu" and raw.size and not _fits(raw, target):
                raise unreadable(
                    f"output {name!r}: its {datatype} values are not all "
                    f"{datatype} integers (from {raw.min()!r} to {raw.max()!r})"
                )
            else:
                array = raw.astype(target).reshape(-1)
        except (KeyError, ValueError, TypeError, OverflowError) as exc:
            raise unreadable(f"output {name!r}: cannot read its {datatype} values") from exc
    if array.size != count:
        raise unreadable(f"output {name!r}: {array.size} values for shape {list(shape)}")
    return array.reshape(shape)
