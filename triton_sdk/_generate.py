"""JSON forms for the generate extension, and conversions between them and tensors.

``model.generate`` / ``generate_stream`` speak dicts of JSON values; over HTTP they go to
``/v2/models/M/generate[_stream]``, over gRPC through a (streamed) inference whose outputs
are turned into the same dicts here. Conversely, ``model.stream`` over HTTP travels as
``generate_stream`` events that are turned back into results.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np

from ._errors import InferenceError, InvalidInputError, classify_message, unreadable
from ._ops import JSONValue
from ._request import InferRequest, ParameterValue, check_parameters, reserved_parameter
from ._result import InferResult, decode_json_output
from ._shaping import Tensor, prepare_inputs
from ._spec import ModelSpec

__all__ = [
    "JSONValue",
    "ServerSentEvents",
    "TextOutputs",
    "check_generate",
    "event_to_result",
    "generate_body",
    "generate_request",
    "loads_event",
    "response_fields",
    "result_fields",
    "single_response",
    "tensors_to_fields",
]


_RESPONSE_METADATA = frozenset({"model_name", "model_version", "id"})
_NOT_IN_JSON = frozenset({"FP16", "BF16"})  # (Triton's JSON tensors refuse them)
_BODY_KEYS = frozenset({"id", "parameters"})


def _plain(value: Any, errors: str = "replace") -> JSONValue:
    """A JSON value for one output or input: bytes as text, one element as itself.

    ``errors="strict"`` refuses bytes that are not UTF-8 (inputs must not be altered).
    """
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            raise InvalidInputError(
                "the generate extension carries text: bytes that are not UTF-8 cannot be "
                "sent through it (use model.infer, or a gRPC client)"
            ) from exc
    if isinstance(value, list | tuple):
        items = [_plain(item, errors) for item in value]
        return items[0] if len(items) == 1 and not isinstance(items[0], list) else items
    if isinstance(value, np.generic):
        return _plain(value.item(), errors)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(item, errors) for key, item in value.items()}
    raise InvalidInputError(f"cannot send a {type(value).__name__} as JSON")


def generate_body(
    fields: Mapping[str, object],
    parameters: Mapping[str, object] | None,
    request_id: str = "",
    spec: ModelSpec | None = None,
) -> bytes:
    """The JSON body of a generate request; with ``spec``, checked first (see
    :func:`check_generate`)."""
    sent: Mapping[str, JSONValue] = {}
    if spec is not None:
        _, tensors = _checked_generate(spec, fields, parameters, http=True)
        # (None leaves an optional input out, as on gRPC: check_generate took it so;
        # without declared tensors, every field is an input)
        undeclared = not spec.inputs and not spec.has_config
        fields = {
            name: value
            for name, value in fields.items()
            if not (value is None and (undeclared or name in spec.inputs))
        }
        if spec.has_config:
            # Inputs go as the values gRPC would send, as an HTTP stream's do: any buffer
            # or array the shaping reads (a bytearray, an array.array), not only JSON's.
            sent = tensors_to_fields(tensors, spec)
    body = {
        name: sent[name] if name in sent else _plain(value, "strict")
        for name, value in fields.items()
    }
    if request_id:
        body["id"] = request_id
    if parameters:
        body["parameters"] = {name: _plain(value, "strict") for name, value in parameters.items()}
    return json.dumps(body).encode()


def check_generate(
    spec: ModelSpec,
    fields: Mapping[str, object],
    parameters: Mapping[str, object] | None,
    *,
    http: bool = False,
) -> Mapping[str, ParameterValue] | None:
    """Refuse a generate request that cannot be sent, as the gRPC path would: the fields
    named like inputs are checked as one sample of them, the others (the server makes
    them parameters) and ``parameters`` as parameters. ``http``: it goes through the
    HTTP extension, whose JSON Triton (a server with model configs) does not read FP16
    or BF16 from. Returns ``parameters`` as sent (numpy scalars as plain values)."""
    return _checked_generate(spec, fields, parameters, http=http)[0]


def _checked_generate(
    spec: ModelSpec,
    fields: Mapping[str, object],
    parameters: Mapping[str, object] | None,
    *,
    http: bool,
) -> tuple[Mapping[str, ParameterValue] | None, list[Tensor]]:
    """:func:`check_generate`, and the inputs' tensors it checked."""
    tensors = _generate_inputs(spec, fields)
    if http:  # (checked when the call is made, not when the stream is first read)
        for tensor in tensors:
            if tensor.datatype == "BYTES":
                _input_value(tensor.name, tensor.array, spec)
    if http and spec.has_config:
        remedy = "use a gRPC client, or model.infer"
        _refuse_halves(spec, fields, "generate over HTTP", remedy)
        for tensor in tensors:
            shape = tensor.array.shape[1:] if spec.batched else tensor.array.shape
            if len(shape) > 1:  # (Triton cannot turn such a field into the tensor)
                raise InvalidInputError(
                    f"generate over HTTP (the generate extension) carries scalars and 1-D "
                    f"values only; input {tensor.name!r} has shape {shape}: {remedy}",
                    model=spec.name,
                )
        _refuse_body_keys(spec, fields, "generate over HTTP", remedy)
    extra = {name: value for name, value in fields.items() if not _is_input(spec, name)}
    plain = _check_fields(spec, extra, parameters)
    check_parameters(cast("dict[str, ParameterValue]", extra), spec.name)
    return plain, tensors


