"""Bulk inference with model.map against the real server: order, batching, laziness,
errors, progress, and models without a batch axis."""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import Blocking, LoopThread
from .conftest import close_client, inference_count, open_client


def image(index: int) -> np.ndarray:
    return ((np.arange(4) + index) % 256).astype(np.uint8).reshape(2, 2)


def scale_sample(index: int) -> dict[str, Any]:
    return {"IMAGE": image(index), "SCALE": float(index % 7)}


def expected_out(index: int) -> np.ndarray:
    return image(index).astype(np.float32) * np.float32(index % 7)


def check_scaled(result: Any, index: int) -> None:
    assert isinstance(result, ts.InferResult), (index, result)
    out = result["OUT"]
    assert out.shape == (2, 2), index
    assert np.array_equal(out, expected_out(index)), index


def requests_since(server: LocalServer, model: str, before: int, expected: int) -> int:
    """Requests the server counted since ``before``; waits (bounded) for ``expected`` of them:
    the server bumps its counters just after answering."""
    deadline = time.monotonic() + 10
    while inference_count(server, model) - before < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return inference_count(server, model) - before


class Counted:
    """An endless iterable of `scale` samples that counts how many were pulled."""

    def __init__(self) -> None:
        self.pulled = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in itertools.count():
            self.pulled += 1
            yield scale_sample(index)


def take(model: Any, loop: LoopThread, samples: Any, count: int, **options: Any) -> list[Any]:
    """The first ``count`` results of ``model.map``, then the map is closed (both clients)."""
    if isinstance(model, Blocking):

        async def run() -> list[Any]:
            results = model.target.map(samples, **options)
            taken = []
            try:
                async for result in results:
                    taken.append(result)
                    if len(taken) == count:
                        break
            finally:
                await results.aclose()
            return taken

        return list(loop.run(run()))
    results = model.map(samples, **options)
    try:
        return list(itertools.islice(results, count))
    finally:
        results.close()


# Order, shapes, batching


def test_thousand_samples_in_order_without_batch_axis(client: Any, server: LocalServer) -> None:
    model = client.model("scale")
    assert model.spec.max_batch_size == 4
    # The server fills in a preferred batch size of max_batch_size for the dynamic batcher.
    assert model.spec.preferred_batch_sizes in ((), (4,))
    samples = [scale_sample(index) for index in range(1000)]
    before = inference_count(server, "scale")
    results = list(model.map(samples, concurrency=4))
    assert len(results) == 1000
    for index, result in enumerate(results):
        check_scaled(result, index)
    # The default batch size is the preferred (or maximum) batch size, 4: 250 requests.
    expected = math.ceil(1000 / model.spec.max_batch_size)
    assert requests_since(server, "scale", before, expected) == expected


def test_explicit_batch_size(client: Any, server: LocalServer) -> None:
    model = client.model("scale")
    samples = [scale_sample(index) for index in range(20)]
    before = inference_count(server, "scale")
    results = list(model.map(samples, batch_size=3, concurrency=2))
    for index, result in enumerate(results):
        check_scaled(result, index)
    assert len(results) == 20
    assert requests_since(server, "scale", before, 7) == 7


def test_samples_as_lists_and_python_values(client: Any) -> None:
    model = client.model("scale")
    samples = [{"IMAGE": [[1, 2], [3, 4]], "SCALE": 2}, {"IMAGE": [[5, 6], [7, 8]], "SCALE": 0.5}]
    results = list(model.map(iter(samples)))
    assert [result["OUT"].tolist() for result in results] == [
        [[2.0, 4.0], [6.0, 8.0]],
        [[2.5, 3.0], [3.5, 4.0]],
    ]


def test_optional_input_in_some_samples(client: Any) -> None:
    model = client.model("scale")
    samples = []
    for index in range(11):
        sample = scale_sample(index)
        if index % 3 == 0:
            sample["BIAS"] = float(index)
        samples.append(sample)
    results = list(model.map(samples, concurrency=3))
    assert len(results) == 11
    for index, result in enumerate(results):
        bias = float(index) if index % 3 == 0 else 0.0
        assert np.array_equal(result["OUT"], expected_out(index) + np.float32(bias)), index


