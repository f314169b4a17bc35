"""Sequences: the requests a stateful model sees as one conversation."""

from __future__ import annotations

import secrets
import threading
import uuid
import warnings
from typing import Final

from ._base import SequenceFlags
from ._checks import check_text
from ._errors import InvalidInputError, TritonError
from ._spec import ModelSpec

__all__ = ["SequenceNotEndedWarning", "SequenceState", "new_sequence_id"]

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


class SequenceState:
    """Where a sequence is: the flags of its next request, and whether it has ended.

    Shared by the blocking and the asyncio sequence handles; it does no I/O.
    """

    __slots__ = ("_lock", "ended", "model", "sent", "sequence_id")

    def __init__(self, spec: ModelSpec, sequence_id: int | str | None) -> None:
        if not spec.sequence:
            raise InvalidInputError(
                f"model {spec.name!r} has no sequence batching: it is not stateful",
                model=spec.name,
            )
        if sequence_id is None:
            sequence_id = new_sequence_id(spec)
        elif isinstance(sequence_id, bool) or not (
            (isinstance(sequence_id, int) and 0 < sequence_id <= _MAX_INT_ID)
            or (isinstance(sequence_id, str) and sequence_id)
        ):
            raise InvalidInputError(
                f"a sequence id is an int in [1, 2**63 - 1] or a non-empty str, got {sequence_id!r}"
            )
        elif isinstance(sequence_id, str):
            check_text(sequence_id, "sequence id")
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
        self._lock = threading.Lock()  # the blocking handle's requests may come from threads

    def check_open(self) -> None:
        """Raise if the request marked END has been sent: the sequence takes no more."""
        if self.ended:
            raise TritonError(
                f"sequence {self.sequence_id!r} of {self.model!r} has ended", model=self.model
            )

    def claim(self, end: bool) -> SequenceFlags:
        """The flags of the next request (START on the first, END when asked), counted in
        the same step, so that of requests sent at once from several threads or tasks
        only one carries START. Counted as sent whether answered or not: a failed request
        may still have reached the model, so START is never sent twice."""
        with self._lock:
            self.check_open()
            start = self.sent == 0
            self.sent += 1
            self.ended = end
        return SequenceFlags(self.sequence_id, start, end)

    def withdraw(self, flags: SequenceFlags) -> None:
        """Uncount a claimed request that was not sent after all (cancelled while it
        waited for the answer to START, or refused by the client)."""
        with self._lock:
            self.sent -= 1
            if flags.end:
                self.ended = False

    def leave(self) -> None:
        """Warn when the block is left with the sequence still open on the server."""
        if self.sent and not self.ended:
            warnings.warn(
                f"sequence {self.sequence_id!r} of {self.model!r} was left without a request "
                "marked end=True; the server keeps its slot until it idles out. "
                "Send the last request with infer(..., end=True).",
                SequenceNotEndedWarning,
                stacklevel=3,
            )
