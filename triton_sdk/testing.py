"""Test your code without a server: a transport that answers from your own function.

::

    import numpy as np
    import triton_sdk as ts
    from triton_sdk import ops
    from triton_sdk.testing import MockTransport

    spec = ts.ModelSpec(
        name="add_one",
        max_batch_size=8,
        inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
        outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(1,))},
    )

    def handler(op, ctx):
        if isinstance(op, ops.InferRequest):
            return {"Y": op.inputs[0].array + 1}
        raise NotImplementedError(op)   # anything else: a failing test says which op

    mock = MockTransport(handler, models=[spec])
    client = ts.Client("grpc://test", transport=mock)   # or ts.AsyncClient(...)
    assert client.model("add_one").infer(X=[1.0, 2.0])["Y"].tolist() == [[2.0], [3.0]]
    assert mock.calls[-1].ctx.headers == {}

The same ``MockTransport`` serves :class:`~triton_sdk.Client` and
:class:`~triton_sdk.AsyncClient`; the handler may be a plain function or, for the
asyncio client, a coroutine function. Every call goes through the client's real call
path (validation, hooks, retries), so what your code sees is what it would see from a
server.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np

from ._call import CallContext
from ._dtypes import TEXT_KINDS, datatype_of
from ._errors import (
    InvalidInputError,
    ModelNotFoundError,
    TritonError,
    UnsupportedError,
)
from ._ops import (
    JSON,
    GetModelConfig,
    GetModelMetadata,
    IsModelReady,
    IsServerLive,
    IsServerReady,
    ListModels,
    Op,
    StreamInfer,
    StreamOp,
)
from ._request import InferRequest
from ._result import InferResult
from ._shaping import to_array
from ._spec import ModelSpec, TensorSpec
from ._transports._protocol import AsyncTransport, Transport

__all__ = ["AsyncTransport", "Handler", "MockTransport", "RecordedCall", "Transport"]

T = TypeVar("T")

Handler = Callable[[Op[Any] | StreamOp[Any], CallContext], object]
"""``handler(op, ctx)`` returns the op's answer (see :class:`MockTransport`), may raise a
:class:`TritonError` (or return one, which is raised), and may be a coroutine function
for the asyncio client."""


class RecordedCall(NamedTuple):
    """One call that reached the transport: the op and the context of its attempt."""

    op: Op[Any] | StreamOp[Any]
    ctx: CallContext


class MockTransport:
    """A transport for :class:`~triton_sdk.Client` and :class:`~triton_sdk.AsyncClient`
    that answers from ``handler`` and records every call in :attr:`calls`.

    Answers are what the op answers (see ``triton_sdk.ops``): JSON for metadata, config
    and settings, ``bool`` for health, an :class:`~triton_sdk.InferResult` for an
    :class:`~triton_sdk.ops.InferRequest` (or, simpler, a mapping of output name to
    array, batch axis included), an iterable of items for a streamed op (for a
    :class:`~triton_sdk.ops.StreamInfer`, results or such mappings). A returned
    :class:`TritonError` is raised. Mappings are read as a server's answers are: text
    becomes UTF-8 ``bytes``, and only the outputs the request asks for are kept.

    ``models`` are served without the handler: their metadata, config and readiness,
    and the repository index (``ListModels``: these models, ready); other names raise
    ModelNotFoundError (not ready). Without ``models``, the handler answers metadata,
    config and readiness too (a NotImplementedError from it: an unknown model). A
    spec with ``has_config=False`` gets no config (a 404, as from MLServer or KServe),
    so the client builds its spec from the metadata alone. The server is as live and
    ready as :attr:`live` and :attr:`ready` say (set ``mock.ready = False`` to test a
    server that is not ready). An op nothing answers raises an UnsupportedError with
    status ``"UNIMPLEMENTED"``, as from a server without that endpoint.

    The handler gets each attempt's ``ctx`` (``ctx.timeout`` included) but is not cut
    off at the timeout: to test how your code meets a timeout, raise (or return)
    :class:`~triton_sdk.TritonTimeoutError` from the handler.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        models: Iterable[ModelSpec] = (),
        live: bool = True,
        ready: bool = True,
    ) -> None:
        self.handler = handler
        self.models: dict[str, ModelSpec] = {spec.name: spec for spec in models}
        self.live = live
        self.ready = ready
        if len({spec.has_config for spec in self.models.values()}) > 1:
            # A client remembers that its server has no config endpoint: one server is
            # Triton or it is not.
            raise ValueError("models mixes specs with and without has_config: use two mocks")
        self.calls: list[RecordedCall] = []
        self.closed: bool = False

    # What both kinds of client call

    def _canned(self, op: Op[Any] | StreamOp[Any]) -> object:
        if isinstance(op, IsServerLive):
            return self.live
        if isinstance(op, IsServerReady):
            return self.live and self.ready
        if isinstance(op, ListModels) and self.models:
            return repository_index(self.models.values())
        if isinstance(op, GetModelMetadata | GetModelConfig | IsModelReady):
            spec = self.models.get(op.name)
            if (
                spec is not None
                and op.version
                and spec.versions
                and op.version not in spec.versions
            ):
                return _not_found(op)  # (a version the spec does not list)
            if spec is None:
                # Without models, the handler serves the repository; with them, the
                # handler need not know of other names.
                return _UNANSWERED if not self.models else _not_found(op)
            if isinstance(op, IsModelReady):
                return True
            if isinstance(op, GetModelMetadata):
                return model_metadata(spec)
            if not spec.has_config:  # as MLServer and KServe answer
                return UnsupportedError("Not Found", status=404, model=op.name)
            return model_config(spec)
        return _UNANSWERED

    def _record(self, op: Op[Any] | StreamOp[Any], ctx: CallContext) -> None:
        self.calls.append(RecordedCall(op, ctx))

    def _answer(self, op: Op[Any] | StreamOp[Any], answer: object) -> Any:
        if isinstance(answer, BaseException):
            raise _as_raised(op, answer)
        if answer is _UNANSWERED:
            # As a server without the endpoint answers (grpc's "Method not found!").
            raise UnsupportedError(
                f"MockTransport has no answer for {type(op).__name__}",
                status="UNIMPLEMENTED",
                model=op.model,
            )
        if answer is None and (isinstance(op, InferRequest) or getattr(op, "route", None)):
            # (a query's answer; ops that change something may answer None)
            raise TypeError(
                f"the handler answered None to {type(op).__name__}: return its answer, "
                "raise a TritonError, or raise NotImplementedError"
            )
        if isinstance(op, InferRequest):
            if isinstance(answer, Mapping):
                return _result(op, answer, self.models.get(op.model))
            if not isinstance(answer, InferResult):
                raise TypeError(
                    f"the answer to an InferRequest is a mapping of output name to array "
                    f"or an InferResult, got {type(answer).__name__}"
                )
        return answer

    def _items(self, op: StreamOp[Any], answer: object) -> Iterator[Any]:
        items = self._answer(op, answer)
        if isinstance(items, Mapping | str | bytes) or not isinstance(items, Iterable):
            raise TypeError(
                f"the answer to a {type(op).__name__} is an iterable of items (a list, a "
                f"generator), got {type(items).__name__}"
            )
        try:
            for item in items:
                yield self._item(op, item)
        except TritonError as error:  # raised by a generator handler
            raise _as_raised(op, error) from error.__cause__

    def _item(self, op: StreamOp[Any], item: object) -> object:
        """One item of a stream's answer: an error is raised, a mapping is a result."""
        if isinstance(item, BaseException):
            raise _as_raised(op, item)
        if isinstance(op, StreamInfer) and isinstance(item, Mapping):
            return _result(op.request, item, self.models.get(op.request.model))
        return item

    def _first_answer(self, op: Op[Any] | StreamOp[Any], ctx: CallContext) -> object:
        canned = self._canned(op)
        if canned is not _UNANSWERED:
            return canned
        if self.handler is None:
            return _not_answered(op)
        try:
            return self.handler(op, ctx)
        except NotImplementedError:  # the handler does not answer this op
            return _not_answered(op)
        except TritonError as error:  # (raised below, with the call's model and id)
            return error

    # Transport

    def call(self, op: Op[T], ctx: CallContext) -> T:
        """Record the call and answer it (the blocking client's transport method)."""
        self._record(op, ctx)
        answer = self._first_answer(op, ctx)
        if inspect.isawaitable(answer):
            cast("Any", answer).close()
            raise TypeError("a coroutine handler serves only AsyncClient")
        return cast("T", self._answer(op, answer))

    def stream(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        """Record the call and yield its answer's items."""
        self._record(op, ctx)
        answer = self._first_answer(op, ctx)
        if inspect.isawaitable(answer):
            cast("Any", answer).close()
            raise TypeError("a coroutine handler serves only AsyncClient")
        if isinstance(answer, AsyncIterable):
            raise TypeError("an async generator handler serves only AsyncClient")
        yield from self._items(op, answer)

    def close(self) -> None:
        """Record that a client closed it (``closed``). It goes on serving the other
        clients that share it; the closed client refuses calls itself."""
        self.closed = True

    # AsyncTransport

    async def acall(self, op: Op[T], ctx: CallContext) -> T:
        """Record the call and answer it (the asyncio client's transport method)."""
        self._record(op, ctx)
        answer = await _awaited(op, self._first_answer(op, ctx))
        return cast("T", self._answer(op, answer))

    async def astream(self, op: StreamOp[T], ctx: CallContext) -> AsyncIterator[T]:
        """Record the call and yield its answer's items."""
        self._record(op, ctx)
        answer = await _awaited(op, self._first_answer(op, ctx))
        if isinstance(answer, AsyncIterable):  # an async generator handler
            try:
                async for item in answer:
                    yield cast("T", self._item(op, item))
            except TritonError as error:
                raise _as_raised(op, error) from error.__cause__
            return
        for item in self._items(op, answer):
            yield item

    async def aclose(self) -> None:
        """Record that a client closed it (``closed``). It goes on serving the other
        clients that share it; the closed client refuses calls itself."""
        self.closed = True


def _result(
    request: InferRequest, outputs: Mapping[str, Any], spec: ModelSpec | None = None
) -> InferResult:
    """A handler's mapping as the server would answer ``request``: the outputs it asks
    for (all of them when it names none), of the version it names, with its id; an
    output asked for with a class count, given as scores, is classified as Triton does
    it."""
    asked = {output.name: output.class_count for output in request.outputs or ()}
    if spec is not None and spec.outputs:
        outputs = {
            name: value if asked.get(name) else _fitted(name, value, spec)  # (classes: text)
            for name, value in outputs.items()
        }
    if request.outputs is not None:
        outputs = {name: value for name, value in outputs.items() if name in asked}
        for name, value in outputs.items():
            scores = np.asarray(value)
            if asked[name] and scores.dtype.kind in "biuf":  # (text: classified already)
                if spec is not None:  # (in the output's datatype: 2**64 - 1 is no float)
                    scores = np.asarray(_fitted(name, value, spec))
                outputs[name] = _classified(scores, asked[name], spec)
    return result_of(
        request.model, outputs, model_version=request.version or "1", id=request.request_id
    )


def _fitted(name: str, value: Any, spec: ModelSpec) -> Any:
    """An output of the handler's answer in the datatype the model declares, as a server
    sends it (a list of Python floats for an FP32 output comes back FP32), cast by the
    rules inputs are (no value changed on the way: 300 is no UINT8); refused when they
    refuse it. Outputs the model does not declare are kept as they are."""
    declared = spec.outputs.get(name)
    if declared is None:
        return value
    try:
        return to_array(value, declared, spec.name)
    except InvalidInputError as error:
        said = str(error).replace(f"input {name!r}", f"output {name!r}", 1)
        raise ValueError(f"the handler's answer for model {spec.name!r}: {said}") from None


def _classified(scores: np.ndarray[Any, Any], count: int, spec: ModelSpec | None) -> Any:
    """Scores as Triton's classification extension answers them: per sample, the
    ``count`` best as ``"score:index"`` text, best first (labels are the server's)."""
    batched = spec.batched if spec is not None else scores.ndim > 1
    rows = scores.reshape(scores.shape[0], -1) if batched else scores.reshape(1, -1)
    exact = scores.dtype.kind in "iu"  # the server writes an integer as it is, a float as %f
    best = [
        [(f"{row[i]}:{i}" if exact else f"{row[i]:f}:{i}").encode() for i in order[:count]]
        for row in rows.tolist()
        for order in [_ranked(row)]
    ]
    classes = np.array(best, dtype=np.object_)
    return classes if batched else classes[0]


def _ranked(row: list[Any]) -> list[int]:
    """Positions best first, ties in position order; a NaN ranks first (the order the
    server gives NaN is undefined: first where it leads the output, as with argmax)."""
    return sorted(range(len(row)), key=lambda i: (row[i] == row[i], -row[i]))


def _as_raised(op: Op[Any] | StreamOp[Any], error: BaseException) -> BaseException:
    """A handler's error as the client would get it from a server: a copy with the call's
    model and request id when it names none (the handler's own object may serve many
    calls), and its cause."""
    if not isinstance(error, TritonError):
        return error
    request = op.request if isinstance(op, StreamInfer) else op
    request_id = request.request_id if isinstance(request, InferRequest) else ""
    if (error.model is not None or op.model is None) and (
        error.request_id is not None or not request_id
    ):
        return error
    raised = copy.copy(error)
    if raised.model is None:
        raised.model = op.model
    if raised.request_id is None:
        raised.request_id = request_id or None
    raised.__cause__ = error.__cause__
    raised.__traceback__ = error.__traceback__
    return raised


def _not_answered(op: Op[Any] | StreamOp[Any]) -> object:
    """What an op nobody answers gets: an unknown model, or UNIMPLEMENTED."""
    if isinstance(op, GetModelMetadata | GetModelConfig | IsModelReady):
        return _not_found(op)
    return _UNANSWERED


async def _awaited(op: Op[Any] | StreamOp[Any], answer: object) -> object:
    """A coroutine handler's answer."""
    if not inspect.isawaitable(answer):
        return answer
    try:
        return await cast("Awaitable[object]", answer)
    except NotImplementedError:
        return _not_answered(op)
    except TritonError as error:  # (raised below, with the call's model and id)
        return error


def _not_found(op: GetModelMetadata | GetModelConfig | IsModelReady) -> object:
    if isinstance(op, IsModelReady):
        return False
    version = f" version {op.version}" if op.version else ""
    return ModelNotFoundError(
        f"Request for unknown model: '{op.name}'{version} is not found",
        status="NOT_FOUND",
        model=op.name,
    )


_UNANSWERED: Any = object()


# Canned answers


def _tensor_metadata(tensor: TensorSpec, batched: bool) -> JSON:
    # (ints as a server writes them: a spec made with numpy's would not read as one)
    shape = [-1, *map(int, tensor.shape)] if batched else [int(dim) for dim in tensor.shape]
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": shape}


def model_metadata(spec: ModelSpec) -> JSON:
    """The model metadata a server reports for ``spec`` (shapes with the batch axis)."""
    return {
        "name": spec.name,
        "versions": list(spec.versions),
        "platform": spec.platform,
        "inputs": [_tensor_metadata(t, spec.batched) for t in spec.inputs.values()],
        "outputs": [_tensor_metadata(t, spec.batched) for t in spec.outputs.values()],
    }


def repository_index(specs: Iterable[ModelSpec]) -> list[JSON]:
    """The repository index a server reports when ``specs`` are loaded: one ready entry
    per version (one without a version for a spec that lists none)."""
    return [
        {"name": spec.name, "state": "READY", **({"version": version} if version else {})}
        for spec in sorted(specs, key=lambda spec: spec.name)  # (as Triton lists them)
        for version in spec.versions or ("",)
    ]


def _tensor_config(tensor: TensorSpec) -> JSON:
    kind = "STRING" if tensor.datatype == "BYTES" else tensor.datatype  # (config's names)
    dims = [int(dim) for dim in tensor.shape]
    config: JSON = {"name": tensor.name, "data_type": f"TYPE_{kind}", "dims": dims}
    if tensor.optional:
        config["optional"] = True
    if tensor.label_filename:
        config["label_filename"] = tensor.label_filename
    return config


def model_config(spec: ModelSpec) -> JSON:
    """The model config a server reports for ``spec`` (the JSON form of config.pbtxt)."""
    config: JSON = {
        "name": spec.name,
        "platform": spec.platform,
        "backend": spec.backend or "",
        "max_batch_size": int(spec.max_batch_size),
        "input": [_tensor_config(t) for t in spec.inputs.values()],
        "output": [_tensor_config(t) for t in spec.outputs.values()],
    }
    if spec.decoupled:
        config["model_transaction_policy"] = {"decoupled": True}
    if spec.sequence:
        config["sequence_batching"] = {}
        if spec.string_sequence_ids or spec.integer_sequence_ids:
            kind = "TYPE_STRING" if spec.string_sequence_ids else "TYPE_UINT64"
            corrid = {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": kind}
            config["sequence_batching"]["control_input"] = [{"name": "CORRID", "control": [corrid]}]
    if spec.dynamic_batching:
        sizes = [int(size) for size in spec.preferred_batch_sizes]
        config["dynamic_batching"] = {"preferred_batch_size": sizes}
    if spec.parameters:
        config["parameters"] = {
            key: {"string_value": value} for key, value in spec.parameters.items()
        }
    return config


def result_of(model: str, outputs: Mapping[str, Any], **fields: Any) -> InferResult:
    """An InferResult of ``outputs`` (name -> array-like, batch axis included), as a
    server sends it: text (``str`` elements) as UTF-8 ``bytes``, since BYTES outputs
    arrive as bytes. ``fields`` are the result's other fields (``model_version`` is
    ``"1"`` unless given)."""
    arrays = {name: _as_sent(_output_array(value)) for name, value in outputs.items()}
    datatypes = {name: datatype_of(array) for name, array in arrays.items()}
    return InferResult(
        arrays, datatypes=datatypes, model_name=model, **{"model_version": "1", **fields}
    )


def _output_array(value: Any) -> np.ndarray[Any, Any]:
    """``value`` as an array; text as an object array of its own elements (numpy's fixed
    width str/bytes would drop trailing NULs, and refuse bytes mixed with str)."""
    if isinstance(value, np.ndarray):
        return value
    try:
        text = np.array(value, dtype=np.object_)
    except ValueError:  # (ragged: numpy says so below)
        return np.asarray(value)
    if text.size and all(isinstance(item, str | bytes) for item in text.reshape(-1)):
        return text
    return np.asarray(value)


_encode = np.frompyfunc(lambda item: item.encode() if isinstance(item, str) else item, 1, 1)


def _as_sent(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if array.dtype.kind not in TEXT_KINDS:
        return array
    return np.asarray(_encode(array.astype(np.object_)), dtype=np.object_)
