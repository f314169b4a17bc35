"""Copies of large arrays split across cores.

numpy releases the GIL while it copies, and one core alone does not reach the memory's
bandwidth: a large copy into (or out of) a shared-memory region is split between the
calling thread and a few helper threads. Small copies, and machines with one core, copy
in one piece.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import numpy as np

__all__ = ["copied", "copy_into"]

Array = np.ndarray[Any, Any]

PARALLEL_COPY_BYTES: Final = 8 * 2**20
"""Copies of at least this many bytes are split across cores."""
_MIN_PIECE_BYTES: Final = 4 * 2**20
_HELPERS: Final = max(0, min(3, (os.cpu_count() or 1) - 1))

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    # A forked child has none of the parent's threads: a pool inherited from it would
    # queue work that no thread ever runs.
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def _helpers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_HELPERS, thread_name_prefix="triton_sdk-copy")
        return _pool


def copy_into(target: Array, source: Array) -> None:
    """``np.copyto(target, source, casting="equiv")``: the same shapes, dtypes equal but
    for byte order. Large contiguous copies run in pieces on several cores."""
    pieces = min(_HELPERS + 1, source.nbytes // _MIN_PIECE_BYTES)
    if (
        source.nbytes < PARALLEL_COPY_BYTES
        or pieces < 2
        or not (target.flags.c_contiguous and source.flags.c_contiguous)
        or target.shape != source.shape
    ):
        np.copyto(target, source, casting="equiv")
        return
    flat_target, flat_source = target.reshape(-1), source.reshape(-1)
    step = -(-flat_source.size // pieces)
    bounds = [
        (start, min(start + step, flat_source.size)) for start in range(0, flat_source.size, step)
    ]
    pool = _helpers()
    try:
        futures: list[Future[None]] = [
            pool.submit(np.copyto, flat_target[start:end], flat_source[start:end], casting="equiv")
            for start, end in bounds[1:]
        ]
    except RuntimeError:  # the interpreter is shutting down: no new work for threads
        np.copyto(target, source, casting="equiv")
        return
    try:
        start, end = bounds[0]
        np.copyto(flat_target[start:end], flat_source[start:end], casting="equiv")
    finally:
        for future in futures:
            future.result()  # raises what a piece raised


def copied(source: Array) -> Array:
    """A C-ordered copy of ``source`` (as ``source.copy()``)."""
    target = np.empty(source.shape, source.dtype)
    copy_into(target, source)
    return target
