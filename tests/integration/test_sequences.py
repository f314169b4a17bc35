"""Sequences (stateful models) against the real server: flags, ids, independence, the end
of a sequence, and that requests of a sequence are never retried.

`accumulate` on the session server has one sequence slot (one instance, max_batch_size 1,
the direct strategy): a sequence left open blocks every other one until it idles out, so
each test here ends what it opens. Tests that keep two sequences open at once use a copy
of `accumulate` with the oldest strategy and four candidate sequences, on a server of
their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk._sequence import SequenceState
from triton_sdk.local import LocalServer

from ._blocking import Blocking, LoopThread
from .conftest import (
    EXAMPLE_MODELS,
    FIXTURE_MODELS,
    MODES,
    PROTOCOLS,
    client_for,
    close_client,
    inference_count,
    open_client,
)

ENSEMBLE_OF_ACCUMULATE = """
name: "summing"
platform: "ensemble"
max_batch_size: 1
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "accumulate" model_version: -1
  input_map { key: "INPUT" value: "X" } output_map { key: "OUTPUT" value: "Y" }
} ] }
"""
WIDE_CONFIG = """
name: "accumulate"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest { max_candidate_sequences: 4 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def total(result: ts.InferResult) -> int:
    out = result["OUTPUT"]
    assert out.size == 1
    return int(out.reshape(-1)[0])


def raw_sequence_request(
    http_url: str,
    model: str,
    sequence_id: int | str,
    value: int,
    *,
    start: bool = False,
    end: bool = False,
) -> tuple[int, Any]:
    """One request of a sequence sent as plain HTTP JSON, past the SDK: (status, body)."""
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        "parameters": {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end},
    }
    request = urllib.request.Request(
        f"{http_url}/v2/models/{model}/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def raw_total(answer: tuple[int, Any]) -> int:
    status, body = answer
    assert status == 200, body
    return int(body["outputs"][0]["data"][0])


def new_sequence(model: Any, loop: LoopThread, sequence_id: int | str | None = None) -> Any:
    """A sequence of a Model, or a blocking view of an AsyncModel's one."""
    if isinstance(model, Blocking):
        return Blocking(model.target.sequence(sequence_id), loop)
    return model.sequence(sequence_id)


@contextlib.contextmanager
def sequence(model: Any, loop: LoopThread, sequence_id: int | str | None = None) -> Iterator[Any]:
    """``with model.sequence()`` on a Model; ``async with`` (run on the loop) on an AsyncModel."""
    if not isinstance(model, Blocking):
        with model.sequence(sequence_id) as seq:
            yield seq
        return
    handle = model.target.sequence(sequence_id)
    entered = loop.run(handle.__aenter__())
    try:
        yield Blocking(entered, loop)
    except BaseException as exc:
        loop.run(handle.__aexit__(type(exc), exc, exc.__traceback__))
        raise
    loop.run(handle.__aexit__(None, None, None))


def retry_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The retries logged: "retrying ..." (INFO), or "resending ..." (WARNING) when the
    failed attempt had gone out (a connection broken mid-request, as a killed server's)."""
    return [
        record
        for record in caplog.records
        if record.name == "triton_sdk"
        and record.getMessage().startswith(("retrying ", "resending "))
    ]


# One sequence at a time, on the session server


def test_running_sums_with_start_and_end(
    client: Any, server: LocalServer, loop_thread: LoopThread
) -> None:
    model = client.model("accumulate")
    assert model.spec.sequence
    with sequence(model, loop_thread) as seq:
        assert not seq.ended
        # START on the first request: the server would refuse a new sequence without it.
        assert total(seq.infer(INPUT=[1])) == 1
        assert total(seq.infer(INPUT=[2])) == 3
        assert not seq.ended
        assert total(seq.infer(INPUT=[3], end=True)) == 6
        assert seq.ended
    # END reached the server: the sequence is gone, a request continuing it is refused.
    status, body = raw_sequence_request(server.http_url, "accumulate", seq.sequence_id, 1)
    assert status == 400
    assert "START" in body["error"]


def test_results_are_batched_like_infer(client: Any, loop_thread: LoopThread) -> None:
    with sequence(client.model("accumulate"), loop_thread) as seq:
        first = seq.infer(INPUT=[4])
        assert first["OUTPUT"].shape == (1, 1)
        assert first.model_name == "accumulate"
        sample = seq.infer_sample(INPUT=5)
        assert sample["OUTPUT"].shape == (1,)
        assert sample["OUTPUT"].tolist() == [9]
        assert total(seq.infer_sample(INPUT=[1], end=True)) == 10


def test_single_request_sequence(client: Any, server: LocalServer, loop_thread: LoopThread) -> None:
    # START and END on the same request.
    with sequence(client.model("accumulate"), loop_thread) as seq:
        assert total(seq.infer(INPUT=[7], end=True)) == 7
    status, _ = raw_sequence_request(server.http_url, "accumulate", seq.sequence_id, 1)
    assert status == 400


def test_a_new_sequence_starts_from_zero(client: Any, loop_thread: LoopThread) -> None:
    model = client.model("accumulate")
    for _ in range(2):
        with sequence(model, loop_thread) as seq:
            assert total(seq.infer(INPUT=[5])) == 5
            assert total(seq.infer(INPUT=[5], end=True)) == 10


def test_sequence_ids_are_unique_ints(client: Any) -> None:
    model = client.model("accumulate")
    ids = [model.sequence().sequence_id for _ in range(200)]
    assert all(type(sequence_id) is int for sequence_id in ids)
    assert all(0 < sequence_id < 2**63 for sequence_id in ids)
    assert len(set(ids)) == len(ids)


def test_explicit_int_id(client: Any, server: LocalServer, loop_thread: LoopThread) -> None:
    with sequence(client.model("accumulate"), loop_thread, 424242) as seq:
        assert seq.sequence_id == 424242
        assert total(seq.infer(INPUT=[2])) == 2
        # The server keys the sequence by that id: a plain request continues it.
        assert raw_total(raw_sequence_request(server.http_url, "accumulate", 424242, 3)) == 5
        assert total(seq.infer(INPUT=[1], end=True)) == 6


def test_a_second_handle_on_an_open_sequence_is_refused(
    client: Any, server: LocalServer, loop_thread: LoopThread
) -> None:
    # It sent START again: the server restarted the sequence's state without a word (10,
    # not 11), and the first handle's next request failed there.
    model = client.model("accumulate")
    with sequence(model, loop_thread, 777001) as first:
        assert total(first.infer(INPUT=[1])) == 1
        before = inference_count(server, "accumulate")
        with pytest.raises(ts.InvalidInputError, match="777001 of 'accumulate' is open"):
            new_sequence(client.model("accumulate"), loop_thread, 777001)
        assert inference_count(server, "accumulate") == before
        assert total(first.infer(INPUT=[1], end=True)) == 2
    # Ended (or its block left), the id may be used again: a new sequence.
    with (
        pytest.warns(ts.SequenceNotEndedWarning),
        sequence(model, loop_thread, 777001) as again,
    ):
        assert total(again.infer(INPUT=[10])) == 10
    with sequence(model, loop_thread, 777001) as third:  # the last one's block was left
        before = inference_count(server, "accumulate")
        with pytest.raises(ts.TritonError, match=r"block of sequence 777001 .* was left"):
            again.infer(INPUT=[7])  # it went into the new sequence (12, not 5, below)
        assert inference_count(server, "accumulate") == before
        assert total(third.infer(INPUT=[5], end=True)) == 5


def test_a_numpy_integer_id(client: Any, loop_thread: LoopThread) -> None:
    # An id taken from an array or a data frame.
    with sequence(client.model("accumulate"), loop_thread, np.int64(777002)) as seq:
        assert seq.sequence_id == 777002
        assert type(seq.sequence_id) is int
        assert total(seq.infer(INPUT=[3], end=True)) == 3


@pytest.mark.parametrize("bad_id", [0, "", True, np.timedelta64(5), np.float64(5.0)])
def test_invalid_ids_are_refused(client: Any, bad_id: Any) -> None:
    with pytest.raises(ts.InvalidInputError):
        client.model("accumulate").sequence(bad_id)


def test_requests_after_the_end_are_refused(
    client: Any, server: LocalServer, loop_thread: LoopThread
) -> None:
    model = client.model("accumulate")
    with sequence(model, loop_thread) as seq:
        assert total(seq.infer(INPUT=[1], end=True)) == 1
        before = inference_count(server, "accumulate")
        with pytest.raises(ts.TritonError, match="ended"):
            seq.infer(INPUT=[2])
        with pytest.raises(ts.TritonError, match="ended"):
            seq.infer_sample(INPUT=2, end=True)
        assert inference_count(server, "accumulate") == before


def test_leaving_without_end_warns_and_sends_nothing(
    client: Any, server: LocalServer, loop_thread: LoopThread
) -> None:
    model = client.model("accumulate")
    block = contextlib.ExitStack()
    seq = block.enter_context(sequence(model, loop_thread))
    assert total(seq.infer(INPUT=[1])) == 1
    assert total(seq.infer(INPUT=[2])) == 3
    sent = inference_count(server, "accumulate")
    with pytest.warns(ts.SequenceNotEndedWarning, match="end=True"):
        block.close()  # leaves the with block
    assert not seq.ended
    assert inference_count(server, "accumulate") == sent
    # The sequence is still open on the server, untouched: a plain request continues it
    # (and ends it, freeing the model's only sequence slot for the other tests).
    answer = raw_sequence_request(server.http_url, "accumulate", seq.sequence_id, 4, end=True)
    assert raw_total(answer) == 7


def test_a_sequence_that_sent_nothing_does_not_warn(client: Any, loop_thread: LoopThread) -> None:
    with sequence(client.model("accumulate"), loop_thread) as seq:
        pass
    assert not seq.ended


def test_a_request_refused_for_another_event_loop_does_not_warn(
    url: str, loop_thread: LoopThread
) -> None:
    # The refusal came from the transport, so the request counted as sent: a
    # SequenceNotEndedWarning said the server kept a slot it never had.
    client = ts.AsyncClient(url)
    model = loop_thread.run(client.model("accumulate"))  # (its connections: that loop's)

    async def in_another_loop() -> None:
        async with model.sequence() as seq:
            with pytest.raises(ts.TritonError, match="another event loop") as refused:
                await seq.infer(INPUT=[1])
            assert not refused.value.may_have_run

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ts.SequenceNotEndedWarning)
            asyncio.run(in_another_loop())
    finally:
        loop_thread.run(client.aclose())


def _fail_inside_a_sequence(model: Any, loop: LoopThread, ids: list[int | str]) -> None:
    with sequence(model, loop) as seq:
        ids.append(seq.sequence_id)
        assert total(seq.infer(INPUT=[3])) == 3
        raise RuntimeError("boom")


def test_leaving_on_an_exception_still_warns(
    client: Any, server: LocalServer, loop_thread: LoopThread
) -> None:
    ids: list[int | str] = []
    with pytest.warns(ts.SequenceNotEndedWarning), pytest.raises(RuntimeError, match="boom"):
        _fail_inside_a_sequence(client.model("accumulate"), loop_thread, ids)
    answer = raw_sequence_request(server.http_url, "accumulate", ids[0], 1, end=True)
    assert raw_total(answer) == 4


@pytest.mark.parametrize("name", ["add_sub", "text_embed", "repeat"])
def test_sequence_on_a_stateless_model_is_refused(client: Any, name: str) -> None:
    model = client.model(name)
    assert not model.spec.sequence
    with pytest.raises(ts.InvalidInputError, match=rf"'{name}'.*not stateful"):
        model.sequence()


def test_explicit_string_id(client: Any, loop_thread: LoopThread) -> None:
    model = client.model("accumulate_str")
    with sequence(model, loop_thread, "session-1") as seq:
        assert seq.sequence_id == "session-1"
        assert total(seq.infer(INPUT=[5])) == 5
        assert total(seq.infer(INPUT=[6])) == 11
        assert total(seq.infer(INPUT=[7], end=True)) == 18
    # The same string id again is a new sequence.
    with sequence(model, loop_thread, "session-1") as again:
        assert total(again.infer(INPUT=[1], end=True)) == 1


def test_a_refused_input_sends_nothing_and_keeps_the_sequence(
    client: Any, server: LocalServer, loop_thread: LoopThread
) -> None:
    model = client.model("accumulate")
    with sequence(model, loop_thread) as seq:
        assert total(seq.infer(INPUT=[1])) == 1
        before = inference_count(server, "accumulate")
        with pytest.raises(ts.InvalidInputError):
            seq.infer(INPUT=[1.5])
        with pytest.raises(ts.InvalidInputError):
            seq.infer(INPUT=[1, 2])  # a batch of two: the model takes one
        assert inference_count(server, "accumulate") == before
        assert total(seq.infer(INPUT=[2], end=True)) == 3


async def test_async_with_on_async_model(url: str, server: LocalServer) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("accumulate")
        async with model.sequence() as seq:
            assert isinstance(seq, ts.AsyncModelSequence)
            assert total(await seq.infer(INPUT=[1])) == 1
            assert total(await seq.infer(INPUT=[2])) == 3
            assert total(await seq.infer_sample(INPUT=3, end=True)) == 6
            assert seq.ended
        with pytest.raises(ts.TritonError, match="ended"):
            await seq.infer(INPUT=[1])
        with pytest.warns(ts.SequenceNotEndedWarning):
            async with model.sequence() as open_seq:
                assert total(await open_seq.infer(INPUT=[10])) == 10
        answer = raw_sequence_request(
            server.http_url, "accumulate", open_seq.sequence_id, 1, end=True
        )
        assert raw_total(answer) == 11


# Several sequences at once: a copy of `accumulate` with four sequence slots


@pytest.fixture(scope="module")
def wide_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("sequence_repository")
    accumulate = repository / "accumulate"
    (accumulate / "1").mkdir(parents=True)
    (accumulate / "config.pbtxt").write_text(WIDE_CONFIG)
    (accumulate / "1" / "model.py").symlink_to(FIXTURE_MODELS / "accumulate" / "1" / "model.py")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    (repository / "summing" / "1").mkdir(parents=True)
    (repository / "summing" / "config.pbtxt").write_text(ENSEMBLE_OF_ACCUMULATE)
    return repository


@pytest.fixture(scope="module")
def wide_server(wide_repository: Path) -> Iterator[LocalServer]:
    with LocalServer(wide_repository) as running:
        yield running


@pytest.fixture
def wide_client(
    wide_server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    with client_for(wide_server, protocol, mode, loop_thread) as client:
        yield client


def test_a_batch_in_a_sequence_is_refused_and_the_sequence_goes_on(
    wide_client: Any, wide_server: LocalServer, loop_thread: LoopThread
) -> None:
    # max_batch_size 4 let a batch of 2 go out; the sequence batcher refused it after the
    # START it counted as sent, and every later request lacked START ("must specify").
    model = wide_client.model("accumulate")
    before = inference_count(wide_server, "accumulate")
    with sequence(model, loop_thread) as seq:
        with pytest.raises(ts.InvalidInputError, match=r"one sample .* got a batch of 2"):
            seq.infer(INPUT=[[1], [2]])
        assert inference_count(wide_server, "accumulate") == before
        assert total(seq.infer(INPUT=[[5]])) == 5
        assert total(seq.infer_sample(INPUT=[6], end=True)) == 11


def test_a_sequence_through_an_ensemble_reaches_its_stateful_step(
    wide_client: Any, loop_thread: LoopThread
) -> None:
    # An ensemble has no sequence batching of its own, and sequence() refused it: no way
    # to reach the stateful model inside (Triton passes the id and flags on to it).
    model = wide_client.model("summing")
    with sequence(model, loop_thread) as seq:
        sums = [seq.infer(X=[1]), seq.infer(X=[2]), seq.infer(X=[3], end=True)]
    assert [int(result["Y"].reshape(-1)[0]) for result in sums] == [1, 3, 6]
    with pytest.raises(ts.InferenceError, match="correlation ID"):
        model.infer(X=[1])  # (outside a sequence: the server's refusal)


def test_interleaved_sequences_stay_independent(wide_client: Any, loop_thread: LoopThread) -> None:
    model = wide_client.model("accumulate")
    with sequence(model, loop_thread) as first, sequence(model, loop_thread) as second:
        assert first.sequence_id != second.sequence_id
        assert total(first.infer(INPUT=[1])) == 1
        assert total(second.infer(INPUT=[10])) == 10
        assert total(first.infer(INPUT=[2])) == 3
        assert total(second.infer(INPUT=[20])) == 30
        with sequence(model, loop_thread) as third:
            assert total(third.infer(INPUT=[100])) == 100
            assert total(first.infer(INPUT=[3])) == 6
            assert total(third.infer(INPUT=[100], end=True)) == 200
        assert total(second.infer(INPUT=[30], end=True)) == 60
        assert total(first.infer(INPUT=[4], end=True)) == 10


async def test_async_sequences_run_concurrently(wide_server: LocalServer, protocol: str) -> None:
    url = wide_server.grpc_url if protocol == "grpc" else wide_server.http_url
    async with ts.AsyncClient(url) as client:
        model = await client.model("accumulate")

        async def run(step: int) -> list[int]:
            sums = []
            async with model.sequence() as seq:
                for index in range(5):
                    result = await seq.infer(INPUT=[step], end=index == 4)
                    sums.append(total(result))
                    await asyncio.sleep(0)
            return sums

        results = await asyncio.gather(*(run(step) for step in (1, 10, 100)))
        assert results == [[step * n for n in range(1, 6)] for step in (1, 10, 100)]


# Never retried: a server of its own, killed


def test_sequence_requests_are_never_retried(
    wide_repository: Path, loop_thread: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    policy = ts.RetryPolicy(max_attempts=5, initial_backoff=0.01, max_backoff=0.05, jitter=False)
    with LocalServer(wide_repository) as server:
        clients = []
        try:
            handles = []
            for protocol in PROTOCOLS:
                url = server.grpc_url if protocol == "grpc" else server.http_url
                for mode in MODES:
                    client = open_client(url, mode, loop_thread, retry=policy, timeout=10.0)
                    clients.append(client)
                    seq = new_sequence(client.model("accumulate"), loop_thread)
                    assert total(seq.infer(INPUT=[1])) == 1
                    handles.append((f"{protocol}/{mode}", seq, client.model("add_sub")))
            server.kill()
            for name, seq, add_sub in handles:
                caplog.clear()
                with pytest.raises(ts.TritonConnectionError):
                    seq.infer(INPUT=[2], end=True)
                assert retry_records(caplog) == [], name
                # The same client retries a stateless request under the same policy.
                caplog.clear()
                with pytest.raises(ts.TritonConnectionError) as caught:
                    add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
                retried = len(retry_records(caplog))
                assert retried == policy.max_attempts - 1, (name, repr(caught.value))
        finally:
            for client in clients:
                close_client(client, loop_thread)


async def test_requests_sent_at_once_carry_start_only_once(url: str) -> None:
    # Several times: the server refuses a request that reaches it before the one carrying
    # START, so the others must wait for that one whatever order the tasks run in.
    async with ts.AsyncClient(url) as client:
        model = await client.model("accumulate")
        for _ in range(5):
            async with model.sequence() as sequence:
                await asyncio.gather(*(sequence.infer_sample(INPUT=value) for value in (1, 2, 3)))
                last = await sequence.infer_sample(INPUT=4, end=True)
            # A second START would have reset the running sum.
            assert last["OUTPUT"].tolist() == [10]


def test_requests_sent_at_once_from_threads_carry_start_only_once(url: str) -> None:
    # Threads released together, switching as often as the interpreter can: both build
    # their requests at the same moment.
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ts.Client(url) as client, ThreadPoolExecutor(3) as pool:
            model = client.model("accumulate")
            for _ in range(30):
                barrier = threading.Barrier(3)
                with model.sequence() as sequence:

                    def send(value: int, sequence: Any = sequence, barrier: Any = barrier) -> Any:
                        barrier.wait()
                        return sequence.infer_sample(INPUT=value)

                    list(pool.map(send, (1, 2, 3)))
                    last = sequence.infer_sample(INPUT=4, end=True)
                assert last["OUTPUT"].tolist() == [10]
    finally:
        sys.setswitchinterval(switching)


class Sent(ts.CallHook):
    """The flags of each inference request sent."""

    def __init__(self) -> None:
        self.flags: list[tuple[bool, bool]] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if op.call == "infer":
            self.flags.append((op.sequence_start, op.sequence_end))


async def test_an_end_request_cancelled_before_it_went_out_leaves_the_sequence_open(
    url: str,
) -> None:
    sent = Sent()
    async with ts.AsyncClient(url, hooks=[sent]) as client:
        model = await client.model("accumulate")
        async with model.sequence() as sequence:
            first = asyncio.create_task(sequence.infer_sample(INPUT=1))
            last = asyncio.create_task(sequence.infer_sample(INPUT=2, end=True))
            await asyncio.sleep(0)  # both started: the END waits for START's answer
            last.cancel()
            await first
            with pytest.raises(asyncio.CancelledError):
                await last
            assert sent.flags == [(True, False)]  # the END never went out...
            assert not sequence.ended  # ...so the sequence is still open, and can end
            assert total(await sequence.infer_sample(INPUT=2, end=True)) == 3
        assert sent.flags == [(True, False), (False, True)]


class FailBeforeSending(ts.CallHook):
    """Fails the inference requests numbered in ``failing`` (1: the first to reach the
    hooks) before they go out, as a hook whose token service is down would, or (with
    ``bad_header``) by giving them a header no protocol can carry; records the flags of
    the others."""

    def __init__(self, *failing: int, bad_header: bool = False) -> None:
        self.failing = failing
        self.bad_header = bad_header
        self.seen = 0
        self.flags: list[tuple[bool, bool]] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if op.call != "infer":
            return
        self.seen += 1
        if self.seen not in self.failing:
            self.flags.append((op.sequence_start, op.sequence_end))
        elif self.bad_header:
            ctx.headers = {**ctx.headers, "x-token": "line\nbreak"}
        else:
            raise RuntimeError("the token service is down")


@pytest.mark.parametrize("bad_header", [False, True], ids=["hook-raised", "bad-header"])
def test_a_first_request_that_never_went_out_leaves_start_to_the_next(
    make_client: Any, loop_thread: LoopThread, bad_header: bool
) -> None:
    hook = FailBeforeSending(1, bad_header=bad_header)
    model = make_client(hooks=[hook]).model("accumulate")
    with sequence(model, loop_thread) as seq:
        with pytest.raises(ts.InvalidInputError if bad_header else RuntimeError):
            seq.infer(INPUT=[100])
        # The server takes it as the sequence's first (without START it would refuse it).
        assert total(seq.infer(INPUT=[1])) == 1
        assert total(seq.infer(INPUT=[2], end=True)) == 3
    assert hook.flags == [(True, False), (False, True)]


def test_a_first_request_whose_metadata_read_timed_out_leaves_start_to_the_next(
    url: str, make_client: Any, loop_thread: LoopThread
) -> None:
    # Over HTTP a client's first inference reads the server's metadata first: that read
    # timing out sent no inference, but the sequence took its START as sent.
    if not url.startswith("http"):
        pytest.skip("only HTTP reads the server's metadata before a first inference")
    model = make_client().model("accumulate")
    with sequence(model, loop_thread) as seq:
        with pytest.raises(ts.TritonError) as failed:
            seq.infer(INPUT=[100], timeout=1e-4)
        assert not failed.value.may_have_run
        assert total(seq.infer(INPUT=[1])) == 1  # with START
        assert total(seq.infer(INPUT=[2], end=True)) == 3


def test_a_request_whose_timeout_passed_before_it_was_sent_leaves_start_to_the_next(
    url: str, mode: str, make_client: Any, loop_thread: LoopThread
) -> None:
    # The blocking HTTP client found the deadline passed before its first write: nothing
    # went out, yet it said the request may have run, and the sequence took START as sent.
    if not url.startswith("http") or mode != "sync":
        pytest.skip("the blocking HTTP client's deadline on writes")
    model = make_client().model("accumulate")
    with sequence(model, loop_thread) as seq:
        assert total(seq.infer(INPUT=[5])) == 5  # (the metadata is read)
        seq.infer(INPUT=[-5], end=True)
    with sequence(model, loop_thread) as seq:
        with pytest.raises(ts.TritonTimeoutError) as failed:
            seq.infer(INPUT=[100], timeout=1e-6)
        assert not failed.value.may_have_run
        assert total(seq.infer(INPUT=[1])) == 1  # with START
        assert total(seq.infer(INPUT=[2], end=True)) == 3


def test_an_end_that_never_went_out_leaves_the_sequence_open(
    make_client: Any, loop_thread: LoopThread
) -> None:
    hook = FailBeforeSending(2)
    model = make_client(hooks=[hook]).model("accumulate")
    with sequence(model, loop_thread) as seq:
        assert total(seq.infer(INPUT=[1])) == 1
        with pytest.raises(RuntimeError):
            seq.infer(INPUT=[2], end=True)
        assert not seq.ended
        assert total(seq.infer(INPUT=[2], end=True)) == 3
    assert hook.flags == [(True, False), (False, True)]


def test_requests_waiting_for_a_start_that_never_went_out_carry_it_themselves(url: str) -> None:
    # Threads: the first request carries START, and its hook holds it until the other two
    # are waiting for START's answer, then fails it before it goes out. One of the two
    # carries START in its place (the server would refuse both without it).
    for _ in range(5):
        release = threading.Event()
        hook = HeldThenFailed(release)
        with ts.Client(url, hooks=[hook]) as client, ThreadPoolExecutor(3) as pool:
            model = client.model("accumulate")
            with model.sequence() as seq:
                first = pool.submit(seq.infer_sample, INPUT=100)
                assert hook.holding.wait(10)
                others = [pool.submit(seq.infer_sample, INPUT=value) for value in (1, 2)]
                while seq._state.sent < 3:  # (both claimed: they wait for START)
                    time.sleep(0.001)
                release.set()
                with pytest.raises(RuntimeError):
                    first.result(10)
                assert sorted(total(other.result(10)) for other in others) in ([1, 3], [2, 3])
                last = seq.infer_sample(INPUT=4, end=True)
            assert last["OUTPUT"].tolist() == [7]
            assert [start for start, _ in hook.flags].count(True) == 1


def test_a_request_waiting_for_start_when_the_block_is_left_is_not_sent(url: str) -> None:
    # START is held in its hook while a second request waits for it; the block is left
    # meanwhile. Once START is out, the second request must not follow it: a new handle
    # of the same id may be running a new sequence by then.
    release = threading.Event()
    hook = HeldThenFailed(release, fail=False)
    with ts.Client(url, hooks=[hook]) as client, ThreadPoolExecutor(2) as pool:
        model = client.model("accumulate")
        seq = model.sequence()
        seq.__enter__()
        first = pool.submit(seq.infer_sample, INPUT=1)
        assert hook.holding.wait(10)
        second = pool.submit(seq.infer_sample, INPUT=2)
        while seq._state.sent < 2:  # (claimed: it waits for START)
            time.sleep(0.001)
        with pytest.warns(ts.SequenceNotEndedWarning):
            seq.__exit__(None, None, None)
        release.set()
        assert total(first.result(10)) == 1
        with pytest.raises(ts.TritonError, match="was left"):
            second.result(10)
        assert hook.flags == [(True, False)]


class HeldThenFailed(ts.CallHook):
    """Holds the first inference request in ``before_send`` until ``release`` is set,
    then fails it (or, with ``fail=False``, lets it go); records the flags of the
    requests that go on."""

    def __init__(self, release: threading.Event, *, fail: bool = True) -> None:
        self.release = release
        self.fail = fail
        self.holding = threading.Event()
        self.flags: list[tuple[bool, bool]] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if op.call != "infer":
            return
        if not self.holding.is_set():
            self.holding.set()
            self.release.wait(10)
            if self.fail:
                raise RuntimeError("the token service is down")
        self.flags.append((op.sequence_start, op.sequence_end))


@pytest.mark.parametrize("ending", ["timeout", "close"])
def test_a_request_waiting_for_start_keeps_its_timeout_and_wakes_at_close(
    url: str, ending: str
) -> None:
    # It waited for START's request with no bound: past its own timeout, and past the
    # client's close (over blocking HTTP), as long as START took.
    release = threading.Event()
    hook = HeldThenFailed(release, fail=False)
    client = ts.Client(url, hooks=[hook])
    try:
        with ThreadPoolExecutor(2) as pool:
            seq = client.model("accumulate").sequence()
            first = pool.submit(seq.infer_sample, INPUT=100)
            assert hook.holding.wait(10)
            timeout = 0.3 if ending == "timeout" else None
            waiting = pool.submit(seq.infer_sample, INPUT=1, timeout=timeout)
            while seq._state.sent < 2:  # (claimed: it waits for START)
                time.sleep(0.001)
            began = time.monotonic()
            if ending == "close":
                client.close()
            with pytest.raises(ts.TritonError) as caught:
                waiting.result(10)
            assert time.monotonic() - began < 1.5
            if ending == "timeout":
                assert isinstance(caught.value, ts.TritonTimeoutError)
                assert "waited past its timeout for the sequence's START" in str(caught.value)
            else:
                assert "closed" in str(caught.value)
            assert not caught.value.may_have_run
            assert caught.value.model == "accumulate"
            release.set()
            if ending == "close":  # (START, held until now, finds the client closed)
                with pytest.raises(ts.TritonError, match="closed"):
                    first.result(10)
            else:
                first.result(10)
    finally:
        release.set()
        client.close()


class Interrupted(BaseException):
    """Stands for a KeyboardInterrupt: a BaseException arriving between two steps."""


def interrupting(method: Any) -> Any:
    """``method`` of SequenceState, raising Interrupted right after it returns, the
    first time it gives a request START."""
    fired: list[bool] = []

    def wrapper(self: Any, delivery: Any, *args: Any) -> Any:
        had_start = delivery.start
        answer = method(self, delivery, *args)
        if not fired and delivery.start and not had_start:
            fired.append(True)
            raise Interrupted
        return answer

    return wrapper


def in_background(call: Any, *args: Any, **kwargs: Any) -> Future[Any]:
    """``call`` run on a daemon thread: one that hangs fails the test, not its exit."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call(*args, **kwargs))
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


def test_a_request_interrupted_right_after_its_claim_leaves_start_to_the_next(
    make_client: Any, loop_thread: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counted as carrying START, then stopped before it went out: the next request
    # carries START (it waited forever for it before).
    claim = interrupting(SequenceState.claim)
    monkeypatch.setattr(SequenceState, "claim", claim)
    model = make_client().model("accumulate")
    with sequence(model, loop_thread) as seq:
        with pytest.raises(Interrupted):
            seq.infer(INPUT=[100])
        assert total(in_background(seq.infer, INPUT=[1]).result(10)) == 1
        assert total(seq.infer(INPUT=[2], end=True)) == 3


def test_a_request_interrupted_right_after_taking_start_over_gives_it_back(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three threads: the first request carries START and fails before it goes out; the
    # waiter that takes START over is interrupted just after; the last one carries it.
    ready = interrupting(SequenceState.ready)
    monkeypatch.setattr(SequenceState, "ready", ready)
    release = threading.Event()
    hook = HeldThenFailed(release)
    with ts.Client(url, hooks=[hook]) as client, client.model("accumulate").sequence() as seq:
        first = in_background(seq.infer_sample, INPUT=100)
        assert hook.holding.wait(10)
        others = [in_background(seq.infer_sample, INPUT=value) for value in (1, 2)]
        while seq._state.sent < 3:  # (both claimed: they wait for START)
            time.sleep(0.001)
        release.set()
        with pytest.raises(RuntimeError):
            first.result(10)
        outcomes = []
        for other in others:
            try:
                outcomes.append(total(other.result(10)))
            except Interrupted:
                outcomes.append(None)
        assert sorted(outcomes, key=str) in ([1, None], [2, None])
        sent = next(value for value in outcomes if value is not None)
        assert total(seq.infer_sample(INPUT=4, end=True)) == sent + 4
    assert [start for start, _ in hook.flags] == [True, False]
