"""gRPC backends over the service stubs that tritonclient ships.

Requests are built straight into tritonclient's generated protobuf messages and sent on
a channel this module configures itself, so that (a) every ``grpc.RpcError`` is caught
here and becomes a :class:`TritonError` with the original as ``__cause__``, and (b) the
hot path skips tritonclient's per-call ``InferInput`` objects.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from .._config import Endpoint, TLSConfig
from .._errors import (
    InvalidInputError,
    TritonConnectionError,
    TritonError,
    TritonTimeoutError,
    classify_message,
    classify_status,
)
from .._generate import JSONValue, generate_request, result_fields, single_response
from .._request import InferRequest, ParameterValue
from .._result import InferResult, decode_json_output, decode_output
from .._spec import ModelSpec
from .._wire import tensor_bytes
from ._loop import check_loop
from ._protocol import JSON

__all__ = ["AsyncGrpcBackend", "GrpcBackend", "channel_options"]

MAX_MESSAGE_BYTES: Final = 2**31 - 1

_InputTensor = pb.ModelInferRequest.InferInputTensor
_RequestedOutput = pb.ModelInferRequest.InferRequestedOutputTensor


def channel_options(tls: TLSConfig | None = None) -> list[tuple[str, Any]]:
    """The complete channel argument list.

    gRPC takes the list as a whole, so the 2 GiB message limits must be in it (without
    them the receive limit falls back to 4 MiB). The short reconnect backoff lets a
    client find a restarted server within a quarter of a second instead of 1-3 s (or, after a
    long outage, up to two minutes). gRPC's own retry
    policy is not configured: it silently skips requests over 256 KiB, and one retry
    layer (the SDK's) is easier to reason about.
    """
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 2**31 - 1),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 2),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 250),
    ]
    if tls is not None and tls.server_hostname:
        options.append(("grpc.ssl_target_name_override", tls.server_hostname))
    return options


def _credentials(tls: TLSConfig | None) -> grpc.ChannelCredentials:
    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"cannot read TLS file {path}: {exc}") from exc

    tls = tls or TLSConfig()
    return grpc.ssl_channel_credentials(
        root_certificates=read(tls.ca_file),
        private_key=read(tls.key_file),
        certificate_chain=read(tls.cert_file),
    )


def _metadata(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    # gRPC refuses upper-case metadata keys on the client side.
    return tuple((key.lower(), value) for key, value in headers.items()) or None


def _error(exc: grpc.RpcError, model: str | None, request_id: str | None) -> TritonError:
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    message = details or str(exc)
    if code is None:
        return TritonConnectionError(message, model=model, request_id=request_id)
    return classify_status(code.name, message, model=model, request_id=request_id)


def _set_parameter(target: Any, value: ParameterValue) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = value


def build_infer_request(request: InferRequest) -> pb.ModelInferRequest:
    """The protobuf message of an infer request."""
    message = pb.ModelInferRequest(
        model_name=request.model, model_version=request.version, id=request.request_id
    )
    inputs = []
    contents = []
    for tensor in request.inputs:
        contents.append(tensor_bytes(tensor))
        inputs.append(
            _InputTensor(name=tensor.name, datatype=tensor.datatype, shape=tensor.array.shape)
        )
    message.inputs.extend(inputs)
    message.raw_input_contents.extend(contents)
    if request.outputs is not None:
        for output in request.outputs:
            requested = message.outputs.add(name=output.name)
            if output.class_count:
                requested.parameters["classification"].int64_param = output.class_count
    parameters = message.parameters
    for key, value in (request.parameters or {}).items():
        _set_parameter(parameters[key], value)
    if request.sequence_id:
        _set_parameter(parameters["sequence_id"], request.sequence_id)
        parameters["sequence_start"].bool_param = request.sequence_start
        parameters["sequence_end"].bool_param = request.sequence_end
    if request.priority:
        parameters["priority"].uint64_param = request.priority
    return message


def _parameter_value(parameter: Any) -> ParameterValue:
    choice = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, choice) if choice else ""


_TYPED_CONTENTS: Final = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def decode_infer_response(response: pb.ModelInferResponse) -> InferResult:
    """An InferResult from a ModelInferResponse."""
    raw = response.raw_output_contents
    outputs = {}
    datatypes = {}
    for index, output in enumerate(response.outputs):
        shape = tuple(output.shape)
        if index < len(raw):
            outputs[output.name] = decode_output(output.name, output.datatype, shape, raw[index])
        else:
            field = _TYPED_CONTENTS.get(output.datatype, "")
            values = list(getattr(output.contents, field)) if field else []
            outputs[output.name] = decode_json_output(output.name, output.datatype, shape, values)
        datatypes[output.name] = output.datatype
    parameters = (
        {key: _parameter_value(value) for key, value in response.parameters.items()}
        if response.parameters
        else {}
    )
    return InferResult.of(
        outputs,
        datatypes,
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id,
        parameters=parameters,
    )


def _to_json(message: Any) -> JSON:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)  # type: ignore[no-any-return]


def _load_request(
    name: str, config: str | None, files: Mapping[str, bytes] | None
) -> pb.RepositoryModelLoadRequest:
    request = pb.RepositoryModelLoadRequest(model_name=name)
    if config is not None:
        request.parameters["config"].string_param = config
    for path, content in (files or {}).items():
        request.parameters[path].bytes_param = content
    return request


def _unload_request(name: str, unload_dependents: bool) -> pb.RepositoryModelUnloadRequest:
    request = pb.RepositoryModelUnloadRequest(model_name=name)
    request.parameters["unload_dependents"].bool_param = unload_dependents
    return request


def _statistics_request(name: str | None, version: str | None) -> pb.ModelStatisticsRequest:
    return pb.ModelStatisticsRequest(name=name or "", version=version or "")


def _statistics(response: Any) -> list[JSON]:
    return [_to_json(item) for item in response.model_stats]


def _trace_request(
    model: str | None, updates: Mapping[str, list[str]] | None
) -> pb.TraceSettingRequest:
    request = pb.TraceSettingRequest(model_name=model or "")
    for key, values in (updates or {}).items():
        request.settings[key].value.extend(values)
    return request


def _trace_settings(response: Any) -> JSON:
    return {key: list(setting.value) for key, setting in response.settings.items()}


def _log_request(updates: Mapping[str, bool | int | str] | None) -> pb.LogSettingsRequest:
    request = pb.LogSettingsRequest()
    for key, value in (updates or {}).items():
        setting = request.settings[key]
        if isinstance(value, bool):
            setting.bool_param = value
        elif isinstance(value, int):
            setting.uint32_param = value
        else:
            setting.string_param = value
    return request


def _log_settings(response: Any) -> JSON:
    return {
        key: getattr(setting, setting.WhichOneof("parameter_choice") or "string_param")
        for key, setting in response.settings.items()
    }


def _server_metadata(response: Any) -> JSON:
    return {
        "name": response.name,
        "version": response.version,
        "extensions": list(response.extensions),
    }


def _index(response: Any) -> list[JSON]:
    return [
        {"name": model.name, "version": model.version, "state": model.state, "reason": model.reason}
        for model in response.models
    ]


def _stream_message(request: InferRequest) -> pb.ModelInferRequest:
    message = build_infer_request(request)
    # Without it, a decoupled model's last response may carry no outputs and no flag,
    # and the client cannot tell that the stream is over.
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


def _stream_response(
    response: pb.ModelStreamInferResponse, request: InferRequest
) -> tuple[InferResult | None, bool]:
    """The result a stream message carries (None for an empty one) and its final flag."""
    if response.error_message:
        raise classify_message(
            response.error_message, model=request.model, request_id=request.request_id or None
        )
    answer = response.infer_response
    final = answer.parameters["triton_final_response"].bool_param
    if not answer.outputs:
        return None, final
    return decode_infer_response(answer), final


def _response_timeout(timeout: float | None, request: InferRequest) -> TritonTimeoutError:
    return TritonTimeoutError(
        f"no response from {request.model!r} within {timeout}s",
        model=request.model,
        request_id=request.request_id or None,
    )


_END: Final = object()


def _closed(exc: BaseException) -> TritonError:
    return TritonError(f"the client's connection is closed ({exc})")


class GrpcBackend:
    """Blocking gRPC. grpc's channel is thread-safe, so one backend serves all threads."""

    def __init__(
        self, endpoint: Endpoint, *, headers: Mapping[str, str], tls: TLSConfig | None
    ) -> None:
        self.endpoint = endpoint
        target = endpoint.authority
        if endpoint.tls:
            self._channel = grpc.secure_channel(
                target, _credentials(tls), options=channel_options(tls)
            )
        else:
            self._channel = grpc.insecure_channel(target, options=channel_options(tls))
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        self._metadata = _metadata(headers)
        self._closed = False

    def _call(
        self,
        method: Callable[..., Any],
        request: Any,
        timeout: float | None,
        model: str | None = None,
        request_id: str | None = None,
    ) -> Any:
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except ValueError as exc:  # a closed channel, or metadata grpc will not send
            raise self._refused(exc) from exc
        except grpc.RpcError as exc:
            raise _error(exc, model, request_id) from exc

    def is_live(self, timeout: float | None) -> bool:
        return bool(self._call(self._stub.ServerLive, pb.ServerLiveRequest(), timeout).live)

    def is_ready(self, timeout: float | None) -> bool:
        return bool(self._call(self._stub.ServerReady, pb.ServerReadyRequest(), timeout).ready)

    def is_model_ready(self, name: str, version: str | None, timeout: float | None) -> bool:
        request = pb.ModelReadyRequest(name=name, version=version or "")
        return bool(self._call(self._stub.ModelReady, request, timeout, name).ready)

    def server_metadata(self, timeout: float | None) -> JSON:
        request = pb.ServerMetadataRequest()
        return _server_metadata(self._call(self._stub.ServerMetadata, request, timeout))

    def model_metadata(self, name: str, version: str | None, timeout: float | None) -> JSON:
        request = pb.ModelMetadataRequest(name=name, version=version or "")
        return _to_json(self._call(self._stub.ModelMetadata, request, timeout, name))

    def model_config(self, name: str, version: str | None, timeout: float | None) -> JSON:
        request = pb.ModelConfigRequest(name=name, version=version or "")
        return _to_json(self._call(self._stub.ModelConfig, request, timeout, name).config)

    def repository_index(self, timeout: float | None) -> list[JSON]:
        request = pb.RepositoryIndexRequest()
        return _index(self._call(self._stub.RepositoryIndex, request, timeout))

    def load_model(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        timeout: float | None,
    ) -> None:
        request = _load_request(name, config, files)
        self._call(self._stub.RepositoryModelLoad, request, timeout, name)

    def unload_model(self, name: str, unload_dependents: bool, timeout: float | None) -> None:
        request = _unload_request(name, unload_dependents)
        self._call(self._stub.RepositoryModelUnload, request, timeout, name)

    def model_statistics(
        self, name: str | None, version: str | None, timeout: float | None
    ) -> list[JSON]:
        request = _statistics_request(name, version)
        return _statistics(self._call(self._stub.ModelStatistics, request, timeout, name))

    def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None, timeout: float | None
    ) -> JSON:
        request = _trace_request(model, updates)
        return _trace_settings(self._call(self._stub.TraceSetting, request, timeout, model))

    def log_settings(
        self, updates: Mapping[str, bool | int | str] | None, timeout: float | None
    ) -> JSON:
        return _log_settings(self._call(self._stub.LogSettings, _log_request(updates), timeout))

    def infer(self, request: InferRequest, timeout: float | None) -> InferResult:
        message = build_infer_request(request)
        response = self._call(
            self._stub.ModelInfer, message, timeout, request.model, request.request_id or None
        )
        return decode_infer_response(response)

    def generate(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> dict[str, JSONValue]:
        request = generate_request(spec, version, fields, parameters)
        if spec.decoupled:
            result = single_response(list(self.stream(request, spec, timeout)), spec.name)
        else:
            result = self.infer(request, timeout)
        return result_fields(result, batched=spec.batched)

    def generate_stream(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> Iterator[dict[str, JSONValue]]:
        request = generate_request(spec, version, fields, parameters)
        if not spec.decoupled:
            yield result_fields(self.infer(request, timeout), batched=spec.batched)
            return
        for result in self.stream(request, spec, timeout):
            yield result_fields(result, batched=spec.batched)

    def stream(
        self, request: InferRequest, spec: ModelSpec, timeout: float | None
    ) -> Iterator[InferResult]:
        """The responses of one request on a bidirectional stream of its own.

        gRPC's blocking stream iterator has no timeout, so a reader thread moves the
        messages to a queue that is read with ``timeout`` per response. Closing the
        generator (a ``break`` in the caller's loop) cancels the call, which stops the
        request on the server.
        """
        try:
            call = self._stub.ModelStreamInfer(
                iter((_stream_message(request),)), metadata=self._metadata
            )
        except ValueError as exc:
            raise self._refused(exc) from exc
        messages: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            try:
                for message in call:
                    messages.put(message)
            except grpc.RpcError as exc:
                messages.put(exc)
            messages.put(_END)

        threading.Thread(target=read, name="triton_sdk-stream", daemon=True).start()
        try:
            while True:
                try:
                    message = messages.get(timeout=timeout)
                except queue.Empty:
                    raise _response_timeout(timeout, request) from None
                if message is _END:
                    return
                if isinstance(message, grpc.RpcError):
                    raise _error(message, request.model, request.request_id or None) from message
                result, final = _stream_response(message, request)
                if result is not None:
                    yield result
                if final:
                    return
        finally:
            call.cancel()

    def _refused(self, exc: ValueError) -> TritonError:
        if self._closed:
            return _closed(exc)
        return InvalidInputError(f"gRPC refused the request: {exc}")

    def close(self) -> None:
        self._closed = True
        self._channel.close()


class AsyncGrpcBackend:
    """gRPC on asyncio. The channel is opened on first use, inside the running loop."""

    def __init__(
        self, endpoint: Endpoint, *, headers: Mapping[str, str], tls: TLSConfig | None
    ) -> None:
        self.endpoint = endpoint
        self._tls = tls
        self._metadata = _metadata(headers)
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def _open(self) -> Any:
        if self._closed:
            raise _closed(RuntimeError("closed by aclose()"))
        target = self.endpoint.authority
        if self.endpoint.tls:
            self._channel = grpc.aio.secure_channel(
                target, _credentials(self._tls), options=channel_options(self._tls)
            )
        else:
            self._channel = grpc.aio.insecure_channel(target, options=channel_options(self._tls))
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    async def _call(
        self,
        method_name: str,
        request: Any,
        timeout: float | None,
        model: str | None = None,
        request_id: str | None = None,
    ) -> Any:
        self._loop = check_loop(self._loop)
        stub = self._stub or self._open()
        try:
            return await getattr(stub, method_name)(
                request, timeout=timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise _error(exc, model, request_id) from exc

    async def is_live(self, timeout: float | None) -> bool:
        return bool((await self._call("ServerLive", pb.ServerLiveRequest(), timeout)).live)

    async def is_ready(self, timeout: float | None) -> bool:
        return bool((await self._call("ServerReady", pb.ServerReadyRequest(), timeout)).ready)

    async def is_model_ready(self, name: str, version: str | None, timeout: float | None) -> bool:
        request = pb.ModelReadyRequest(name=name, version=version or "")
        return bool((await self._call("ModelReady", request, timeout, name)).ready)

    async def server_metadata(self, timeout: float | None) -> JSON:
        request = pb.ServerMetadataRequest()
        return _server_metadata(await self._call("ServerMetadata", request, timeout))

    async def model_metadata(self, name: str, version: str | None, timeout: float | None) -> JSON:
        request = pb.ModelMetadataRequest(name=name, version=version or "")
        return _to_json(await self._call("ModelMetadata", request, timeout, name))

    async def model_config(self, name: str, version: str | None, timeout: float | None) -> JSON:
        request = pb.ModelConfigRequest(name=name, version=version or "")
        return _to_json((await self._call("ModelConfig", request, timeout, name)).config)

    async def repository_index(self, timeout: float | None) -> list[JSON]:
        request = pb.RepositoryIndexRequest()
        return _index(await self._call("RepositoryIndex", request, timeout))

    async def load_model(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        timeout: float | None,
    ) -> None:
        request = _load_request(name, config, files)
        await self._call("RepositoryModelLoad", request, timeout, name)

    async def unload_model(self, name: str, unload_dependents: bool, timeout: float | None) -> None:
        request = _unload_request(name, unload_dependents)
        await self._call("RepositoryModelUnload", request, timeout, name)

    async def model_statistics(
        self, name: str | None, version: str | None, timeout: float | None
    ) -> list[JSON]:
        request = _statistics_request(name, version)
        return _statistics(await self._call("ModelStatistics", request, timeout, name))

    async def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None, timeout: float | None
    ) -> JSON:
        request = _trace_request(model, updates)
        return _trace_settings(await self._call("TraceSetting", request, timeout, model))

    async def log_settings(
        self, updates: Mapping[str, bool | int | str] | None, timeout: float | None
    ) -> JSON:
        return _log_settings(await self._call("LogSettings", _log_request(updates), timeout))

    async def infer(self, request: InferRequest, timeout: float | None) -> InferResult:
        message = build_infer_request(request)
        response = await self._call(
            "ModelInfer", message, timeout, request.model, request.request_id or None
        )
        return decode_infer_response(response)

    async def generate(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> dict[str, JSONValue]:
        request = generate_request(spec, version, fields, parameters)
        if spec.decoupled:
            results = [result async for result in self.stream(request, spec, timeout)]
            result = single_response(results, spec.name)
        else:
            result = await self.infer(request, timeout)
        return result_fields(result, batched=spec.batched)

    async def generate_stream(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> AsyncIterator[dict[str, JSONValue]]:
        request = generate_request(spec, version, fields, parameters)
        if not spec.decoupled:
            yield result_fields(await self.infer(request, timeout), batched=spec.batched)
            return
        async for result in self.stream(request, spec, timeout):
            yield result_fields(result, batched=spec.batched)

    async def stream(
        self, request: InferRequest, spec: ModelSpec, timeout: float | None
    ) -> AsyncIterator[InferResult]:
        """The responses of one request on a bidirectional stream of its own."""
        self._loop = check_loop(self._loop)
        stub = self._stub or self._open()
        call = stub.ModelStreamInfer(metadata=self._metadata)
        try:
            try:
                await call.write(_stream_message(request))
                await call.done_writing()
                while True:
                    try:
                        message = await asyncio.wait_for(call.read(), timeout)
                    except asyncio.TimeoutError:
                        raise _response_timeout(timeout, request) from None
                    if message is grpc.aio.EOF:
                        return
                    result, final = _stream_response(message, request)
                    if result is not None:
                        yield result
                    if final:
                        return
            except grpc.RpcError as exc:
                raise _error(exc, request.model, request.request_id or None) from exc
        finally:
            call.cancel()

    async def close(self) -> None:
        self._closed = True
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None