def test_outputs_selects(client: Any) -> None:
    model = client.model("add_sub")
    samples = [{"INPUT0": [index] * 4, "INPUT1": [1, 1, 1, 1]} for index in range(3)]
    results = list(model.map(samples, outputs=["OUTPUT1"]))
    assert [list(result) for result in results] == [["OUTPUT1"]] * 3
    assert [result["OUTPUT1"].tolist() for result in results] == [
        [-1.0] * 4,
        [0.0] * 4,
        [1.0] * 4,
    ]


def test_no_samples_no_results(client: Any, server: LocalServer) -> None:
    before = inference_count(server, "scale")
    assert list(client.model("scale").map([])) == []
    assert inference_count(server, "scale") == before


@pytest.mark.parametrize("options", [{"batch_size": 0}, {"concurrency": 0}, {"errors": "skip"}])
def test_bad_options_are_refused(client: Any, options: dict[str, Any]) -> None:
    with pytest.raises(ts.InvalidInputError):
        list(client.model("scale").map([scale_sample(0)], **options))


def test_model_without_batch_axis_maps_one_request_per_sample(
    client: Any, server: LocalServer
) -> None:
    model = client.model("add_sub")
    assert model.spec.max_batch_size == 0
    samples = [{"INPUT0": [index, 1, 2, 3], "INPUT1": [1, 1, 1, 1]} for index in range(10)]
    before = inference_count(server, "add_sub")
    results = list(model.map(samples, batch_size=8, concurrency=3))
    assert len(results) == 10
    for index, result in enumerate(results):
        assert result["OUTPUT0"].shape == (4,)
        assert result["OUTPUT0"].tolist() == [index + 1, 2, 3, 4]
        assert result["OUTPUT1"].tolist() == [index - 1, 0, 1, 2]
    assert requests_since(server, "add_sub", before, 10) == 10


# Laziness


@pytest.mark.parametrize(("concurrency", "batch_size"), [(2, 4), (1, 3), (4, 1)])
def test_endless_generator_is_read_lazily(
    client: Any, loop_thread: LoopThread, concurrency: int, batch_size: int
) -> None:
    model = client.model("scale")
    samples = Counted()
    taken = 10
    results = take(
        model, loop_thread, iter(samples), taken, concurrency=concurrency, batch_size=batch_size
    )
    assert len(results) == taken
    for index, result in enumerate(results):
        check_scaled(result, index)
    # Only a bounded window is read ahead of what was consumed.
    read_ahead = samples.pulled - taken
    assert 0 <= read_ahead <= (concurrency + 1) * batch_size + 2, samples.pulled


class Slow(Counted):
    """Counted, each sample 0.3 s after the one before (a slow source); iterated
    asynchronously, it waits without blocking the event loop."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for sample in super().__iter__():
            time.sleep(0.3)
            yield sample

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        for sample in super().__iter__():
            await asyncio.sleep(0.3)
            yield sample


def test_a_finished_batch_comes_out_before_the_window_fills(
    client: Any, loop_thread: LoopThread
) -> None:
    """Results are not held back until `concurrency` batches are in flight: with a slow
    source, the first batch's results come long before the eighth sample is read."""
    samples = Slow()
    model = client.model("scale")
    source = aiter(samples) if isinstance(model, Blocking) else iter(samples)
    (first,) = take(model, loop_thread, source, 1, batch_size=2, concurrency=4)
    check_scaled(first, 0)
    assert samples.pulled < 8, samples.pulled


def test_a_bad_shared_memory_mode_ends_map_at_once(client: Any, loop_thread: LoopThread) -> None:
    """Not one InvalidInputError per sample, for ever, in collect mode."""
    model = client.model("scale")
    with pytest.raises(ts.InvalidInputError, match="shared_memory"):
        take(model, loop_thread, iter(Counted()), 3, errors="collect", shared_memory="bogus")


# Errors


