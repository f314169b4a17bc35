"""Transports over many endpoints: each call goes to one, picked by the balancer.

A connection-level failure ejects the endpoint; an idempotent call then goes at once to
another one. Ejected endpoints are probed for readiness in the background (a thread, or
a task of the client's event loop) and take calls again once ready. Requests of a
sequence stay on their endpoint; a stream stays on the endpoint it was opened on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TypeVar

from .._balance import Balancer, EndpointState, Member
from .._call import CallContext
from .._errors import TritonError
from .._ops import IsServerReady, Op, StreamOp
from ._protocol import AsyncTransport, Transport

__all__ = ["AsyncBalancedTransport", "BalancedTransport"]

T = TypeVar("T")

PROBE_TIMEOUT = 1.0
_READY = IsServerReady()


def _probe_context(headers: Mapping[str, str]) -> CallContext:
    return CallContext(_READY.call, None, headers, PROBE_TIMEOUT)


class BalancedTransport:
    """A blocking transport over the endpoints of one client."""

    def __init__(self, members: list[Member[Transport]], headers: Mapping[str, str]) -> None:
        self.balancer = Balancer(members)
        self._headers = headers
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._prober: threading.Thread | None = None

    def endpoints(self) -> list[EndpointState]:
        return self.balancer.states()

    def call(self, op: Op[T], ctx: CallContext) -> T:
        balancer = self.balancer
        route = balancer.route(op)
        while True:
            try:
                result = route.member.transport.call(op, ctx)
            except TritonError as error:
                failure = balancer.failed(route, op, error)
                self._probe_ejected()
                if failure is not error:
                    raise failure from error
                if balancer.reroute(route, op, error):
                    continue
                raise
            balancer.succeeded(route, op)
            return result

    def stream(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        route = self.balancer.route(op)
        failure: TritonError | None = None
        try:
            yield from route.member.transport.stream(op, ctx)
        except TritonError as error:
            failure = error
            raise
        finally:
            if failure is None:
                self.balancer.succeeded(route, op)
            else:
                self.balancer.failed(route, op, failure)
                self._probe_ejected()

    def close(self) -> None:
        self._closed.set()
        errors = []
        for member in self.balancer.members:  # each one, whatever the others do
            try:
                member.transport.close()
            except TritonError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _probe_ejected(self) -> None:
        """Start the prober unless it runs (it stops when no endpoint is ejected)."""
        with self._lock:
            if self._prober is None and not self._closed.is_set():
                self._prober = threading.Thread(
                    target=self._probe, name="triton_sdk-probe", daemon=True
                )
                self._prober.start()

    def _probe(self) -> None:
        ctx = _probe_context(self._headers)
        while not self._closed.is_set():
            with self._lock:
                due, wait = self.balancer.due_probes()
                if wait is None:
                    self._prober = None
                    return
            for member in due:
                self.balancer.probed(member, _ready(member.transport, ctx))
            self._closed.wait(wait)


class AsyncBalancedTransport:
    """The asyncio twin of :class:`BalancedTransport`; it probes from a task."""

    def __init__(self, members: list[Member[AsyncTransport]], headers: Mapping[str, str]) -> None:
        self.balancer = Balancer(members)
        self._headers = headers
        self._closed = False
        self._prober: asyncio.Task[None] | None = None

    def endpoints(self) -> list[EndpointState]:
        return self.balancer.states()

    async def acall(self, op: Op[T], ctx: CallContext) -> T:
        balancer = self.balancer
        route = balancer.route(op)
        while True:
            try:
                result = await route.member.transport.acall(op, ctx)
            except TritonError as error:
                failure = balancer.failed(route, op, error)
                self._probe_ejected()
                if failure is not error:
                    raise failure from error
                if balancer.reroute(route, op, error):
                    continue
                raise
            balancer.succeeded(route, op)
            return result

    async def astream(self, op: StreamOp[T], ctx: CallContext) -> AsyncIterator[T]:
        route = self.balancer.route(op)
        failure: TritonError | None = None
        try:
            async for item in route.member.transport.astream(op, ctx):
                yield item
        except TritonError as error:
            failure = error
            raise
        finally:
            if failure is None:
                self.balancer.succeeded(route, op)
            else:
                self.balancer.failed(route, op, failure)
                self._probe_ejected()

    async def aclose(self) -> None:
        self._closed = True
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        errors = []
        for member in self.balancer.members:
            try:
                await member.transport.aclose()
            except TritonError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _probe_ejected(self) -> None:
        if self._prober is None and not self._closed:
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        ctx = _probe_context(self._headers)
        while True:
            due, wait = self.balancer.due_probes()
            if wait is None:
                self._prober = None
                return
            for member in due:
                self.balancer.probed(member, await _aready(member.transport, ctx))
            await asyncio.sleep(wait)


def _ready(transport: Transport, ctx: CallContext) -> bool:
    try:
        return transport.call(_READY, ctx)
    except TritonError:
        return False


async def _aready(transport: AsyncTransport, ctx: CallContext) -> bool:
    try:
        return await transport.acall(_READY, ctx)
    except TritonError:
        return False
