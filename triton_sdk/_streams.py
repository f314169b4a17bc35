"""Iterators over a stream of responses that cancel the request when left early."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Generic, NoReturn, TypeVar

from ._errors import TritonError
from ._transports._loop import check_loop

if TYPE_CHECKING:
    from ._call import StreamStop

__all__ = ["AsyncResponseStream", "ResponseStream"]

T = TypeVar("T")


def ended_by(failure: BaseException) -> TritonError:
    """The error of reading on after ``failure`` came out of a stream: it has ended (a
    timeout or a cancellation cancels the request), and it must not look like an end
    after the last response."""
    error = TritonError(
        f"this stream ended with {type(failure).__name__}"
        + (f": {failure}" if str(failure) else "")
        + "; it gives no more responses (open a new one)"
    )
    error.__cause__ = failure
    return error


def _after_responses(failure: BaseException) -> None:
    """A failure that came after the stream's first response: the model ran."""
    if isinstance(failure, TritonError):
        failure.may_have_run = True


def _not_copied(stream: object) -> TypeError:
    # (a copy would share the request, and cancel it when collected)
    return TypeError(
        f"a stream ({type(stream).__name__}) cannot be pickled or copied: it is one request "
        "in flight; read it where it is"
    )


def _read_twice(reader: str) -> TritonError:
    return TritonError(
        f"this stream is being read by another {reader}: a stream is read by one {reader} "
        "at a time (close() may come from any)"
    )


class ResponseStream(Generic[T]):
    """The responses of one streamed request, in order.

    Iterate it with ``for``; it ends after the model's final response. Closing it early
    (:meth:`close`, leaving ``with model.stream(...) as responses:``, or dropping it, as
    ``break`` out of ``for r in model.stream(...)`` does) cancels the request on the
    server. ``break`` alone only pauses a stream still referred to.
    """

    __slots__ = ("_answered", "_failure", "_iterator", "_reading", "_stop")

    def __init__(self, iterator: Iterator[T], stop: StreamStop | None = None) -> None:
        self._iterator = iterator
        self._stop = stop
        self._failure: BaseException | None = None
        self._answered = False
        self._reading = threading.Lock()  # (held by the thread reading)

    def __iter__(self) -> ResponseStream[T]:
        return self

    def __next__(self) -> T:
        if self._failure is not None:
            raise ended_by(self._failure)
        if not self._reading.acquire(blocking=False):  # (it stays the other reader's)
            raise _read_twice("thread")
        try:
            response = next(self._iterator)
        except StopIteration:
            raise
        except BaseException as exc:
            self._failure = exc
            if self._answered:
                _after_responses(exc)
            raise
        finally:
            self._reading.release()
        self._answered = True
        return response

    def close(self) -> None:
        """Stop reading: cancel the request if it is still running. From another thread
        than the one reading, the reader's loop then ends as after its last response."""
        close = getattr(self._iterator, "close", None)
        if close is None:
            return
        if self._stop is None:
            close()
            return
        # Stop first: should another thread be reading (now, or by the time close() runs),
        # it ends its wait, and close() then finds the generator busy.
        self._stop.request()
        try:
            close()
        except ValueError as exc:
            if "already executing" not in str(exc):
                raise

    def __enter__(self) -> ResponseStream[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __reduce__(self) -> NoReturn:
        raise _not_copied(self)

    def __del__(self) -> None:
        self.close()


class AsyncResponseStream(Generic[T]):
    """The asyncio twin of :class:`ResponseStream`: ``async for``, ``aclose``, ``async with``."""

    __slots__ = ("_answered", "_failure", "_iterator", "_loop", "_reading", "_stop")

    def __init__(self, iterator: AsyncIterator[T], stop: StreamStop | None = None) -> None:
        self._iterator = iterator
        self._stop = stop
        self._failure: BaseException | None = None
        self._answered = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False

    def __aiter__(self) -> AsyncResponseStream[T]:
        return self

    async def __anext__(self) -> T:
        if self._failure is not None:
            raise ended_by(self._failure)
        # A started stream waits on futures of the loop it started in: read in another,
        # it would fail with asyncio's RuntimeError, after a request it cannot cancel.
        self._loop = check_loop(self._loop)
        if self._reading:  # (it stays the other reader's)
            raise _read_twice("task")
        self._reading = True
        try:
            response = await self._iterator.__anext__()
        except StopAsyncIteration:
            raise
        except BaseException as exc:
            self._failure = exc
            if self._answered:
                _after_responses(exc)
            raise
        finally:
            self._reading = False
        self._answered = True
        return response

    async def aclose(self) -> None:
        """Stop reading: cancel the request if it is still running. From another task
        than the one reading, the reader's loop then ends as after its last response."""
        aclose = getattr(self._iterator, "aclose", None)
        if aclose is None:
            return
        if self._stop is None:
            await aclose()
            return
        self._stop.request()  # as in ResponseStream.close
        try:
            await aclose()
        except RuntimeError as exc:
            # Another task waits in it: "aclose(): asynchronous generator is already running".
            if "already running" not in str(exc):
                raise

    def __reduce__(self) -> NoReturn:
        raise _not_copied(self)

    async def __aenter__(self) -> AsyncResponseStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
