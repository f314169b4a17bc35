"""The KServe v2 HTTP/REST protocol with Triton's binary tensor extension, without I/O.

:class:`HttpCodec` turns every op into an :class:`HttpCall` (what to send, how to read
the answer) or an :class:`HttpStream` (a server-sent-events answer read piece by piece);
both HTTP transports (blocking and asyncio) perform them and never look inside.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, NoReturn, TypeAlias, TypeVar, cast
from urllib.parse import quote

import attrs
import numpy as np

from ._errors import (
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    TritonError,
    UnsupportedError,
    classify_message,
    classify_status,
    redirect_refused,
    refuse_error_body,
    unreadable,
    unreadable_answer,
    values_refused,
)
from ._generate import (
    JSONValue,
    ServerSentEvents,
    TextOutputs,
    event_to_result,
    generate_body,
    generate_request,
    loads_event,
    response_fields,
    result_fields,
    tensors_to_fields,
)
from ._ops import (
    Generate,
    GenerateStream,
    GetCudaSharedMemoryStatus,
    GetLogSettings,
    GetModelConfig,
    GetModelMetadata,
    GetModelStatistics,
    GetSystemSharedMemoryStatus,
    GetTraceSettings,
    ListModels,
    LoadModel,
    Op,
    RegisterCudaSharedMemory,
    RegisterSystemSharedMemory,
    StreamInfer,
    StreamOp,
    UnloadModel,
    UnregisterCudaSharedMemory,
    UnregisterSystemSharedMemory,
    UpdateLogSettings,
    UpdateTraceSettings,
)
from ._request import InferRequest, RequestedOutput
from ._result import (
    Array,
    InferResult,
    Undecoded,
    decode_json_output,
    decode_output,
    keep_outputs,
    named_twice,
    read_region,
)
from ._shaping import Tensor
from ._spec import ModelSpec
from ._wire import tensor_payload

if TYPE_CHECKING:
    from ._shm import Placement, Slot

__all__ = [
    "HEADER_LENGTH",
    "HttpCall",
    "HttpCodec",
    "HttpStream",
    "decode_infer",
    "encode_infer",
    "encode_infer_json",
    "error_from_response",
    "is_triton",
]

T = TypeVar("T")

HEADER_LENGTH: Final = "Inference-Header-Content-Length"


# What a path segment may hold as it is (RFC 3986's pchar, but for letters, digits and
# "-._~", which quote() never escapes). Triton's HTTP endpoint does not decode %-escapes,
# so a model named "a+b" is reachable only as /v2/models/a+b.
_SEGMENT_SAFE = "!$&'()*+,;=:@"


def path_segment(text: str) -> str:
    """``text`` as one segment of a URL's path: escaped where it must be."""
    return quote(text, safe=_SEGMENT_SAFE)


def model_segment(name: str, version: str | None) -> str:
    """``{name}[/versions/{version}]``, quoted."""
    segment = path_segment(name)
    if version:
        segment += f"/versions/{path_segment(version)}"
    return segment


def model_path(base: str, name: str, version: str | None, suffix: str = "") -> str:
    """``{base}/v2/models/{name}[/versions/{version}]{suffix}``, with the name quoted."""
    return f"{base}/v2/models/{model_segment(name, version)}{suffix}"


def _parameters(request: InferRequest) -> dict[str, Any]:
    parameters: dict[str, Any] = dict(request.parameters or {})
    if request.sequence_id:
        parameters["sequence_id"] = request.sequence_id
        parameters["sequence_start"] = request.sequence_start
        parameters["sequence_end"] = request.sequence_end
    if request.priority:
        parameters["priority"] = request.priority
    return parameters


def _region(slot: Slot) -> dict[str, Any]:
    parameters: dict[str, Any] = {
        "shared_memory_region": slot.region.name,
        "shared_memory_byte_size": slot.byte_size,
    }
    if slot.offset:
        parameters["shared_memory_offset"] = slot.offset
    return parameters


def _header(request: InferRequest, sizes: list[int | None]) -> bytes:
    placement = request.shared_memory
    inputs = [
        {
            "name": tensor.name,
            "shape": list(tensor.array.shape),
            "datatype": tensor.datatype,
            "parameters": (
                {"binary_data_size": size}
                if size is not None or placement is None
                else _region(placement.inputs[tensor.name])
            ),
        }
        for tensor, size in zip(request.inputs, sizes, strict=True)
    ]
    header: dict[str, Any] = {"inputs": inputs}
    if request.request_id:
        header["id"] = request.request_id
    parameters = _parameters(request)
    if request.outputs is None:
        parameters["binary_data_output"] = True
    else:
        header["outputs"] = [
            {"name": output.name, "parameters": _output_parameters(output, placement)}
            for output in request.outputs
        ]
    if parameters:
        header["parameters"] = parameters
    return json.dumps(header, separators=(",", ":")).encode()


