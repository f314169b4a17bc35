"""Calls logged at DEBUG on the ``triton_sdk`` logger, header values hidden.

A client made while that logger is enabled for DEBUG gets :class:`LogCalls` among its
hooks; other clients pay nothing for it. Retries are logged at INFO (WARNING when the
request may run twice), endpoints ejected and readmitted at INFO, failover at DEBUG.
"""

from __future__ import annotations

import logging
import time

from ._call import AnyOp, CallContext, CallHook
from ._errors import TritonError

__all__ = ["LogCalls", "logger", "wanted"]

logger = logging.getLogger("triton_sdk")
_STARTED = "triton_sdk.started"
_SETTLED = "triton_sdk.settled"  # (answered or failed)


def wanted() -> bool:
    """Whether a client made now should log its calls."""
    return logger.isEnabledFor(logging.DEBUG)


def _what(ctx: CallContext) -> str:
    model = "" if ctx.model is None else f" {ctx.model!r}"
    return f"{ctx.call}{model}"


class LogCalls(CallHook):
    """Each attempt, answer and failure at DEBUG; header names only (values may be
    credentials)."""

    def before_send(self, op: AnyOp, ctx: CallContext) -> None:
        ctx.state[_STARTED] = time.perf_counter()
        logger.debug(
            "sending %s to %s (attempt %d, timeout %s, headers %s)",
            _what(ctx),
            ctx.url,
            ctx.attempt,
            ctx.timeout,
            sorted(ctx.headers) or "none",
        )

    def after_receive(self, op: AnyOp, ctx: CallContext, result: object) -> None:
        ctx.state[_SETTLED] = True
        started = ctx.state.get(_STARTED)
        took = "" if started is None else f" in {(time.perf_counter() - started) * 1e3:.2f} ms"
        logger.debug("%s answered%s", _what(ctx), took)

    def on_error(self, op: AnyOp, ctx: CallContext, error: TritonError) -> None:
        ctx.state[_SETTLED] = True
        logger.debug("%s failed: %s: %s", _what(ctx), type(error).__name__, error)

    def on_end(self, op: AnyOp, ctx: CallContext) -> None:
        if not ctx.state.get(_SETTLED):
            logger.debug("%s ended without an answer", _what(ctx))