def _refuse_halves(spec: ModelSpec, names: Iterable[str], call: str, remedy: str) -> None:
    """Refuse FP16 and BF16 inputs among ``names``, which ``call`` sends as JSON."""
    halves = sorted(
        name for name in names if name in spec.inputs and spec.inputs[name].datatype in _NOT_IN_JSON
    )
    if halves:
        raise InvalidInputError(
            f"input {', '.join(map(repr, halves))} is FP16 or BF16, which Triton does not "
            f"read from JSON: {call} cannot carry it ({remedy})",
            model=spec.name,
        )


def _refuse_body_keys(spec: ModelSpec, names: Iterable[str], call: str, remedy: str) -> None:
    """Refuse inputs among ``names`` that the generate extension reads as the request's
    own keys (``id``, ``parameters``), which ``call`` sends as JSON."""
    clash = sorted(name for name in names if name in _BODY_KEYS and name in spec.inputs)
    if clash:
        raise InvalidInputError(
            f"input {', '.join(map(repr, clash))} cannot go through {call}: the generate "
            f"extension reads that key of its body as the request's own, not as an input "
            f"({remedy})",
            model=spec.name,
        )


def check_not_inputs(spec: ModelSpec, parameters: object) -> None:
    """Refuse parameters named like inputs of a Triton model: its generate extension (HTTP
    streams and generate) reads such a parameter as that input, gRPC as a parameter."""
    if not spec.has_config or not isinstance(parameters, Mapping):
        return
    clash = sorted(name for name in parameters if name in spec.inputs)
    if clash:
        raise InvalidInputError(
            f"parameter {', '.join(map(repr, clash))} is named like an input of model "
            f"{spec.name!r}: over HTTP Triton reads it as that input, over gRPC as a "
            "parameter; give it as an input",
            model=spec.name,
        )


def _check_fields(
    spec: ModelSpec, extra: Mapping[str, object], parameters: Mapping[str, object] | None
) -> Mapping[str, ParameterValue] | None:
    """Refuse fields (not inputs) that the protocols would send differently: over HTTP a
    field is a key of the body beside ``parameters`` and ``id``, so the server would get
    a parameter twice, or read the field as the request's id."""
    # (a mapping, before its keys are read)
    plain = check_parameters(cast("Mapping[str, ParameterValue] | None", parameters), spec.name)
    check_not_inputs(spec, parameters)
    twice = sorted(extra.keys() & (parameters or {}).keys())
    if twice:
        raise InvalidInputError(
            f"{', '.join(map(repr, twice))} given both as a field and in parameters",
            model=spec.name,
        )
    if "parameters" in extra:
        raise InvalidInputError(
            "a field named 'parameters' is where the HTTP extension reads the request's "
            "parameters: give them in parameters={...}",
            model=spec.name,
        )
    if "id" in extra:
        raise InvalidInputError(
            "a field named 'id' is the request's id in the generate extension, not a "
            "parameter: give it in parameters={'id': ...}",
            model=spec.name,
        )
    reserved = sorted(name for name in extra if reserved_parameter(name))
    if reserved:
        # (Over gRPC, Triton reads "priority" or "timeout" as the request's own; its HTTP
        # extension hands them to the model.)
        hint = "; infer takes priority=" if "priority" in reserved else ""
        raise InvalidInputError(
            f"{', '.join(map(repr, reserved))} cannot be a generate field: the name is "
            "reserved by the inference protocol, and the two protocols would send it apart "
            f"(generate has no such option{hint})",
            model=spec.name,
        )
    return plain


