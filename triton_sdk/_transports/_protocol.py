"""What a transport is: send one call, open one stream, close. Once blocking, once asyncio."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Protocol, TypeVar, runtime_checkable

from .._call import CallContext
from .._ops import Op, StreamOp

__all__ = ["AsyncTransport", "Transport"]

T = TypeVar("T")


@runtime_checkable
class Transport(Protocol):
    """Moves ops to a server and answers back, blocking; safe to share between threads.

    It obeys ``ctx.timeout`` and sends ``ctx.headers``, raises only :class:`TritonError`
    and never retries (the client's call path does).
    """

    def call(self, op: Op[T], ctx: CallContext) -> T:
        """Send a unary op and return its answer."""
        ...

    def stream(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        """Send a streamed op; each item as it arrives. Closing the iterator cancels it."""
        ...

    def close(self) -> None:
        """Close the connections; later calls raise TritonError."""
        ...


@runtime_checkable
class AsyncTransport(Protocol):
    """The asyncio twin of :class:`Transport`, with ``a``-prefixed names, so that one
    object can serve both kinds of client (as :class:`~triton_sdk.testing.MockTransport`
    does)."""

    async def acall(self, op: Op[T], ctx: CallContext) -> T:
        """Send ``op`` and return its answer, or raise its TritonError."""

    def astream(self, op: StreamOp[T], ctx: CallContext) -> AsyncIterator[T]:
        """Send a streamed ``op``; yield its responses as they arrive."""

    async def aclose(self) -> None:
        """Close the connections (in the event loop they were opened in)."""
