"""Run an AsyncClient from blocking test code, so one test body covers all four transports.

The async client really runs on an event loop (in a thread of its own); the wrapper only
waits for each coroutine, and turns async iterators into plain ones.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import triton_sdk as ts


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Blocking:
    """A blocking view of an AsyncClient or AsyncModel (or anything with coroutines)."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        self._target = target
        self._loop = loop

    @property
    def target(self) -> Any:
        return self._target

    def _wrap(self, value: Any) -> Any:
        if isinstance(
            value, ts.AsyncModel | ts.AsyncChat | ts.AsyncChatCompletions | ts.AsyncCompletions
        ):
            return Blocking(value, self._loop)
        if hasattr(value, "__anext__"):
            return self._iterate(value)
        return value

    def _iterate(self, iterator: AsyncIterator[Any]) -> Iterator[Any]:
        async def next_item() -> Any:
            try:
                return True, await iterator.__anext__()
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self._loop.run(next_item())
                if not more:
                    return
                yield self._wrap(item)
        finally:  # leaving the loop early closes the stream, as it does on a Client
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                self._loop.run(aclose())

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return self._wrap(attribute)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            if inspect.isawaitable(result):
                return self._wrap(self._loop.run(result))
            if hasattr(result, "__anext__"):
                return self._iterate(result)
            return self._wrap(result)

        return call

    def __repr__(self) -> str:
        return f"Blocking({self._target!r})"