def _output_parameters(output: RequestedOutput, placement: Placement | None) -> dict[str, Any]:
    slot = None if placement is None else placement.outputs.get(output.name)
    if slot is not None:
        return _region(slot)
    if output.class_count:
        return {"binary_data": True, "classification": output.class_count}
    return {"binary_data": True}


_HeaderKey = tuple[Any, ...]
_HEADERS: dict[_HeaderKey, bytes] = {}
_MAX_HEADERS: Final = 1024


_LARGEST_BODY: Final = 2**31 - 2**16
"""The tensors' bytes an HTTP body may carry, its JSON header left room: Triton reads
the body's length as an int32, and its refusal would come after the whole upload, garbled
("should be in range (0, -2044967137)")."""


def _too_large(request: InferRequest) -> InvalidInputError:
    return values_refused(
        "the request is larger than Triton reads over HTTP (2 GiB): split the batch "
        "(model.map) or use shared memory",
        model=request.model,
    )


def encode_infer(request: InferRequest) -> tuple[list[bytes | memoryview], int]:
    """The body parts of an infer request and the length of its JSON header.

    Headers of plain requests (no id, parameters or sequence) repeat from call to call,
    so they are kept, keyed by what they contain.
    """
    parts: list[bytes | memoryview] = [b""]
    sizes: list[int | None] = []
    placement = request.shared_memory
    total = 0
    for tensor in request.inputs:
        if placement is not None and tensor.name in placement.inputs:
            sizes.append(None)  # its data is in a region
            continue
        if tensor.datatype != "BYTES" and total + tensor.array.nbytes >= _LARGEST_BODY:
            raise _too_large(request)  # (before its payload is made: a copy, if strided)
        raw = tensor_payload(tensor)
        parts.append(raw)
        size = len(raw) if isinstance(raw, bytes) else raw.nbytes
        sizes.append(size)
        total += size
    if total >= _LARGEST_BODY:
        raise _too_large(request)
    plain = not (
        request.request_id
        or request.parameters
        or request.sequence_id
        or request.priority
        or placement is not None
    )
    if not plain:
        parts[0] = _header(request, sizes)
        return parts, len(parts[0])
    key = (
        tuple(
            (tensor.name, tensor.datatype, tensor.array.shape, size)
            for tensor, size in zip(request.inputs, sizes, strict=True)
        ),
        None if request.outputs is None else tuple(request.outputs),
    )
    header = _HEADERS.get(key)
    if header is None:
        header = _header(request, sizes)
        if len(_HEADERS) >= _MAX_HEADERS:
            _HEADERS.clear()
        _HEADERS[key] = header
    parts[0] = header
    return parts, len(header)


def is_triton(server_metadata: Any) -> bool:
    """Whether a server's metadata names Triton (which reads binary tensors over HTTP)."""
    return isinstance(server_metadata, dict) and server_metadata.get("name") == "triton"


def encode_infer_json(request: InferRequest, binary_possible: bool = True) -> bytes:
    """An infer request with its tensors as JSON ``data`` lists, as every Open Inference
    Protocol server reads them (no binary extension). ``binary_possible``: whether this
    request could travel with binary tensors instead (not a stream, nor generate on a
    server without configs), which a refusal then suggests."""
    remedy = "use a gRPC client or http_binary=True" if binary_possible else "use a gRPC client"
    if request.shared_memory is not None:
        raise InvalidInputError("shared memory needs Triton's binary HTTP (http_binary=True)")
    body: dict[str, Any] = {
        "inputs": [
            {
                "name": tensor.name,
                "shape": list(tensor.array.shape),
                "datatype": tensor.datatype,
                "data": _json_data(tensor, remedy, request.model),
            }
            for tensor in request.inputs
        ]
    }
    if request.request_id:
        body["id"] = request.request_id
    if request.outputs is not None:
        body["outputs"] = [
            {"name": output.name, "parameters": {"classification": output.class_count}}
            if output.class_count
            else {"name": output.name}
            for output in request.outputs
        ]
    parameters = _parameters(request)
    if parameters:
        body["parameters"] = parameters
    try:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as exc:
        raise _not_finite(request, parameters, remedy) from exc


_FLOATS: Final = frozenset({"FP16", "FP32", "FP64", "BF16"})


def _not_finite(
    request: InferRequest, parameters: Mapping[str, object], remedy: str
) -> InvalidInputError:
    """The refusal of a JSON body holding NaN or an infinity, naming where it is."""
    for tensor in request.inputs:
        if tensor.datatype in _FLOATS and not np.isfinite(tensor.array.astype(float)).all():
            return values_refused(
                f"input {tensor.name!r} holds NaN or infinite values, which JSON cannot "
                f"carry: {remedy}",
                model=request.model,
            )
    named = sorted(
        name
        for name, value in parameters.items()
        if isinstance(value, float) and not math.isfinite(value)
    )
    if not named:
        return values_refused(f"NaN and infinite values cannot travel as JSON: {remedy}")
    return values_refused(
        f"parameter {', '.join(map(repr, named))} is NaN or infinite, which JSON cannot "
        "carry: send it as a str",
        model=request.model,
    )


