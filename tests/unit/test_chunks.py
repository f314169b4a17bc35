"""The blocking client's runner of split-batch chunks, closed while a call runs."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import triton_sdk as ts
from triton_sdk._concurrency import MAX_CHUNKS_IN_FLIGHT, ChunkRunner


def test_a_call_cut_short_by_close_after_chunks_went_out_may_have_run() -> None:
    # The chunks waiting for a thread failed with "this Client is closed" and
    # may_have_run=False, which became the call's error although its first chunks ran.
    runner = ChunkRunner("Client")
    began = threading.Semaphore(0)
    release = threading.Event()

    def send(chunk: int) -> int:
        began.release()
        release.wait(5)
        return chunk

    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(runner.run, send, range(3 * MAX_CHUNKS_IN_FLIGHT))
        for _ in range(MAX_CHUNKS_IN_FLIGHT):
            assert began.acquire(timeout=5)
        runner.close()
        release.set()
        error = call.exception(timeout=5)
    assert isinstance(error, ts.TritonError)
    assert str(error) == "the client's connection is closed (closed while the call was in flight)"
    assert error.may_have_run


def test_a_call_after_close_sent_nothing() -> None:
    runner = ChunkRunner("Client")
    runner.close()
    with pytest.raises(ts.TritonError, match="this Client is closed") as caught:
        runner.run(lambda chunk: chunk, range(3))
    assert not caught.value.may_have_run


def test_a_chunk_refused_on_the_client_keeps_its_own_error() -> None:
    # It was taken for a close: "closed while the call was in flight", may_have_run=True.
    runner = ChunkRunner("Client")

    def send(chunk: int) -> int:
        if chunk == 5:
            raise ts.InvalidInputError("NaN cannot travel as JSON")
        return chunk

    with pytest.raises(ts.InvalidInputError, match="NaN") as caught:
        runner.run(send, range(10))
    assert not caught.value.may_have_run
    runner.close()


@pytest.mark.parametrize("url", ["grpc://127.0.0.1:9", "http://127.0.0.1:9"])
def test_a_call_that_finds_the_connections_closed_before_sending_says_so_alike(url: str) -> None:
    # close() between a call's check of the client and its send: the message was grpc's
    # ("Cannot invoke RPC on closed channel!") or the pool's own words, by transport.
    client = ts.Client(url)
    client._transport.close()  # type: ignore[attr-defined]  # (as close() does, first)
    with pytest.raises(ts.TritonError) as caught:
        client.server_metadata()
    assert str(caught.value) == (
        "the client's connection is closed (closed before the call went out)"
    )
    assert not caught.value.may_have_run
    client.close()
