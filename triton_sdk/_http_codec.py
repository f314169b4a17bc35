"""The KServe v2 HTTP/REST protocol with Triton's binary tensor extension, without I/O.

Both HTTP backends (sync and asyncio) send what :func:`encode_infer` builds and read
answers with :func:`decode_infer` and :func:`error_from_response`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

import attrs

from ._errors import InferenceError, TritonError, classify_message, classify_status
from ._generate import response_fields
from ._request import InferRequest
from ._result import InferResult, decode_json_output, decode_output
from ._wire import tensor_payload

__all__ = [
    "HEADER_LENGTH",
    "HttpCall",
    "Routes",
    "decode_infer",
    "encode_infer",
    "error_from_response",
]

T = TypeVar("T")

HEADER_LENGTH: Final = "Inference-Header-Content-Length"


def model_path(base: str, name: str, version: str | None, suffix: str = "") -> str:
    """``{base}/v2/models/{name}[/versions/{version}]{suffix}``, with the name quoted."""
    path = f"{base}/v2/models/{quote(name, safe='')}"
    if version:
        path += f"/versions/{quote(version, safe='')}"
    return path + suffix


def _parameters(request: InferRequest) -> dict[str, Any]:
    parameters: dict[str, Any] = dict(request.parameters or {})
    if request.sequence_id:
        parameters["sequence_id"] = request.sequence_id
        parameters["sequence_start"] = request.sequence_start
        parameters["sequence_end"] = request.sequence_end
    if request.priority:
        parameters["priority"] = request.priority
    return parameters


def _header(request: InferRequest, sizes: list[int]) -> bytes:
    inputs = [
        {
            "name": tensor.name,
            "shape": list(tensor.array.shape),
            "datatype": tensor.datatype,
            "parameters": {"binary_data_size": size},
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
            {
                "name": output.name,
                "parameters": (
                    {"binary_data": True, "classification": output.class_count}
                    if output.class_count
                    else {"binary_data": True}
                ),
            }
            for output in request.outputs
        ]
    if parameters:
        header["parameters"] = parameters
    return json.dumps(header, separators=(",", ":")).encode()


_HeaderKey = tuple[Any, ...]
_HEADERS: dict[_HeaderKey, bytes] = {}
_MAX_HEADERS: Final = 1024


def encode_infer(request: InferRequest) -> tuple[list[bytes | memoryview], int]:
    """The body parts of an infer request and the length of its JSON header.

    Headers of plain requests (no id, parameters or sequence) repeat from call to call,
    so they are kept, keyed by what they contain.
    """
    parts: list[bytes | memoryview] = [b""]
    sizes = []
    for tensor in request.inputs:
        raw = tensor_payload(tensor)
        parts.append(raw)
        sizes.append(len(raw) if isinstance(raw, bytes) else raw.nbytes)
    plain = not (
        request.request_id or request.parameters or request.sequence_id or request.priority
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


def decode_json(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise InferenceError(f"{what}: the server sent a body that is not JSON") from exc


def decode_infer(
    body: bytes,
    header_length: int | None,
    model: str | None = None,
    request_id: str | None = None,
) -> InferResult:
    """Read an infer response: a JSON header, then the binary outputs it describes."""
    json_end = len(body) if header_length is None else header_length
    header = decode_json(body[:json_end], "infer")
    if "error" in header:
        raise classify_message(str(header["error"]), status=200, model=model, request_id=request_id)
    view = memoryview(body)
    offset = json_end
    outputs = {}
    datatypes = {}
    for output in header.get("outputs", ()):
        name = output["name"]
        datatype = output["datatype"]
        shape = output["shape"]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:
            outputs[name] = decode_json_output(name, datatype, shape, output.get("data", []))
        else:
            outputs[name] = decode_output(name, datatype, shape, view[offset : offset + size])
            offset += size
        datatypes[name] = datatype
    return InferResult.of(
        outputs,
        datatypes,
        model_name=str(header.get("model_name", "")),
        model_version=str(header.get("model_version", "")),
        id=str(header.get("id", "")),
        parameters=header.get("parameters") or {},
    )


def error_from_response(
    status: int, body: bytes, *, model: str | None = None, request_id: str | None = None
) -> TritonError:
    """The error of a non-200 answer, from its status and its ``{"error": ...}`` body."""
    message = body.decode("utf-8", "replace").strip()
    if message.startswith("data:"):
        # generate_stream refuses a request with an event-stream body.
        message = "\n".join(
            line.removeprefix("data:").strip()
            for line in message.splitlines()
            if line.startswith("data:")
        )
    try:
        decoded = json.loads(message)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and "error" in decoded:
        message = str(decoded["error"])
    return classify_status(status, message or f"HTTP {status}", model=model, request_id=request_id)


def load_body(config: str | None, files: Mapping[str, bytes] | None) -> bytes:
    """The body of a repository load request: an optional config and files (base64)."""
    parameters: dict[str, Any] = {}
    if config is not None:
        parameters["config"] = config
    for path, content in (files or {}).items():
        parameters[path] = base64.b64encode(content).decode("ascii")
    return json.dumps({"parameters": parameters} if parameters else {}).encode()


@attrs.define
class HttpCall(Generic[T]):
    """One HTTP exchange, described without doing it: what to send, how to read the answer.

    The sync and asyncio backends each have a single method that performs a call; every
    endpoint is described once, here.
    """

    method: str
    path: str
    body: Sequence[bytes | memoryview] | None
    headers: Mapping[str, str]
    read: Callable[[int, int | None, bytes], T]
    """(status, Inference-Header-Content-Length or None, body) -> value, or raise."""
    model: str | None = None
    request_id: str | None = None


_NO_HEADERS: Final[Mapping[str, str]] = {}
_JSON_HEADERS: Final = {"Content-Type": "application/json"}
_STREAM_HEADERS: Final = {"Content-Type": "application/json", "Accept": "text/event-stream"}


def _is_ok(status: int, header_length: int | None, body: bytes) -> bool:
    return status == 200


Reader = Callable[[int, int | None, bytes], T]
"""(status, Inference-Header-Content-Length or None, body) -> value, or raise."""


def _reader(
    then: Callable[[int | None, bytes], T],
    model: str | None = None,
    request_id: str | None = None,
) -> Reader[T]:
    """A reader that raises the server's error unless the status is 200, else reads on."""

    def read(status: int, header_length: int | None, body: bytes) -> T:
        if status != 200:
            raise error_from_response(status, body, model=model, request_id=request_id)
        return then(header_length, body)

    return read