def test_errors_raise_raises_the_first_error(client: Any) -> None:
    model = client.model("scale")
    samples = [scale_sample(index) for index in range(20)]
    samples[5] = {"IMAGE": np.zeros((3, 3), dtype=np.uint8), "SCALE": 1.0}
    samples[12] = {"IMAGE": image(12)}  # SCALE missing
    with pytest.raises(ts.InvalidInputError, match=r"'IMAGE'.*\(3, 3\)"):
        list(model.map(samples, concurrency=2))
    with pytest.raises(ts.InvalidInputError, match=r"'IMAGE'.*\(3, 3\)"):
        list(model.map(samples, errors="raise"))


def test_a_sample_refused_on_the_client_ends_the_map_there(
    client: Any, server: LocalServer
) -> None:
    # Nothing after it was read or sent: all the later batches went out, to be thrown away.
    pulled: list[int] = []

    def samples() -> Iterator[dict[str, Any]]:
        for index in range(10):
            pulled.append(index)
            bad = {"IMAGE": np.zeros((3, 3), dtype=np.uint8), "SCALE": 1.0}
            yield bad if index == 2 else scale_sample(index)

    model = client.model("scale")
    before = inference_count(server, "scale")
    results: list[Any] = []
    mapped = model.map(samples(), batch_size=2, concurrency=4)
    with pytest.raises(ts.InvalidInputError, match=r"^sample 2: .*'IMAGE'"):
        results.extend(mapped)  # (what came before the error stays in the list)
    assert len(results) == 2
    for index, result in enumerate(results):
        check_scaled(result, index)
    assert pulled == [0, 1, 2]
    assert requests_since(server, "scale", before, 1) == 1


def test_samples_that_fail_to_come_end_the_map_after_what_was_sent(client: Any) -> None:
    def samples() -> Iterator[dict[str, Any]]:
        for index in range(5):
            yield scale_sample(index)
        raise RuntimeError("the source broke")

    results: list[Any] = []
    mapped = client.model("scale").map(samples(), batch_size=2, concurrency=4)
    with pytest.raises(RuntimeError, match="the source broke"):
        results.extend(mapped)
    # The two full batches had gone out: their results come first (the fifth sample,
    # still waiting for a batch, was never sent).
    assert len(results) == 4
    for index, result in enumerate(results):
        check_scaled(result, index)


def test_an_error_raised_by_map_lets_the_requests_in_flight_finish(
    client: Any, tmp_path: Path
) -> None:
    # Cancelling a request just as the server answers it can crash older Tritons (this
    # test's among them), so map waits for what it has sent before it raises, on both clients.
    finished = tmp_path / "finished"
    samples = [{"SECONDS": [-0.3]}, {"SECONDS": [1.0]}]  # the first fails after 0.3 s
    mapped = client.model("sleep").map(
        samples, concurrency=2, headers={"x-finished": str(finished)}
    )
    with pytest.raises(ts.InferenceError, match="failed as asked"):
        list(mapped)
    assert finished.exists()  # the second request had run, and had been answered


def test_errors_raise_on_a_model_error(client: Any) -> None:
    # `zeros` fails inside the model on a negative count.
    samples = [{"COUNT": count} for count in (3, 2, -1, 4, -2)]
    with pytest.raises(ts.InferenceError, match="negative dimensions"):
        list(client.model("zeros").map(samples))


def test_errors_collect_yields_errors_in_place(client: Any, server: LocalServer) -> None:
    model = client.model("scale")
    samples: list[Any] = [scale_sample(index) for index in range(30)]
    samples[5] = {"IMAGE": np.zeros((3, 3), dtype=np.uint8), "SCALE": 1.0}
    samples[6] = {"IMAGE": image(6), "SCALE": 1.0, "NOPE": 1.0}
    samples[17] = ["not", "a", "mapping"]
    samples[29] = {"IMAGE": image(29)}
    before = inference_count(server, "scale")
    results = list(model.map(samples, errors="collect", concurrency=3))
    assert len(results) == 30
    bad = {5: r"\(3, 3\)", 6: "'NOPE'", 17: "mapping", 29: "'SCALE'"}
    for index, result in enumerate(results):
        if index in bad:
            assert isinstance(result, ts.InvalidInputError), (index, result)
            assert re.search(bad[index], str(result)), (index, str(result))
        else:
            check_scaled(result, index)
    # The 26 good samples went in batches of at most 4; the refused ones were not sent.
    assert 7 <= requests_since(server, "scale", before, 7) <= 26


