"""The retry decisions of a :class:`RetryPolicy`; tenacity does the looping.

The loop itself lives in the clients' call path (``_run``). Its first attempt runs
with no retry machinery at all: most calls succeed, and building tenacity objects for
each one would cost more than the SDK's whole per-call budget. Only after a retryable
failure does tenacity take over, starting at attempt 2, so attempt counts, backoff and
the deadline all include the first attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import tenacity

from ._config import RetryBudget, RetryPolicy
from ._errors import TritonError, TritonTimeoutError
from ._fork import renew_lock_on_fork

__all__ = [
    "StopAt",
    "TokenBucket",
    "attempt_timeout",
    "final_error",
    "retrying_kwargs",
    "should_retry",
]

logger = logging.getLogger("triton_sdk")


def should_retry(error: BaseException, *, idempotent: bool) -> bool:
    """Whether a failed attempt may be repeated: idempotent calls, retryable failures."""
    return idempotent and isinstance(error, TritonError) and error.retryable


def attempt_timeout(timeout: float | None, deadline_at: float | None, now: float) -> float | None:
    """The time one attempt may take: the call's timeout, cut to what the deadline leaves.

    Raises TritonTimeoutError when the deadline has already passed.
    """
    if deadline_at is None:
        return timeout
    remaining = deadline_at - now
    if remaining <= 0:
        raise TritonTimeoutError("the retry deadline passed before the next attempt")
    return remaining if timeout is None else min(timeout, remaining)


class _Wait(tenacity.wait.wait_base):
    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.policy.backoff(retry_state.attempt_number)


class TokenBucket:
    """A client's :class:`RetryBudget` at work.

    Calls are counted without a lock (a lost count under contention only makes the
    budget a little stricter); the balance is brought up to date when a retry asks.
    """

    __slots__ = ("__weakref__", "_balance", "_lock", "_seen", "budget", "calls")

    def __init__(self, budget: RetryBudget) -> None:
        self.budget = budget
        self.calls = 0
        self._seen = 0
        self._balance = float(budget.reserve)
        self._lock = threading.Lock()
        renew_lock_on_fork(self)

    def withdraw(self) -> bool:
        """Take one retry; False when the bucket is empty."""
        with self._lock:
            calls = self.calls
            earned = self.budget.ratio * (calls - self._seen)
            self._seen = calls
            self._balance = min(float(self.budget.reserve), self._balance + earned)
            if self._balance < 1:
                return False
            self._balance -= 1
            return True


class StopAt(tenacity.stop.stop_base):
    """Stop after ``max_attempts``, when the next wait would end past the deadline, or
    when the client's retry budget is spent."""

    def __init__(
        self, policy: RetryPolicy, deadline_at: float | None, bucket: TokenBucket | None = None
    ) -> None:
        self.max_attempts = policy.max_attempts
        self.deadline_at = deadline_at
        self.bucket = bucket
        self.hit_deadline = False
        self.hit_budget = False

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        if retry_state.attempt_number >= self.max_attempts:
            return True
        if self.deadline_at is not None:
            next_start = time.monotonic() + (retry_state.upcoming_sleep or 0.0)
            self.hit_deadline = next_start >= self.deadline_at
            if self.hit_deadline:
                return True
        if self.bucket is not None and not self.bucket.withdraw():
            self.hit_budget = True
            return True
        return False


def _log_retry(what: str, policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], None]:
    def log(retry_state: tenacity.RetryCallState) -> None:
        error = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(error, TritonError) and error.may_have_run:
            logger.warning(
                "resending %s in %.3fs after attempt %d of %d failed once the request had "
                "gone out, so the server may run it twice: %s",
                what,
                retry_state.upcoming_sleep,
                retry_state.attempt_number,
                policy.max_attempts,
                error,
            )
            return
        logger.info(
            "retrying %s in %.3fs after attempt %d of %d failed: %s",
            what,
            retry_state.upcoming_sleep,
            retry_state.attempt_number,
            policy.max_attempts,
            error,
        )

    return log


def retrying_kwargs(policy: RetryPolicy, stop: StopAt, what: str, idempotent: bool) -> Any:
    """The arguments of tenacity's ``Retrying``/``AsyncRetrying`` for a call's retries."""
    return {
        "stop": stop,
        "wait": _Wait(policy),
        "retry": tenacity.retry_if_exception(lambda exc: should_retry(exc, idempotent=idempotent)),
        "before_sleep": _log_retry(what, policy),
        "reraise": True,
    }


def final_error(error: TritonError, stop: StopAt, what: str, policy: RetryPolicy) -> TritonError:
    """The error that ends the call: a deadline that cut retries short is a timeout."""
    if stop.hit_budget:
        logger.warning(
            "not retrying %s: the client's retry budget is spent (%s); last failure: %s",
            what,
            stop.bucket.budget if stop.bucket is not None else None,
            error,
        )
        return error
    if not stop.hit_deadline or isinstance(error, TritonTimeoutError):
        return error
    return TritonTimeoutError(
        f"{what}: gave up, the next attempt would start past the retry deadline of "
        f"{policy.deadline}s; last failure: {error}",
        status=error.status,
        model=error.model,
        request_id=error.request_id,
    )
