"""The KServe v2 gRPC protocol, without I/O: every op as a protobuf request and a reader.

Messages are tritonclient's generated protobuf classes, built directly (no per-call
``InferInput`` objects). A transport sends what :func:`encode` / :func:`encode_stream`
describe and never looks inside.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar, cast

import attrs
import numpy as np
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from ._dtypes import wire_dtype
from ._errors import InferenceError, InvalidInputError, classify_message, unreadable, values_refused
from ._generate import (
    JSONValue,
    TextOutputs,
    generate_request,
    result_fields,
    single_response,
)
from ._ops import (
    JSON,
    Generate,
    GenerateStream,
    GetCudaSharedMemoryStatus,
    GetLogSettings,
    GetModelStatistics,
    GetServerMetadata,
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
from ._request import InferRequest, ParameterValue
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
from ._wire import payload_size, tensor_bytes, tensor_payload

if TYPE_CHECKING:
    from ._shm import Placement, Slot
    from ._spec import ModelSpec

__all__ = [
    "SERVICE",
    "GrpcCall",
    "GrpcCollect",
    "GrpcStream",
    "SplitAnswer",
    "build_infer_request",
    "decode_infer_response",
    "encode",
    "encode_stream",
    "serialize_large_infer",
    "split_infer_response",
]

T = TypeVar("T")
U = TypeVar("U")

_InputTensor = pb.ModelInferRequest.InferInputTensor


@attrs.define
class GrpcCall(Generic[T]):
    """A unary RPC: the stub method's name, its request, and how to read its reply.

    ``wire=True``: the request is already in wire form (bytes) and the reply is read in
    wire form too, without protobuf messages in between (see :func:`serialize_large_infer`).

    ``streamed=True`` (large requests): the transport sends the request as a stream of
    one message, which the server answers as the unary call it is. grpc frees a streamed
    message as soon as it is sent, where it keeps a unary request until the answer has
    arrived, so a large round trip never holds its request and its answer at once.
    """

    rpc: str
    message: Any
    read: Callable[[Any], T]
    wire: bool = False
    streamed: bool = False

    def take(self) -> Iterator[Any]:
        """The message as a stream of one, which then holds the only reference to it
        (the iterator lets go of it once exhausted, which grpc does right after sending)."""
        message, self.message = self.message, None
        return iter((message,))


@attrs.define
class GrpcStream(Generic[T]):
    """One request on a ``ModelStreamInfer`` call; ``read`` turns each message
    into an item or None, raising the error a message carries.

    ``bare=True``: the server answers with bare ``ModelInferResponse`` messages, as
    MLServer does, instead of Triton's ``ModelStreamInferResponse``; none of them says
    it is the last, so the stream ends when the server closes it. ``end``: the item
    after the last message, made when the stream ends without an error (None: none).
    """

    message: pb.ModelInferRequest
    read: Callable[[Any], T | None]
    bare: bool = False
    end: Callable[[], T | None] | None = None

    def last_item(self) -> T | None:
        """The item after the last message (see ``end``)."""
        return None if self.end is None else self.end()

    def is_last(self, message: Any) -> bool:
        """Whether the client is done with the stream after ``message``: its request's
        last response, or an error (which ends the caller's iteration, though the model
        may go on answering). Either way the stream is then left for the server to
        close: cancelling a request while its model still answers can crash Triton 2.51
        (triton-inference-server/server#7368, #8034)."""
        return not self.bare and (is_final_response(message) or bool(message.error_message))


@attrs.define
class GrpcCollect(Generic[U, T]):
    """A unary op that travels as a stream (generate on a decoupled model): the items of
    ``stream`` are read, then ``collect`` makes the answer. As for any unary call, the
    timeout bounds the whole call, not each response; once ``most`` items are exceeded,
    the stream is left (the answer cannot be right) and ``collect`` gets them."""

    stream: GrpcStream[U]
    collect: Callable[[list[U]], T]
    most: int | None = None


# Inference


def _set_parameter(target: Any, value: ParameterValue) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = value


def _set_region(parameters: Any, slot: Slot) -> None:
    parameters["shared_memory_region"].string_param = slot.region.name
    parameters["shared_memory_byte_size"].int64_param = slot.byte_size
    if slot.offset:
        parameters["shared_memory_offset"].int64_param = slot.offset


def build_infer_request(request: InferRequest) -> pb.ModelInferRequest:
    """The protobuf message of an infer request."""
    message, tensors = _infer_message(request)
    message.raw_input_contents.extend([tensor_bytes(tensor) for tensor in tensors])
    return message


def _infer_message(request: InferRequest) -> tuple[pb.ModelInferRequest, list[Tensor]]:
    """The message of an infer request without its raw contents, and the tensors whose
    data goes there, in order."""
    message = pb.ModelInferRequest(
        model_name=request.model, model_version=request.version, id=request.request_id
    )
    inputs = []
    with_contents = []
    placement = request.shared_memory
    for tensor in request.inputs:
        described = _InputTensor(
            name=tensor.name, datatype=tensor.datatype, shape=tensor.array.shape
        )
        slot = None if placement is None else placement.inputs.get(tensor.name)
        if slot is None:
            with_contents.append(tensor)
        else:  # its data is in a region: no raw contents
            _set_region(described.parameters, slot)
        inputs.append(described)
    message.inputs.extend(inputs)
    if request.outputs is not None:
        for output in request.outputs:
            requested = message.outputs.add(name=output.name)
            if output.class_count:
                requested.parameters["classification"].int64_param = output.class_count
            slot = None if placement is None else placement.outputs.get(output.name)
            if slot is not None:
                _set_region(requested.parameters, slot)
    parameters = message.parameters
    if not request.triton:
        _refuse_untyped(request)
    for key, value in (request.parameters or {}).items():
        _set_parameter(parameters[key], value)
    if request.sequence_id:
        _set_parameter(parameters["sequence_id"], request.sequence_id)
        parameters["sequence_start"].bool_param = request.sequence_start
        parameters["sequence_end"].bool_param = request.sequence_end
    if request.priority:
        if request.triton:
            parameters["priority"].uint64_param = request.priority
        else:
            parameters["priority"].int64_param = request.priority
    return message, with_contents


def _refuse_untyped(request: InferRequest) -> None:
    """Refuse what the gRPC protocol of a server without model configs (MLServer, KServe)
    cannot carry: it drops double parameters without a word, and reads no uint64."""
    floats = sorted(
        key for key, value in (request.parameters or {}).items() if type(value) is float
    )
    if floats:
        raise InvalidInputError(
            f"parameter {', '.join(map(repr, floats))} is a float, which the gRPC protocol "
            "of this server does not carry (its parameters are bool, int or str; the "
            "server would drop it): send it as a str, or use an HTTP URL",
            model=request.model,
            request_id=request.request_id or None,
        )
    if request.priority >= 2**63:
        raise InvalidInputError(
            f"priority must be below 2**63 for this server (its gRPC protocol carries it "
            f"as an int64), got {request.priority}",
            model=request.model,
            request_id=request.request_id or None,
        )


# Large requests and answers in wire form. protobuf copies every bytes field into and out
# of its messages, and each copy of a large tensor costs its size in memory and time; these
# write and read the raw contents fields by hand, so a tensor's data is copied once on the
# way out (into the request's bytes) and not at all on the way back (outputs are views of
# the answer's bytes).

LARGE_REQUEST: Final = 1 << 20
"""Requests whose raw contents reach this many bytes are serialized by hand."""
LARGE_ANSWER: Final = 1 << 20
"""Answers of this many bytes are always read by hand, so that their outputs are views."""

_RAW_INPUT_KEY: Final = bytes([7 << 3 | 2])  # ModelInferRequest.raw_input_contents
_RAW_OUTPUT_TAG: Final = 6 << 3 | 2  # ModelInferResponse.raw_output_contents
_RAW_OUTPUT_KEY: Final = bytes([_RAW_OUTPUT_TAG])


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def serialize_large_infer(request: InferRequest) -> bytes | None:
    """The wire bytes of an infer request whose raw contents are large; None for others,
    which the protobuf message serves better."""
    size = payload_size(request)
    if size < LARGE_REQUEST:
        return None
    if size >= 2**31:  # (refused before its payloads are made: they may not fit in memory)
        raise _too_large(request)
    message, tensors = _infer_message(request)
    head = message.SerializeToString()
    parts: list[bytes | memoryview] = [head]
    total = len(head)
    for tensor in tensors:
        payload = tensor_payload(tensor)
        size = payload.nbytes if isinstance(payload, memoryview) else len(payload)
        key = _RAW_INPUT_KEY + _varint(size)
        parts.extend((key, payload))
        total += len(key) + size
    if total < 2**31:
        return b"".join(parts)
    raise _too_large(request)


def _too_large(request: InferRequest) -> InvalidInputError:
    return values_refused(
        "the request is larger than a gRPC message can be (2 GiB): split the batch "
        "(model.map) or use shared memory",
        model=request.model,
    )


class _PlainInfer:
    """One shape of plain infer request (see :func:`plain_infer`): its serialized head,
    and the layout of the answers it gets.

    Calls of a model usually repeat one shape of request and get answers that differ only
    in their raw contents. Such an answer is read by comparing its bytes with the layout
    learned from an earlier one, and slicing views of its raw contents, instead of
    parsing a message. Every other answer is parsed, and learned from until
    ``_MAX_LESSONS`` answers in a row have needed parsing (outputs of varying shape,
    answers from servers of other model versions); an answer that fits the layout
    again starts the count over.
    """

    __slots__ = ("answer", "head", "lessons")

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.answer: _AnswerLayout | None = None
        self.lessons = 0

    def read(self, data: bytes) -> InferResult:
        answer = self.answer
        if answer is not None:
            result = answer.read(data)
            if result is not None:
                if self.lessons:
                    self.lessons = 0
                return result
        learning = self.lessons < _MAX_LESSONS
        if not learning and len(data) < LARGE_ANSWER:
            return decode_infer_response(_parse_answer(data))  # (faster than splitting)
        split = split_infer_response(data)  # outputs are views: no copy of a large answer
        result = decode_infer_response(split.message, None, split.raw)
        if learning:
            self.lessons += 1  # (a race between threads only miscounts a lesson)
            layout = _AnswerLayout.learn(data, split)
            if layout is not None:
                self.answer = layout
        return result


def _parse_answer(data: bytes) -> pb.ModelInferResponse:
    try:
        return _parse_response(data)
    except DecodeError as exc:
        raise _malformed(exc) from exc


def _malformed(cause: Exception) -> InferenceError:
    return unreadable(f"the server sent a malformed infer answer ({cause})")


_MAX_LESSONS: Final = 16


@attrs.frozen
class _AnswerLayout:
    """An infer answer's bytes before its raw contents (``head``), and the key (tag and
    length) of each raw contents field after them, with how it decodes. An answer made of
    ``head`` and exactly such fields holds the message this layout was learned from, with
    other raw contents of the same sizes."""

    head: bytes
    outputs: tuple[tuple[str, bytes, int, np.dtype[Any], tuple[int, ...]], ...]
    """Per output: name, key, length of its raw contents, dtype, shape."""
    datatypes: Mapping[str, str]
    model_name: str
    model_version: str

    @classmethod
    def learn(cls, data: bytes, split: SplitAnswer) -> _AnswerLayout | None:
        """The layout of ``data`` (read without error as ``split``), or None for answers
        other than a head and then numeric raw contents only."""
        message, raw = split.message, split.raw
        if (
            split.raw_start is None
            or message.parameters
            or message.id
            or len(raw) != len(message.outputs)
        ):
            return None
        outputs = []
        for output, contents in zip(message.outputs, raw, strict=True):
            if output.datatype == "BYTES":
                return None
            size = contents.nbytes
            key = _RAW_OUTPUT_KEY + _varint(size)
            outputs.append(
                (output.name, key, size, wire_dtype(output.datatype), tuple(output.shape))
            )
        return cls(
            data[: split.raw_start],
            tuple(outputs),
            {output.name: output.datatype for output in message.outputs},
            message.model_name,
            message.model_version,
        )

    def read(self, data: bytes) -> InferResult | None:
        """The answer ``data`` holds, or None when it is not laid out like this one."""
        if not data.startswith(self.head):
            return None
        view = memoryview(data)
        position = len(self.head)
        outputs: dict[str, Array | Undecoded] = {}
        for name, key, size, dtype, shape in self.outputs:
            if not data.startswith(key, position):
                return None
            start = position + len(key)
            position = start + size
            outputs[name] = Undecoded(view[start:position], dtype, shape)
        if position != len(data):
            return None
        return InferResult.of(
            outputs,
            dict(self.datatypes),
            model_name=self.model_name,
            model_version=self.model_version,
            id="",
            parameters={},
        )


_HEADS: dict[Hashable, _PlainInfer] = {}
"""Plain infer requests by everything they hold but their raw contents: calls of a
model usually repeat one shape of request, whose head is then built once."""
_MAX_HEADS: Final = 256


def plain_infer(request: InferRequest) -> tuple[bytes, _PlainInfer] | None:
    """The wire bytes of a plain infer request (no id, parameters, sequence, priority or
    regions) from a cached head, and the entry that reads its answer; None for others."""
    if (
        request.shared_memory is not None
        or request.parameters
        or request.sequence_id
        or request.priority
        or request.request_id
    ):
        return None
    inputs = request.inputs
    key = (
        request.model,
        request.version,
        request.outputs,
        *[(tensor.name, tensor.datatype, tensor.array.shape) for tensor in inputs],
    )
    plain = _HEADS.get(key)
    if plain is None:
        plain = _PlainInfer(_infer_message(request)[0].SerializeToString())
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        _HEADS[key] = plain
    parts = [plain.head]
    for tensor in inputs:
        payload = tensor_bytes(tensor)
        parts += (_RAW_INPUT_KEY, _varint(len(payload)), payload)
    return b"".join(parts), plain


def _read_varint(data: memoryview, position: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


class SplitAnswer(NamedTuple):
    """An infer answer in wire form, read apart: the message without its raw contents,
    and the raw contents as views of the answer's bytes."""

    message: pb.ModelInferResponse
    raw: list[memoryview]
    raw_start: int | None
    """Where the first raw contents field begins; None when there is none, or when
    another field comes after it."""


def split_infer_response(data: bytes) -> SplitAnswer:
    """A ModelInferResponse in wire form, as the message without its raw contents and the
    raw contents as views of ``data``."""
    view = memoryview(data)
    end = len(view)
    rest: list[memoryview] = []
    raw: list[memoryview] = []
    raw_start: int | None = None
    others_after_raw = False
    position = 0
    try:
        while position < end:
            start = position
            key, position = _read_key(view, position)
            if key == _RAW_OUTPUT_TAG:
                length, position = _read_varint(view, position)
                if position + length > end:
                    raise ValueError("a field runs past the end")
                if raw_start is None:
                    raw_start = start
                raw.append(view[position : position + length])
                position += length
                continue
            position = _skip(view, position, key & 7)
            rest.append(view[start:position])
            others_after_raw = raw_start is not None
        if position != end:
            raise ValueError("a field runs past the end")
        message = pb.ModelInferResponse.FromString(b"".join(rest))
        return SplitAnswer(message, raw, None if others_after_raw else raw_start)
    except (ValueError, IndexError, DecodeError) as exc:
        raise _malformed(exc) from exc


def _read_key(data: memoryview, position: int) -> tuple[int, int]:
    """A field's key (number and wire type), as protobuf reads one: at most 5 bytes."""
    key, after = _read_varint(data, position)
    if after - position > 5 or key > 0xFFFFFFFF or key >> 3 == 0:
        raise ValueError("an invalid field key")
    return key, after


_MAX_GROUP_DEPTH: Final = 100  # protobuf's own limit on nesting


def _skip(data: memoryview, position: int, wire_type: int, depth: int = 0) -> int:
    """The position after a field's value; for a group, after its end (protobuf checks
    that the ends match when it parses the field)."""
    if wire_type == 0:
        return _read_varint(data, position)[1]
    if wire_type == 2:
        length, position = _read_varint(data, position)
        return position + length
    if wire_type in (1, 5):
        return position + (8 if wire_type == 1 else 4)
    if wire_type == 3:
        if depth >= _MAX_GROUP_DEPTH:
            raise ValueError("groups nested too deep")
        while True:
            key, position = _read_key(data, position)
            if key & 7 == 4:
                return position
            position = _skip(data, position, key & 7, depth + 1)
    raise ValueError(f"wire type {wire_type}")


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


def decode_infer_response(
    response: pb.ModelInferResponse,
    placement: Placement | None = None,
    raw: Sequence[bytes | memoryview] | None = None,
) -> InferResult:
    """An InferResult from a ModelInferResponse; outputs in regions are read from them.
    ``raw`` holds the raw contents when they were read apart from the message."""
    if raw is None:
        raw = response.raw_output_contents
    outputs: dict[str, Array | Undecoded] = {}
    datatypes = {}
    # Triton gives every output a raw entry, an empty one to an output in a region; a
    # server that leaves those out gives the others theirs in order.
    one_each = len(raw) == len(response.outputs)
    index = 0
    for position, output in enumerate(response.outputs):
        shape = tuple(output.shape)
        slot = None if placement is None else placement.outputs.get(output.name)
        if slot is not None:
            outputs[output.name] = read_region(output.name, output.datatype, shape, slot)
        elif one_each or index < len(raw):
            contents = raw[position] if one_each else raw[index]
            outputs[output.name] = decode_output(output.name, output.datatype, shape, contents)
            index += 1
        else:
            field = _TYPED_CONTENTS.get(output.datatype, "")
            values = list(getattr(output.contents, field)) if field else []
            outputs[output.name] = decode_json_output(output.name, output.datatype, shape, values)
        datatypes[output.name] = output.datatype
    if len(outputs) != len(response.outputs):
        raise named_twice([output.name for output in response.outputs])
    parameters = (
        {
            key: _parameter_value(value)
            for key, value in response.parameters.items()
            if key != _FINAL_FLAG  # (the stream's end, asked for by the client: not the model's)
        }
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


_FINAL_FLAG: Final = "triton_final_response"


def _stream_message(request: InferRequest) -> pb.ModelInferRequest:
    message = build_infer_request(request)
    # Without it, a decoupled model's last response may carry no outputs and no flag,
    # and the client cannot tell that the stream is over.
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


def is_final_response(response: pb.ModelStreamInferResponse) -> bool:
    """Whether a stream's message is its request's last (an error's included)."""
    parameters = response.infer_response.parameters
    return _FINAL_FLAG in parameters and parameters[_FINAL_FLAG].bool_param


def _stream_of(request: InferRequest, spec: ModelSpec | None = None) -> GrpcStream[InferResult]:
    """The stream of ``request``: Triton's, or the bare one of a server that gave no
    config for ``spec`` (errors then end the call with a status)."""
    if spec is not None and not spec.has_config:
        keep = request.outputs_to_keep()

        def read_bare(answer: pb.ModelInferResponse) -> InferResult:
            return keep_outputs(decode_infer_response(answer), keep)

        return GrpcStream(build_infer_request(request), read_bare, bare=True)
    model, request_id = request.model, request.request_id or None
    # A model that is not decoupled answers once, its flag in its one response: that
    # response is the model's even without outputs (outputs= named none it gave).
    answers_once = spec is not None and spec.has_config and not spec.decoupled

    def read(response: pb.ModelStreamInferResponse) -> InferResult | None:
        if response.error_message:
            raise classify_message(response.error_message, model=model, request_id=request_id)
        answer = response.infer_response
        if not answer.outputs and is_final_response(response) and not answers_once:
            return None  # (the flag that ends the request, asked for, not a response)
        return decode_infer_response(answer)

    return GrpcStream(_stream_message(request), read)


SERVICE: Final = "inference.GRPCInferenceService"


_parse_response: Final = pb.ModelInferResponse.FromString


def _infer(request: InferRequest) -> GrpcCall[InferResult]:
    """An infer request: as a protobuf message, or in wire form when its tensors are
    large (one copy of their data, and the answer's raw contents read as views)."""
    call = _infer_call(request)
    if request.triton or request.outputs is None:
        return call
    keep, read = request.outputs_to_keep(), call.read
    call.read = lambda answer: keep_outputs(read(answer), keep)
    return call


def _infer_call(request: InferRequest) -> GrpcCall[InferResult]:
    placement = request.shared_memory
    wire = serialize_large_infer(request)
    if wire is not None:

        def read_wire(data: bytes) -> InferResult:
            message, raw, _ = split_infer_response(data)
            return decode_infer_response(message, placement, raw)

        return GrpcCall("ModelInfer", wire, read_wire, wire=True, streamed=True)
    if placement is None:
        plain = plain_infer(request)
        if plain is not None:
            return GrpcCall("ModelInfer", plain[0], plain[1].read, wire=True)
        return GrpcCall("ModelInfer", build_infer_request(request), decode_infer_response)
    return GrpcCall(
        "ModelInfer",
        build_infer_request(request),
        lambda response: decode_infer_response(response, placement),
    )


# System shared memory


def _register(op: RegisterSystemSharedMemory) -> GrpcCall[None]:
    request = pb.SystemSharedMemoryRegisterRequest(
        name=op.name, key=op.key, offset=op.offset, byte_size=op.byte_size
    )
    return GrpcCall("SystemSharedMemoryRegister", request, _nothing)


def _unregister(op: UnregisterSystemSharedMemory) -> GrpcCall[None]:
    request = pb.SystemSharedMemoryUnregisterRequest(name=op.name)
    return GrpcCall("SystemSharedMemoryUnregister", request, _nothing)


def _read_regions(response: Any) -> list[JSON]:
    """The regions of a system or CUDA shared memory status answer."""
    return [_to_json(region) for region in response.regions.values()]


def _shm_status(op: GetSystemSharedMemoryStatus) -> GrpcCall[list[JSON]]:
    request = pb.SystemSharedMemoryStatusRequest(name=op.name)
    return GrpcCall("SystemSharedMemoryStatus", request, _read_regions)


def _register_cuda(op: RegisterCudaSharedMemory) -> GrpcCall[None]:
    request = pb.CudaSharedMemoryRegisterRequest(
        name=op.name, raw_handle=op.raw_handle, device_id=op.device_id, byte_size=op.byte_size
    )
    return GrpcCall("CudaSharedMemoryRegister", request, _nothing)


def _unregister_cuda(op: UnregisterCudaSharedMemory) -> GrpcCall[None]:
    request = pb.CudaSharedMemoryUnregisterRequest(name=op.name)
    return GrpcCall("CudaSharedMemoryUnregister", request, _nothing)


def _cuda_status(op: GetCudaSharedMemoryStatus) -> GrpcCall[list[JSON]]:
    request = pb.CudaSharedMemoryStatusRequest(name=op.name)
    return GrpcCall("CudaSharedMemoryStatus", request, _read_regions)


def _generate(op: Generate) -> GrpcCall[dict[str, JSONValue]] | GrpcCollect[Any, Any]:
    """Generate as the HTTP extension does it: fields named like inputs are one sample."""
    spec = op.spec
    request = generate_request(spec, op.version, op.fields, op.parameters)

    def fields(result: InferResult) -> dict[str, JSONValue]:
        return result_fields(result, spec)

    if spec.decoupled:
        return GrpcCollect(
            _stream_of(request),
            lambda results: fields(single_response(results, spec.name)),
            most=1,
        )
    return GrpcCall(
        "ModelInfer",
        build_infer_request(request),
        lambda response: fields(decode_infer_response(response)),
    )


# The repository, statistics, trace and log settings


def _to_json(message: Any) -> JSON:
    """A message as HTTP's JSON has it: protobuf's JSON writes 64-bit integers as strings
    (``"dims": ["1"]``), which HTTP's answers, and code written for them, read as ints."""
    data: JSON = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return _ints_of(message.DESCRIPTOR, data)


_INT64_TYPES: Final = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _ints_of(descriptor: Any, data: JSON) -> JSON:
    """``data`` (MessageToDict's, of a ``descriptor`` message) with its 64-bit integers
    as ints, in nested messages, lists and maps too."""
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            item = entry.fields_by_name["value"]
            data[field.name] = {key: _value_of(item, v) for key, v in value.items()}
        elif isinstance(value, list):
            data[field.name] = [_value_of(field, v) for v in value]
        else:
            data[field.name] = _value_of(field, value)
    return data


def _value_of(field: Any, value: Any) -> Any:
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    if field.message_type is not None and isinstance(value, dict):
        return _ints_of(field.message_type, value)
    return value


def _list_models(op: ListModels) -> GrpcCall[list[JSON]]:
    def read(response: Any) -> list[JSON]:
        return [
            {"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
            for m in response.models
        ]

    return GrpcCall("RepositoryIndex", pb.RepositoryIndexRequest(), read)


def _load(op: LoadModel) -> GrpcCall[None]:
    request = pb.RepositoryModelLoadRequest(model_name=op.name)
    if op.config is not None:
        request.parameters["config"].string_param = op.config
    for path, content in (op.files or {}).items():
        request.parameters[path].bytes_param = content
    return GrpcCall("RepositoryModelLoad", request, _nothing)


def _unload(op: UnloadModel) -> GrpcCall[None]:
    request = pb.RepositoryModelUnloadRequest(model_name=op.name)
    request.parameters["unload_dependents"].bool_param = op.unload_dependents
    return GrpcCall("RepositoryModelUnload", request, _nothing)


def _nothing(response: Any) -> None:
    return None


def _statistics(op: GetModelStatistics) -> GrpcCall[list[JSON]]:
    request = pb.ModelStatisticsRequest(name=op.name or "", version=op.version or "")
    return GrpcCall(
        "ModelStatistics", request, lambda response: [_to_json(s) for s in response.model_stats]
    )


def _trace(model: str | None, updates: Mapping[str, list[str]] | None) -> GrpcCall[JSON]:
    request = pb.TraceSettingRequest(model_name=model or "")
    for key, values in (updates or {}).items():
        request.settings[key].value.extend(values)  # (no values: the setting is cleared)

    def read(response: Any) -> JSON:
        return {key: list(setting.value) for key, setting in response.settings.items()}

    return GrpcCall("TraceSetting", request, read)


def _log(updates: Mapping[str, bool | int | str] | None) -> GrpcCall[JSON]:
    request = pb.LogSettingsRequest()
    for key, value in (updates or {}).items():
        setting = request.settings[key]
        if isinstance(value, bool):
            setting.bool_param = value
        elif isinstance(value, int):
            setting.uint32_param = value
        else:
            setting.string_param = value

    def read(response: Any) -> JSON:
        return {
            key: getattr(setting, setting.WhichOneof("parameter_choice") or "string_param")
            for key, setting in response.settings.items()
        }

    return GrpcCall("LogSettings", request, read)


def _server_metadata(op: GetServerMetadata) -> GrpcCall[JSON]:
    def read(response: Any) -> JSON:
        # (every field, an empty name too: proto3 leaves it out of its JSON form)
        return {
            "name": response.name,
            "version": response.version,
            "extensions": list(response.extensions),
        }

    return GrpcCall("ServerMetadata", pb.ServerMetadataRequest(), read)


_ENCODERS: Final[dict[type[Any], Callable[[Any], GrpcCall[Any] | GrpcCollect[Any, Any]]]] = {
    GetServerMetadata: _server_metadata,
    InferRequest: _infer,
    Generate: _generate,
    ListModels: _list_models,
    LoadModel: _load,
    UnloadModel: _unload,
    GetModelStatistics: _statistics,
    GetTraceSettings: lambda op: _trace(op.model_name, None),
    UpdateTraceSettings: lambda op: _trace(op.model_name, op.updates),
    GetLogSettings: lambda op: _log(None),
    UpdateLogSettings: lambda op: _log(op.updates),
    RegisterSystemSharedMemory: _register,
    UnregisterSystemSharedMemory: _unregister,
    GetSystemSharedMemoryStatus: _shm_status,
    RegisterCudaSharedMemory: _register_cuda,
    UnregisterCudaSharedMemory: _unregister_cuda,
    GetCudaSharedMemoryStatus: _cuda_status,
}


def _routed(op: Op[Any]) -> GrpcCall[Any]:
    """A plain op: its route's RPC, with the op's fields as the request's."""
    route = op.route
    if route is None:
        raise TypeError(f"no gRPC encoding for {type(op).__name__}")
    fields = attrs.fields(cast("type[attrs.AttrsInstance]", type(op)))
    message = getattr(pb, f"{route.rpc}Request")(
        **{field.name: getattr(op, field.name) or "" for field in fields}
    )
    field = route.field
    if route.answer == "ok":
        return GrpcCall(route.rpc, message, lambda response: bool(getattr(response, field or "")))
    if field is None:
        return GrpcCall(route.rpc, message, _to_json)
    return GrpcCall(route.rpc, message, lambda response: _to_json(getattr(response, field)))


def encode(op: Op[T]) -> GrpcCall[T] | GrpcCollect[Any, T]:
    """How ``op`` travels over gRPC."""
    encoder = _ENCODERS.get(type(op))
    return cast("GrpcCall[T] | GrpcCollect[Any, T]", (encoder or _routed)(op))


def encode_stream(op: StreamOp[T]) -> GrpcStream[T] | GrpcCall[T]:
    """How a streamed op travels: a stream, or one unary call standing for a stream of one
    (generate_stream on a Triton model that is not decoupled)."""
    if isinstance(op, StreamInfer):
        return cast("GrpcStream[T]", _stream_of(op.request, op.spec))
    if isinstance(op, GenerateStream):
        spec = op.spec
        request = generate_request(spec, op.version, op.fields, op.parameters)
        if not spec.decoupled and spec.has_config:
            return cast(
                "GrpcCall[T]",
                GrpcCall(
                    "ModelInfer",
                    build_infer_request(request),
                    lambda r: result_fields(decode_infer_response(r), spec),
                ),
            )
        stream = _stream_of(request, spec)
        text = TextOutputs()

        def read(response: Any) -> Any:
            result = stream.read(response)
            return None if result is None else result_fields(result, spec, text)

        return cast("GrpcStream[T]", GrpcStream(stream.message, read, stream.bare, text.finish))
    raise TypeError(f"no gRPC stream encoding for {type(op).__name__}")
