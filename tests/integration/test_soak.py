"""Soak: thousands of calls on one client per transport leak no memory, sockets or threads.

Each transport gets one client: the blocking one is shared by several threads, the
asyncio one by several tasks. After a warm-up (connections opened, buffers and caches
filled) the process's resident memory, open file descriptors and threads are measured,
the callers run for a few seconds more, and the same figures are measured again. The
bounds are generous on purpose: a leak of one socket, thread or buffer per call would
exceed them many times over across thousands of calls, while allocator noise does not.
Every answer is checked, and a minimum number of calls keeps the bounds meaningful.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import EXAMPLE_MODELS, server_url

THREADS = 4
"""Threads sharing one blocking client."""
TASKS = 8
"""Tasks sharing one asyncio client."""
WARMUP_CALLS = 200
"""Calls of each caller before the first measurement."""
SOAK_SECONDS = 4.0
"""How long the callers run at least between the two measurements."""
MIN_CALLS = 2_000
"""Calls the measured phase makes at least, however slow the machine: fewer and the bounds
below would mean little."""
MAX_SOAK_SECONDS = 90.0
"""Where the measured phase ends even short of MIN_CALLS (the test then fails)."""
RSS_GROWTH_KIB = 20 * 1024
FD_GROWTH = 8
THREAD_GROWTH = 4
OS_THREAD_GROWTH = 16

Array = np.ndarray[Any, Any]


class Usage(NamedTuple):
    rss_kib: int
    fds: int
    threads: int
    os_threads: int  # also gRPC's own threads, which threading does not see


def usage() -> Usage:
    """This process's resident memory (KiB), open file descriptors and threads."""
    gc.collect()
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return Usage(
        rss_kib=int(status["VmRSS"].split()[0]),
        fds=len(os.listdir("/proc/self/fd")),
        threads=threading.active_count(),
        os_threads=int(status["Threads"]),
    )


class Tally:
    """What one caller saw: calls made, wrong answers, exceptions by class."""

    def __init__(self) -> None:
        self.calls = 0
        self.wrong = 0
        self.errors: collections.Counter[str] = collections.Counter()

    def add(self, other: Tally) -> None:
        self.calls += other.calls
        self.wrong += other.wrong
        self.errors.update(other.errors)


class Phase:
    """The measured phase: at least SOAK_SECONDS and MIN_CALLS calls in all."""

    def __init__(self, tallies: list[Tally]) -> None:
        self.tallies = tallies
        self.began = time.monotonic()

    def over(self) -> bool:
        ran = time.monotonic() - self.began
        if ran < SOAK_SECONDS:
            return False
        return ran > MAX_SOAK_SECONDS or sum(tally.calls for tally in self.tallies) >= MIN_CALLS


def inputs(caller: int) -> tuple[Array, Array]:
    """Distinct inputs per caller, so that an answer delivered to another caller shows."""
    a = np.arange(4, dtype=np.float32) + np.float32(caller * 10)
    return a, np.full(4, np.float32(caller + 0.5))


def check(result: ts.InferResult, a: Array, b: Array, tally: Tally) -> None:
    tally.calls += 1
    if not (np.array_equal(result["OUTPUT0"], a + b) and np.array_equal(result["OUTPUT1"], a - b)):
        tally.wrong += 1


@pytest.fixture(scope="module")
def soak_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repository = tmp_path_factory.mktemp("soak_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    with LocalServer(repository) as running:
        yield running


# Blocking clients: THREADS threads, phases kept in step by a barrier


def sync_soak(url: str) -> tuple[Usage, Usage, Tally]:
    barrier = threading.Barrier(THREADS + 1, timeout=120)
    tallies = [Tally() for _ in range(THREADS)]
    phase = [Phase(tallies)]  # begun again by the main thread once the baseline is measured

    def run(model: ts.Model, caller: int, over: Callable[[], bool], tally: Tally) -> None:
        a, b = inputs(caller)
        while not over():
            try:
                check(model.infer(INPUT0=a, INPUT1=b), a, b, tally)
            except Exception as error:
                tally.calls += 1
                tally.errors[type(error).__name__] += 1

    def caller(model: ts.Model, index: int) -> None:
        try:
            warmup = Tally()
            run(model, index, lambda: warmup.calls >= WARMUP_CALLS, warmup)
            barrier.wait()  # warm-up done
            barrier.wait()  # baseline measured
            run(model, index, phase[0].over, tallies[index])
            barrier.wait()  # soak done
            barrier.wait()  # end measured
        except BaseException:
            barrier.abort()
            raise

    with ts.Client(url) as client:
        model = client.model("add_sub")
        threads = [
            threading.Thread(target=caller, args=(model, index), daemon=True)
            for index in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        try:
            barrier.wait()
            before = usage()
            phase[0] = Phase(tallies)
            barrier.wait()
            barrier.wait()
            after = usage()
            barrier.wait()
        except BaseException:
            barrier.abort()  # frees the callers
            raise
        finally:
            for thread in threads:
                thread.join(30)
    total = Tally()
    for tally in tallies:
        total.add(tally)
    return before, after, total


# The asyncio client: TASKS tasks on one event loop


async def async_phase(model: ts.AsyncModel, warmup: bool) -> Tally:
    tallies = [Tally() for _ in range(TASKS)]
    phase = Phase(tallies)

    async def caller(index: int, tally: Tally) -> None:
        a, b = inputs(index)
        while not (tally.calls >= WARMUP_CALLS if warmup else phase.over()):
            try:
                check(await model.infer(INPUT0=a, INPUT1=b), a, b, tally)
            except Exception as error:
                tally.calls += 1
                tally.errors[type(error).__name__] += 1

    await asyncio.gather(*(caller(index, tally) for index, tally in enumerate(tallies)))
    total = Tally()
    for tally in tallies:
        total.add(tally)
    return total


async def async_soak(url: str) -> tuple[Usage, Usage, Tally]:
    async with ts.AsyncClient(url) as client:
        model = await client.model("add_sub")
        await async_phase(model, warmup=True)
        before = usage()
        tally = await async_phase(model, warmup=False)
        after = usage()
    return before, after, tally


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_no_growth_per_call(soak_server: LocalServer, protocol: str, mode: str) -> None:
    url = server_url(soak_server, protocol)
    began = time.monotonic()
    if mode == "sync":
        before, after, tally = sync_soak(url)
    else:
        before, after, tally = asyncio.run(async_soak(url))
    elapsed = time.monotonic() - began
    print(
        f"soak {protocol}-{mode}: {tally.calls} calls ({elapsed:.1f}s in all); "
        f"RSS {before.rss_kib} -> {after.rss_kib} KiB "
        f"({after.rss_kib - before.rss_kib:+d}), fds {before.fds} -> {after.fds}, "
        f"threads {before.threads} -> {after.threads} (OS {before.os_threads} -> "
        f"{after.os_threads})"
    )
    assert not tally.errors, f"calls raised: {dict(tally.errors)}"
    assert tally.wrong == 0, f"{tally.wrong} wrong answers"
    assert tally.calls >= MIN_CALLS, (
        f"only {tally.calls} calls: too few for the bounds to mean much"
    )
    assert after.rss_kib - before.rss_kib <= RSS_GROWTH_KIB, (before, after)
    assert after.fds - before.fds <= FD_GROWTH, (before, after)
    assert after.threads - before.threads <= THREAD_GROWTH, (before, after)
    assert after.os_threads - before.os_threads <= OS_THREAD_GROWTH, (before, after)
