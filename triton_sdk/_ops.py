"""Every server call, described once as a value: what it asks and what it answers.

A shell builds an op, the call path runs it through the hooks and the retry policy, and
a transport sends it: the codecs (``_http_codec``, ``_grpc_codec``) turn each op into
its protocol's request and read the answer back into the same protocol-neutral value.

Plain calls (a GET over HTTP, a unary RPC whose request fields are the op's fields)
carry their :class:`Route` and need nothing else: adding one is an op here and a shell
method. Calls with bodies, streams or protocol differences have an encoder in each codec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeAlias, TypeVar

import attrs

from ._checks import check_model_name, check_version
from ._config import check_metrics_url, check_openai_url
from ._errors import InvalidInputError, UnsupportedError
from ._result import InferResult
from ._spec import ModelSpec, stateful_message

if TYPE_CHECKING:
    from ._request import InferRequest, ParameterValue

__all__ = [
    "JSON",
    "FetchMetrics",
    "Generate",
    "GenerateStream",
    "GetCudaSharedMemoryStatus",
    "GetLogSettings",
    "GetModelConfig",
    "GetModelMetadata",
    "GetModelStatistics",
    "GetServerMetadata",
    "GetSystemSharedMemoryStatus",
    "GetTraceSettings",
    "IsModelReady",
    "IsServerLive",
    "IsServerReady",
    "JSONValue",
    "ListModels",
    "LoadModel",
    "Op",
    "OpenAIEvents",
    "OpenAIPost",
    "RegisterCudaSharedMemory",
    "RegisterSystemSharedMemory",
    "Route",
    "StreamInfer",
    "StreamOp",
    "UnloadModel",
    "UnregisterCudaSharedMemory",
    "UnregisterSystemSharedMemory",
    "UpdateLogSettings",
    "UpdateTraceSettings",
]

T_co = TypeVar("T_co", covariant=True)

JSON: TypeAlias = dict[str, Any]
"""A decoded JSON object; gRPC answers are converted to the shape HTTP's have (64-bit
integers as ints), except that fields left at their default are left out."""

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
"""A value of a decoded JSON document."""


@attrs.frozen
class Route:
    """Where a plain call goes: an HTTP path and a unary RPC, both without a body.

    ``http_path`` may hold ``{model}``, which stands for the op's ``name`` (and
    ``/versions/{version}`` when it has one). The RPC's request message takes the op's
    fields by name. ``answer`` says how to read the reply: ``"json"`` (the body, or the
    RPC's reply, or its ``field``, as JSON) or ``"ok"`` (HTTP 200, or the RPC's boolean
    ``field``).
    """

    http_path: str
    rpc: str
    answer: Literal["json", "ok"] = "json"
    field: str | None = None


class _Call:
    """What every server call says of itself.

    Attributes:
        call: the call's name, for logs, hooks and errors (``"infer"``, ``"load_model"``).
    """

    __slots__ = ()

    call: ClassVar[str]

    @property
    def model(self) -> str | None:
        """The model the call is about, if any."""
        return None

    @property
    def request_id(self) -> str | None:
        """The request id the call carries, if any."""
        return None


class Op(_Call, Generic[T_co]):
    """A unary server call whose answer is a ``T_co``.

    Attributes:
        idempotent: whether sending it twice is harmless, so the retry policy may.
        route: set on plain calls, see :class:`Route`.
    """

    __slots__ = ()

    route: ClassVar[Route | None] = None

    @property
    def idempotent(self) -> bool:
        """Whether running the op twice is harmless: only such ops are retried, or sent
        to another endpoint, after a failure that may have left them running."""
        return True


class StreamOp(_Call, Generic[T_co]):
    """A call answered by a stream of ``T_co``: never retried, read as it arrives."""

    __slots__ = ()


def _model_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_model_name(value)


def _optional_model_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_model_name(value)


def _version(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_version(value)


def _files(instance: object, attribute: attrs.Attribute[Any], files: object) -> None:
    if files is None:
        return
    if not isinstance(files, Mapping) or not all(
        isinstance(path, str) and isinstance(content, bytes) for path, content in files.items()
    ):
        raise InvalidInputError('files maps "file:<path>" (str) to its content (bytes)')
    bare = [path for path in files if not path.startswith("file:")]
    if bare:
        raise InvalidInputError(
            f'files maps "file:<path>" to content: {", ".join(map(repr, bare))} lacks the '
            f'"file:" prefix (e.g. "file:1/model.py")'
        )
    if files and getattr(instance, "config", None) is None:
        # (the server looks for the model in its repository, and says only that it failed)
        raise InvalidInputError("files= needs a config= too: the server loads files with one")


def _config_text(instance: object, attribute: attrs.Attribute[Any], config: object) -> None:
    if config is None:
        return
    try:
        parsed = json.loads(config, parse_constant=_no_constant)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        # (the server says only "failed to poll from model repository")
        raise InvalidInputError(f"config is not JSON text: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidInputError(
            f"config must be a JSON object (a model config), got {str(config)[:40]!r}"
        )


def _no_constant(name: str) -> object:
    """json's NaN and Infinity, which are no JSON."""
    raise ValueError(f"{name} is no JSON value")


