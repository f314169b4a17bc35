"""The few primitives where blocking and asyncio code really differ, as named twins.

``_async_client.py`` is written once, against the ``Async*``/``a*`` names here;
``_client.py`` is generated from it (``scripts/unasync.py``), which maps each name to its
blocking twin. Everything else the two clients do is the same text.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from collections import deque
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
)
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, Final, TypeAlias, TypeVar

from ._base import closed_error
from ._errors import TritonError
from ._fork import on_fork
from ._transports._errors import closed_in_flight

__all__ = [
    "MAX_CHUNKS_IN_FLIGHT",
    "AsyncChunkRunner",
    "AsyncGate",
    "AsyncSamples",
    "AsyncWindow",
    "ChunkRunner",
    "Gate",
    "Samples",
    "Window",
    "aclose_iterator",
    "acurrent_worker",
    "aiterate",
    "ashielded",
    "asleep",
    "await_until",
    "close_iterator",
    "current_worker",
    "iterate",
    "shielded",
    "sleep",
    "wait_until",
    "within",
]

A = TypeVar("A")
R = TypeVar("R")
T = TypeVar("T")

MAX_CHUNKS_IN_FLIGHT: Final = 8
"""How many chunks of split batches are in flight at once: per call on AsyncClient, per
client on Client (whose calls share one pool of this many threads)."""


# Sleeping, iterating, closing iterators


sleep = time.sleep
asleep = asyncio.sleep

Samples: TypeAlias = Iterable[T]
AsyncSamples: TypeAlias = Iterable[T] | AsyncIterable[T]
"""``AsyncModel.map`` also takes asynchronous iterables."""


def shielded(work: Callable[[A], T], argument: A) -> T:
    """The blocking twin of :func:`ashielded`: a blocking call runs to its end anyway."""
    return work(argument)


_SHIELDED: set[asyncio.Task[Any]] = set()
"""Work that goes on after its caller was cancelled (kept: the loop holds tasks weakly)."""


async def ashielded(work: Callable[[A], Coroutine[Any, Any, T]], argument: A) -> T:
    """Run ``work(argument)`` to its end even if the awaiting task is cancelled: the
    cancellation reaches the caller at once, and the work goes on in the loop (a close
    cut off by a timeout still unregisters its regions and closes its connections)."""
    task = asyncio.ensure_future(work(argument))
    _SHIELDED.add(task)
    task.add_done_callback(_SHIELDED.discard)
    return await asyncio.shield(task)


def wait_until(done: Callable[[], bool], limit: float, interval: float = 0.005) -> bool:
    """Poll ``done`` every ``interval`` seconds for at most ``limit`` seconds; whether it
    came true."""
    deadline = time.monotonic() + limit
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sleep(min(interval, left))
    return True


async def await_until(done: Callable[[], bool], limit: float, interval: float = 0.005) -> bool:
    """The asyncio twin of :func:`wait_until`."""
    deadline = time.monotonic() + limit
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asleep(min(interval, left))
    return True


def current_worker() -> object:
    """What runs this code: the thread (its twin: the asyncio task)."""
    return threading.get_ident()


def acurrent_worker() -> object:
    """The asyncio task that runs this code."""
    return asyncio.current_task()


def iterate(items: Iterable[T]) -> Iterator[T]:
    return iter(items)


async def aiterate(items: Iterable[T] | AsyncIterable[T]) -> AsyncIterator[T]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


def close_iterator(iterator: Iterator[Any]) -> None:
    """Close a generator (which cancels the stream it reads); plain iterators need not."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