def _json_data(tensor: Tensor, remedy: str, model: str) -> list[Any]:
    flat = tensor.array.reshape(-1)
    if tensor.datatype != "BYTES":
        return flat.astype(float).tolist() if tensor.datatype == "BF16" else flat.tolist()  # type: ignore[no-any-return]
    try:
        return [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in flat]
    except UnicodeDecodeError as exc:
        raise values_refused(
            f"input {tensor.name!r}: bytes that are not UTF-8 cannot travel as JSON; {remedy}",
            model=model,
        ) from exc


Body: TypeAlias = bytes | bytearray
"""An answer's body: ``bytearray`` when a large one was read into a buffer of its own."""


def decode_json(body: Body, what: str) -> Any:
    try:
        try:
            return json.loads(body)
        except UnicodeDecodeError:
            # Triton writes the bytes of a BYTES output into a JSON string as they are:
            # bytes that are not UTF-8 stay surrogate escapes (decode_json_output).
            return json.loads(bytes(body).decode("utf-8", "surrogateescape"))
    except ValueError as exc:
        raise unreadable(f"{what}: the server sent a body that is not JSON") from exc
    except RecursionError:  # (arrays nested past Python's stack: no answer of Triton's)
        raise unreadable(f"{what}: the server sent JSON nested too deep to read") from None


def _text(value: object) -> str:
    return "" if value is None else str(value)


def decode_infer(
    body: Body,
    header_length: int | None,
    model: str | None = None,
    request_id: str | None = None,
    placement: Placement | None = None,
) -> InferResult:
    """Read an infer response: a JSON header, then the binary outputs it describes;
    outputs in shared memory regions are read from them."""
    json_end = len(body) if header_length is None else header_length
    # A whole slice of a bytearray would copy it: JSON-only answers are read as they are.
    header = decode_json(body if header_length is None else body[:json_end], "infer")
    if "error" in header:
        raise classify_message(str(header["error"]), status=200, model=model, request_id=request_id)
    view = memoryview(body).toreadonly()  # outputs are read-only views, whatever holds them
    offset = json_end
    outputs: dict[str, Array | Undecoded] = {}
    datatypes = {}
    for output in header.get("outputs", ()):
        name = output["name"]
        datatype = output["datatype"]
        shape = output["shape"]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is not None and (type(size) is not int or size < 0):
            raise unreadable(f"output {name!r}: binary_data_size {size!r} is not a size")
        slot = None if placement is None else placement.outputs.get(name)
        if slot is not None:
            outputs[name] = read_region(name, datatype, shape, slot)
        elif size is None:
            outputs[name] = decode_json_output(name, datatype, shape, output.get("data", []))
        else:
            outputs[name] = decode_output(name, datatype, shape, view[offset : offset + size])
            offset += size
        datatypes[name] = datatype
    if len(outputs) != len(header.get("outputs", ())):
        raise named_twice([str(output["name"]) for output in header["outputs"]])
    return InferResult.of(
        outputs,
        datatypes,
        # MLServer's stream events write what is unset as null.
        model_name=_text(header.get("model_name")),
        model_version=_text(header.get("model_version")),
        id=_text(header.get("id")),
        parameters=header.get("parameters") or {},
    )


# A path the server has no route for: Triton's {"error": "Not Found"}, FastAPI's
# {"detail": "Not Found"} (MLServer, KServe), Go's "404 page not found"; web servers and
# proxies answer with an HTML page.
_NO_ROUTE = re.compile(r"(404:?\s*)?(page\s+)?not\s+found\.?", re.IGNORECASE)


def error_from_response(
    status: int, body: Body, *, model: str | None = None, request_id: str | None = None
) -> TritonError:
    """The error of a non-200 answer, from its status and its ``{"error": ...}`` body."""
    message = body.decode("utf-8", "replace").strip()
    if message.startswith("data:"):
        # generate_stream refuses a request with an event-stream body: the error is its
        # first event, followed by any responses the model sent after it.
        message = message.splitlines()[0].removeprefix("data:").strip()
    try:
        decoded = json.loads(message)
    except (ValueError, RecursionError):
        decoded = None
    if isinstance(decoded, dict):
        message = _error_text(decoded, message)
    if model is not None:
        message = _with_name_as_given(message, model)
    if status == 404 and decoded is None and message.startswith("<"):
        message = "Not Found"  # a web server's or a proxy's HTML page
    if status == 404 and _NO_ROUTE.fullmatch(message):
        return UnsupportedError(message, status=404, model=model, request_id=request_id)
    if 300 <= status < 400:
        message = redirect_refused(status, message)
    return classify_status(status, message or f"HTTP {status}", model=model, request_id=request_id)


