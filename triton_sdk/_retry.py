"""Running a call under a :class:`RetryPolicy`, with tenacity doing the looping.

The first attempt runs on a fast path with no retry machinery at all: most calls
succeed, and building tenacity objects for each one would cost more than the SDK's
whole per-call budget. Only after a retryable failure does tenacity take over; it is
handed the failure that already happened, so attempt counts, backoff and the deadline
all include the first attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import tenacity

from ._config import RetryPolicy
from ._errors import TritonError, TritonTimeoutError

__all__ = ["attempt_timeout", "call_async", "call_sync", "should_retry"]

logger = logging.getLogger("triton_sdk")

T = TypeVar("T")


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


class _StopAt(tenacity.stop.stop_base):
    """Stop after ``max_attempts``, or when the next wait would end past the deadline."""

    def __init__(self, policy: RetryPolicy, deadline_at: float | None) -> None:
        self.max_attempts = policy.max_attempts
        self.deadline_at = deadline_at
        self.hit_deadline = False

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        if retry_state.attempt_number >= self.max_attempts:
            return True
        if self.deadline_at is None:
            return False
        next_start = time.monotonic() + (retry_state.upcoming_sleep or 0.0)
        self.hit_deadline = next_start >= self.deadline_at
        return self.hit_deadline


def _log_retry(what: str, policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], None]:
    def log(retry_state: tenacity.RetryCallState) -> None:
        error = retry_state.outcome.exception() if retry_state.outcome else None
        logger.info(
            "retrying %s in %.3fs after attempt %d of %d failed: %s",
            what,
            retry_state.upcoming_sleep,
            retry_state.attempt_number,
            policy.max_attempts,
            error,
        )

    return log


def _retrying_kwargs(policy: RetryPolicy, stop: _StopAt, what: str, idempotent: bool) -> Any:
    return {
        "stop": stop,
        "wait": _Wait(policy),
        "retry": tenacity.retry_if_exception(lambda exc: should_retry(exc, idempotent=idempotent)),
        "before_sleep": _log_retry(what, policy),
        "reraise": True,
    }


def _replay_first(first: BaseException) -> Iterator[BaseException]:
    yield first


def _final_error(error: TritonError, stop: _StopAt, what: str, policy: RetryPolicy) -> TritonError:
    """The error that ends the call: a deadline that cut retries short is a timeout."""
    if not stop.hit_deadline or isinstance(error, TritonTimeoutError):
        return error
    return TritonTimeoutError(
        f"{what}: gave up, the next attempt would start past the retry deadline of "
        f"{policy.deadline}s; last failure: {error}",
        status=error.status,
        model=error.model,
        request_id=error.request_id,
    )


def _deadline_at(policy: RetryPolicy, started: float | None) -> float | None:
    if policy.deadline is None:
        return None
    return (time.monotonic() if started is None else started) + policy.deadline


def call_sync(
    attempt: Callable[[float | None], T],
    *,
    policy: RetryPolicy,
    timeout: float | None,
    idempotent: bool,
    what: str,
    started: float | None = None,
) -> T:
    """Run ``attempt(timeout_for_this_attempt)`` under the policy.

    ``started`` (a ``time.monotonic()`` value) starts the deadline's clock earlier, for
    calls made of several requests: all of them share one deadline.
    """
    deadline_at = _deadline_at(policy, started)
    try:
        return attempt(attempt_timeout(timeout, deadline_at, time.monotonic()))
    except TritonError as error:
        if policy.max_attempts <= 1 or not should_retry(error, idempotent=idempotent):
            raise
        replay = _replay_first(error)

    def again() -> T:
        failed = next(replay, None)
        if failed is not None:
            raise failed
        return attempt(attempt_timeout(timeout, deadline_at, time.monotonic()))

    stop = _StopAt(policy, deadline_at)
    try:
        return tenacity.Retrying(**_retrying_kwargs(policy, stop, what, idempotent))(again)
    except TritonError as error:
        final = _final_error(error, stop, what, policy)
        if final is error:
            raise
        raise final from error


async def call_async(
    attempt: Callable[[float | None], Awaitable[T]],
    *,
    policy: RetryPolicy,
    timeout: float | None,
    idempotent: bool,
    what: str,
    started: float | None = None,
) -> T:
    """The asynchronous twin of :func:`call_sync`."""
    deadline_at = _deadline_at(policy, started)
    try:
        return await attempt(attempt_timeout(timeout, deadline_at, time.monotonic()))
    except TritonError as error:
        if policy.max_attempts <= 1 or not should_retry(error, idempotent=idempotent):
            raise
        replay = _replay_first(error)

    async def again() -> T:
        failed = next(replay, None)
        if failed is not None:
            raise failed
        return await attempt(attempt_timeout(timeout, deadline_at, time.monotonic()))

    stop = _StopAt(policy, deadline_at)
    try:
        return await tenacity.AsyncRetrying(**_retrying_kwargs(policy, stop, what, idempotent))(
            again
        )
    except TritonError as error:
        final = _final_error(error, stop, what, policy)
        if final is error:
            raise
        raise final from error