def _flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{attribute.name} must be a bool, got {type(value).__name__}")


def _name_field() -> Any:
    return attrs.field(validator=_model_name)


def _version_field() -> Any:
    return attrs.field(default=None, validator=_version)


class _ModelOp:
    """Mixin: the op's ``name`` is the model it is about."""

    __slots__ = ()
    name: str | None

    @property
    def model(self) -> str | None:
        return self.name


# Health and server


@attrs.frozen
class IsServerLive(Op[bool]):
    call = "is_live"
    route: ClassVar[Route] = Route("/v2/health/live", "ServerLive", "ok", "live")


@attrs.frozen
class IsServerReady(Op[bool]):
    call = "is_ready"
    route: ClassVar[Route] = Route("/v2/health/ready", "ServerReady", "ok", "ready")


@attrs.frozen
class IsModelReady(_ModelOp, Op[bool]):
    name: str = _name_field()
    version: str | None = _version_field()
    call = "is_model_ready"
    route: ClassVar[Route] = Route("/v2/models/{model}/ready", "ModelReady", "ok", "ready")


@attrs.frozen
class GetServerMetadata(Op[JSON]):
    call = "server_metadata"
    route: ClassVar[Route] = Route("/v2", "ServerMetadata")


# Models and the repository


@attrs.frozen
class GetModelMetadata(_ModelOp, Op[JSON]):
    name: str = _name_field()
    version: str | None = _version_field()
    call = "model_metadata"
    route: ClassVar[Route] = Route("/v2/models/{model}", "ModelMetadata")


@attrs.frozen
class GetModelConfig(_ModelOp, Op[JSON]):
    name: str = _name_field()
    version: str | None = _version_field()
    call = "model_config"
    route: ClassVar[Route] = Route("/v2/models/{model}/config", "ModelConfig", field="config")


@attrs.frozen
class ListModels(Op[list[JSON]]):
    """The repository index: one ``{name, version, state, reason}`` per model version."""

    call = "models"


@attrs.frozen
class LoadModel(_ModelOp, Op[None]):
    """Load or reload a model; ``config`` is the JSON text of a config override and
    ``files`` maps ``"file:<path>"`` to content. Never retried: it really reloads."""

    name: str = _name_field()
    config: str | None = attrs.field(default=None, validator=_config_text)
    files: Mapping[str, bytes] | None = attrs.field(default=None, validator=_files)
    call = "load_model"

    @property
    def idempotent(self) -> bool:
        return False


@attrs.frozen
class UnloadModel(_ModelOp, Op[None]):
    name: str = _name_field()
    unload_dependents: bool = attrs.field(default=False, validator=_flag)
    call = "unload_model"


# Statistics, trace and log settings, metrics


@attrs.frozen
class GetModelStatistics(_ModelOp, Op[list[JSON]]):
    """Statistics of one model (all of them when ``name`` is None)."""

    name: str | None = attrs.field(default=None, validator=_optional_model_name)
    version: str | None = _version_field()
    call = "model_statistics"

    def __attrs_post_init__(self) -> None:
        if self.name is None and self.version:
            # (the server answers with every model's, the version ignored)
            raise InvalidInputError("a version of the statistics needs the model's name too")


@attrs.frozen
class GetTraceSettings(Op[JSON]):
    """Trace settings, server-wide or of one model: ``{setting: [values]}``."""

    model_name: str | None = attrs.field(default=None, validator=_optional_model_name)
    call = "trace_settings"

    @property
    def model(self) -> str | None:
        return self.model_name


@attrs.frozen
class UpdateTraceSettings(Op[JSON]):
    """Change trace settings; answers the settings in force afterwards."""

    model_name: str | None = attrs.field(validator=_optional_model_name)
    updates: Mapping[str, list[str]]
    call = "update_trace_settings"

    @property
    def model(self) -> str | None:
        return self.model_name


@attrs.frozen
class GetLogSettings(Op[JSON]):
    call = "log_settings"


@attrs.frozen
class UpdateLogSettings(Op[JSON]):
    updates: Mapping[str, bool | int | str]
    call = "update_log_settings"


@attrs.frozen
class FetchMetrics(Op[str]):
    """The text of the server's Prometheus endpoint at ``url`` (its own port)."""

    url: str = attrs.field(validator=lambda _, __, url: check_metrics_url(url))
    call = "metrics"


# An OpenAI-compatible frontend (``openai_url``): its own port, plain HTTP whatever the
# client's protocol, as the metrics endpoint.


def _openai_url(instance: object, attribute: attrs.Attribute[Any], url: object) -> None:
    check_openai_url(url)


def _encoded(fields: _OpenAIFields) -> bytes:
    """The body as sent: strict JSON (no NaN or infinity, which a frontend's parser
    refuses), encoded once, when the call is made, so that a body that cannot be sent is
    refused before anything is."""
    try:
        return json.dumps(fields.body, allow_nan=False).encode()
    except (TypeError, ValueError) as error:
        raise InvalidInputError(
            f"the request cannot be sent as JSON: {error}", model=fields.model_name
        ) from None


