"""What the typed per-model modules written by ``triton-sdk stubgen`` build on.

A generated class wraps a :class:`~triton_sdk.Model` (or an
:class:`~triton_sdk.AsyncModel` for its ``Async`` twin) and checks, when it is made, that
the model on the server still has the inputs and outputs the class was written for. Its
methods take the model's inputs as keyword parameters and return a result class whose
outputs are typed attributes. See docs/stubs.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar, cast, overload

from ._async_client import AsyncModel
from ._client import Model
from ._errors import InvalidInputError
from ._result import InferResult
from ._shaping import InputValue
from ._spec import ModelSpec
from ._streams import AsyncResponseStream, ResponseStream

__all__ = ["AsyncStubModel", "StubModel", "given", "signature", "typed", "typed_stream"]

R = TypeVar("R", bound=InferResult)


def signature(spec: ModelSpec) -> str:
    """The parts of a model's spec that a stub depends on, as one line."""
    parts = [f"max_batch_size {spec.max_batch_size}"]
    if spec.decoupled:
        parts.append("decoupled")
    if spec.sequence:  # (its calls go through model.sequence(): a change the stub must see)
        parts.append("sequences")
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for tensor in tensors.values():
            optional = " optional" if tensor.optional else ""
            parts.append(f"{kind} {tensor.name} {tensor.datatype} {list(tensor.shape)}{optional}")
    return "; ".join(parts)


def _check(stub: type[Any], model: object, expected: type[Any]) -> None:
    if not isinstance(model, expected):
        raise InvalidInputError(
            f"{stub.__name__} wraps a ts.{expected.__name__}, got {type(model).__name__}"
        )
    name: str = stub.MODEL
    if model.name != name:
        raise InvalidInputError(f"{stub.__name__} is for model {name!r}, got {model.name!r}")
    now = signature(model.spec)
    if now != stub.SIGNATURE:
        written = set(stub.SIGNATURE.split("; "))
        current = set(now.split("; "))
        changes = [f"now: {part}" for part in now.split("; ") if part not in written]
        changes += [f"was: {part}" for part in stub.SIGNATURE.split("; ") if part not in current]
        if not changes:  # the same tensors, in another order (which names may depend on)
            changes = [f"the same tensors in another order, now: {now}; was: {stub.SIGNATURE}"]
        raise InvalidInputError(
            f"model {name!r} on the server is not the one {stub.__name__} was generated "
            f"for ({'; '.join(changes)}); run triton-sdk stubgen again"
        )


class StubModel:
    """Base of the generated classes: a :class:`~triton_sdk.Model` of one known spec."""

    MODEL: ClassVar[str]
    SIGNATURE: ClassVar[str]

    def __init__(self, model: Model) -> None:
        _check(type(self), model, Model)
        self.model = model

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.model!r}>"


class AsyncStubModel:
    """Base of the generated ``Async`` classes: an :class:`~triton_sdk.AsyncModel` of one
    known spec."""

    MODEL: ClassVar[str]
    SIGNATURE: ClassVar[str]

    def __init__(self, model: AsyncModel) -> None:
        _check(type(self), model, AsyncModel)
        self.model = model

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.model!r}>"


def given(inputs: Mapping[str, InputValue | None]) -> dict[str, InputValue]:
    """The inputs that were given (optional inputs left as None are not sent)."""
    return {name: value for name, value in inputs.items() if value is not None}


def typed(result: InferResult, cls: type[R]) -> R:
    """``result`` as the generated result class (the same object: no copy)."""
    result.__class__ = cls
    return cast("R", result)


class _TypedResponses(Generic[R]):
    """The responses of a :class:`ResponseStream`, each as the generated result class;
    closing it closes that stream."""

    __slots__ = ("_cls", "_responses")

    def __init__(self, responses: ResponseStream[InferResult], cls: type[R]) -> None:
        self._responses = responses
        self._cls = cls

    def __iter__(self) -> _TypedResponses[R]:
        return self

    def __next__(self) -> R:
        return typed(next(self._responses), self._cls)

    def close(self) -> None:
        self._responses.close()


class _AsyncTypedResponses(Generic[R]):
    """The asyncio twin of :class:`_TypedResponses`."""

    __slots__ = ("_cls", "_responses")

    def __init__(self, responses: AsyncResponseStream[InferResult], cls: type[R]) -> None:
        self._responses = responses
        self._cls = cls

    def __aiter__(self) -> _AsyncTypedResponses[R]:
        return self

    async def __anext__(self) -> R:
        return typed(await self._responses.__anext__(), self._cls)

    async def aclose(self) -> None:
        await self._responses.aclose()


@overload
def typed_stream(responses: ResponseStream[InferResult], cls: type[R]) -> ResponseStream[R]: ...
@overload
def typed_stream(
    responses: AsyncResponseStream[InferResult], cls: type[R]
) -> AsyncResponseStream[R]: ...
def typed_stream(
    responses: ResponseStream[InferResult] | AsyncResponseStream[InferResult], cls: type[R]
) -> ResponseStream[R] | AsyncResponseStream[R]:
    """``responses`` (what ``Model.stream`` or ``AsyncModel.stream`` returned) yielding the
    generated result class. Closing it (``close``, ``aclose``, leaving ``with``) closes
    ``responses``, which cancels the request as ever, from another thread or task too."""
    # No StreamStop of its own: closing goes through to ``responses``, which stops itself.
    if isinstance(responses, AsyncResponseStream):
        return AsyncResponseStream(_AsyncTypedResponses(responses, cls))
    return ResponseStream(_TypedResponses(responses, cls))