def generate_request(
    spec: ModelSpec,
    version: str | None,
    fields: Mapping[str, object],
    parameters: Mapping[str, ParameterValue] | None,
) -> InferRequest:
    """An inference request for generate over gRPC, built the way the HTTP extension does:
    fields named like inputs are one sample of that input, other fields are parameters."""
    extra = {name: value for name, value in fields.items() if not _is_input(spec, name)}
    _check_fields(spec, extra, parameters)
    merged: dict[str, Any] = {**extra, **(parameters or {})}
    return InferRequest(
        model=spec.name,
        version=version or "",
        inputs=_generate_inputs(spec, fields),
        parameters=check_parameters(merged, spec.name),
        triton=spec.has_config,
    )


def _generate_inputs(spec: ModelSpec, fields: Mapping[str, object]) -> list[Tensor]:
    """The fields named like inputs, shaped and checked as one sample of them."""
    # A JSON scalar is a one-element tensor, as the HTTP extension reads it (so that a
    # prompt fits a [-1] input too).
    if _undeclared(spec):
        inputs = {name: [value] if _scalar(value) else value for name, value in fields.items()}
    else:
        inputs = {
            name: [value] if _scalar(value) and len(spec.inputs[name].shape) == 1 else value
            for name, value in fields.items()
            if name in spec.inputs
        }
    return prepare_inputs(spec, inputs, sample=True).tensors


def _undeclared(spec: ModelSpec) -> bool:
    """A model whose server declares no tensors: every field is an input (see
    prepare_inputs), none a parameter."""
    return not spec.inputs and not spec.has_config


def _is_input(spec: ModelSpec, name: str) -> bool:
    return name in spec.inputs or _undeclared(spec)


def _scalar(value: object) -> bool:
    return isinstance(value, str | bytes | int | float | bool | np.generic)


def single_response(results: list[InferResult], model: str) -> InferResult:
    """The one response generate needs (as the HTTP extension requires); ``results``
    may stop at the second."""
    if len(results) != 1:
        raise InferenceError(
            f"generate expects the model to answer with exactly one response, it sent "
            f"{'none' if not results else 'more than one'}; use generate_stream",
            model=model,
        )
    return results[0]


def response_fields(
    document: Any,
    model: str,
    request_id: str | None = None,
    outputs: Collection[str] = (),
    text: TextOutputs | None = None,
) -> dict[str, JSONValue]:
    """The outputs of one generate answer or event; an ``error`` field raises (unless the
    model has an output of that name and the answer holds more: Triton's errors are
    ``{"error": ...}`` alone). Given the model's ``outputs``, the other fields are left
    out (an ensemble's answer carries its sequence fields too, which the gRPC path,
    reading outputs, never shows). ``text``: the stream's text decoder (see
    :class:`TextOutputs`), else the answer is whole."""
    if not isinstance(document, dict):
        failure = unreadable(f"generate answered with a non-object: {document!r}", model)
        failure.request_id = request_id
        raise failure
    if "error" in document and ("error" not in outputs or len(document) == 1):
        raise classify_message(
            _whole_text(str(document["error"])), status=200, model=model, request_id=request_id
        )
    return (text or TextOutputs(streamed=False)).fields(
        {
            name: value
            for name, value in document.items()
            if name not in _RESPONSE_METADATA and (not outputs or name in outputs)
        }
    )


