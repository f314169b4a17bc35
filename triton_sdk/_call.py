"""The pure parts of the call path: per-call options, per-attempt context, hooks.

Every public network method of both clients resolves its options once
(:meth:`ClientSettings.options`), then each attempt gets a :class:`CallContext` that the
hooks see and may change (headers, timeout) and that the transport obeys.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._checks import check_headers, check_timeout
from ._config import RetryPolicy
from ._errors import InvalidInputError, TritonError
from ._ops import Op, StreamOp
from ._retry import attempt_timeout

__all__ = [
    "AnyOp",
    "CallContext",
    "CallHook",
    "CallOptions",
    "StreamStop",
    "end_attempt",
    "run_before_send",
]

AnyOp = Op[Any] | StreamOp[Any]


@attrs.define(slots=True)
class CallContext:
    """One attempt of one call, as the hooks and the transport see it.

    Hooks may replace ``headers`` (a read-only mapping: assign a new one) and
    ``timeout``; ``state`` is theirs to keep anything between ``before_send`` and the
    answer.

    Attributes:
        call: the operation's name (``"infer"``, ``"model_metadata"``, ...).
        model: the model the call is about, if any.
        headers: sent with the request: the client's, with the call's on top.
        timeout: seconds this attempt may take (``None``: no limit); for a stream,
            the wait for each response.
        deadline_at: ``time.monotonic()`` value the whole call must end by, or None.
        attempt: 1 for the first attempt, 2 for the first retry, ...
        url: the URL the attempt goes to, for hooks that name the server: the client's;
            on a client over many endpoints, its first endpoint's in ``before_send`` and
            the endpoint the attempt went to afterwards; the probed endpoint's for a
            readiness probe, the op's own for metrics and the OpenAI frontend (set for
            hooks only; ``""`` in a transport's own use).
    """

    call: str
    model: str | None
    headers: Mapping[str, str] = attrs.field(repr=False)  # values may be credentials
    timeout: float | None
    deadline_at: float | None = None
    attempt: int = 1
    state: dict[str, Any] = attrs.field(factory=dict, repr=False)
    url: str = ""
    # A stream's: how a thread other than the reader's stops it (ResponseStream.close).
    _stop: StreamStop | None = attrs.field(default=None, init=False, repr=False, eq=False)


class StreamStop:
    """Stops a stream that another thread is reading. The transport gives ``cancel`` (which
    makes the reader's wait end) once the stream is open; a stopped stream ends quietly,
    as one left with ``break`` does."""

    __slots__ = ("_cancel", "requested")

    def __init__(self) -> None:
        self._cancel: Callable[[], object] | None = None
        self.requested: bool = False

    def arm(self, cancel: Callable[[], object]) -> None:
        """Called by the transport when the stream is open."""
        self._cancel = cancel
        if self.requested:  # stopped while it opened
            cancel()

    def disarm(self) -> None:
        """Called by the transport once the request has had its last response: there is
        nothing left to stop, and the server closes the stream itself."""
        self._cancel = None

    def request(self) -> None:
        self.requested = True
        cancel = self._cancel  # (read once: the reader's thread may disarm it meanwhile)
        if cancel is not None:
            cancel()


class CallHook:
    """Sees every attempt of every call of a client: ``Client(url, hooks=[MyHook()])``.

    Subclass it and override what you need; each method runs in the thread (or task)
    that sends the attempt and must not block: the caller's, a worker's for the batches
    of ``map`` and of a split batch (with the caller's context variables), or, on a
    client over many endpoints, the upkeep's for its readiness probes. Telemetry,
    logging and header injection (a rotating token, a ``traceparent``) plug in here.
    """

    def before_send(self, op: AnyOp, ctx: CallContext) -> None:
        """Called before each attempt is sent; may change ``ctx.headers``/``ctx.timeout``
        (a timeout past the call's retry deadline is cut to it)."""

    def after_receive(self, op: AnyOp, ctx: CallContext, result: object) -> None:
        """Called with a call's answer, or with each response of a stream."""

    def on_error(self, op: AnyOp, ctx: CallContext, error: TritonError) -> None:
        """Called when an attempt (or a stream) fails, before any retry."""

    def on_end(self, op: AnyOp, ctx: CallContext) -> None:
        """Called once when an attempt is over, whatever became of it: after
        ``after_receive`` or ``on_error``, and also when neither came (a stream that ended
        without a response, or was stopped or left before one; a call cancelled; another
        hook's ``before_send`` raised). The place to release what ``before_send`` took.

        A hook that raises (a bug of its own) does not stop the other hooks: every hook's
        ``after_receive``, ``on_error`` and ``on_end`` runs, then the first exception is
        raised to the caller."""


def _each(hooks: tuple[CallHook, ...], run: Callable[[CallHook], None]) -> None:
    """``run(hook)`` for every hook, each even when one before it raised: the first
    exception is raised after the last hook (a hook's bug shows, and the others' spans
    and counters are still told)."""
    failure: Exception | None = None
    for hook in hooks:
        try:
            run(hook)
        except Exception as error:
            failure = failure or error
    if failure is not None:
        raise failure


def end_attempt(hooks: tuple[CallHook, ...], op: AnyOp, ctx: CallContext) -> None:
    """Run every hook's ``on_end`` (see :func:`_each`)."""
    _each(hooks, lambda hook: hook.on_end(op, ctx))


def run_after_receive(
    hooks: tuple[CallHook, ...], op: AnyOp, ctx: CallContext, result: object
) -> None:
    """Run every hook's ``after_receive`` (see :func:`_each`)."""
    _each(hooks, lambda hook: hook.after_receive(op, ctx, result))


def run_on_error(
    hooks: tuple[CallHook, ...], op: AnyOp, ctx: CallContext, error: TritonError
) -> None:
    """Run every hook's ``on_error`` (see :func:`_each`); a hook's own exception is
    raised with the call's error as its context."""
    _each(hooks, lambda hook: hook.on_error(op, ctx, error))


def run_before_send(hooks: tuple[CallHook, ...], op: AnyOp, ctx: CallContext) -> None:
    """Run the hooks' ``before_send``; what they changed is checked as the call's own
    arguments are (a header the protocols cannot carry, a timeout that is no number)."""
    headers, timeout = ctx.headers, ctx.timeout
    for hook in hooks:
        hook.before_send(op, ctx)
    if ctx.headers is not headers:
        if not isinstance(ctx.headers, Mapping):  # (None would drop every header)
            raise InvalidInputError(
                f"a hook set ctx.headers to {type(ctx.headers).__name__}, not a mapping of "
                "header names to values ({} for none)",
                model=op.model,
            )
        ctx.headers = MappingProxyType(check_headers(ctx.headers))
    if ctx.timeout is not timeout:
        # Still within the call's deadline, whatever the hook asked for.
        ctx.timeout = attempt_timeout(check_timeout(ctx.timeout), ctx.deadline_at, time.monotonic())


@attrs.frozen
class CallOptions:
    """The options of one public call, resolved against the client's once."""

    timeout: float | None
    retry: RetryPolicy
    headers: Mapping[str, str] = attrs.field(repr=False)  # values may be credentials
    deadline_at: float | None = attrs.field(default=None)

    def context(self, op: AnyOp, attempt: int = 1) -> CallContext:
        """The context of an attempt; raises TritonTimeoutError past the deadline."""
        if self.deadline_at is None:
            return CallContext(op.call, op.model, self.headers, self.timeout, None, attempt)
        timeout = attempt_timeout(self.timeout, self.deadline_at, time.monotonic())
        return CallContext(op.call, op.model, self.headers, timeout, self.deadline_at, attempt)