def _with_name_as_given(message: str, model: str) -> str:
    """``message`` with the model's name as the caller wrote it, where the server echoed
    it %-escaped as the path carried it.

    Triton's HTTP endpoint does not decode %-escapes in the path: it looks up ``a%20b``,
    not ``a b``, so a model whose name needs escaping is reachable over gRPC only. Servers
    that decode (MLServer, KServe) echo the name as given and are left alone.
    """
    escaped = path_segment(model)
    if escaped == model or escaped not in message:
        return message
    return (
        f"{message.replace(escaped, model)} (over HTTP the name travels as {escaped!r}, "
        "which this server does not decode; a model whose name needs %-escapes is "
        "reachable over gRPC)"
    )


def _error_text(body: dict[str, Any], raw: str) -> str:
    """The message of an error body: Triton's ``{"error": ...}``, or FastAPI's ``{"detail":
    ...}`` (MLServer, KServe): a text, or a list of validation errors."""
    for key in ("error", "detail"):
        value = body.get(key)
        if isinstance(value, list):
            return "; ".join(
                f"{'.'.join(map(str, item.get('loc', ())))}: {item.get('msg', item)}"
                if isinstance(item, dict)
                else str(item)
                for item in value
            )
        if value is not None:
            return str(value)
    return raw


def load_body(config: str | None, files: Mapping[str, bytes] | None) -> bytes:
    """The body of a repository load request: an optional config and files (base64)."""
    parameters: dict[str, Any] = {}
    if config is not None:
        parameters["config"] = config
    for path, content in (files or {}).items():
        parameters[path] = base64.b64encode(content).decode("ascii")
    return json.dumps({"parameters": parameters} if parameters else {}).encode()


Reader = Callable[[int, int | None, Body], T]
"""(status, Inference-Header-Content-Length or None, body) -> value, or raise."""


@attrs.define
class HttpCall(Generic[T]):
    """One HTTP exchange, described without doing it: what to send, how to read the answer."""

    method: str
    path: str
    body: Sequence[bytes | memoryview] | None
    headers: Mapping[str, str]
    read: Reader[T]
    compressible: bool = False
    """Whether the server reads this body compressed: Triton decompresses inference
    requests only (any other body, compressed, is refused as JSON it cannot parse), and
    other servers may read none."""


@attrs.define
class HttpStream(Generic[T]):
    """A request answered by server-sent events, read as they arrive.

    ``check`` reads a refusal (any status but 200) and raises it; ``decoder()`` makes a
    fresh :class:`EventDecoder` for the events of one answer.
    """

    method: str
    path: str
    body: Sequence[bytes | memoryview]
    headers: Mapping[str, str]
    check: Reader[None]
    decoder: Callable[[], EventDecoder[T]]
    model: str | None = None
    cut_off: str | None = None
    """For a server that ends a stream it has opened by dropping the connection when the
    model fails (MLServer): the message of the :class:`InferenceError` that such an end
    raises, instead of a connection error."""

    def cut_off_error(self, request_id: str | None) -> InferenceError | None:
        """The error of a stream that broke off after it opened, if this server means a
        model's failure by that."""
        if self.cut_off is None:
            return None
        return InferenceError(self.cut_off, model=self.model, request_id=request_id)

    def opens(self, status: int, content_type: str | None) -> bool:
        """Whether an answer opens the stream: a 200 that is an event stream (or does
        not say what it is)."""
        return status == 200 and (
            not content_type
            or content_type.partition(";")[0].strip().lower() == "text/event-stream"
        )

    def refuse(self, status: int, content_type: str | None, body: Body) -> NoReturn:
        """Raise the error of an answer that does not open the stream: the server's
        refusal, or a 200 of another kind (a proxy's page, a server that ignored
        ``Accept``), which would otherwise read as a stream of no events."""
        self.check(status, None, body)
        raise InferenceError(
            f"the server answered {self.path} with {content_type}, not an event stream: "
            f"{bytes(body[:200])!r}",
            model=self.model,
        )


class EventDecoder(Generic[T]):
    """Feed the bytes of an event stream as they arrive; get one item per event.

    ``end``: the last item, made when the stream ends (None: no item)."""

    def __init__(
        self, convert: Callable[[str], T], end: Callable[[], T | None] | None = None
    ) -> None:
        self._events = ServerSentEvents()
        self._convert = convert
        self._end = end

    def feed(self, chunk: bytes) -> Iterator[T]:
        """The items of the events ``chunk`` ends, one by one: an event that fails to
        convert (the server's error) raises after the items of those before it."""
        for data in self._events.feed(chunk):
            yield self._convert(data)

    def finish(self) -> Iterator[T]:
        """The items of an event the stream ended without a blank line after, and the
        stream's last item (see ``end``)."""
        for data in self._events.finish():
            yield self._convert(data)
        last = None if self._end is None else self._end()
        if last is not None:
            yield last


