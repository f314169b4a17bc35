"""What a forked child must not share with its parent.

A child made by ``os.fork()`` (``multiprocessing``'s "fork" start method) inherits the
parent's clients: their shared-memory regions (the same memory: a region reused in both
would mix the two processes' tensors), their keep-alive sockets (the same connections: two
requests on one would get each other's answers) and the names the parent will give its
next regions. Right after the fork, in the child, each object registered here drops its
share of them, without closing or unregistering anything (they are the parent's still):
the child's client makes its own as it goes. In the parent, before a fork and again after
it, each object registered for it stops reusing what the child may still read (the regions
under output views the child has copies of).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Protocol

__all__ = ["ForkAware", "before_fork", "on_fork", "renew_lock_on_fork"]


class ForkAware(Protocol):
    def after_fork_in_child(self) -> None:
        """Let go of what the parent process owns, without closing it."""


class ForkAwareParent(Protocol):
    def before_fork(self) -> None:
        """Stop using what a child forked now would share with this process."""


class HasLock(Protocol):
    _lock: threading.Lock


_AWARE: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_LOCKED: weakref.WeakSet[HasLock] = weakref.WeakSet()
_PARENTS: weakref.WeakSet[ForkAwareParent] = weakref.WeakSet()


def on_fork(aware: ForkAware) -> None:
    """Have ``aware.after_fork_in_child()`` run in every child forked from now on (while
    ``aware`` lives)."""
    _AWARE.add(aware)


def before_fork(aware: ForkAwareParent) -> None:
    """Have ``aware.before_fork()`` run in the parent before every fork from now on (while
    ``aware`` lives). Before, not after: between the fork and an after-handler, another
    thread could go on using what the child now shares."""
    _PARENTS.add(aware)


def renew_lock_on_fork(owner: HasLock) -> None:
    """Give ``owner`` a new ``_lock`` in every child forked from now on (while ``owner``
    lives): one that another thread of the parent held at the fork stays held in the
    child for good, and the child's first use of it would hang."""
    _LOCKED.add(owner)


def _in_child() -> None:
    for owner in list(_LOCKED):
        owner._lock = threading.Lock()
    for aware in list(_AWARE):
        try:
            aware.after_fork_in_child()
        except Exception:  # (one failure must not leave the others shared)
            logging.getLogger("triton_sdk").exception(
                "a forked child could not let go of %r", aware
            )


def _before() -> None:
    for aware in list(_PARENTS):
        try:
            aware.before_fork()
        except Exception:  # (a failure here must not fail the fork)
            logging.getLogger("triton_sdk").exception("could not mark what %r shares", aware)


if hasattr(os, "register_at_fork"):  # POSIX
    # Before, and after in the parent too: fork() may let another thread run in between.
    os.register_at_fork(before=_before, after_in_parent=_before, after_in_child=_in_child)
