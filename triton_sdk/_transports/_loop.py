"""asyncio connections belong to the event loop they were opened in."""

from __future__ import annotations

import asyncio

from .._errors import TritonError, refused_before_sending

__all__ = ["check_loop", "check_open_loop", "refuse_another_loop"]


def check_loop(bound: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """The running loop, refusing one other than the loop the connections were opened in."""
    running = asyncio.get_running_loop()
    if bound is not None and bound is not running:
        raise refused_before_sending(
            TritonError(
                "this AsyncClient was first used in another event loop, and its connections "
                "belong to that loop: open one AsyncClient per event loop"
            )
        )
    return running


def check_open_loop(bound: asyncio.AbstractEventLoop | None) -> None:
    """check_loop while ``bound`` is open; once ``asyncio.run`` has ended it, there is no
    loop left to close its connections in, and nothing to refuse."""
    if bound is not None and not bound.is_closed():
        check_loop(bound)


def refuse_another_loop(transport: object) -> None:
    """Raise check_loop's error when ``transport``'s connections belong to a loop other
    than the running one. (Transports of the SDK say so; a test double needs not.)"""
    refuse = getattr(transport, "refuse_other_loop", None)
    if refuse is not None:
        refuse()