_NO_HEADERS: Final[Mapping[str, str]] = {}
_JSON_HEADERS: Final = {"Content-Type": "application/json"}
_STREAM_HEADERS: Final = {"Content-Type": "application/json", "Accept": "text/event-stream"}


def _is_ok(status: int, header_length: int | None, body: Body) -> bool:
    """A health answer: 200 is yes, another answer of the server no (KServe says not
    ready with a 503 and its ``{"error": ...}``). A gateway's 502, 503 or 504 (the server
    behind it is away) is its error, retried under the policy as gRPC's UNAVAILABLE is
    (is_live and the others answer False once it gives up)."""
    if status in _GATEWAY_FAILURES and not _servers_own(body):
        raise error_from_response(status, body)
    return status == 200


def _servers_own(body: Body) -> bool:
    """Whether an error answer is an inference server's ``{"error": ...}`` JSON."""
    try:
        answer = json.loads(bytes(body))
    except (ValueError, RecursionError):
        return False
    return isinstance(answer, dict) and "error" in answer


_GATEWAY_FAILURES: Final = frozenset({502, 503, 504})


def _reader(
    then: Callable[[int | None, Body], T],
    model: str | None = None,
    request_id: str | None = None,
) -> Reader[T]:
    """A reader that raises the server's error unless the status is 200, else reads on."""

    def read(status: int, header_length: int | None, body: Body) -> T:
        if status != 200:
            raise error_from_response(status, body, model=model, request_id=request_id)
        return then(header_length, body)

    return read


def _json_reader(what: str, model: str | None = None) -> Reader[Any]:
    def json_body(header_length: int | None, body: Body) -> Any:
        return decode_json(body, what)

    return _reader(json_body, model)


def _same_model(reader: Reader[Any], name: str) -> Reader[Any]:
    """``reader`` of a model's metadata or statistics, refusing those of another model.

    Triton's HTTP endpoint looks a %-escaped name up as it travels (``a%20b`` for
    ``a b``), so a model literally named so would answer in its place.
    """

    def of_that_model(status: int, header_length: int | None, body: Body) -> Any:
        answer = reader(status, header_length, body)
        entries = answer if isinstance(answer, list) else [answer]
        named = {entry.get("name") if isinstance(entry, dict) else None for entry in entries}
        if named <= {name}:
            return answer
        raise ModelNotFoundError(
            f"model {name!r} was not reached: over HTTP the name travels as "
            f"{path_segment(name)!r}, which this server does not decode, and the model "
            f"{sorted(map(str, named - {name}))[0]!r} answered; a model whose name needs "
            "%-escapes is reachable over gRPC",
            status=404,
            model=name,
        )

    return of_that_model


def _slashed_name(reader: Reader[T], name: str) -> Reader[T]:
    """``reader`` of a model's own path, for a name with a '/': a server that decodes
    the %2F (uvicorn: MLServer, KServe) finds a path of a part more, which no route has,
    or redirects it (FastAPI drops a trailing slash). The model is missing there."""

    def read(status: int, header_length: int | None, body: Body) -> T:
        try:
            return reader(status, header_length, body)
        except TritonError as error:
            redirected = isinstance(error.status, int) and 300 <= error.status < 400
            if not redirected and not (type(error) is UnsupportedError and error.status == 404):
                raise
            raise ModelNotFoundError(
                f"model {name!r} was not found: over HTTP its '/' travels as %2F, which "
                "this server decodes into a path of its own; a model whose name has a '/' "
                "is reachable over gRPC",
                status=error.status,
                model=name,
                request_id=error.request_id,
            ) from error

    return read


def _status_reader(model: str | None, request_id: str | None = None) -> Reader[None]:
    def nothing(header_length: int | None, body: Body) -> None:
        return None

    return _reader(nothing, model, request_id)


def _model_stats(answer: Any, model: str | None) -> Any:
    """The ``model_stats`` of a decoded answer, which must have them (a proxy's
    ``{"error": ...}`` with 200, or any other object, is no answer of statistics)."""
    refuse_error_body(answer, "model_statistics", model)
    try:
        return answer["model_stats"]
    except (KeyError, TypeError) as exc:
        raise unreadable_answer(exc, "model_statistics", model) from exc


def _statistics_reader(model: str | None) -> Reader[Any]:
    def model_stats(header_length: int | None, body: Body) -> Any:
        return _model_stats(decode_json(body, "model statistics"), model)

    return _reader(model_stats, model)


def _infer_reader(request: InferRequest) -> Reader[InferResult]:
    model, request_id = request.model, request.request_id or None
    placement = request.shared_memory
    keep = request.outputs_to_keep()

    def infer_result(header_length: int | None, body: Body) -> InferResult:
        result = decode_infer(body, header_length, model, request_id, placement)
        return result if keep is None else keep_outputs(result, keep)

    return _reader(infer_result, model, request_id)


