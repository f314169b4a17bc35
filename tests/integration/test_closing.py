"""Closing a client while its calls and streams are in flight, against the real server:
each of them ends at once with the closed client's error, never a raw CancelledError and
never a wait for the rest of the stream."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer
from triton_sdk.ops import UnregisterSystemSharedMemory

from .._reader import StreamReader
from .conftest import LoopThread, close_client, open_client, server_url

LONG = 60
DELAY_MS = 100  # the stream would take 6 s


def is_closed_error(error: BaseException) -> bool:
    return type(error) is ts.TritonError and "closed" in str(error)


def test_closing_a_client_ends_the_stream_another_thread_reads(
    server: LocalServer, protocol: str
) -> None:
    client = ts.Client(server_url(server, protocol))
    reader = StreamReader(client.model("repeat").stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS))
    reader.wait_until_waiting()
    closed_at = time.monotonic()
    client.close()
    reader.join(5)
    assert time.monotonic() - closed_at < 2
    (error,) = reader.outcome
    assert isinstance(error, BaseException), error
    assert is_closed_error(error), error


@pytest.mark.parametrize("what", ["stream", "calls"])
def test_aclose_ends_what_is_in_flight_with_the_closed_error(
    server: LocalServer, protocol: str, what: str
) -> None:
    async def main() -> list[BaseException | object]:
        client = ts.AsyncClient(server_url(server, protocol), retry=ts.RetryPolicy.none())
        if what == "stream":
            repeat = await client.model("repeat")

            async def work() -> object:
                return [r async for r in repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS)]

            tasks = [asyncio.create_task(work())]
        else:
            sleep = await client.model("sleep")
            tasks = [asyncio.create_task(sleep.infer(SECONDS=[3.0])) for _ in range(4)]
        await asyncio.sleep(0.5)
        closed_at = time.monotonic()
        await client.aclose()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=5)
        assert time.monotonic() - closed_at < 2
        # Nobody cancelled the tasks themselves (Task.cancelling is Python 3.11+).
        assert all(getattr(task, "cancelling", lambda: 0)() == 0 for task in tasks)
        return outcomes

    outcomes = asyncio.run(main())
    assert all(isinstance(outcome, BaseException) for outcome in outcomes), outcomes
    assert all(is_closed_error(outcome) for outcome in outcomes), outcomes  # type: ignore[arg-type]
    # The model the call was about (it was None on the calls).
    model = "repeat" if what == "stream" else "sleep"
    assert all(outcome.model == model for outcome in outcomes), outcomes  # type: ignore[union-attr]
    if what == "calls":
        wait_for_the_sleeps(server)


def wait_for_the_sleeps(server: LocalServer) -> None:
    """Wait until the sleeps the closed client left on the server are over (later tests
    of the ``sleep`` model have short timeouts). The model serves one queue, in order, on
    two instances: two quick requests sent at once answer only once every sleep before
    them has started. Those sleeps are the same 3 s, started two at a time, so the last
    ones then end within moments."""
    with ts.Client(server.grpc_url) as client, ThreadPoolExecutor(2) as pool:
        sleep = client.model("sleep")
        quick = [pool.submit(sleep.infer, SECONDS=[0.0], timeout=60) for _ in range(2)]
        assert all(call.result()["SLEPT"].tolist() == [0.0] for call in quick)


def test_closing_a_client_does_not_wait_for_a_split_batch_in_flight(
    server: LocalServer, protocol: str
) -> None:
    # close() waited for the chunks' threads before closing the connections: it took as
    # long as the chunks ran, and over gRPC the call then succeeded after close().
    for _ in range(3):
        client = ts.Client(server_url(server, protocol), retry=ts.RetryPolicy.none())
        busy = client.model("busy")  # max_batch_size 1: two samples are two chunks
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(busy.infer, MILLIS=[[1500], [1500]], timeout=None)
            time.sleep(0.5)
            closed_at = time.monotonic()
            client.close()
            assert time.monotonic() - closed_at < 0.5
            # (over gRPC the call ends at once; over HTTP its chunk in flight finishes)
            error = call.exception(timeout=2 if protocol == "grpc" else 10)
        _wait_until_busy_is_idle(server)
        # busy queues one request: when both chunks reach it before it takes the first,
        # the second is refused at once (a race of the server's): try again.
        if not isinstance(error, ts.ServerOverloadedError):
            break
    if protocol == "grpc":  # the call ends with the closed error, as unsplit ones do
        assert error is not None
        assert is_closed_error(error), error
    else:  # HTTP calls in flight finish; a chunk not started is not sent
        assert error is None or is_closed_error(error), error


def _wait_until_busy_is_idle(server: LocalServer) -> None:
    with ts.Client(server.grpc_url, retry=ts.RetryPolicy.resilient()) as other:
        other.model("busy").infer(MILLIS=[[0]])


def test_cancelling_the_reader_still_cancels_it(server: LocalServer, protocol: str) -> None:
    # The closed error is for aclose(): a task cancelled by its caller stays cancelled.
    async def main() -> None:
        async with ts.AsyncClient(server_url(server, protocol)) as client:
            repeat = await client.model("repeat")

            async def work() -> None:
                async for _ in repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS):
                    pass

            task = asyncio.create_task(work())
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_closing_a_stream_another_thread_reads_ends_its_loop(
    server: LocalServer, protocol: str
) -> None:
    with ts.Client(server_url(server, protocol)) as client:
        stream = client.model("repeat").stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS)
        reader = StreamReader(stream)
        reader.wait_until_waiting()
        stream.close()  # while the reader waits for the next response
        reader.join(3)
        assert reader.outcome == ["ended"]
        assert len(reader.seen) < LONG // 2
        # The client goes on serving.
        assert [r["OUT"].tolist() for r in client.model("repeat").stream(IN=[5])] == [[5]]


def test_aclosing_a_stream_another_task_reads_ends_its_loop(
    server: LocalServer, protocol: str
) -> None:
    async def main() -> None:
        async with ts.AsyncClient(server_url(server, protocol)) as client:
            repeat = await client.model("repeat")
            stream = repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS)
            seen: list[int] = []
            first = asyncio.Event()

            async def read() -> str:
                async for result in stream:
                    seen.append(int(result["OUT"][0]))
                    first.set()
                return "ended"

            reader = asyncio.create_task(read())
            await asyncio.wait_for(first.wait(), 10)
            await asyncio.sleep(0.05)  # the reader is back waiting in the stream
            await stream.aclose()  # while the reader awaits the next response
            assert await asyncio.wait_for(reader, 3) == "ended"
            assert len(seen) < LONG // 2
            assert [r["OUT"].tolist() async for r in repeat.stream(IN=[5])] == [[5]]

    asyncio.run(main())


def test_stopping_a_generate_stream_answered_by_one_inference_ends_its_loop(
    server: LocalServer, protocol: str
) -> None:
    # On a model that is not decoupled, gRPC sends generate_stream as one inference, which
    # close() from another thread (or aclose() from another task) did not cancel: the
    # reader waited for the whole answer, and got it after the stream was closed.
    async def stop_async_reader() -> tuple[object, float]:
        async with ts.AsyncClient(server_url(server, protocol)) as aclient:
            stream = (await aclient.model("sleep")).generate_stream(SECONDS=3.0)
            reader = asyncio.create_task(anext(stream, "ended"))
            await asyncio.sleep(0.5)
            stopped_at = time.monotonic()
            await stream.aclose()
            outcome = await asyncio.wait_for(reader, 5)
            return outcome, time.monotonic() - stopped_at

    with ts.Client(server_url(server, protocol)) as client:
        stream = client.model("sleep").generate_stream(SECONDS=3.0)
        reader = StreamReader(stream)
        time.sleep(0.5)
        stopped_at = time.monotonic()
        stream.close()
        reader.join(5)
        assert time.monotonic() - stopped_at < 1
        assert reader.outcome == ["ended"]
        assert reader.seen == []
    outcome, took = asyncio.run(stop_async_reader())
    assert outcome == "ended"
    assert took < 1
    wait_for_the_sleeps(server)


def _connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on loopback."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                ours.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in ours:
                    count += 1
    return count


def test_aclose_after_a_grpc_stream_closes_its_connection_at_once(server: LocalServer) -> None:
    # (The stream's grace timer held the call, and so the connection, for 5 s more.)
    before = _connections_to(server.grpc_port)

    async def stream_then_close() -> int:
        client = ts.AsyncClient(server.grpc_url)
        model = await client.model("repeat")
        assert [result["OUT"].tolist() async for result in model.stream(IN=[1, 2])] == [[1], [2]]
        await client.aclose()
        for _ in range(40):  # 2 s at most; the loop goes on, as a service's does
            if _connections_to(server.grpc_port) <= before:
                break
            await asyncio.sleep(0.05)
        return _connections_to(server.grpc_port)

    assert asyncio.run(stream_then_close()) == before


def own_region(op: object) -> bool:
    """An unregistration of a region of this process (not one a dead process left, which
    a client's first shared-memory call sweeps)."""
    return isinstance(op, UnregisterSystemSharedMemory) and f"-{os.getpid()}-" in op.name


class SlowUnregister(ts.CallHook):
    """Holds each unregistration of this process's regions 0.3 s, and counts them."""

    def __init__(self) -> None:
        self.begun = threading.Event()
        self.done = 0

    def before_send(self, op: object, ctx: ts.CallContext) -> None:
        if own_region(op):
            self.begun.set()
            time.sleep(0.3)

    def after_receive(self, op: object, ctx: ts.CallContext, result: object) -> None:
        if own_region(op):
            self.done += 1


def test_a_second_close_returns_once_the_first_is_done(server: LocalServer, protocol: str) -> None:
    # It returned at once, while the first was still unregistering the client's regions:
    # a program that then exited left them registered.
    hook = SlowUnregister()
    client = ts.Client(server_url(server, protocol), shared_memory="system", hooks=[hook])
    batch = np.ones((1, 262144), dtype=np.float32)
    client.model("big_fixed").infer(X=batch)
    first = threading.Thread(target=client.close)
    first.start()
    assert hook.begun.wait(10)
    client.close()
    assert hook.done == 2  # the input's region and the output's
    first.join(10)


def test_a_close_from_within_the_close_returns_at_once(server: LocalServer, protocol: str) -> None:
    # A hook of the close's own calls: waiting for the close to end would wait on itself.
    took: list[float] = []

    class ClosesAgain(ts.CallHook):
        def before_send(self, op: object, ctx: ts.CallContext) -> None:
            if own_region(op) and not took:
                started = time.monotonic()
                client.close()
                took.append(time.monotonic() - started)

    client = ts.Client(server_url(server, protocol), shared_memory="system", hooks=[ClosesAgain()])
    client.model("big_fixed").infer(X=np.ones((1, 262144), dtype=np.float32))
    client.close()
    assert took
    assert took[0] < 1


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_closing_a_client_wakes_a_call_waiting_to_retry(
    protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    # The call slept out its whole backoff before it noticed the client was closed.
    policy = ts.RetryPolicy(max_attempts=3, initial_backoff=30.0, max_backoff=30.0, jitter=False)
    client = open_client(f"{protocol}://127.0.0.1:9", mode, loop_thread, retry=policy)
    closer = threading.Timer(0.3, close_client, (client, loop_thread))
    started = time.monotonic()
    closer.start()
    with pytest.raises(ts.TritonError) as caught:
        client.server_metadata()
    closer.join(5)
    assert time.monotonic() - started < 5
    error = caught.value
    assert "closed while the call waited to retry" in str(error), error
    assert isinstance(error.__cause__, ts.TritonConnectionError), error  # the last failure
    assert str(error.__cause__) in str(error)
    assert not error.retryable
    assert not error.may_have_run


class HeldOnce(ts.CallHook):
    """The first unregistration of each of this process's regions answers as Triton
    2.50-2.51 do for some milliseconds after a call's answer: the region is in use."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.done: list[str] = []

    def before_send(self, op: object, ctx: ts.CallContext) -> None:
        if own_region(op) and op.name not in self.refused:  # type: ignore[attr-defined]
            self.refused.add(op.name)  # type: ignore[attr-defined]
            raise ts.InferenceError(
                f"Cannot unregister shared memory region '{op.name}', it is currently in use"  # type: ignore[attr-defined]
            )

    def after_receive(self, op: object, ctx: ts.CallContext, result: object) -> None:
        if own_region(op):
            self.done.append(op.name)  # type: ignore[attr-defined]


def test_close_asks_again_for_regions_the_server_still_holds_for_a_finished_call(
    server: LocalServer, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    # One refusal and close gave up: the regions stayed registered for the life of the
    # process (the sweep frees those of dead processes only).
    hook = HeldOnce()
    client = ts.Client(server_url(server, protocol), shared_memory="system", hooks=[hook])
    client.model("big_fixed").infer(X=np.ones((1, 262144), dtype=np.float32))
    with caplog.at_level(logging.WARNING, logger="triton_sdk"):
        client.close()
    assert len(hook.refused) == 2  # the input's region and the output's
    assert sorted(hook.done) == sorted(hook.refused)
    assert "could not unregister" not in caplog.text
