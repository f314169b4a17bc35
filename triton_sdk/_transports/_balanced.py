"""Transports over many endpoints: each call goes to one, picked by the balancer.

A connection-level failure ejects the endpoint; an idempotent call then goes at once to
another one. Upkeep runs in the background (a thread, or a task of the client's event
loop): ejected endpoints are probed for readiness and take calls again once ready, and
a DNS name is resolved again every ``resolve_interval`` seconds and soon after a
failure. Requests of a sequence stay on their endpoint; a stream stays on the endpoint
it was opened on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

from .._balance import Balancer, Discovery, EndpointState, Member, Route
from .._call import (
    AnyOp,
    CallContext,
    CallHook,
    end_attempt,
    run_after_receive,
    run_before_send,
    run_on_error,
)
from .._concurrency import aclose_iterator, within
from .._config import Endpoint, TLSConfig
from .._errors import (
    InvalidInputError,
    TritonError,
    UnsupportedError,
    names_no_server,
    refused_here,
    unsupported_operation,
)
from .._fork import on_fork
from .._ops import IsModelReady, IsServerLive, IsServerReady, Op, OpenAIEvents, StreamOp
from .._retry import TokenBucket
from ._loop import check_loop, check_open_loop, refuse_another_loop
from ._openai import openai_events, openai_events_async
from ._own_url import OWN_URL_CALLS, OwnTLS, own_url_acall, own_url_call
from ._protocol import AsyncTransport, Transport

__all__ = ["AsyncBalancedTransport", "BalancedTransport"]

T = TypeVar("T")

logger = logging.getLogger("triton_sdk")

PROBE_TIMEOUT = 1.0
_READY = IsServerReady()


def _probe_context(headers: Mapping[str, str], member: Member[Any]) -> CallContext:
    ctx = CallContext(_READY.call, None, headers, PROBE_TIMEOUT)
    ctx.url = str(member.endpoint)
    return ctx


def _name_endpoint(ctx: CallContext, route: Route[Any]) -> None:
    """Tell the hooks where the attempt goes (they saw the client's first URL before)."""
    if ctx.url:  # (set for hooks only)
        ctx.url = str(route.member.endpoint)


def _refused_there(error: TritonError, op: AnyOp, route: Route[Any]) -> UnsupportedError:
    """The refusal of an operation the endpoint lacks, naming that endpoint (the client
    names its first one)."""
    return unsupported_operation(error, op.call, str(route.member.endpoint))


def _naming_endpoint(error: TritonError, route: Route[Any]) -> TritonError:
    """``error`` with the endpoint that gave it in its message (a redirect, an answer
    that cannot be read, a model that differs on one replica mid-rollout: which one?)."""
    endpoint = str(route.member.endpoint)
    refused = refused_here(error) or isinstance(error, InvalidInputError)  # (the client's)
    if endpoint not in error.message and not refused:
        error.message = f"{error.message} (endpoint {endpoint})"
        error.args = (error.message,)
    return error


def _stream_over(
    balancer: Balancer[Any],
    route: Route[Any],
    op: StreamOp[Any],
    ctx: CallContext,
    failure: TritonError | None,
    answered: bool,
) -> bool:
    """Record how a stream on ``route`` ended; True when it failed there. A stream the
    caller stopped (from another thread: its connection is cut, which reads as a failure)
    or left before any response says nothing of the endpoint."""
    stopped = ctx._stop is not None and ctx._stop.requested
    if failure is not None and not stopped:
        balancer.failed(route, op, failure)
        return True
    if answered:
        balancer.succeeded(route, op)
    else:
        balancer.abandoned(route, op)
    return False


def _moves(
    balancer: Balancer[Any],
    route: Route[Any],
    op: StreamOp[Any],
    ctx: CallContext,
    failure: TritonError,
    answered: bool,
    allowed: Callable[[], bool],
) -> bool:
    """Whether a stream that failed before its first response goes to another endpoint
    (nothing of it ran there: no connection, no such model); ``route`` then points there."""
    if answered or (ctx._stop is not None and ctx._stop.requested):
        return False
    if not balancer.reroute(route, op, failure, allowed):
        return False
    _log_failover(op, failure, route.member.endpoint)
    return True


def _next_wait(waits: list[float | None]) -> float | None:
    known = [wait for wait in waits if wait is not None]
    return min(known) if known else None


_HEALTH_CHECKS: Final = (IsServerLive, IsServerReady, IsModelReady)


def _budget_for(op: Op[Any], allowed: Callable[[], bool]) -> Callable[[], bool]:
    """What a failover of ``op`` draws on: the client's retry budget, except for health
    checks, which are cheap and which wait_until_ready polls (a fleet still starting
    drained the budget before its first real call)."""
    return _always if isinstance(op, _HEALTH_CHECKS) else allowed


class BalancedTransport:
    """A blocking transport over the endpoints of one client (a list, or a DNS name's
    addresses when ``discovery`` is given)."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        open_endpoint: Callable[[Endpoint], Transport],
        headers: Mapping[str, str],
        discovery: Discovery | None = None,
        budget: TokenBucket | None = None,
        hooks: tuple[CallHook, ...] = (),
        tls: TLSConfig | None = None,
    ) -> None:
        self._open = open_endpoint
        self._headers = headers
        self._hooks = hooks
        self._own_tls = OwnTLS(tls, self._hosts)  # (for calls to URLs of their own)
        self._discovery = discovery
        self._allowed = _always if budget is None else budget.withdraw
        if discovery is not None:
            endpoints = discovery.resolve() or []
        self.balancer = Balancer([Member(e, open_endpoint(e)) for e in endpoints])
        self._closed = threading.Event()
        self._wake = threading.Event()
        weakref.finalize(self, self._wake.set)  # (the upkeep thread then ends at once)
        self._lock = threading.Lock()
        self._upkeep: threading.Thread | None = None
        self._restart_upkeep = False
        if discovery is not None:
            self._start_upkeep()
        on_fork(self)

    def after_fork_in_child(self) -> None:
        """The parent's upkeep thread is not in a forked child (and may have held the
        lock at the fork): the child's next call starts one of its own. Not here: it
        would probe through connections whose own fork hooks may not have run yet."""
        self.balancer.after_fork_in_child()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        weakref.finalize(self, self._wake.set)
        closed, self._closed = self._closed.is_set(), threading.Event()
        if closed:
            self._closed.set()
        self._upkeep = None
        self._restart_upkeep = True

    def _resume_upkeep(self) -> None:
        self._restart_upkeep = False
        self._start_upkeep()

    def endpoints(self) -> list[EndpointState]:
        return self.balancer.states()

    def _hosts(self) -> list[str]:
        return [member.endpoint.host for member in self.balancer.members]

    def call(self, op: Op[T], ctx: CallContext) -> T:
        if self._restart_upkeep:
            self._resume_upkeep()
        if isinstance(op, OWN_URL_CALLS):  # (no endpoint is picked: see own_url_call)
            return own_url_call(op, ctx, self._own_tls(op.url))  # type: ignore[no-any-return]
        balancer = self.balancer
        try:
            route = balancer.route(op)
        except TritonError:
            self._after_failure()
            raise
        while True:
            try:
                _name_endpoint(ctx, route)
                result = route.member.transport.call(op, ctx)
            except TritonError as error:
                failure = balancer.failed(route, op, error)
                self._after_failure()
                if failure is not error:
                    raise failure from error
                if balancer.reroute(route, op, error, _budget_for(op, self._allowed)):
                    _log_failover(op, error, route.member.endpoint)
                    continue
                if names_no_server(error):
                    raise _refused_there(error, op, route) from error
                raise _naming_endpoint(error, route)  # noqa: B904 (the same error)
            except BaseException:  # interrupted: nothing to say about the endpoint
                balancer.abandoned(route, op)
                raise
            balancer.succeeded(route, op)
            return result

    def stream(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        if self._restart_upkeep:
            self._resume_upkeep()
        if isinstance(op, OpenAIEvents):
            yield from openai_events(op, ctx, self._own_tls(op.url))  # type: ignore[misc]
            return
        try:
            route = self.balancer.route(op)
        except TritonError:
            self._after_failure()
            raise
        while True:
            failure: TritonError | None = None
            answered = False
            try:
                _name_endpoint(ctx, route)
                for item in route.member.transport.stream(op, ctx):
                    answered = True
                    yield item
                answered = True  # (the server ended it)
            except TritonError as error:
                failure = error
            finally:
                if _stream_over(self.balancer, route, op, ctx, failure, answered):
                    self._after_failure()
            if failure is None:
                return
            if _moves(self.balancer, route, op, ctx, failure, answered, self._allowed):
                continue
            if names_no_server(failure):
                raise _refused_there(failure, op, route) from failure
            raise _naming_endpoint(failure, route)

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        with self._lock:
            upkeep = self._upkeep
        if upkeep is not None and upkeep is not threading.current_thread():
            upkeep.join(PROBE_TIMEOUT + 1)  # it may be opening endpoints DNS just gave
        members = [*self.balancer.members, *self.balancer.retired]
        errors = []
        for member in members:  # each one, whatever the others do
            try:
                member.transport.close()
            except TritonError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _after_failure(self) -> None:
        """Probe what was ejected, and resolve the name again soon."""
        if self._discovery is not None:
            self._discovery.soon()
        self._start_upkeep()
        self._wake.set()

    def _start_upkeep(self) -> None:
        """Start the upkeep thread unless it runs (it stops when it has nothing to do)."""
        with self._lock:
            if self._upkeep is None and not self._closed.is_set():
                self._upkeep = threading.Thread(
                    target=_keep_up,
                    args=(weakref.ref(self),),
                    name="triton_sdk-upkeep",
                    daemon=True,
                )
                self._upkeep.start()

    def _upkeep_round(self) -> float | None:
        """Resolve, close what left, probe what is due; the seconds until the next round
        (None: nothing to watch, the thread ends)."""
        balancer, discovery = self.balancer, self._discovery
        resolve_in = None
        if discovery is not None:
            if discovery.wait() == 0:
                endpoints = discovery.resolve()
                if endpoints is not None and not self._closed.is_set():
                    balancer.update(endpoints, self._open)
            for member in balancer.idle_retired():
                _close_quietly(member)
            resolve_in = discovery.wait()
        with self._lock:
            due, probe_in = balancer.due_probes()
            wait = _next_wait([resolve_in, probe_in])
            if wait is None:
                self._upkeep = None  # under the lock: a failure now starts a new thread
                return None
        for member in due:
            ctx = _probe_context(self._headers, member)
            balancer.probed(member, *_ready(member.transport, ctx, self._hooks))
        return wait


def _keep_up(transport_ref: weakref.ref[BalancedTransport]) -> None:
    """The upkeep thread: rounds until there is nothing to watch or the transport is
    closed. It holds the transport only during a round: a client dropped without close()
    is collected, connections and all, and its thread ends after its wait."""
    transport = transport_ref()
    try:
        while transport is not None and not transport._closed.is_set():
            wait = transport._upkeep_round()
            if wait is None:
                return
            wake = transport._wake
            transport = None
            wake.wait(wait)
            wake.clear()
            transport = transport_ref()
    except Exception:  # logged: calls go on, and the next failure starts it again
        logger.exception("the upkeep of the client's endpoints failed")
    finally:
        if transport is not None:
            with transport._lock:
                if transport._upkeep is threading.current_thread():
                    transport._upkeep = None


class AsyncBalancedTransport:
    """The asyncio twin of :class:`BalancedTransport`; its upkeep is a task, started by
    the first call."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        open_endpoint: Callable[[Endpoint], AsyncTransport],
        headers: Mapping[str, str],
        discovery: Discovery | None = None,
        budget: TokenBucket | None = None,
        hooks: tuple[CallHook, ...] = (),
        tls: TLSConfig | None = None,
    ) -> None:
        self._open = open_endpoint
        self._headers = headers
        self._hooks = hooks
        self._own_tls = OwnTLS(tls, self._hosts)  # (for calls to URLs of their own)
        self._discovery = discovery
        self._allowed = _always if budget is None else budget.withdraw
        if discovery is not None:
            endpoints = discovery.resolve() or []
        self.balancer = Balancer([Member(e, open_endpoint(e)) for e in endpoints])
        self._closed = False
        self._wake: asyncio.Event | None = None
        self._upkeep: asyncio.Task[None] | None = None
        # The loop of the first call: every endpoint's connections are opened in it, so
        # another loop is refused before an endpoint is picked (one not yet used would
        # take it, and the client could then be closed in neither).
        self._loop: asyncio.AbstractEventLoop | None = None

    def endpoints(self) -> list[EndpointState]:
        return self.balancer.states()

    def _hosts(self) -> list[str]:
        return [member.endpoint.host for member in self.balancer.members]

    async def acall(self, op: Op[T], ctx: CallContext) -> T:
        if isinstance(op, OWN_URL_CALLS):  # (no endpoint is picked: see own_url_call)
            return await own_url_acall(op, ctx, self._own_tls(op.url))  # type: ignore[no-any-return]
        self._loop = check_loop(self._loop)
        balancer = self.balancer
        if self._upkeep is None and self._discovery is not None:
            self._start_upkeep()
        try:
            route = balancer.route(op)
        except TritonError:
            self._after_failure()
            raise
        while True:
            try:
                _name_endpoint(ctx, route)
                result = await route.member.transport.acall(op, ctx)
            except TritonError as error:
                failure = balancer.failed(route, op, error)
                self._after_failure()
                if failure is not error:
                    raise failure from error
                if balancer.reroute(route, op, error, _budget_for(op, self._allowed)):
                    _log_failover(op, error, route.member.endpoint)
                    continue
                if names_no_server(error):
                    raise _refused_there(error, op, route) from error
                raise _naming_endpoint(error, route)  # noqa: B904 (the same error)
            except BaseException:  # cancelled: nothing to say about the endpoint
                balancer.abandoned(route, op)
                raise
            balancer.succeeded(route, op)
            return result

    async def astream(self, op: StreamOp[T], ctx: CallContext) -> AsyncIterator[T]:
        if isinstance(op, OpenAIEvents):
            own = openai_events_async(op, ctx, self._own_tls(op.url))
            try:
                async for event in own:
                    yield event  # type: ignore[misc]
            finally:
                await aclose_iterator(own)
            return
        self._loop = check_loop(self._loop)
        try:
            route = self.balancer.route(op)
        except TritonError:
            self._after_failure()
            raise
        while True:
            failure: TritonError | None = None
            answered = False
            _name_endpoint(ctx, route)
            responses = route.member.transport.astream(op, ctx)
            try:
                async for item in responses:
                    answered = True
                    yield item
                answered = True  # (the server ended it)
            except TritonError as error:
                failure = error
            finally:
                try:
                    await aclose_iterator(responses)  # cancels the call now, not when collected
                finally:
                    if _stream_over(self.balancer, route, op, ctx, failure, answered):
                        self._after_failure()
            if failure is None:
                return
            if _moves(self.balancer, route, op, ctx, failure, answered, self._allowed):
                continue
            if names_no_server(failure):
                raise _refused_there(failure, op, route) from failure
            raise _naming_endpoint(failure, route)

    def refuse_other_loop(self) -> None:
        """Raise the documented TritonError when called in a loop other than the one
        its endpoints' connections were opened in."""
        check_open_loop(self._loop)
        for member in [*self.balancer.members, *self.balancer.retired]:
            refuse_another_loop(member.transport)

    async def aclose(self) -> None:
        self.refuse_other_loop()
        self._closed = True
        if self._upkeep is not None:
            self._upkeep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._upkeep
        errors = []
        for member in [*self.balancer.members, *self.balancer.retired]:
            try:
                await member.transport.aclose()
            except TritonError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _after_failure(self) -> None:
        if self._discovery is not None:
            self._discovery.soon()
        self._start_upkeep()
        if self._wake is not None:
            self._wake.set()

    def _start_upkeep(self) -> None:
        if self._upkeep is None and not self._closed:
            self._wake = asyncio.Event()
            self._upkeep = asyncio.get_running_loop().create_task(self._keep_up(self._wake))

    async def _keep_up(self, wake: asyncio.Event) -> None:
        try:
            while True:
                wait = await self._upkeep_round()
                if wait is None:
                    return
                # (asyncio.TimeoutError is not TimeoutError before Python 3.11.)
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await within(wake.wait(), wait)
                wake.clear()
        except Exception:  # logged: calls go on, and the next failure starts it again
            logger.exception("the upkeep of the client's endpoints failed")
        finally:
            if self._upkeep is asyncio.current_task():
                self._upkeep = None

    async def _upkeep_round(self) -> float | None:
        balancer, discovery = self.balancer, self._discovery
        resolve_in = None
        if discovery is not None:
            if discovery.wait() == 0:
                endpoints = await asyncio.to_thread(discovery.resolve)
                if endpoints is not None and not self._closed:
                    balancer.update(endpoints, self._open)
            for member in balancer.idle_retired():
                try:
                    await member.transport.aclose()
                except TritonError as error:
                    _log_close_failure(member.endpoint, error)
            resolve_in = discovery.wait()
        due, probe_in = balancer.due_probes()
        wait = _next_wait([resolve_in, probe_in])
        if wait is None:
            return None
        for member in due:
            ctx = _probe_context(self._headers, member)
            balancer.probed(member, *await _aready(member.transport, ctx, self._hooks))
        return wait