def result_fields(
    result: InferResult, spec: ModelSpec, text: TextOutputs | None = None
) -> dict[str, JSONValue]:
    """A generate-style dict from an inference result (gRPC path); ``text`` as for
    :func:`response_fields`."""
    # Flat, as Triton's HTTP extension writes them (each output whole). A model known
    # from its metadata alone is checked to answer its one sample with one row: its
    # leading -1 may be no batch axis (a tokenizer), and a flat answer would hide that.
    if spec.batched and not spec.has_config:
        result = result.without_batch_axis()
    return (text or TextOutputs(streamed=False)).fields(
        {name: array.reshape(-1) for name, array in result.items()}
    )


def loads_event(data: str | bytes | bytearray, what: str) -> Any:
    """The JSON of a generate answer or event, whose strings may hold bytes that are not
    UTF-8: Triton writes a text output's bytes as they are (a byte-level tokenizer's
    token may be part of a character). Such bytes stay in the strings as surrogate
    escapes, for :class:`TextOutputs` and BYTES outputs to turn back into the bytes."""
    if not isinstance(data, str):
        data = data.decode("utf-8", "surrogateescape")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # (Recursion: nested past Python's stack)
        raise unreadable(f"{what}: the server sent a body that is not JSON") from exc


def _whole_text(value: str) -> str:
    """``value`` with the bytes that :func:`loads_event` kept as escapes read as U+FFFD."""
    if value.isascii():
        return value
    return _utf8(value).decode("utf-8", "replace")


def _utf8(value: str) -> bytes:
    """The bytes of a string from :func:`loads_event`; a lone surrogate that JSON wrote
    as an escape (``"\\ud800"``) stays one that reads as U+FFFD."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


class TextOutputs:
    """The text of a generate stream's outputs, decoded across its responses.

    A byte-level tokenizer streams bytes: a character may begin in one response and end
    in the next. Its first bytes are held back until its last one comes, so the text
    arrives whole instead of as U+FFFD in both responses. Values come as bytes (gRPC)
    or as strings from :func:`loads_event` (HTTP). ``streamed=False``: one whole answer,
    where a cut character is U+FFFD at once.
    """

    def __init__(self, *, streamed: bool = True) -> None:
        self._streamed = streamed
        self._decoders: dict[tuple[str, int], codecs.IncrementalDecoder] = {}

    def fields(self, outputs: Mapping[str, object]) -> dict[str, JSONValue]:
        """A response's outputs as JSON values, their text decoded."""
        return {name: _plain(self._value(name, value)) for name, value in outputs.items()}

    def finish(self) -> dict[str, JSONValue] | None:
        """At the stream's end: U+FFFD for each text output that ended inside a character
        (its held bytes never became one), or None when none did."""
        cut = {name for (name, _), decoder in self._decoders.items() if decoder.getstate()[0]}
        if not cut:
            return None
        left: dict[str, list[str]] = {}
        for (name, _), decoder in sorted(self._decoders.items()):
            if name in cut:
                left.setdefault(name, []).append(decoder.decode(b"", final=True))
        return {name: _plain(items) for name, items in left.items()}

    def _value(self, name: str, value: object) -> object:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, list):
            return [self._item(name, index, item) for index, item in enumerate(value)]
        return self._item(name, 0, value)

    def _item(self, name: str, index: int, item: object) -> object:
        if isinstance(item, list):  # (a nested list: its text is whole)
            return [_whole_text(x) if isinstance(x, str) else x for x in item]
        if isinstance(item, str):
            if item.isascii() and (name, index) not in self._decoders:
                return item
            item = _utf8(item)
        if not isinstance(item, bytes):
            return item
        if not self._streamed:
            return item.decode("utf-8", "replace")
        decoder = self._decoders.get((name, index))
        if decoder is None:
            decoder = self._decoders[name, index] = _utf8_decoder(errors="replace")
        return decoder.decode(item)


_utf8_decoder = codecs.getincrementaldecoder("utf-8")


