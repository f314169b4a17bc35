"""Sequences: the requests a stateful model sees as one conversation."""

from __future__ import annotations

import secrets
import threading
import uuid
import warnings
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final, Generic, Protocol, TypeVar

import numpy as np

from ._checks import check_text, numpy_number, shown
from ._errors import (
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    ServerOverloadedError,
    TritonConnectionError,
    TritonError,
    sent_nothing,
)
from ._fork import renew_lock_on_fork
from ._request import InferRequest
from ._spec import ModelSpec

__all__ = [
    "SENDING",
    "Delivery",
    "OpenSequences",
    "SequenceNotEndedWarning",
    "SequenceState",
    "mark_reached",
    "new_sequence_id",
]

_MAX_INT_ID: Final = 2**63 - 1


class SequenceNotEndedWarning(UserWarning):
    """A sequence was left without a request marked ``end=True``.

    The server keeps the sequence's slot until it idles out
    (``max_sequence_idle_microseconds`` in the model's config).
    """


def new_sequence_id(spec: ModelSpec) -> int | str:
    """A fresh id: a random positive int64, or a UUID for string-id models."""
    if spec.string_sequence_ids:
        return uuid.uuid4().hex
    return secrets.randbelow(_MAX_INT_ID) + 1


class Delivery:
    """One request of a sequence: what the sequence counted for it, and how far it got.

    ``counted``: the sequence counted it (``start``: it carries START; ``end``: END),
    until it is settled. ``reached``: the client handed it to the transport, past the
    hooks' ``before_send`` and the shared-memory set-up. With hooks, what the transport
    itself did is kept too (``answered``, ``failure``): a hook that raises afterwards
    must not make a request that went out look unsent.

    The sequence writes ``counted`` and ``start`` under its lock, so that whatever
    interrupts the request (an exception, a KeyboardInterrupt between two steps),
    settling the delivery undoes exactly what was counted for it.
    """

    __slots__ = ("answered", "counted", "end", "failure", "reached", "start")

    def __init__(self) -> None:
        self.counted = False
        self.start = False
        self.end = False
        self.reached = False
        self.answered = False
        self.failure: TritonError | None = None

    def went_out(self, error: BaseException) -> bool:
        """Whether the request, failed with ``error``, may have reached the server.

        It did not if it never reached the transport, if gRPC refused to send it
        (``InvalidInputError``), if the server could not be connected to (the one
        connection failure that proves nothing went out), or if the server turned it
        away unrun (no such model ready, a full queue). Anything else may have run.
        """
        if not self.reached:
            return False
        if self.answered:
            return True
        if self.failure is not None:
            error = self.failure
        if sent_nothing(error):
            return False
        if (
            isinstance(error, _TURNED_AWAY)
            and error.status in _TURNED_AWAY_STATUS
            and not error.may_have_run
        ):
            return False  # (the server refused it before any sequence could begin)
        return not (
            isinstance(error, TritonConnectionError) and error.retryable and not error.may_have_run
        )


_TURNED_AWAY: Final = (ModelNotFoundError, ModelNotReadyError, ServerOverloadedError)
# (the server's own refusals; a model's failure whose words read alike has another status)
_TURNED_AWAY_STATUS: Final = frozenset({"NOT_FOUND", "UNAVAILABLE", 404, 503})


SENDING: Final[ContextVar[Delivery | None]] = ContextVar("triton_sdk_sending", default=None)
"""The :class:`Delivery` of the sequence request the current call sends, if any."""


def _current(op: object) -> Delivery | None:
    delivery = SENDING.get()
    return delivery if delivery is not None and isinstance(op, InferRequest) else None


def mark_reached(op: object) -> None:
    """Note that ``op`` reaches the transport, when it is the current sequence request
    (the client calls this only while :data:`SENDING` is set)."""
    delivery = _current(op)
    if delivery is not None:
        delivery.reached = True