@attrs.frozen
class _OpenAIFields:
    url: str = attrs.field(validator=_openai_url)
    body: Mapping[str, Any] = attrs.field(repr=False)
    model_name: str | None = None
    payload: bytes = attrs.field(
        init=False, repr=False, eq=False, default=attrs.Factory(_encoded, takes_self=True)
    )
    """``body`` encoded as JSON: what goes over the wire."""

    @property
    def model(self) -> str | None:
        return self.model_name


@attrs.frozen
class OpenAIPost(_OpenAIFields, Op[JSON]):
    """A POST of ``body`` to ``url`` of an OpenAI-compatible frontend, answered by one
    JSON object. Never retried: a generation is not idempotent."""

    call = "openai"

    @property
    def idempotent(self) -> bool:
        return False


@attrs.frozen
class OpenAIEvents(_OpenAIFields, StreamOp[JSON]):
    """Like :class:`OpenAIPost`, answered by the JSON events of a server-sent-event
    stream, up to ``data: [DONE]``."""

    call = "openai_stream"


# System shared memory


@attrs.frozen
class RegisterSystemSharedMemory(Op[None]):
    """Let the server map ``byte_size`` bytes at ``offset`` of the shm object ``key``
    as region ``name``. Not retried: a second registration of a name fails."""

    name: str
    key: str
    byte_size: int
    offset: int = 0
    call = "register_system_shared_memory"

    @property
    def idempotent(self) -> bool:
        return False


@attrs.frozen
class UnregisterSystemSharedMemory(Op[None]):
    """Forget region ``name`` (every region when it is empty)."""

    name: str = ""
    call = "unregister_system_shared_memory"


@attrs.frozen
class GetSystemSharedMemoryStatus(Op[list[JSON]]):
    """The registered regions (``name``, ``key``, ``offset``, ``byte_size``)."""

    name: str = ""
    call = "system_shared_memory_status"


# CUDA shared memory


@attrs.frozen
class RegisterCudaSharedMemory(Op[None]):
    """Let the server open ``byte_size`` bytes of GPU memory on device ``device_id``
    through the CUDA IPC handle ``raw_handle`` (the handle's bytes, not base64), as region
    ``name``. Not retried: a second registration of a name fails."""

    name: str
    raw_handle: bytes = attrs.field(repr=False)
    device_id: int
    byte_size: int
    call = "register_cuda_shared_memory"

    @property
    def idempotent(self) -> bool:
        return False


@attrs.frozen
class UnregisterCudaSharedMemory(Op[None]):
    """Forget CUDA region ``name`` (every CUDA region when it is empty)."""

    name: str = ""
    call = "unregister_cuda_shared_memory"


@attrs.frozen
class GetCudaSharedMemoryStatus(Op[list[JSON]]):
    """The registered CUDA regions (``name``, ``device_id``, ``byte_size``)."""

    name: str = ""
    call = "cuda_shared_memory_status"


# Inference (``InferRequest``, the hot path, lives in ``_request``)


@attrs.frozen
class _GenerateFields:
    spec: ModelSpec
    version: str | None
    fields: Mapping[str, object]
    parameters: Mapping[str, ParameterValue] | None = None

    def __attrs_post_init__(self) -> None:
        if self.spec.sequence and self.spec.decoupled:
            raise UnsupportedError(stateful_message(self.spec), model=self.spec.name)
        if self.spec.sequence:
            # Triton refuses a request without a correlation id, and a generate request
            # can carry none: the sequence fields are reserved parameters.
            raise InvalidInputError(
                f"model {self.spec.name!r} is stateful (sequence batching): the server "
                "takes its requests only within a sequence, which generate cannot carry; "
                "use model.sequence(...) and infer within it",
                model=self.spec.name,
            )

    @property
    def model(self) -> str | None:
        return self.spec.name


@attrs.frozen
class Generate(_GenerateFields, Op[dict[str, JSONValue]]):
    """The generate extension: JSON fields in, the one response's fields out.

    Over gRPC, and to a server without model configs (``spec.has_config`` false), it
    travels as an inference (a stream for decoupled models), so the model's spec says
    which fields are inputs.
    """

    call = "generate"


@attrs.frozen
class GenerateStream(_GenerateFields, StreamOp[dict[str, JSONValue]]):
    """Like :class:`Generate`, answered by the fields of each response as it arrives."""

    call = "generate_stream"


@attrs.frozen
class StreamInfer(StreamOp[InferResult]):
    """One request to a decoupled model, answered by any number of responses.

    Over HTTP it travels through the generate_stream extension, which needs the spec, or
    to a server without model configs, through its infer_stream endpoint.
    """

    request: InferRequest
    spec: ModelSpec
    call = "stream"

    @property
    def model(self) -> str | None:
        return self.request.model

    @property
    def request_id(self) -> str | None:
        return self.request.request_id or None