def tensors_to_fields(tensors: list[Tensor], spec: ModelSpec) -> dict[str, JSONValue]:
    """JSON fields for inputs sent through generate_stream (``model.stream`` over HTTP).

    The extension carries one sample of scalars or 1-D values per input; anything else
    needs the gRPC stream.
    """
    names = [tensor.name for tensor in tensors]
    call = "streaming over HTTP (the generate extension)"
    _refuse_halves(spec, names, call, "use a gRPC client")
    _refuse_body_keys(spec, names, call, "use a gRPC client")
    fields: dict[str, JSONValue] = {}
    for tensor in tensors:
        array = tensor.array
        if spec.batched:
            if array.shape[0] != 1:
                raise InvalidInputError(
                    f"streaming over HTTP sends one sample; input {tensor.name!r} has a batch "
                    f"of {array.shape[0]}: use a gRPC client for batched streams",
                    model=spec.name,
                )
            array = array[0, ...]  # (a scalar sample stays an array)
        if array.ndim > 1:
            raise InvalidInputError(
                f"streaming over HTTP (the generate extension) carries scalars and 1-D values "
                f"only; input {tensor.name!r} has shape {array.shape}: use a gRPC client",
                model=spec.name,
            )
        fields[tensor.name] = _input_value(tensor.name, array, spec)
    return fields


def _input_value(name: str, value: Any, spec: ModelSpec) -> JSONValue:
    """An input's JSON value, refused (naming it) when it holds bytes that are not UTF-8."""
    try:
        return _plain(value, "strict")
    except InvalidInputError as error:
        raise InvalidInputError(f"input {name!r}: {error}", model=spec.name) from error.__cause__


def event_to_result(
    event: Mapping[str, Any], spec: ModelSpec, wanted: Collection[str] | None = None
) -> InferResult:
    """An InferResult from one generate_stream event, shaped by the model's output specs.

    ``wanted`` keeps only those outputs (the request's ``outputs``), as gRPC would.
    """
    outputs = {}
    datatypes = {}
    for name, value in event.items():
        if name in _RESPONSE_METADATA or name not in spec.outputs:
            continue
        if wanted is not None and name not in wanted:
            continue
        output = spec.outputs[name]
        flat = value if isinstance(value, list) else [value]
        shape = _event_shape(output.shape, len(flat))
        if spec.batched:
            shape = (1, *shape)
        outputs[name] = decode_json_output(name, output.datatype, shape, flat)
        datatypes[name] = output.datatype
    return InferResult(
        outputs,
        datatypes=datatypes,
        model_name=str(event.get("model_name", spec.name)),
        model_version=str(event.get("model_version", "")),
        id=str(event.get("id", "")),
    )


def _event_shape(dims: tuple[int, ...], count: int) -> tuple[int, ...]:
    """The shape of ``count`` values of an output of ``dims`` (the events carry none): the
    one variable dimension, if there is one, is what the count leaves; flat when the
    count does not fit the dims, or when two or more vary."""
    known = int(np.prod([dim for dim in dims if dim != -1]))
    variable = dims.count(-1)
    if variable == 0 and known == count:
        return dims
    if variable == 1 and known > 0 and count % known == 0:
        return tuple(count // known if dim == -1 else dim for dim in dims)
    return (count,)


class ServerSentEvents:
    """An incremental parser of a ``text/event-stream``: feed bytes as they arrive, in
    chunks of any size, and get the ``data`` of each event that ends."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        """The bytes of a line not ended yet, as they came: joined once it ends (a line
        of any length, in chunks of any size, costs its length)."""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Take the next bytes of the stream; return the data of the events they end."""
        if b"\n" not in chunk:
            self._pending.append(chunk)
            return []
        lines = chunk.split(b"\n")
        lines[0] = b"".join([*self._pending, lines[0]])
        self._pending = [lines.pop()]
        return [data for data in map(self._line, lines) if data is not None]

    def finish(self) -> list[str]:
        """The last event, when the stream ended without a blank line after it."""
        pending, self._pending = b"".join(self._pending), []
        return [data for data in map(self._line, (pending, b"")) if data is not None]

    def events(self, chunks: Iterable[bytes]) -> Iterator[str]:
        """The data of every event in a stream of chunks."""
        for chunk in chunks:
            yield from self.feed(chunk)
        yield from self.finish()

    def _line(self, line: bytes) -> str | None:
        # (bytes that are not UTF-8 stay as surrogate escapes: see loads_event)
        text = line.decode("utf-8", "surrogateescape").rstrip("\r")
        if not text:
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data
        if text.startswith(":"):
            return None
        field, _, value = text.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
        return None
