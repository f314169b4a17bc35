"""Concurrency: one client shared by threads, a sync client inside an event loop, many
concurrent async calls, and oversized batches split into chunks, on the real server.

Every answer is checked against its own input, so a response delivered to the wrong
caller (cross-talk) fails the test.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import PROTOCOLS, server_url

THREADS = 8
CALLS_PER_THREAD = 25
DIMS = 768


def embed(text: str) -> np.ndarray[Any, Any]:
    """The text_embed example model's function (triton_sdk/examples/models/text_embed),
    repeated here as an independent oracle: hashed character trigrams, L2-normalised."""
    padded = f"  {text.lower()} "
    vector = np.zeros(DIMS, dtype=np.float32)
    for start in range(len(padded) - 2):
        digest = hashlib.blake2b(padded[start : start + 3].encode("utf-8"), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % DIMS
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def add_sub_inputs(key: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    left = np.arange(4, dtype=np.float32) + np.float32(key * 10)
    right = np.full(4, key % 7 + 0.5, dtype=np.float32)
    return left, right


def add_sub_mapping(key: int) -> dict[str, np.ndarray[Any, Any]]:
    left, right = add_sub_inputs(key)
    return {"INPUT0": left, "INPUT1": right}


def check_add_sub(result: Any, key: int) -> None:
    left, right = add_sub_inputs(key)
    np.testing.assert_array_equal(result["OUTPUT0"], left + right)
    np.testing.assert_array_equal(result["OUTPUT1"], left - right)


def texts_for(thread: int, call: int) -> list[str]:
    """1-3 texts, distinct for every (thread, call), so that batches differ in size too."""
    return [f"thread {thread} call {call} item {item}" for item in range(call % 3 + 1)]


def check_embeddings(output: np.ndarray[Any, Any], texts: list[str]) -> None:
    assert output.shape == (len(texts), DIMS)
    expected = np.stack([embed(text) for text in texts])
    np.testing.assert_allclose(output, expected, rtol=0, atol=1e-6)


# One sync Client, many threads


def test_sync_client_shared_by_threads(url: str) -> None:
    with ts.Client(url) as client:
        add_sub = client.model("add_sub")
        text_embed = client.model("text_embed")

        def work(thread: int) -> int:
            done = 0
            for call in range(CALLS_PER_THREAD):
                key = thread * 1000 + call
                left, right = add_sub_inputs(key)
                check_add_sub(add_sub.infer(INPUT0=left, INPUT1=right), key)
                texts = texts_for(thread, call)
                check_embeddings(text_embed.infer(TEXT=texts)["OUTPUT"], texts)
                done += 1
            return done

        with ThreadPoolExecutor(THREADS) as pool:
            futures = [pool.submit(work, thread) for thread in range(THREADS)]
            assert [future.result(timeout=120) for future in futures] == [
                CALLS_PER_THREAD
            ] * THREADS


# The sync Client called from inside a running event loop (as in Jupyter)


async def test_sync_client_inside_running_event_loop(url: str) -> None:
    asyncio.get_running_loop()  # this test body runs on a loop
    with ts.Client(url) as client:
        assert client.is_ready()
        model = client.model("add_sub")
        left, right = add_sub_inputs(3)
        check_add_sub(model.infer(INPUT0=left, INPUT1=right), 3)
        # A split batch uses the client's own threads; that must work under a loop too.
        texts = [f"inside a loop {index}" for index in range(11)]
        check_embeddings(client.model("text_embed").infer(TEXT=texts)["OUTPUT"], texts)


# An AsyncClient with many calls in flight


async def test_async_client_concurrent_infers(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        add_sub = await client.model("add_sub")
        text_embed = await client.model("text_embed")
        keys = range(32)
        # Inputs as one mapping this time (the other tests pass them by keyword).
        sums = [add_sub.infer(add_sub_mapping(key)) for key in keys]
        embeddings = [text_embed.infer(TEXT=texts_for(key, key)) for key in keys]
        results = await asyncio.gather(*sums, *embeddings)
    for key, result in zip(keys, results[:32], strict=True):
        check_add_sub(result, key)
    for key, result in zip(keys, results[32:], strict=True):
        check_embeddings(result["OUTPUT"], texts_for(key, key))


# A batch over max_batch_size: split into chunks, joined in input order


def test_oversized_batch_keeps_input_order(client: Any) -> None:
    model = client.model("text_embed")
    assert model.spec.max_batch_size == 8
    texts = [f"sample number {index}: {'x' * index}" for index in range(21)]  # 8 + 8 + 5
    output = model.infer(TEXT=texts)["OUTPUT"]
    # The server refuses batches over 8: 21 rows can only come from joined chunks.
    assert output.shape == (21, DIMS)
    for index, text in enumerate(texts):
        np.testing.assert_allclose(
            output[index], model.infer_sample(TEXT=text)["OUTPUT"], rtol=0, atol=1e-6
        )
    check_embeddings(output, texts)
    # Every row differs, so a misplaced chunk could not have gone unnoticed.
    assert len({row.tobytes() for row in output}) == len(texts)


async def test_oversized_batches_concurrently_async(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("text_embed")
        batches = [[f"batch {batch} text {index}" for index in range(19)] for batch in range(4)]
        results = await asyncio.gather(*(model.infer(TEXT=texts) for texts in batches))
    for texts, result in zip(batches, results, strict=True):
        check_embeddings(result["OUTPUT"], texts)


def test_http_client_with_descriptors_above_1023(server: LocalServer) -> None:
    # select() cannot watch descriptors past 1023; a busy process easily has that many.
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with ts.Client(server.http_url, retry=ts.RetryPolicy.none()) as client:
            model = client.model("add_sub")
            for value in range(5):
                result = model.infer(INPUT0=[value] * 4, INPUT1=[1, 1, 1, 1])
                assert result["OUTPUT0"].tolist() == [value + 1] * 4
            assert client.is_ready()
    finally:
        for descriptor in opened:
            os.close(descriptor)


# (aiohttp cannot close its connections once their loop has closed: it warns.)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_waiting_in_another_event_loop_raises_at_once(server: LocalServer, protocol: str) -> None:
    # (It took the loop's refusal for "not ready": it waited out its timeout, or forever.)
    client = ts.AsyncClient(server_url(server, protocol))
    asyncio.run(client.server_metadata())  # first used in this loop, which ends
    started = time.monotonic()
    with pytest.raises(ts.TritonError, match=r"^this AsyncClient was first used in another"):
        asyncio.run(client.wait_until_ready(timeout=10))
    assert time.monotonic() - started < 5
    asyncio.run(client.aclose())
    del client
    gc.collect()  # (aiohttp's warnings, now, under this test's filter)