def _log_failover(op: AnyOp, error: TritonError, endpoint: Endpoint) -> None:
    logger.debug("sending %s to %s instead, after: %s", op.call, endpoint, error)


def _always() -> bool:
    return True


def _close_quietly(member: Member[Transport]) -> None:
    """Close a retired endpoint's transport; a failure to close is only logged."""
    try:
        member.transport.close()
    except TritonError as error:
        _log_close_failure(member.endpoint, error)


def _log_close_failure(endpoint: Endpoint, error: TritonError) -> None:
    logger.warning("could not close the connections to %s, gone from DNS: %s", endpoint, error)


# Probes go through the client's hooks as its calls do: a token a hook adds is what lets
# them in (a guarded server refused them, and an ejected endpoint never came back). What
# a hook raises here is logged: the upkeep goes on, and the probe counts as not ready.


_Probe = tuple[bool, TritonError | None]
"""Whether a probed endpoint is ready; the probe's error, if it failed."""


def _ready(transport: Transport, ctx: CallContext, hooks: tuple[CallHook, ...]) -> _Probe:
    try:
        run_before_send(hooks, _READY, ctx)
        try:
            ready = transport.call(_READY, ctx)
        except TritonError as error:
            _settle(hooks, ctx, error)
            return False, error
        _settle(hooks, ctx, ready)
        return ready, None
    except Exception as error:
        _log_hook_failure(ctx, error)
        return False, None
    finally:
        _end(hooks, ctx)


