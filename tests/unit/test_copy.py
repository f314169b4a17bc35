"""Large copies split across cores: the same bytes as one np.copyto, whatever the layout."""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from triton_sdk import _copy
from triton_sdk._copy import PARALLEL_COPY_BYTES, copied, copy_into

LARGE = PARALLEL_COPY_BYTES // 4 * 3 + 7  # float32 elements: 24 MiB and a ragged tail


def _source(count: int, dtype: str = "<f4") -> np.ndarray[Any, Any]:
    return np.random.default_rng(count).random(count).astype(dtype)


@pytest.mark.parametrize("count", [10, PARALLEL_COPY_BYTES // 4 - 1, LARGE])
def test_copy_into_copies_every_element(count: int) -> None:
    source = _source(count)
    target = np.zeros_like(source)
    copy_into(target, source)
    assert np.array_equal(target, source)


def test_large_copies_run_in_pieces_on_helper_threads(submitted: list[int]) -> None:
    source = _source(LARGE).reshape(1, -1)  # a short first axis: cut from the flat array
    target = np.zeros_like(source)
    copy_into(target, source)
    assert np.array_equal(target, source)
    assert submitted
    assert sum(submitted) < source.size  # the calling thread copied a piece itself


def test_byte_order_is_converted_as_np_copyto_does() -> None:
    source = _source(LARGE, ">f4")
    target = np.zeros(source.shape, "<f4")
    copy_into(target, source)
    assert np.array_equal(target, source)
    assert target.tobytes() == source.astype("<f4").tobytes()


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the pieces handed to helper threads."""
    if _copy._HELPERS < 1:
        pytest.skip("one core: copies are never split")
    sizes: list[int] = []
    pool = _copy._helpers()
    real_submit = pool.submit

    def counting_submit(function: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(target.size)
        return real_submit(function, target, *args, **kwargs)

    monkeypatch.setattr(pool, "submit", counting_submit)
    return sizes


def test_non_contiguous_arrays_are_cut_along_their_first_axis(submitted: list[int]) -> None:
    rows = LARGE // 4
    source = _source(2 * rows * 4).reshape(2 * rows, 4)[::2]
    target = np.zeros((2 * rows, 4), "<f4")[::2]  # flattening it would make a copy
    copy_into(target, source)
    assert np.array_equal(target, source)
    assert submitted


def test_fortran_ordered_target_gets_every_element() -> None:
    source = _source(LARGE // 4 * 4).reshape(-1, 4)
    target = np.zeros(source.shape, "<f4", order="F")
    copy_into(target, source)
    assert np.array_equal(target, source)


def test_a_short_first_axis_of_a_strided_array_is_copied_whole(submitted: list[int]) -> None:
    source = _source(2 * LARGE).reshape(1, -1)[:, ::2]
    target = np.zeros_like(source)
    copy_into(target, source)
    assert np.array_equal(target, source)
    assert submitted == []


def test_copied_is_a_separate_c_ordered_copy() -> None:
    source = _source(LARGE).reshape(-1, 1)
    result = copied(source)
    assert result.flags.c_contiguous
    assert not np.shares_memory(result, source)
    assert np.array_equal(result, source)


def _copy_in_child(queue: Any) -> None:
    source = _source(LARGE)
    queue.put(bool(np.array_equal(copied(source), source)))


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_copies_with_threads_of_its_own() -> None:
    copied(_source(LARGE))  # the parent's helper threads exist before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_copy_in_child, args=(queue,))
    child.start()
    try:
        child.join(60)
        assert child.exitcode == 0  # a child waiting on the parent's threads never ends
        assert queue.get(timeout=1) is True
    finally:
        child.kill()
        child.join()


def test_a_pool_that_no_longer_takes_work_leaves_the_copy_to_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if _copy._HELPERS < 1:
        pytest.skip("one core: copies are never split")
    stopped = ThreadPoolExecutor(1)
    stopped.shutdown()  # as at interpreter exit: submit raises RuntimeError
    monkeypatch.setattr(_copy, "_pool", stopped)
    source = _source(LARGE)
    target = np.zeros_like(source)
    copy_into(target, source)
    assert np.array_equal(target, source)