def _json_reader(what: str, model: str | None = None) -> Reader[Any]:
    return _reader(lambda _, body: decode_json(body, what), model)


def _checked(model: str | None) -> Reader[None]:
    return _reader(lambda _, __: None, model)


def _field_reader(field: str, model: str | None) -> Reader[Any]:
    return _reader(lambda _, body: decode_json(body, field).get(field, []), model)


def _generate_reader(model: str) -> Reader[dict[str, Any]]:
    return _reader(lambda _, body: response_fields(decode_json(body, "generate"), model), model)


def _infer_reader(request: InferRequest) -> Reader[InferResult]:
    model, request_id = request.model, request.request_id or None
    return _reader(
        lambda length, body: decode_infer(body, length, model, request_id), model, request_id
    )


def _settings_call(
    path: str, updates: Mapping[str, Any] | None, model: str | None
) -> HttpCall[Any]:
    reader = _json_reader("settings", model)
    if updates is None:
        return HttpCall("GET", path, None, _NO_HEADERS, reader, model)
    return HttpCall("POST", path, [json.dumps(updates).encode()], _JSON_HEADERS, reader, model)


class Routes:
    """The calls of the HTTP protocol for a server under ``base`` (a path prefix or "")."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._infer_paths: dict[tuple[str, str], str] = {}

    def live(self) -> HttpCall[bool]:
        return HttpCall("GET", f"{self.base}/v2/health/live", None, _NO_HEADERS, _is_ok)

    def ready(self) -> HttpCall[bool]:
        return HttpCall("GET", f"{self.base}/v2/health/ready", None, _NO_HEADERS, _is_ok)

    def model_ready(self, name: str, version: str | None) -> HttpCall[bool]:
        path = model_path(self.base, name, version, "/ready")
        return HttpCall("GET", path, None, _NO_HEADERS, _is_ok, name)

    def server_metadata(self) -> HttpCall[Any]:
        return HttpCall(
            "GET", f"{self.base}/v2", None, _NO_HEADERS, _json_reader("server metadata")
        )

    def model_metadata(self, name: str, version: str | None) -> HttpCall[Any]:
        path = model_path(self.base, name, version)
        return HttpCall("GET", path, None, _NO_HEADERS, _json_reader("model metadata", name), name)

    def model_config(self, name: str, version: str | None) -> HttpCall[Any]:
        path = model_path(self.base, name, version, "/config")
        return HttpCall("GET", path, None, _NO_HEADERS, _json_reader("model config", name), name)

    def repository_index(self) -> HttpCall[Any]:
        path = f"{self.base}/v2/repository/index"
        return HttpCall("POST", path, [b"{}"], _JSON_HEADERS, _json_reader("repository index"))

    def load_model(
        self, name: str, config: str | None, files: Mapping[str, bytes] | None
    ) -> HttpCall[None]:
        path = f"{self.base}/v2/repository/models/{quote(name, safe='')}/load"
        body = [load_body(config, files)]
        return HttpCall("POST", path, body, _JSON_HEADERS, _checked(name), name)

    def unload_model(self, name: str, unload_dependents: bool) -> HttpCall[None]:
        path = f"{self.base}/v2/repository/models/{quote(name, safe='')}/unload"
        body = [json.dumps({"parameters": {"unload_dependents": unload_dependents}}).encode()]
        return HttpCall("POST", path, body, _JSON_HEADERS, _checked(name), name)

    def model_statistics(self, name: str | None, version: str | None) -> HttpCall[Any]:
        if name is None:
            path = f"{self.base}/v2/models/stats"
        else:
            path = model_path(self.base, name, version, "/stats")
        return HttpCall("GET", path, None, _NO_HEADERS, _field_reader("model_stats", name), name)

    def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None
    ) -> HttpCall[Any]:
        if model is None:
            path = f"{self.base}/v2/trace/setting"
        else:
            path = model_path(self.base, model, None, "/trace/setting")
        # Over HTTP only the level is a list; the other settings are plain strings.
        http_updates: dict[str, list[str] | str] | None = None
        if updates is not None:
            http_updates = {
                key: values if key == "trace_level" else values[0]
                for key, values in updates.items()
            }
        return _settings_call(path, http_updates, model)

    def log_settings(self, updates: Mapping[str, bool | int | str] | None) -> HttpCall[Any]:
        return _settings_call(f"{self.base}/v2/logging", updates, None)

    def generate(self, name: str, version: str | None, body: bytes) -> HttpCall[dict[str, Any]]:
        path = model_path(self.base, name, version, "/generate")
        return HttpCall("POST", path, [body], _JSON_HEADERS, _generate_reader(name), name)

    def generate_stream(self, name: str, version: str | None, body: bytes) -> HttpCall[None]:
        """The request of a generate stream; ``read`` only checks the status."""
        path = model_path(self.base, name, version, "/generate_stream")
        return HttpCall("POST", path, [body], _STREAM_HEADERS, _checked(name), name)

    def infer(self, request: InferRequest) -> HttpCall[InferResult]:
        parts, json_length = encode_infer(request)
        headers = {HEADER_LENGTH: str(json_length), "Content-Type": "application/octet-stream"}
        path = self._infer_paths.get((request.model, request.version))
        if path is None:
            path = model_path(self.base, request.model, request.version, "/infer")
            self._infer_paths[(request.model, request.version)] = path
        return HttpCall(
            "POST",
            path,
            parts,
            headers,
            _infer_reader(request),
            request.model,
            request.request_id or None,
        )