_CUT_OFF: Final = (
    "the server closed the stream before its end (MLServer does this when the model fails, "
    "and says why only in its own log)"
)

_STREAM_HINT: Final = (
    " (model.stream over HTTP goes through the generate_stream extension, which takes one "
    "sample of scalar or 1-D inputs; a gRPC client streams any decoupled model)"
)


def _stream_refusal_reader(model: str, request_id: str | None) -> Reader[None]:
    """A generate_stream refusal; one of the inputs gets a hint about gRPC."""
    check = _status_reader(model, request_id)

    def read(status: int, header_length: int | None, body: Body) -> None:
        try:
            check(status, header_length, body)
        except InferenceError as error:
            message = error.message.lower()
            hints = ("parse", "json", "shape", "datatype", "data-type")
            if not any(hint in message for hint in hints):
                raise
            raise type(error)(
                error.message + _STREAM_HINT,
                status=error.status,
                model=error.model,
                request_id=error.request_id,
                retryable=error.retryable,
            ) from error

    return read


def _generate_events(spec: ModelSpec) -> EventDecoder[dict[str, JSONValue]]:
    """The decoder of one generate stream's events; its text outputs are decoded across
    them (see TextOutputs)."""
    text = TextOutputs()

    def convert(data: str) -> dict[str, JSONValue]:
        event = loads_event(data, "generate_stream")
        return response_fields(event, spec.name, outputs=spec.outputs, text=text)

    return EventDecoder(convert, text.finish)


def _stream_results(spec: ModelSpec, request: InferRequest) -> Callable[[str], InferResult]:
    wanted = None if request.outputs is None else {output.name for output in request.outputs}
    request_id = request.request_id or None

    def convert(data: str) -> InferResult:
        event = loads_event(data, "generate_stream")
        # (raises the error an event carries)
        response_fields(event, spec.name, request_id, outputs=spec.outputs)
        return event_to_result(event, spec, wanted)

    return convert


