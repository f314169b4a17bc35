"""Streams over decoupled models against the real server: order, concurrency, leaving early,
timeouts, errors; and how HTTP carries them (the generate_stream extension)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from ._relay import Relay
from .conftest import FIXTURE_MODELS, MODES, PROTOCOLS, close_client, inference_count, open_client

# `repeat` waits DELAY_MS after each response; a stream of LONG of them takes this long.
LONG = 50
LONG_DELAY_MS = 50
LONG_STREAM_SECONDS = LONG * LONG_DELAY_MS / 1000


def values(results: list[ts.InferResult]) -> list[tuple[int, int]]:
    return [(int(res["OUT"][0]), int(res["IDX"][0])) for res in results]


def test_one_result_per_response_in_order(client: Any) -> None:
    results = list(client.model("repeat").stream(IN=[4, 2, 0]))
    assert len(results) == 3
    assert all(isinstance(res, ts.InferResult) for res in results)
    assert values(results) == [(4, 0), (2, 1), (0, 2)]
    for res in results:
        assert res.model_name == "repeat"
        assert res["OUT"].shape == (1,)
        assert res["OUT"].dtype == np.int32
        assert res["IDX"].dtype == np.uint32
        assert set(res) == {"OUT", "IDX"}
        # The flag gRPC's stream ends a request with is the client's, not the model's.
        assert res.parameters == {}


def test_stream_ends_after_the_final_response(client: Any) -> None:
    stream = client.model("repeat").stream(IN=[7])
    first = next(stream)
    assert values([first]) == [(7, 0)]
    with pytest.raises(StopIteration):
        next(stream)


def test_zero_responses_is_an_empty_iteration(client: Any) -> None:
    assert list(client.model("repeat").stream(IN=np.array([], dtype=np.int32))) == []


def test_stream_of_generated_text(client: Any) -> None:
    results = list(client.model("generator").stream(text_input="to be or", max_tokens=5))
    assert [res.as_strings("text_output").tolist() for res in results] == [
        ["to "],
        ["be "],
        ["or "],
        ["to "],
        ["be "],
    ]
    assert [int(res["index"][0]) for res in results] == [0, 1, 2, 3, 4]


def test_a_parameter_named_like_an_input_is_refused_on_both_protocols(
    client: Any, server: LocalServer
) -> None:
    # HTTP's generate extension took it as the input (2 tokens), gRPC as a parameter (4).
    model = client.model("generator")
    before = inference_count(server, "generator")
    with pytest.raises(ts.InvalidInputError, match="'max_tokens' is named like an input"):
        model.stream(text_input="a b c", parameters={"max_tokens": 2})
    with pytest.raises(ts.InvalidInputError, match="'max_tokens' is named like an input"):
        model.generate(text_input="a b c", parameters={"max_tokens": 2})
    assert inference_count(server, "generator") == before


def test_outputs_selects(client: Any) -> None:
    results = list(client.model("repeat").stream(IN=[5, 6], outputs=["OUT"]))
    assert [res["OUT"].tolist() for res in results] == [[5], [6]]
    assert all("IDX" not in res for res in results)


def test_two_streams_at_once_on_one_client(client: Any) -> None:
    model = client.model("repeat")
    first = model.stream(IN=[1, 2, 3, 4], DELAY_MS=20)
    second = model.stream(IN=[10, 20, 30, 40], DELAY_MS=20)
    got: dict[str, list[tuple[int, int]]] = {"first": [], "second": []}
    # Read alternately: both requests are in flight at the same time.
    for _ in range(4):
        got["first"] += values([next(first)])
        got["second"] += values([next(second)])
    assert list(first) == []
    assert list(second) == []
    assert got["first"] == [(1, 0), (2, 1), (3, 2), (4, 3)]
    assert got["second"] == [(10, 0), (20, 1), (30, 2), (40, 3)]


def test_a_second_reader_is_refused_and_leaves_the_stream_to_the_first(url: str) -> None:
    # Its ValueError ("generator already executing") was kept as the stream's failure: the
    # first reader's next read raised "this stream ended with ValueError".
    with ts.Client(url) as client:
        stream = client.model("repeat").stream(IN=[1, 2, 3, 4], DELAY_MS=300)
        assert values([next(stream)]) == [(1, 0)]
        refused: list[BaseException] = []
        reader = threading.Thread(target=lambda: refused.append(read_on(stream)))
        reader.start()
        time.sleep(0.1)  # (the reader waits in the stream for the next response)
        with pytest.raises(ts.TritonError, match="being read by another thread"):
            next(stream)
        reader.join(10)
        assert refused == [[(2, 1), (3, 2), (4, 3)]]


def read_on(stream: Any) -> Any:
    return values(list(stream))


async def test_a_second_reading_task_is_refused_and_leaves_the_stream_to_the_first(
    url: str,
) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("repeat")
        stream = model.stream(IN=[1, 2, 3, 4], DELAY_MS=300)
        assert values([await anext(stream)]) == [(1, 0)]
        reader = asyncio.ensure_future(collect(stream))
        await asyncio.sleep(0.1)
        with pytest.raises(ts.TritonError, match="being read by another task"):
            await anext(stream)
        assert values(await reader) == [(2, 1), (3, 2), (4, 3)]


async def collect(stream: Any) -> list[Any]:
    return [result async for result in stream]


def test_leaving_early_cancels_and_frees_the_client(client: Any) -> None:
    model = client.model("repeat")
    started = time.monotonic()
    seen = []
    for res in model.stream(IN=list(range(LONG)), DELAY_MS=LONG_DELAY_MS):
        seen.append(int(res["OUT"][0]))
        if len(seen) == 2:
            break
    left = time.monotonic() - started
    assert seen == [0, 1]
    # The whole stream takes 2.5 s; leaving it does not wait for the rest.
    assert left < LONG_STREAM_SECONDS * 0.7
    # The client is usable at once for another stream, which gets all of its values.
    assert values(list(model.stream(IN=[7, 8, 9]))) == [(7, 0), (8, 1), (9, 2)]
    assert time.monotonic() - started < LONG_STREAM_SECONDS * 0.8


def test_with_block_and_close(client: Any, mode: str, loop_thread: LoopThread) -> None:
    model = client.model("repeat")
    if mode == "sync":
        with model.stream(IN=list(range(LONG)), DELAY_MS=LONG_DELAY_MS) as stream:
            assert isinstance(stream, ts.ResponseStream)
            assert int(next(stream)["OUT"][0]) == 0
        # Left: the stream is over.
        with pytest.raises(StopIteration):
            next(stream)
        stream = model.stream(IN=list(range(LONG)), DELAY_MS=LONG_DELAY_MS)
        assert int(next(stream)["OUT"][0]) == 0
        stream.close()
        stream.close()  # closing twice is harmless
        assert list(stream) == []
    else:

        async def run() -> None:
            target = model.target
            async with target.stream(IN=list(range(LONG)), DELAY_MS=LONG_DELAY_MS) as stream:
                assert isinstance(stream, ts.AsyncResponseStream)
                assert int((await anext(stream))["OUT"][0]) == 0
            with pytest.raises(StopAsyncIteration):
                await anext(stream)
            stream = target.stream(IN=list(range(LONG)), DELAY_MS=LONG_DELAY_MS)
            assert int((await anext(stream))["OUT"][0]) == 0
            await stream.aclose()
            await stream.aclose()
            assert [res async for res in stream] == []

        started = time.monotonic()
        loop_thread.run(run())
        assert time.monotonic() - started < LONG_STREAM_SECONDS * 0.8
    assert values(list(model.stream(IN=[3]))) == [(3, 0)]


def test_per_response_timeout(client: Any) -> None:
    model = client.model("repeat")
    stream = model.stream(IN=[1, 2], DELAY_MS=3000, timeout=0.3)
    assert values([next(stream)]) == [(1, 0)]
    started = time.monotonic()
    with pytest.raises(ts.TritonTimeoutError) as timed_out:
        next(stream)
    assert time.monotonic() - started < 2.0
    # The same words on both protocols (gRPC's lacked that the request may still run);
    # in the brackets, the transport's own (aiohttp: "Timeout on reading data ...").
    said = str(timed_out.value)
    assert said.startswith("no answer from model 'repeat' within 0.3 s ("), said
    assert said.endswith("); the server may still run the request"), said
    if isinstance(client, ts.Client):  # (the asyncio one: test_async_timeout_and_cancelled_task)
        # Reading on is an error, not an end as after the last response (StopIteration).
        with pytest.raises(ts.TritonError, match="stream ended with TritonTimeoutError") as read:
            next(stream)
        assert read.value.__cause__ is timed_out.value
    # The client still works.
    assert values(list(model.stream(IN=[4]))) == [(4, 0)]


def test_a_model_error_arrives_as_inference_error(client: Any) -> None:
    # `zeros` fails on a negative count (numpy refuses the shape) inside the model.
    with pytest.raises(ts.InferenceError, match="negative dimensions") as caught:
        list(client.model("zeros").stream(COUNT=[-1], request_id="r7"))
    assert type(caught.value).__module__.startswith("triton_sdk")
    assert caught.value.model == "zeros"
    assert caught.value.request_id == "r7"


def test_responses_sent_just_before_an_error_all_arrive(client: Any) -> None:
    # `repeat` sends 1 and 2 at once, then fails on -1: over HTTP all three events often
    # come in one read, and the two responses must not be lost with the error.
    model = client.model("repeat")
    for _ in range(10):
        stream = model.stream(IN=[1, 2, -1, 3])
        assert values([next(stream), next(stream)]) == [(1, 0), (2, 1)]
        with pytest.raises(ts.InferenceError, match="no negative numbers") as caught:
            next(stream)
        assert not caught.value.retryable
        assert caught.value.may_have_run  # (it came after responses: the model ran)


def test_an_error_sent_first_and_not_last_reads_as_its_message(client: Any) -> None:
    # `repeat` sends an error response without the final flag for -100, then goes on:
    # Triton's HTTP endpoint answers 400 with that error event and the later responses.
    with pytest.raises(ts.InferenceError) as caught:
        list(client.model("repeat").stream(IN=[-100, 2]))
    assert str(caught.value) == "far too negative: -100"


def test_half_floats_are_streamed_over_grpc_and_refused_before_sending_over_http(
    client: Any, protocol: str, server: LocalServer
) -> None:
    # Triton reads no FP16 or BF16 from JSON, which the HTTP stream sends: it answered 400.
    model = client.model("all_dtypes")
    halves = np.array([[0.5, -2.0]], np.float16)
    before = inference_count(server, "all_dtypes")
    if protocol == "grpc":
        (result,) = list(model.stream(IN_FP16=halves, outputs=["OUT_FP16"]))
        assert result["OUT_FP16"].tolist() == halves.tolist()
        return
    # Refused when the call is made (it was at the first read), as the docs say.
    with pytest.raises(ts.InvalidInputError, match=r"'IN_FP16' is FP16.*use a gRPC client"):
        model.stream(IN_FP16=halves)
    with pytest.raises(ts.InvalidInputError, match=r"input 'IN_BYTES': .* not UTF-8") as caught:
        model.stream(IN_BYTES=[[b"\xff"]])
    assert caught.value.model == "all_dtypes"  # (it was None)
    with pytest.raises(ts.InvalidInputError, match=r"input 'IN_BYTES': .* not UTF-8"):
        model.generate_stream(IN_BYTES=[b"\xff"])
    assert inference_count(server, "all_dtypes") == before


def test_infer_on_a_decoupled_model_is_refused(client: Any, server: LocalServer) -> None:
    model = client.model("repeat")
    assert model.spec.decoupled
    before = inference_count(server, "repeat")
    with pytest.raises(ts.InvalidInputError, match=r"decoupled.*stream"):
        model.infer(IN=[1, 2])
    with pytest.raises(ts.InvalidInputError, match=r"stream"):
        model.infer_sample(IN=[1, 2])
    assert inference_count(server, "repeat") == before


def test_stream_on_a_model_that_answers_once(
    client: Any, protocol: str, server: LocalServer
) -> None:
    model = client.model("scale")
    image = np.arange(4, dtype=np.uint8).reshape(1, 2, 2)
    if protocol == "grpc":
        # gRPC streams anything, also a batch of 2-D samples.
        (res,) = list(model.stream(IMAGE=np.concatenate([image, image]), SCALE=[2.0, 3.0]))
        assert res["OUT"].shape == (2, 2, 2)
        assert np.array_equal(res["OUT"], np.stack([image[0] * 2.0, image[0] * 3.0]))
        return
    # HTTP streams through generate_stream, which carries one sample of scalars or 1-D values.
    before = inference_count(server, "scale")
    with pytest.raises(ts.TritonError, match="gRPC"):
        list(model.stream(IMAGE=image, SCALE=[2.0]))
    with pytest.raises(ts.TritonError, match="gRPC"):
        list(model.stream(IMAGE=np.concatenate([image, image]), SCALE=[2.0, 3.0]))
    assert inference_count(server, "scale") == before


def test_a_batched_stream_over_http_is_refused(client: Any, protocol: str) -> None:
    model = client.model("all_dtypes")
    if protocol == "grpc":
        (res,) = list(model.stream(IN_INT32=[[1, 2], [3, 4]], outputs=["OUT_INT32"]))
        assert res["OUT_INT32"].tolist() == [[1, 2], [3, 4]]
        return
    with pytest.raises(ts.TritonError, match="gRPC"):
        model.stream(IN_INT32=[[1, 2], [3, 4]])  # (refused at the call, not at the first read)
    # One sample of a 1-D input is what the extension carries.
    (res,) = list(model.stream(IN_INT32=[[1, 2]], outputs=["OUT_INT32"]))
    assert res["OUT_INT32"].tolist() == [[1, 2]]


# Native asyncio


async def test_async_streams_run_concurrently(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("repeat")
        arrivals: list[str] = []

        async def collect(name: str, items: list[int]) -> list[tuple[int, int]]:
            got = []
            async for res in model.stream(IN=items, DELAY_MS=100):
                arrivals.append(name)
                got.append((int(res["OUT"][0]), int(res["IDX"][0])))
            return got

        first, second = await asyncio.gather(
            collect("first", [1, 2, 3, 4]), collect("second", [10, 20, 30, 40])
        )
        assert first == [(1, 0), (2, 1), (3, 2), (4, 3)]
        assert second == [(10, 0), (20, 1), (30, 2), (40, 3)]
        # The responses of both streams arrived interleaved, not one stream after the other.
        assert arrivals.index("second") < len(arrivals) - 1 - arrivals[::-1].index("first")
        assert arrivals.index("first") < len(arrivals) - 1 - arrivals[::-1].index("second")


async def test_async_leaving_early_with_async_with(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("repeat")
        started = time.monotonic()
        seen = []
        async with model.stream(IN=list(range(LONG)), DELAY_MS=LONG_DELAY_MS) as stream:
            async for res in stream:
                seen.append(int(res["OUT"][0]))
                if len(seen) == 2:
                    break
        assert seen == [0, 1]
        assert time.monotonic() - started < LONG_STREAM_SECONDS * 0.7
        again = [int(res["OUT"][0]) async for res in model.stream(IN=[5, 6])]
        assert again == [5, 6]


CUT_STREAMS_THEN_NEW_LOOPS = """
import asyncio, sys
import triton_sdk as ts

