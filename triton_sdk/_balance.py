"""Spreading calls over the endpoints of one client: the decisions, without I/O.

A :class:`Balancer` holds one :class:`Member` per endpoint. Each call asks it for a
:class:`Route` (which endpoint), then reports how the attempt ended; the balancer keeps
the counters, ejects an endpoint that fails at the connection level (or stops
answering), and says when an ejected one is due for a readiness probe. The transports in
``_transports/_balanced.py`` do the sending and the probing.

Picking is "power of two choices": two healthy endpoints at random, the one with fewer
requests in flight wins. Requests of a sequence stay on the endpoint that started it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Final, Generic, TypeVar, overload

import attrs

from ._config import DnsName, Endpoint
from ._errors import (
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    SequenceLostError,
    ServerOverloadedError,
    TritonConnectionError,
    TritonError,
    TritonTimeoutError,
    refused_here,
)
from ._ops import Op, StreamInfer, StreamOp
from ._request import InferRequest

__all__ = ["Balancer", "Discovery", "EndpointState", "Member", "Route", "same_endpoint"]

T = TypeVar("T")

logger = logging.getLogger("triton_sdk")

PROBE_FIRST = 0.05
"""Seconds from an ejection to the first readiness probe; doubled after each failed one."""
PROBE_MAX = 2.0

HUNG_AFTER = 3
"""Calls in a row that time out on an endpoint, with no answer between them, that eject
it: it accepts connections but does not answer (a stopped process, a wedged GPU)."""

LACKING_FOR = 5.0
"""Seconds an endpoint that answered that it has no model (not ready, unknown: a rolling
update, a pod shutting down) gets no calls for that model, while others may take them."""

FAILING_HALF_LIFE = 1.0
"""Seconds in which an endpoint's run of failed answers counts half as much when
picking. An endpoint that fails at once (a broken replica, a full queue) has no request
in flight, and would otherwise win every pick."""

PIN_IDLE = 3600.0
"""Seconds after its last request that a sequence left open (never sent END) is
forgotten, so that such sequences do not pile up; far longer than servers keep them."""
_PIN_SWEEP = 60.0


@attrs.frozen
class EndpointState:
    """One endpoint of a client, as :meth:`Client.endpoints` reports it.

    Attributes:
        url: the endpoint's address.
        healthy: False while it is ejected (after a connection-level failure, or after
            ``HUNG_AFTER`` calls in a row timed out there; until a readiness probe
            succeeds).
        in_flight: requests sent to it and not answered yet (streams included).
        requests: attempts sent to it so far.
        failures: attempts that failed at the connection level.
        ejections: how many times it was ejected.
    """

    url: str
    healthy: bool
    in_flight: int
    requests: int
    failures: int
    ejections: int


class Member(Generic[T]):
    """One endpoint, its transport and its counters (guarded by the balancer's lock)."""

    __slots__ = (
        "breaks",
        "ejections",
        "endpoint",
        "failing",
        "failing_at",
        "failures",
        "healthy",
        "in_flight",
        "lacking",
        "probe_at",
        "probe_wait",
        "requests",
        "timeouts",
        "transport",
    )

    def __init__(self, endpoint: Endpoint, transport: T) -> None:
        self.endpoint = endpoint
        self.transport = transport
        self.healthy = True
        self.in_flight = 0
        self.requests = 0
        self.failures = 0
        self.breaks = 0  # connection-level failures seen by calls or probes
        self.ejections = 0
        self.timeouts = 0  # calls in a row that timed out, with no answer since
        self.probe_at = 0.0
        self.probe_wait = PROBE_FIRST
        self.failing = 0.0  # failed answers in a row, decaying (see FAILING_HALF_LIFE)
        self.failing_at = 0.0
        # (model, version) -> until when it gets no calls for it here
        self.lacking: dict[ModelKey, float] = {}

    def recent_failures(self, now: float) -> float:
        """The run of failed answers, decayed; below a half, none (one failure long ago
        must not keep an endpoint out of every pick against one with nothing in flight)."""
        if not self.failing:
            return 0.0
        failing = self.failing * 0.5 ** ((now - self.failing_at) / FAILING_HALF_LIFE)
        return failing if failing >= 0.5 else 0.0

    def load(self, now: float) -> float:
        """What picking compares: requests in flight, and the recent failed answers."""
        return self.in_flight + self.recent_failures(now)

    def lacks(self, model: ModelKey | None, now: float) -> bool:
        if model is None or not self.lacking:
            return False
        until = self.lacking.get(model)
        if until is None:
            return False
        if until <= now:
            del self.lacking[model]
            return False
        return True

    def state(self) -> EndpointState:
        return EndpointState(
            str(self.endpoint),
            self.healthy,
            self.in_flight,
            self.requests,
            self.failures,
            self.ejections,
        )


@attrs.define(slots=True)
class Route(Generic[T]):
    """Where one attempt goes, and the endpoints tried already for this call."""

    member: Member[T]
    sequence: int | str = 0
    tried: list[Member[T]] = attrs.field(factory=list)
    # The member's ejections when the attempt was sent: a timeout of an attempt sent
    # before the last ejection says nothing of the member since its readmission.
    ejections: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.ejections = self.member.ejections


def _sequence(op: Op[object] | StreamOp[object]) -> InferRequest | None:
    return op if isinstance(op, InferRequest) and op.sequence_id else None


_SAME: ContextVar[list[Any] | None] = ContextVar("triton_sdk_same_endpoint", default=None)


@contextlib.contextmanager
def same_endpoint() -> Iterator[list[Any]]:
    """Send the calls made within to one endpoint (the first call's), while it stays
    healthy: the reads that make one answer (a model's metadata and config) must not mix
    two replicas mid-rollout. Yields the endpoints used, in order: more than one when a
    call had to move (the reads before it came from another endpoint)."""
    used: list[Any] = []
    token = _SAME.set(used)
    try:
        yield used
    finally:
        _SAME.reset(token)


ModelKey = tuple[str, str]
"""A model and the version asked for ("": the one the server's policy picks)."""


def _model_of(op: Op[object] | StreamOp[object]) -> ModelKey | None:
    model = op.model
    if not isinstance(model, str):
        return None
    version = getattr(op, "version", None)
    if version is None and isinstance(op, StreamInfer):
        version = op.request.version
    return (model, version if isinstance(version, str) else "")


_PinKey = tuple[str, str, int | str]


def _pin_key(request: InferRequest) -> _PinKey:
    """A sequence as the server knows it: an id is a sequence of one model (version)
    only; two models' sequences of the same id are two sequences."""
    return (request.model, request.version, request.sequence_id)


class Balancer(Generic[T]):
    """The endpoints of one client and the state that picking needs; thread-safe."""

    def __init__(self, members: list[Member[T]], *, seed: int | None = None) -> None:
        self.members = members
        self.retired: list[Member[T]] = []  # gone from DNS; closed once idle
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        # Each sequence's endpoint, when the sequence was last used, and the endpoint's
        # breaks when the sequence started there (_LOST: the sequence is lost): once a
        # call or a probe more failed there at the connection level, the server may have
        # lost its state (a hung server, ejected for its timeouts, has not).
        self._pins: dict[_PinKey, tuple[Member[T], float, int]] = {}
        self._sweep_at = time.monotonic() + _PIN_SWEEP

    def after_fork_in_child(self) -> None:
        """A forked child has none of the parent's calls in flight (counted, they would
        steer its picks for good), a lock of its own (the parent's may have been held at
        the fork) and picks of its own, not the parent's next ones."""
        self._lock = threading.Lock()
        for member in [*self.members, *self.retired]:
            member.in_flight = 0
        self._random.seed()

    def states(self) -> list[EndpointState]:
        with self._lock:
            return [member.state() for member in self.members]

    def route(self, op: Op[object] | StreamOp[object]) -> Route[T]:
        """The endpoint for the first attempt of ``op``; counted as in flight there.

        Raises SequenceLostError for a request of a sequence whose endpoint failed.
        """
        request = _sequence(op)
        model = _model_of(op)
        with self._lock:
            if request is None:
                same = _SAME.get()
                if same:
                    member = same[-1]
                    if member.healthy and member in self.members:
                        self._count(member)
                        return Route(member)
                member = self._take((), model)
                if same is not None:
                    same.append(member)
                return Route(member)
            sequence = request.sequence_id
            key = _pin_key(request)
            now = time.monotonic()
            if now >= self._sweep_at:
                self._forget_idle_sequences(now)
            if request.sequence_start or key not in self._pins:
                # (A sequence started before this client knew it stays where it goes now.)
                member = self._take((), model)
                self._pins[key] = (member, now, member.breaks)
                return Route(member, sequence)
            pinned, _, breaks = self._pins[key]
            if breaks == _LOST or pinned.breaks != breaks:
                # Its endpoint failed, maybe seen by other calls only (and may be back,
                # restarted): the sequence's state there is gone, or may be.
                if request.sequence_end:
                    del self._pins[key]
                else:
                    self._pins[key] = (pinned, now, _LOST)
                raise _lost(sequence, pinned.endpoint)
            self._count(pinned)
            self._pins[key] = (pinned, now, breaks)
            return Route(pinned, sequence)

    def _forget_idle_sequences(self, now: float) -> None:
        self._sweep_at = now + _PIN_SWEEP
        idle = [key for key, (_, used, _) in self._pins.items() if now - used > PIN_IDLE]
        for key in idle:
            del self._pins[key]

    def reroute(
        self,
        route: Route[T],
        op: Op[object] | StreamOp[object],
        error: TritonError,
        allowed: Callable[[], bool] = lambda: True,
    ) -> bool:
        """After a failed attempt: True when ``route`` now points at another endpoint
        that the same call goes to at once. That needs a failure that proves the request
        did not run (no connection, a full queue, no such model there), an idempotent
        call (or a stream, or the START of a sequence: nothing of them ran), an endpoint
        not tried yet, and ``allowed()`` (the client's retry budget; a model missing
        there draws nothing from it: that endpoint is left out for the model a while)."""
        request = _sequence(op)
        if request is not None and not request.sequence_start:
            return False
        if isinstance(op, Op) and request is None and not op.idempotent:
            return False
        if not _elsewhere(error):
            return False
        with self._lock:
            route.tried.append(route.member)
            if len(route.tried) >= len(self.members):
                return False
            if _model_missing(error):
                # Free, where another endpoint may have it; where none may (every one
                # left said so lately: a name no server has), the error is the answer.
                model, now = _model_of(op), time.monotonic()
                left = [m for m in self.members if m not in route.tried]
                refused = all(m.lacks(model, now) for m in left)
                if refused:
                    return False
            else:
                refused = not allowed()
            if not refused:
                route.member = self._take(route.tried, _model_of(op))
                route.ejections = route.member.ejections
                if request is not None:
                    self._pins[_pin_key(request)] = (
                        route.member,
                        time.monotonic(),
                        route.member.breaks,
                    )
                same = _SAME.get()
                if same is not None:
                    same.append(route.member)
                return True
        logger.warning(  # (outside the lock: a slow handler would hold up every call)
            "not failing %s over to another endpoint: the client's retry budget is spent; "
            "failure at %s: %s",
            op.call,
            route.tried[-1].endpoint,
            error,
        )
        return False

    def succeeded(self, route: Route[T], op: AnyOp) -> None:
        """Record an attempt on ``route.member`` that was answered."""
        self.failed(route, op, None)

    @overload
    def failed(self, route: Route[T], op: AnyOp, error: TritonError) -> TritonError: ...
    @overload
    def failed(self, route: Route[T], op: AnyOp, error: None) -> None: ...
    def failed(self, route: Route[T], op: AnyOp, error: TritonError | None) -> TritonError | None:
        """Record a failed attempt on ``route.member``; returns the error to raise (a
        sequence's connection failure becomes SequenceLostError). A connection-level
        failure ejects the endpoint, and so does the last of ``HUNG_AFTER`` calls in a
        row that timed out there (streams, which may wait long for a response, aside)."""
        member = route.member
        request = _sequence(op)
        with self._lock:
            member.in_flight -= 1
            self._note_answer(member, op, error)
            if (
                request is not None
                and request.sequence_start
                and error is not None
                and _elsewhere(error)
            ):
                # Turned away unrun (no connection, no such model, a full queue): no
                # sequence began there, and it may start elsewhere (see reroute). A START
                # the server answered otherwise (the model failed) stays pinned.
                self._pins.pop(_pin_key(request), None)
                if _connection_failure(error):
                    member.failures += 1
                    member.breaks += 1
                    self._eject(member, error)
                return error
            if error is None or not _connection_failure(error):
                if isinstance(error, TritonTimeoutError):
                    if isinstance(op, Op) and route.ejections == member.ejections:
                        member.timeouts += 1
                        if member.timeouts >= HUNG_AFTER:
                            self._eject(member, f"{member.timeouts} calls in a row timed out")
                elif not isinstance(error, TritonConnectionError | InvalidInputError):
                    member.timeouts = 0  # answered (a refusal found here was never sent)
                self._ended(request)
                return error
            member.failures += 1
            member.breaks += 1
            self._eject(member, error)
            if request is None:
                return error
            key = _pin_key(request)
            if request.sequence_end:
                self._pins.pop(key, None)
            else:
                self._pins[key] = (member, time.monotonic(), _LOST)
            return _lost(request.sequence_id, member.endpoint, error)

    @staticmethod
    def _note_answer(member: Member[T], op: AnyOp, error: TritonError | None) -> None:
        """Keep the endpoint's run of failed answers and the models it said it lacks."""
        if error is None:
            member.failing = 0.0
            if member.lacking:
                model = _model_of(op)
                if model is not None:
                    member.lacking.pop(model, None)
            return
        if _model_missing(error):
            model = _model_of(op)
            if model is not None:
                member.lacking[model] = time.monotonic() + LACKING_FOR
            return
        if _answered_failure(error):
            now = time.monotonic()
            member.failing = member.recent_failures(now) + 1
            member.failing_at = now

    def abandoned(self, route: Route[T], op: AnyOp) -> None:
        """Record an attempt given up before its answer (interrupted, cancelled): it
        says nothing of the endpoint."""
        with self._lock:
            route.member.in_flight -= 1
            self._ended(_sequence(op))

    def _ended(self, request: InferRequest | None) -> None:
        """A sequence's END went out (or failed without losing it): forget the sequence."""
        if request is not None and request.sequence_end:
            self._pins.pop(_pin_key(request), None)

    @staticmethod
    def _eject(member: Member[T], why: object) -> None:
        if not member.healthy:
            return
        logger.info("endpoint %s ejected: %s", member.endpoint, why)
        member.healthy = False
        member.ejections += 1
        member.timeouts = 0
        member.probe_wait = PROBE_FIRST
        member.probe_at = time.monotonic() + PROBE_FIRST

    def update(self, endpoints: list[Endpoint], make: Callable[[Endpoint], T]) -> None:
        """Make ``endpoints`` the members: new ones join (healthy), missing ones retire
        (their sequences stay on them until they end)."""
        wanted = set(endpoints)
        with self._lock:
            known = {member.endpoint for member in self.members}
        joining = [
            Member(endpoint, make(endpoint)) for endpoint in endpoints if endpoint not in known
        ]
        with self._lock:
            leaving = [member for member in self.members if member.endpoint not in wanted]
            staying = [member for member in self.members if member.endpoint in wanted]
            self.members = staying + joining
            self.retired.extend(leaving)

    def idle_retired(self) -> list[Member[T]]:
        """Retired members with nothing in flight and no sequence on them (to close)."""
        with self._lock:
            pinned = {id(member) for member, _, breaks in self._pins.values() if breaks != _LOST}
            idle = [m for m in self.retired if m.in_flight == 0 and id(m) not in pinned]
            self.retired = [member for member in self.retired if member not in idle]
        return idle

    def due_probes(self) -> tuple[list[Member[T]], float | None]:
        """The ejected endpoints due for a readiness probe now, and the seconds until the
        next one is due (None when no endpoint is ejected)."""
        now = time.monotonic()
        with self._lock:
            ejected = [member for member in self.members if not member.healthy]
            due = [member for member in ejected if member.probe_at <= now]
            later = [member.probe_at - now for member in ejected if member.probe_at > now]
        return due, (min(later) if later else (PROBE_FIRST if due else None))

    def probed(self, member: Member[T], ready: bool, failure: TritonError | None = None) -> None:
        """Record a readiness probe: a ready endpoint takes calls again; otherwise the
        next probe waits twice as long (up to PROBE_MAX). A probe that failed at the
        connection level (``failure``) counts as a break: a server that hung, was
        ejected, and is then restarted at its address has lost its sequences."""
        with self._lock:
            if failure is not None and _connection_failure(failure):
                member.breaks += 1
            if ready:
                logger.info("endpoint %s is ready again", member.endpoint)
                member.healthy = True
                member.timeouts = 0  # (the probe was answered)
                return
            member.probe_wait = min(member.probe_wait * 2, PROBE_MAX)
            member.probe_at = time.monotonic() + member.probe_wait

    def _take(self, tried: list[Member[T]] | tuple[()], model: ModelKey | None = None) -> Member[T]:
        candidates = [m for m in self.members if m.healthy and m not in tried]
        if not candidates:  # every endpoint is ejected: try one rather than fail unasked
            candidates = [m for m in self.members if m not in tried] or self.members
        if not candidates:
            raise TritonConnectionError(
                "no endpoint to send to: the DNS name has no address (yet)", retryable=True
            )
        now = time.monotonic()
        if model is not None and len(candidates) > 1:
            having = [m for m in candidates if not m.lacks(model, now)]
            candidates = having or candidates  # (none has it: its own error says so)
        if len(candidates) == 1:
            member = candidates[0]
        else:
            first, second = self._random.sample(candidates, 2)
            member = first if first.load(now) <= second.load(now) else second
        self._count(member)
        return member

    @staticmethod
    def _count(member: Member[T]) -> None:
        member.in_flight += 1
        member.requests += 1


AnyOp = Op[object] | StreamOp[object]


def _connection_failure(error: TritonError) -> bool:
    """The endpoint could not be reached or dropped the connection (not TLS, which no
    other endpoint of the same fleet would pass either)."""
    return isinstance(error, TritonConnectionError) and error.retryable


def _model_missing(error: TritonError) -> bool:
    """The endpoint has no such model ready (and ran nothing)."""
    return isinstance(error, ModelNotReadyError | ModelNotFoundError) and not error.may_have_run


def _answered_failure(error: TritonError) -> bool:
    """A failure the endpoint answered with (the model failed, the queue was full), as
    opposed to one of the connection, a timeout (see HUNG_AFTER), or the client's own
    refusal, which never reached it."""
    if isinstance(error, TritonConnectionError | TritonTimeoutError | InvalidInputError):
        return False
    # (a request the server found malformed would fail on every endpoint alike)
    return error.status not in _REQUEST_AT_FAULT and not refused_here(error)


_REQUEST_AT_FAULT: Final = frozenset({"INVALID_ARGUMENT", 400})


def _elsewhere(error: TritonError) -> bool:
    """Another endpoint may take at once a call that failed so on this one: the request
    did not run (a failure after it went out is the retry policy's to repeat). That
    includes a model this endpoint does not have ready: a server shutting down (a pod
    being replaced) unloads its models before it closes its ports, and a rolling update
    has the model on some servers first. Such an endpoint is not ejected: its other
    models (and the sequences on it) are fine."""
    if isinstance(error, ServerOverloadedError | ModelNotReadyError | ModelNotFoundError):
        return not error.may_have_run
    return _connection_failure(error) and not error.may_have_run


_LOST: Final = -1
"""A pinned sequence's breaks once it is lost (each later request raises, until its END)."""


def _lost(
    sequence: int | str, endpoint: Endpoint, cause: TritonError | None = None
) -> SequenceLostError:
    detail = "" if cause is None else f": {cause}"
    return SequenceLostError(
        f"sequence {sequence!r} was on {endpoint}, which failed{detail}. A sequence cannot "
        "move to another endpoint (its state lives in that server): start it again"
    )


def _addresses(answer: object) -> list[str]:
    """A resolver's answer as distinct addresses, in its order; a TypeError for an
    answer that is not a list of non-empty str (a lone str would be read letter by
    letter)."""
    if isinstance(answer, str | bytes) or not isinstance(answer, Iterable):
        raise TypeError(f"the resolver answered {answer!r}, not a list of addresses")
    addresses = list(dict.fromkeys(answer))
    for address in addresses:
        if not isinstance(address, str) or not _is_host(address):
            raise TypeError(
                f"the resolver answered {address!r}, not an address (an IP address or a host name)"
            )
    return addresses


# A host name: dot-separated labels of letters, digits, "-" and "_" (Kubernetes' names).
_HOST_NAME: Final = re.compile(
    r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?"
)


def _is_host(text: str) -> bool:
    """Whether ``text`` is an IP address or a host name: nothing else may stand in a
    URL's host (``10.0.0.7@evil``, ``host/path?`` would reach somewhere else)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return len(text) <= 253 and _HOST_NAME.fullmatch(text) is not None
    return True


RESOLVE_GAP = 1.0
"""The fewest seconds between two resolutions that failures ask for."""


class Discovery:
    """When a client's DNS name is resolved again, and its endpoints when it is."""

    def __init__(
        self, dns: DnsName, resolver: Callable[[str], Sequence[str]], interval: float
    ) -> None:
        self.dns = dns
        self.resolver = resolver
        self.interval = interval
        self.next_at = 0.0
        self._last = -RESOLVE_GAP

    def wait(self) -> float:
        """Seconds until the next resolution is due (0: now)."""
        return max(0.0, self.next_at - time.monotonic())

    def soon(self) -> None:
        """Resolve again soon (a failure may mean the fleet changed)."""
        self.next_at = min(self.next_at, self._last + RESOLVE_GAP)

    def resolve(self) -> list[Endpoint] | None:
        """The name's endpoints now; None (logged) when it does not resolve or has no
        address, so that the client keeps the endpoints it has."""
        self._last = time.monotonic()
        self.next_at = self._last + self.interval
        try:
            addresses = _addresses(self.resolver(self.dns.name))
        except Exception as error:  # logged; the client goes on with the endpoints it has
            logger.warning("could not resolve %s: %s", self.dns, error)
            return None
        if not addresses:
            logger.warning("%s resolved to no address", self.dns)
            return None
        return self.dns.endpoints(addresses)