class HttpCodec:
    """The calls of the HTTP protocol for a server under ``base`` (a path prefix or "")."""

    def __init__(self, base: str, binary: bool | None = True) -> None:
        self.base = base
        # Tensors in Triton's binary extension, or as JSON data (other servers); None:
        # not decided yet (the transport asks the server's metadata first).
        self.binary = binary
        self._binary_given = binary  # (what the user asked for: "auto" is None)
        self._infer_paths: dict[tuple[str, str], str] = {}
        self._encoders: dict[type[Any], Callable[[Any], HttpCall[Any]]] = {
            InferRequest: self._infer,
            Generate: self._generate,
            ListModels: self._list_models,
            LoadModel: self._load,
            UnloadModel: self._unload,
            GetModelStatistics: self._statistics,
            GetTraceSettings: lambda op: self._trace(op.model_name, None),
            UpdateTraceSettings: lambda op: self._trace(op.model_name, op.updates),
            GetLogSettings: lambda op: self._settings(f"{self.base}/v2/logging", None, None),
            RegisterSystemSharedMemory: self._register,
            UnregisterSystemSharedMemory: self._unregister,
            GetSystemSharedMemoryStatus: self._shm_status,
            RegisterCudaSharedMemory: self._register_cuda,
            UnregisterCudaSharedMemory: lambda op: self._unregister(op, "cuda"),
            GetCudaSharedMemoryStatus: lambda op: self._shm_status(op, "cuda"),
            UpdateLogSettings: lambda op: self._settings(
                f"{self.base}/v2/logging", op.updates, None
            ),
        }

    def encode(self, op: Op[T]) -> HttpCall[T]:
        """How ``op`` travels over HTTP."""
        encoder = self._encoders.get(type(op))
        return cast("HttpCall[T]", (encoder or self._routed)(op))

    def encode_stream(self, op: StreamOp[T]) -> HttpStream[T]:
        """How a streamed op travels: a generate_stream request to Triton, an infer_stream
        request to a server that gave no config (see :meth:`_infer_stream`)."""
        if isinstance(op, StreamInfer | GenerateStream) and not op.spec.has_config:
            return cast("HttpStream[T]", self._infer_stream(op))
        if isinstance(op, GenerateStream):
            spec = op.spec
            body = generate_body(op.fields, op.parameters, spec=spec)
            return cast(
                "HttpStream[T]",
                self._event_stream(
                    spec.name,
                    op.version,
                    body,
                    _status_reader(spec.name),
                    lambda: _generate_events(spec),
                ),
            )
        if isinstance(op, StreamInfer):
            request, spec = op.request, op.spec
            fields = tensors_to_fields(list(request.inputs), spec)
            body = generate_body(fields, request.parameters, request.request_id)
            return cast(
                "HttpStream[T]",
                self._event_stream(
                    spec.name,
                    request.version,
                    body,
                    _stream_refusal_reader(spec.name, request.request_id or None),
                    lambda: EventDecoder(_stream_results(spec, request)),
                ),
            )
        raise TypeError(f"no HTTP stream encoding for {type(op).__name__}")

    def _infer_stream(
        self, op: StreamInfer | GenerateStream
    ) -> HttpStream[InferResult] | HttpStream[dict[str, JSONValue]]:
        """A stream through MLServer's ``infer_stream`` endpoint: an inference request in
        JSON (the only form it reads), answered by one event per response, each an
        inference response in JSON. Servers without the endpoint answer 404:
        UnsupportedError."""
        spec = op.spec
        if isinstance(op, StreamInfer):
            request = op.request
        else:
            request = generate_request(spec, op.version, op.fields, op.parameters)
        request_id = request.request_id or None
        keep = request.outputs_to_keep()

        def result(data: str) -> InferResult:
            decoded = decode_infer(
                data.encode("utf-8", "surrogateescape"), None, spec.name, request_id
            )
            return keep_outputs(decoded, keep)

        def decoder() -> EventDecoder[Any]:
            if isinstance(op, StreamInfer):
                return EventDecoder(result)
            text = TextOutputs()

            def fields(data: str) -> dict[str, JSONValue]:
                return result_fields(result(data), spec, text)

            return EventDecoder(fields, text.finish)

        return HttpStream(
            "POST",
            model_path(self.base, spec.name, request.version, "/infer_stream"),
            [encode_infer_json(request, binary_possible=False)],
            _STREAM_HEADERS,
            _status_reader(spec.name, request_id),
            decoder,
            spec.name,
            cut_off=_CUT_OFF,
        )

    def _event_stream(
        self,
        name: str,
        version: str | None,
        body: bytes,
        check: Reader[None],
        decoder: Callable[[], EventDecoder[T]],
    ) -> HttpStream[T]:
        path = model_path(self.base, name, version, "/generate_stream")
        return HttpStream("POST", path, [body], _STREAM_HEADERS, check, decoder, name)

    def _routed(self, op: Op[Any]) -> HttpCall[Any]:
        """A plain op: a GET of its route's path."""
        route = op.route
        if route is None:
            raise TypeError(f"no HTTP encoding for {type(op).__name__}")
        path = route.http_path
        if "{model}" in path:
            name, version = getattr(op, "name"), getattr(op, "version")  # noqa: B009
            path = path.replace("{model}", model_segment(name, version))
        if route.answer == "ok":
            return HttpCall("GET", self.base + path, None, _NO_HEADERS, _is_ok)
        reader = _json_reader(op.call.replace("_", " "), op.model)
        if isinstance(op, GetModelMetadata | GetModelConfig) and path_segment(op.name) != op.name:
            reader = _same_model(reader, op.name)
            if "/" in op.name:
                reader = _slashed_name(reader, op.name)
        return HttpCall("GET", self.base + path, None, _NO_HEADERS, reader)

    def _shm_path(self, name: str, action: str, kind: str = "system") -> str:
        region = f"/region/{path_segment(name)}" if name else ""
        return f"{self.base}/v2/{kind}sharedmemory{region}/{action}"

    def _register(self, op: RegisterSystemSharedMemory) -> HttpCall[None]:
        body = {"key": op.key, "offset": op.offset, "byte_size": op.byte_size}
        path = self._shm_path(op.name, "register")
        return HttpCall(
            "POST", path, [json.dumps(body).encode()], _JSON_HEADERS, _status_reader(None)
        )

    def _register_cuda(self, op: RegisterCudaSharedMemory) -> HttpCall[None]:
        handle = base64.b64encode(op.raw_handle).decode("ascii")
        body = {"raw_handle": {"b64": handle}, "device_id": op.device_id, "byte_size": op.byte_size}
        path = self._shm_path(op.name, "register", "cuda")
        return HttpCall(
            "POST", path, [json.dumps(body).encode()], _JSON_HEADERS, _status_reader(None)
        )

    def _unregister(
        self, op: UnregisterSystemSharedMemory | UnregisterCudaSharedMemory, kind: str = "system"
    ) -> HttpCall[None]:
        path = self._shm_path(op.name, "unregister", kind)
        return HttpCall("POST", path, [b"{}"], _JSON_HEADERS, _status_reader(None))

    def _shm_status(
        self, op: GetSystemSharedMemoryStatus | GetCudaSharedMemoryStatus, kind: str = "system"
    ) -> HttpCall[Any]:
        path = self._shm_path(op.name, "status", kind)
        return HttpCall("GET", path, None, _NO_HEADERS, _json_reader("shared memory status"))

    def _list_models(self, op: ListModels) -> HttpCall[Any]:
        path = f"{self.base}/v2/repository/index"
        return HttpCall("POST", path, [b"{}"], _JSON_HEADERS, _json_reader("repository index"))

    def _load(self, op: LoadModel) -> HttpCall[None]:
        path = f"{self.base}/v2/repository/models/{path_segment(op.name)}/load"
        body = [load_body(op.config, op.files)]
        return HttpCall("POST", path, body, _JSON_HEADERS, _status_reader(op.name))

    def _unload(self, op: UnloadModel) -> HttpCall[None]:
        path = f"{self.base}/v2/repository/models/{path_segment(op.name)}/unload"
        parameters = {"parameters": {"unload_dependents": op.unload_dependents}}
        body = [json.dumps(parameters).encode()]
        return HttpCall("POST", path, body, _JSON_HEADERS, _status_reader(op.name))

    def _statistics(self, op: GetModelStatistics) -> HttpCall[Any]:
        reader = _statistics_reader(op.name)
        if op.name is not None:
            if path_segment(op.name) != op.name:
                reader = _same_model(reader, op.name)
            path = model_path(self.base, op.name, op.version, "/stats")
            return HttpCall("GET", path, None, _NO_HEADERS, reader)

        def every_model(status: int, header_length: int | None, body: Body) -> Any:
            # A server without the statistics extension reads /v2/models/stats as the
            # metadata of a model named "stats": it has none (404), or it answers with
            # that model's metadata, which has no "model_stats".
            if status == 404:
                error = error_from_response(status, body)
                raise UnsupportedError(error.message, status=404) from error
            if status != 200:
                return reader(status, header_length, body)  # (raises the server's error)
            answer = decode_json(body, "model statistics")
            refuse_error_body(answer, "model_statistics")
            if isinstance(answer, dict) and "model_stats" not in answer:
                raise UnsupportedError(
                    "Not Found (the metadata of a model named 'stats' answered)", status=404
                )
            return _model_stats(answer, None)

        return HttpCall("GET", f"{self.base}/v2/models/stats", None, _NO_HEADERS, every_model)

    def _trace(self, model: str | None, updates: Mapping[str, list[str]] | None) -> HttpCall[Any]:
        if model is None:
            path = f"{self.base}/v2/trace/setting"
        else:
            path = model_path(self.base, model, None, "/trace/setting")
        # Over HTTP only the level is a list; the other settings are plain strings, and
        # null clears one.
        http_updates: dict[str, list[str] | str | None] | None = None
        if updates is not None:
            http_updates = {
                key: None if not values else values if key == "trace_level" else values[0]
                for key, values in updates.items()
            }
        return self._settings(path, http_updates, model)

    def _settings(
        self, path: str, updates: Mapping[str, Any] | None, model: str | None
    ) -> HttpCall[Any]:
        reader = _json_reader("settings", model)
        if updates is None:
            return HttpCall("GET", path, None, _NO_HEADERS, reader)
        return HttpCall("POST", path, [json.dumps(updates).encode()], _JSON_HEADERS, reader)

    def _generate(self, op: Generate) -> HttpCall[dict[str, JSONValue]]:
        spec = op.spec
        if not spec.has_config:
            # Not Triton: its generate extension cannot be counted on (MLServer's
            # generate endpoint takes an inference request), so generate is an inference,
            # as over gRPC, in JSON, which every such server reads.
            request = generate_request(spec, op.version, op.fields, op.parameters)
            call = self._infer(request, json_body=True)
            infer = call.read

            def read(status: int, header_length: int | None, data: Body) -> dict[str, JSONValue]:
                return result_fields(infer(status, header_length, data), spec)

            return HttpCall(
                call.method, call.path, call.body, call.headers, read, call.compressible
            )
        body = generate_body(op.fields, op.parameters, spec=spec)
        path = model_path(self.base, spec.name, op.version, "/generate")

        def generated(header_length: int | None, data: Body) -> dict[str, JSONValue]:
            return response_fields(loads_event(data, "generate"), spec.name, outputs=spec.outputs)

        return HttpCall("POST", path, [body], _JSON_HEADERS, _reader(generated, spec.name))

    def _infer(self, request: InferRequest, json_body: bool = False) -> HttpCall[InferResult]:
        if json_body or self.binary is False:
            # (http_binary=True is a remedy on Triton only: where the user chose JSON)
            binary_possible = not json_body and self._binary_given is False
            parts: list[bytes | memoryview] = [encode_infer_json(request, binary_possible)]
            headers = _JSON_HEADERS
        else:
            parts, json_length = encode_infer(request)
            headers = {
                HEADER_LENGTH: str(json_length),
                "Content-Type": "application/octet-stream",
            }
        key = (request.model, request.version)
        path = self._infer_paths.get(key)
        if path is None:
            path = model_path(self.base, request.model, request.version, "/infer")
            if len(self._infer_paths) < _MAX_HEADERS:
                self._infer_paths[key] = path
        # Compressed where it is Triton that reads it (binary tensors): of the others,
        # KServe reads no compressed body, MLServer no deflate.
        compressible = self.binary is True and not json_body
        return HttpCall("POST", path, parts, headers, _infer_reader(request), compressible)