MANY = '{"max_tokens": 400}'

async def main() -> None:
    async with ts.AsyncClient(sys.argv[1]) as client:
        model = await client.model("llm_vllm")  # (no response before the whole text)
        words = {"text_input": "forever", "stream": False, "sampling_parameters": MANY}
        try:
            async for _ in model.generate_stream(words, timeout=0.2):
                pass
        except ts.TritonTimeoutError:
            print("timed out")
        task = asyncio.ensure_future(model.generate(words))
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

for _ in range(6):
    asyncio.run(main())
"""


def test_calls_cut_off_leave_nothing_for_the_next_event_loop(server: LocalServer) -> None:
    # A gRPC call cut off (a timed-out stream, a cancelled task) ends on grpc's poller
    # thread a moment later: with its client closed and its loop gone by then, the next
    # asyncio.run of the process logged "RuntimeError: Event loop is closed".
    ran = subprocess.run(
        [sys.executable, "-c", CUT_STREAMS_THEN_NEW_LOOPS, server.grpc_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.stdout.split("\n")[:-1] == ["timed out"] * 6, ran.stderr
    assert ran.stderr == ""


async def test_async_timeout_and_cancelled_task(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("repeat")
        stream = model.stream(IN=[1, 2], DELAY_MS=3000, timeout=0.3)
        assert int((await anext(stream))["OUT"][0]) == 1
        started = time.monotonic()
        with pytest.raises(ts.TritonTimeoutError):
            await anext(stream)
        assert time.monotonic() - started < 2.0
        with pytest.raises(ts.TritonError, match="this stream ended with TritonTimeoutError"):
            await anext(stream)

        # A read cancelled from outside (asyncio.wait_for) ends the stream as well.
        cut = model.stream(IN=[1, 2], DELAY_MS=3000)
        assert int((await anext(cut))["OUT"][0]) == 1
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(cut), 0.3)
        with pytest.raises(ts.TritonError, match="this stream ended with CancelledError"):
            await anext(cut)

        # A task reading a stream can be cancelled; the client stays usable.
        async def read_all() -> list[int]:
            return [int(res["OUT"][0]) async for res in model.stream(IN=[1] * LONG, DELAY_MS=100)]

        task = asyncio.create_task(read_all())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [int(res["OUT"][0]) async for res in model.stream(IN=[8])] == [8]


# A server that dies mid-stream: errors are SDK errors, never raw grpc/aiohttp/http.client ones


@pytest.fixture
def repeat_repository(tmp_path: Path) -> Path:
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "repeat").symlink_to(FIXTURE_MODELS / "repeat", target_is_directory=True)
    return repository


def test_server_dying_mid_stream_raises_triton_errors(
    repeat_repository: Path, loop_thread: LoopThread
) -> None:
    with LocalServer(repeat_repository) as server:
        clients = []
        streams = []
        try:
            for protocol in PROTOCOLS:
                url = server.grpc_url if protocol == "grpc" else server.http_url
                for mode in MODES:
                    client = open_client(url, mode, loop_thread)
                    clients.append(client)
                    stream = client.model("repeat").stream(IN=list(range(100)), DELAY_MS=100)
                    assert int(next(stream)["OUT"][0]) == 0
                    streams.append((f"{protocol}/{mode}", stream))
            server.kill()
            outcomes = {}
            for name, stream in streams:
                try:
                    rest = list(stream)
                except ts.TritonError as error:
                    outcomes[name] = type(error).__name__
                except Exception as error:
                    outcomes[name] = f"raw {type(error).__module__}.{type(error).__name__}"
                else:
                    outcomes[name] = f"ended without an error after {len(rest)} more responses"
            # A stream cut short is an error, never a silent (truncated) end.
            assert outcomes == {name: "TritonConnectionError" for name, _ in streams}
        finally:
            for client in clients:
                close_client(client, loop_thread)


def test_a_stream_broken_after_its_first_response_may_have_run(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    # The model ran (a response came): an HTTP stream broken then said may_have_run=False.
    port = server.grpc_port if protocol == "grpc" else server.http_port
    with Relay("127.0.0.1", port) as relay:
        client = open_client(f"{protocol}://{relay.address}", mode, loop_thread)
        try:
            stream = iter(client.model("repeat").stream(IN=list(range(8)), DELAY_MS=[200]))
            assert values([next(stream)]) == [(0, 0)]
            relay.mode = "reset"
            with pytest.raises(ts.TritonConnectionError) as caught:
                list(stream)
            assert caught.value.may_have_run
        finally:
            close_client(client, loop_thread)


def test_the_one_response_of_a_model_that_is_not_decoupled_comes_without_outputs(
    client: Any,
) -> None:
    # outputs= named one the model did not give: gRPC took its only response for the
    # flag that ends a request, and the stream was empty (HTTP gave the response).
    results = list(client.model("all_dtypes").stream(IN_INT32=[[1]], outputs=["OUT_INT8"]))
    assert len(results) == 1
    assert dict(results[0]) == {}
