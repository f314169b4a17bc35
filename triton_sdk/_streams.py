"""Iterators over a stream of responses that cancel the request when left early."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["AsyncResponseStream", "ResponseStream"]

T = TypeVar("T")


class ResponseStream(Generic[T]):
    """The responses of one streamed request, in order.

    Iterate it with ``for``; it ends after the model's final response. Leaving early (a
    ``break``, an exception, or :meth:`close`) cancels the request on the server and
    frees the stream; ``with model.stream(...) as responses:`` makes that explicit.
    """

    __slots__ = ("_iterator",)

    def __init__(self, iterator: Iterator[T]) -> None:
        self._iterator = iterator

    def __iter__(self) -> ResponseStream[T]:
        return self

    def __next__(self) -> T:
        return next(self._iterator)

    def close(self) -> None:
        """Stop reading: cancel the request if it is still running."""
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> ResponseStream[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class AsyncResponseStream(Generic[T]):
    """The asyncio twin of :class:`ResponseStream`: ``async for``, ``aclose``, ``async with``."""

    __slots__ = ("_iterator",)

    def __init__(self, iterator: AsyncIterator[T]) -> None:
        self._iterator = iterator

    def __aiter__(self) -> AsyncResponseStream[T]:
        return self

    async def __anext__(self) -> T:
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        """Stop reading: cancel the request if it is still running."""
        aclose = getattr(self._iterator, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> AsyncResponseStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