def mark_outcome(op: object, failure: TritonError | None) -> None:
    """Note what the transport did with ``op`` (answered it, or failed with
    ``failure``), before the hooks see it."""
    delivery = _current(op)
    if delivery is not None:
        delivery.answered = failure is None
        delivery.failure = failure


class Opens(Protocol):
    def open(self) -> None: ...


G = TypeVar("G", bound=Opens)


# Where the request carrying START is.
_START_UNSENT: Final = 0
_START_GOING: Final = 1
_START_SENT: Final = 2


MAX_STR_ID_BYTES: Final = 128
"""The longest str correlation id the server takes, in bytes of UTF-8."""


def check_end(end: object) -> bool:
    """``end=`` of a sequence's request: a bool (a numpy bool counts as its value)."""
    if isinstance(end, bool):
        return end
    if isinstance(end, np.bool_):
        return bool(end)
    raise InvalidInputError(f"end is a bool, got {end!r}")


class SequenceState(Generic[G]):
    """Where a sequence is: the flags of its next request, and whether it has ended.

    Shared by the blocking and the asyncio sequence handles, which give the kind of
    gate their requests wait on for START (``new_gate``); it does no I/O.
    """

    __slots__ = (
        "__weakref__",
        "_lock",
        "_new_gate",
        "_start",
        "ended",
        "left",
        "model",
        "sent",
        "sequence_id",
        "started",
    )

    def __init__(
        self, spec: ModelSpec, sequence_id: int | str | None, new_gate: Callable[[], G]
    ) -> None:
        # (an ensemble passes the sequence on to its steps, a stateful one among them)
        if not spec.sequence and spec.platform != "ensemble":
            raise InvalidInputError(
                f"model {spec.name!r} has no sequence batching: it is not stateful",
                model=spec.name,
            )
        if sequence_id is None:
            sequence_id = new_sequence_id(spec)
        elif numpy_number(sequence_id, integer=True):
            sequence_id = int(sequence_id)  # an id taken from an array or a data frame
        if isinstance(sequence_id, bool) or not (
            (isinstance(sequence_id, int) and 0 < sequence_id <= _MAX_INT_ID)
            or (isinstance(sequence_id, str) and sequence_id)
        ):
            raise InvalidInputError(
                "a sequence id is an int in [1, 2**63 - 1] or a non-empty str, got "
                f"{shown(sequence_id)}"
            )
        if isinstance(sequence_id, str):
            check_text(sequence_id, "sequence id")
            if len(sequence_id.encode()) > MAX_STR_ID_BYTES:
                raise InvalidInputError(
                    f"a str sequence id is at most {MAX_STR_ID_BYTES} bytes of UTF-8 (as "
                    f"the server takes it), got {len(sequence_id.encode())}"
                )
            if spec.integer_sequence_ids:
                raise InvalidInputError(
                    f"model {spec.name!r} takes integer sequence ids (its CORRID control is "
                    f"not TYPE_STRING), got the str {sequence_id!r}",
                    model=spec.name,
                )
        self.model = spec.name
        self.sequence_id = sequence_id
        self.sent = 0
        self.ended = False
        self.left = False  # (its block was left: it takes no more requests from it)
        self._start = _START_UNSENT
        self._new_gate = new_gate
        self.started = new_gate()
        """Opened when the request carrying START is done; replaced when it never went
        out (requests waiting on it then ask again)."""
        self._lock = threading.Lock()  # the blocking handle's requests may come from threads
        renew_lock_on_fork(self)

    def check_open(self) -> None:
        """Raise if the request marked END has been sent, or the handle's ``with`` block
        was left: the sequence takes no more from this handle."""
        if self.ended:
            raise TritonError(
                f"sequence {self.sequence_id!r} of {self.model!r} has ended", model=self.model
            )
        if self.left:
            raise self._left_error()

    def _left_error(self) -> TritonError:
        # Another handle may have started a new sequence of this id since: a request
        # from this one would land in it.
        return TritonError(
            f"the block of sequence {self.sequence_id!r} of {self.model!r} was left: its "
            "handle takes no more requests (open model.sequence() again for a new one)",
            model=self.model,
        )

    def claim(self, delivery: Delivery, end: bool) -> None:
        """Count ``delivery`` as the next request: it carries START when no request
        carrying it is out or on its way (``delivery.start``), END when asked. Counted
        in one step, so that of requests sent at once from several threads or tasks
        only one carries START."""
        with self._lock:
            self.check_open()
            start = self._start == _START_UNSENT
            delivery.start = start
            delivery.end = end
            delivery.counted = True
            if start:
                self._start = _START_GOING
            self.sent += 1
            self.ended = end

    def ready(self, delivery: Delivery) -> G | None:
        """None when the counted ``delivery`` may go: it carries START, START has gone
        out, or the request that carried START never went out (this one then takes its
        place: ``delivery.start`` turns true). Otherwise, START is on its way: the gate
        to wait on before asking again. Raises when the handle's block was left since
        the request was counted (it waited for START, or it was sent from another thread
        or task as the block ended): it goes no further."""
        with self._lock:
            if self.left:
                raise self._left_error()
            if delivery.start or self._start == _START_SENT:
                return None
            if self._start == _START_UNSENT:
                delivery.start = True
                self._start = _START_GOING
                return None
            return self.started

    def settle(self, delivery: Delivery, went_out: bool) -> None:
        """A request is done (or given up before it was counted: then this does
        nothing). One that may have reached the server stays counted (a failed one may
        still have run: START is never sent twice); one that never went out is
        uncounted: after it, the sequence is where it was (still open after an END,
        without START after a START). The requests waiting for START go on."""
        replacement = self._new_gate() if delivery.start and not went_out else None
        waited: G | None = None
        with self._lock:
            try:
                if not delivery.counted:
                    return
                # START first: an interrupt landing between these steps must not leave
                # START "on its way" with nobody to settle it (the waiters would hang).
                if delivery.start:
                    waited = self.started
                    self._start = _START_SENT if went_out else _START_UNSENT
                    if replacement is not None:
                        self.started = replacement
                if not went_out:
                    self.sent -= 1
                    if delivery.end:
                        self.ended = False
                delivery.counted = False
            finally:
                if waited is not None:
                    waited.open()

    def leave(self) -> None:
        """Warn when the block is left with the sequence still open on the server."""
        self.left = True
        if self.sent and not self.ended:
            warnings.warn(
                f"sequence {self.sequence_id!r} of {self.model!r} was left without a request "
                "marked end=True; the server keeps its slot until it idles out. "
                "Send the last request with infer(..., end=True).",
                SequenceNotEndedWarning,
                stacklevel=3,
            )


class OpenSequences:
    """The sequences a client has open, by model and id. A second handle on an open one
    would send START again, which silently restarts the sequence on the server (and the
    first handle's next request fails there): it is refused instead."""

    __slots__ = ("__weakref__", "_lock", "_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        renew_lock_on_fork(self)
        self._open: weakref.WeakValueDictionary[tuple[str, int | str], SequenceState[Any]] = (
            weakref.WeakValueDictionary()
        )

    def add(self, state: SequenceState[Any]) -> None:
        """Count ``state`` as open; refuse it while another handle has its id open (not
        ended, its block not left, not yet garbage)."""
        key = (state.model, state.sequence_id)
        with self._lock:
            other = self._open.get(key)
            if other is not None and not (other.ended or other.left):
                raise InvalidInputError(
                    f"sequence {state.sequence_id!r} of {state.model!r} is open in another "
                    "handle of this client: a second one would send START again, which "
                    "restarts it on the server; end the first (end=True) or leave its block",
                    model=state.model,
                )
            self._open[key] = state
