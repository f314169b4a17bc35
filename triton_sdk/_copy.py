"""Copies of large arrays split across cores.

numpy releases the GIL while it copies, and one core alone does not reach the memory's
bandwidth: a large copy into (or out of) a shared-memory region is split between the
calling thread and a few helper threads. Small copies, and machines with one core, copy
in one piece.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Final

import numpy as np

__all__ = ["copied", "copy_into"]

Array = np.ndarray[Any, Any]

PARALLEL_COPY_BYTES: Final = 8 * 2**20
"""Copies of at least this many bytes are split across cores."""
_MIN_PIECE_BYTES: Final = 4 * 2**20


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_HELPERS: Final = max(0, min(3, _cores() - 1))

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    # A forked child has none of the parent's threads: a pool inherited from it would
    # queue work that no thread ever runs (and its lock may have been held at the fork).
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_pool)


def _helpers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_HELPERS, thread_name_prefix="triton_sdk-copy")
        return _pool


Piece = tuple[Array, Array]


def _pieces(target: Array, source: Array, count: int) -> list[Piece] | None:
    """``count`` views of both arrays that together cover them: cut along the first axis,
    or (C-contiguous arrays with a short first axis) along the flattened arrays."""
    if source.ndim and source.shape[0] >= count:
        cut, length = (target, source), source.shape[0]
    elif target.flags.c_contiguous and source.flags.c_contiguous:
        cut, length = (target.reshape(-1), source.reshape(-1)), source.size
    else:
        return None
    step = -(-length // count)
    return [
        (cut[0][start : start + step], cut[1][start : start + step])
        for start in range(0, length, step)
    ]


def copy_into(target: Array, source: Array) -> None:
    """``np.copyto(target, source, casting="equiv")``: the same shapes, dtypes equal but
    for byte order. Large copies run in pieces on several cores; when this returns (or
    raises), no piece is still being written."""
    count = min(_HELPERS + 1, source.nbytes // _MIN_PIECE_BYTES)
    pieces = None
    if source.nbytes >= PARALLEL_COPY_BYTES and count >= 2 and target.shape == source.shape:
        pieces = _pieces(target, source, count)
    if pieces is None:
        np.copyto(target, source, casting="equiv")
        return
    pool = _helpers()
    handed: list[tuple[Future[None], Piece]] = []
    mine = pieces[:1]
    try:
        for piece in pieces[1:]:
            handed.append((pool.submit(np.copyto, *piece, casting="equiv"), piece))
    except RuntimeError:  # the interpreter is shutting down: no new work for threads
        mine += pieces[1 + len(handed) :]
    try:
        for piece in mine:
            np.copyto(*piece, casting="equiv")
        for future, piece in handed:
            if future.cancel():  # no helper has taken it yet: copy it here
                np.copyto(*piece, casting="equiv")
    finally:
        for future, _ in handed:
            future.cancel()
        wait([future for future, _ in handed])  # no piece may land after this returns
    for future, _ in handed:
        if not future.cancelled():
            future.result()  # raises what a piece raised


def copied(source: Array) -> Array:
    """A C-ordered copy of ``source`` (as ``source.copy()``)."""
    target = np.empty(source.shape, source.dtype)
    copy_into(target, source)
    return target