async def aclose_iterator(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


# The chunks of a split batch


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable``; ``asyncio.TimeoutError`` after ``timeout`` seconds (None: no
    limit).

    Not ``asyncio.wait_for``: before Python 3.12 it drops a cancellation of the caller
    that arrives as the awaitable finishes, and the cancelled task goes on as if nothing
    happened (a cancelled stream was read to its end).
    """
    if timeout is None:
        return await awaitable
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await awaitable
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if expired:
            raise asyncio.TimeoutError from None
        raise
    finally:
        timer.cancel()


class _NotStarted(Exception):
    """A chunk that close() kept from being sent: ``error`` is the closed client's."""

    def __init__(self, error: TritonError) -> None:
        super().__init__(str(error))
        self.error = error


class ChunkRunner:
    """Runs the chunks of a split batch on a pool of threads shared by the client's calls."""

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        on_fork(self)

    def after_fork_in_child(self) -> None:
        # The child has none of the pool's threads: work queued there would never run
        # (and the lock may have been held at the fork).
        self._lock = threading.Lock()
        self._executor = None

    def run(self, send: Callable[[A], R], chunks: Iterable[A]) -> list[R]:
        """``send`` each chunk, at most MAX_CHUNKS_IN_FLIGHT at once; answers in order."""
        with self._lock:
            if self._closed:
                raise closed_error(self._kind)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    MAX_CHUNKS_IN_FLIGHT, thread_name_prefix="triton_sdk"
                )
            executor = self._executor
        futures: list[Future[R]] = []
        started: list[None] = []  # (one per chunk that began to be sent)

        def start(chunk: A) -> R:
            if self._closed:  # a chunk that waited for a thread until close(): not sent
                raise _NotStarted(closed_error(self._kind))
            started.append(None)
            return send(chunk)

        try:
            try:
                for chunk in chunks:
                    # Each runs in the caller's context (contextvars: a tracer's span).
                    context = contextvars.copy_context()
                    futures.append(executor.submit(context.run, start, chunk))
            except RuntimeError as exc:  # the pool was shut down by close() meanwhile
                raise self._closed_error(started) from exc
            # The first failure ends the call, whichever chunk it is.
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                failure = future.exception() if future in done else None
                if failure is None:
                    continue
                if isinstance(failure, _NotStarted):  # (close() came first)
                    raise self._closed_error(started) from None
                future.result()  # raises it
            return [future.result() for future in futures]
        finally:
            # A failed call sends none of its chunks still waiting for a thread (a
            # finished one has none left).
            for future in futures:
                future.cancel()

    def _closed_error(self, started: list[None]) -> TritonError:
        """The error of a call that close() cut short: it may have run in part when
        some of its chunks had gone out."""
        return closed_in_flight() if started else closed_error(self._kind)

    def close(self) -> None:
        """Refuse new calls and chunks not started, without waiting for those in flight:
        the client closes its transport first, which ends them (gRPC) or lets them finish
        (HTTP), as it does calls in flight on other threads."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            # (Not cancel_futures=True: futures cancelled so never wake wait().)
            executor.shutdown(wait=False)


class AsyncChunkRunner:
    """Runs the chunks of a split batch as tasks, at most MAX_CHUNKS_IN_FLIGHT per call."""

    def __init__(self, kind: str) -> None:
        self._kind = kind

    async def run(self, send: Callable[[A], Awaitable[R]], chunks: Iterable[A]) -> list[R]:
        slots = asyncio.Semaphore(MAX_CHUNKS_IN_FLIGHT)
        sent: set[int] = set()

        async def one(index: int, chunk: A) -> R:
            async with slots:
                sent.add(index)
                return await send(chunk)

        tasks = [asyncio.ensure_future(one(index, chunk)) for index, chunk in enumerate(chunks)]
        try:
            return list(await asyncio.gather(*tasks))
        except Exception:
            # The first failure ends the call, whichever chunk it is. Chunks still waiting
            # for a slot are dropped; those already sent are waited for, not cancelled
            # (see AsyncWindow.__aexit__).
            for index, task in enumerate(tasks):
                if index not in sent:
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            for task in tasks:  # cancelling the caller cancels every chunk
                task.cancel()

    def close(self) -> None:
        """Nothing to release: each call's tasks end with the call."""


# The window of batches of map


class Window:
    """Batches of ``map`` in flight on a pool of threads, oldest first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool = ThreadPoolExecutor(size, thread_name_prefix="triton_sdk-map")
        self._pending: deque[Future[Any]] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, work: Callable[[A], R], item: A) -> None:
        context = contextvars.copy_context()  # the caller's, for hooks (a tracer's span)
        self._pending.append(self._pool.submit(context.run, work, item))

    def oldest(self) -> Any:
        """Wait for the oldest batch and return its answer."""
        return self._pending.popleft().result()

    def oldest_done(self) -> bool:
        """Whether the oldest batch has its answer (``oldest`` would not wait)."""
        return bool(self._pending) and self._pending[0].done()

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Cancel what has not started; wait for what has."""
        for future in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)


class AsyncWindow:
    """Batches of ``map`` in flight as tasks, oldest first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pending: deque[asyncio.Future[Any]] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, work: Callable[[A], Awaitable[R]], item: A) -> None:
        self._pending.append(asyncio.ensure_future(work(item)))

    async def oldest(self) -> Any:
        return await self._pending.popleft()

    def oldest_done(self) -> bool:
        """Whether the oldest batch has its answer (``oldest`` would not wait)."""
        return bool(self._pending) and self._pending[0].done()

    async def __aenter__(self) -> AsyncWindow:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        """Wait for the batches in flight, whose outcomes are dropped.

        They are not cancelled: a request cancelled just as the server answers it can crash
        older Triton releases (triton-inference-server/server#7368 and #8034), and
        ``map`` should not risk a server for results nobody reads. Only a cancellation that
        ends the iteration (the task cancelled while it waits in ``map``) cancels them.
        """
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            for task in self._pending:
                task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)


class Gate:
    """Shut until opened, once; ``wait`` blocks the calling thread until then."""

    def __init__(self) -> None:
        self._opened = threading.Event()

    def open(self) -> None:
        self._opened.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it opened (within ``timeout`` seconds, when given)."""
        return self._opened.wait(timeout)


class AsyncGate:
    """Shut until opened, once; ``wait`` suspends the calling task until then."""

    def __init__(self) -> None:
        self._opened = asyncio.Event()

    def open(self) -> None:
        self._opened.set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Whether it opened (within ``timeout`` seconds, when given)."""
        try:
            await asyncio.wait_for(self._opened.wait(), timeout)
        except asyncio.TimeoutError:  # (not TimeoutError before Python 3.11)
            return False
        return True
