"""One test body for both clients: their answers, awaited or not, read the same way."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any


async def resolve(value: Any) -> Any:
    """The value of a call on either client: awaited, and drained when it is a stream."""
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, AsyncIterator):
        return [item async for item in value]
    if isinstance(value, Iterator):
        return list(value)
    return value