def test_errors_collect_with_model_errors(client: Any) -> None:
    samples = [{"COUNT": count} for count in (3, -1, 2, -5, 1)]
    results = list(client.model("zeros").map(samples, errors="collect", concurrency=2))
    assert len(results) == 5
    for index in (1, 3):
        assert isinstance(results[index], ts.InferenceError), results[index]
        assert "negative dimensions" in str(results[index])
    assert [results[index]["OUT"].shape for index in (0, 2, 4)] == [(3,), (2,), (1,)]


def test_a_value_json_cannot_carry_fails_its_sample_only(
    server: LocalServer, mode: str, loop_thread: LoopThread
) -> None:
    # Over HTTP without binary tensors, NaN is refused when the batch is encoded: the
    # batch is sent again sample by sample (it failed whole, each sample with its error).
    client = open_client(server.http_url, mode, loop_thread, http_binary=False)
    try:
        model = client.model("scale")
        samples = [scale_sample(index) for index in range(6)]
        samples[2]["SCALE"] = math.nan
        results = list(model.map(samples, errors="collect", batch_size=6))
        for index, result in enumerate(results):
            if index == 2:
                assert isinstance(result, ts.InvalidInputError)
                assert str(result).startswith("sample 2: ")
                assert "NaN" in str(result)
            else:
                check_scaled(result, index)
        answered = []
        outcomes = model.map(samples, batch_size=6)
        answered.append(next(outcomes))
        answered.append(next(outcomes))
        with pytest.raises(ts.InvalidInputError, match=r"^sample 2: .*NaN"):
            next(outcomes)
        for index, result in enumerate(answered):
            check_scaled(result, index)
        assert len(answered) == 2
    finally:
        close_client(client, loop_thread)


# Progress


def test_progress_bar(client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    samples = [scale_sample(index) for index in range(40)]
    results = list(client.model("scale").map(samples, progress=True))
    assert len(results) == 40
    err = capsys.readouterr().err
    assert "40/40" in err


def test_progress_bar_without_length(client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    samples = (scale_sample(index) for index in range(12))
    assert len(list(client.model("scale").map(samples, progress=True))) == 12
    assert "12" in capsys.readouterr().err


# asyncio


async def test_async_map_over_an_async_generator(url: str, server: LocalServer) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("scale")
        pulled = 0

        async def samples(count: int) -> AsyncIterator[dict[str, Any]]:
            nonlocal pulled
            for index in range(count):
                pulled += 1
                yield scale_sample(index)

        before = inference_count(server, "scale")
        results = [result async for result in model.map(samples(100), concurrency=4)]
        assert len(results) == 100
        for index, result in enumerate(results):
            check_scaled(result, index)
        assert requests_since(server, "scale", before, 25) == 25

        # An endless async generator is read lazily too.
        async def endless() -> AsyncIterator[dict[str, Any]]:
            nonlocal pulled
            for index in itertools.count():
                pulled += 1
                yield scale_sample(index)

        pulled = 0
        mapped = model.map(endless(), concurrency=2, batch_size=4)
        taken = []
        async for result in mapped:
            taken.append(result)
            if len(taken) == 10:
                break
        await mapped.aclose()
        for index, result in enumerate(taken):
            check_scaled(result, index)
        assert pulled - len(taken) <= 3 * 4 + 2

        # errors="collect" over an async generator.
        async def with_a_bad_one() -> AsyncIterator[dict[str, Any]]:
            for index in range(6):
                yield {"IMAGE": image(index)} if index == 3 else scale_sample(index)

        collected = [result async for result in model.map(with_a_bad_one(), errors="collect")]
        assert isinstance(collected[3], ts.InvalidInputError)
        for index in (0, 1, 2, 4, 5):
            check_scaled(collected[index], index)