async def _aready(
    transport: AsyncTransport, ctx: CallContext, hooks: tuple[CallHook, ...]
) -> _Probe:
    try:
        run_before_send(hooks, _READY, ctx)
        try:
            ready = await transport.acall(_READY, ctx)
        except TritonError as error:
            _settle(hooks, ctx, error)
            return False, error
        _settle(hooks, ctx, ready)
        return ready, None
    except Exception as error:
        _log_hook_failure(ctx, error)
        return False, None
    finally:
        _end(hooks, ctx)


def _settle(hooks: tuple[CallHook, ...], ctx: CallContext, outcome: bool | TritonError) -> None:
    """Tell every hook how the probe went (each one, whatever the others do); a hook's
    failure is logged, and the probe's answer stands."""
    try:
        if isinstance(outcome, TritonError):
            run_on_error(hooks, _READY, ctx, outcome)
        else:
            run_after_receive(hooks, _READY, ctx, outcome)
    except Exception as error:
        _log_hook_failure(ctx, error)


def _end(hooks: tuple[CallHook, ...], ctx: CallContext) -> None:
    try:
        end_attempt(hooks, _READY, ctx)
    except Exception as error:
        _log_hook_failure(ctx, error)


def _log_hook_failure(ctx: CallContext, error: Exception) -> None:
    logger.warning("a hook failed on the readiness probe of %s: %r", ctx.url, error)
