"""System shared memory against a real server on this host: results, reuse, cleanup.

The session server shares this host, so "auto" uses shared memory for large tensors.
What a server that cannot read this host's memory does is in tests/unit/test_shm.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import _shm as shm
from triton_sdk import ops
from triton_sdk._shm import HOST, MAX_LENT
from triton_sdk.local import LocalServer
from triton_sdk.ops import UnregisterSystemSharedMemory

from .._regions import region_files
from .conftest import (
    LoopThread,
    close_client,
    inference_count,
    open_client,
    request_count,
    server_url,
    wait_until,
)

SAMPLE = 262144  # FP32 elements per sample of big_fixed: 1 MiB


def ours(client: Any) -> list[str]:
    """The regions the server has of this process's clients."""
    pid = f"-{os.getpid()}-"
    return sorted(r.name for r in client.system_shared_memory_status() if pid in r.name)


def own(client: Any) -> list[str]:
    """The regions the server has of this client."""
    pool = getattr(client, "target", client)._regions
    return [name for name in ours(client) if name.startswith(pool._tag + "-")]


def close(client: Any) -> None:
    """Close a Client, or the blocking view of an AsyncClient."""
    if hasattr(client, "close"):
        client.close()
    else:
        client.aclose()


@pytest.mark.parametrize("shared_memory", ["auto", "system"])
def test_large_tensors_go_through_regions_and_come_back_right(
    make_client: Any, shared_memory: str
) -> None:
    client = make_client(shared_memory=shared_memory)
    model = client.model("big_fixed")
    batch = np.random.default_rng(1).random((3, SAMPLE), dtype=np.float32)
    assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)
    assert own(client), "nothing was registered"
    assert region_files() == []  # unlinked as soon as the server had them


def test_regions_are_reused_call_after_call(make_client: Any) -> None:
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    batch = np.ones((2, SAMPLE), dtype=np.float32)
    model.infer(X=batch)
    first = own(client)
    for scale in range(2, 6):
        assert np.array_equal(model.infer(X=batch * scale)["Y"], 2 * scale * batch)
    assert own(client) == first


def test_outputs_are_views_of_their_regions_kept_while_the_array_lives(
    make_client: Any,
) -> None:
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    ones = np.ones((1, SAMPLE), dtype=np.float32)
    held = model.infer(X=ones)["Y"][0, :8]  # a slice of the output: still the region's memory
    assert not held.flags.owndata
    assert held.base is not None
    registered = own(client)
    for scale in range(2, 5):  # the held region is not reused: another one is taken
        assert np.array_equal(model.infer(X=ones * scale)["Y"], 2 * scale * ones)
        assert np.array_equal(held, np.full(8, 2, dtype=np.float32))
    assert len(own(client)) == len(registered) + 1
    del held  # its region goes back to the pool: no new one from now on
    grown = own(client)
    for _ in range(3):
        model.infer(X=ones)
    assert own(client) == grown


def test_past_a_few_held_views_outputs_are_copied(make_client: Any) -> None:
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    ones = np.ones((1, SAMPLE), dtype=np.float32)
    held = [model.infer(X=ones)["Y"] for _ in range(MAX_LENT)]
    assert not any(array.flags.owndata for array in held)
    extra = model.infer(X=ones)["Y"]
    assert extra.flags.owndata  # the cap is reached: copies, through one more region
    registered = len(own(client))
    more = [model.infer(X=ones)["Y"] for _ in range(3)]
    assert all(array.flags.owndata for array in more)
    assert len(own(client)) == registered  # that region serves every further call
    del held
    assert not model.infer(X=ones)["Y"].flags.owndata  # regions came back: views again


def test_concurrent_calls_lend_no_more_than_the_cap(make_client: Any) -> None:
    # The cap was checked when each call was placed, but a loan counted only once its
    # call was over: calls in flight together each got a view (32 of 32).
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    ones = np.ones((1, SAMPLE), dtype=np.float32)
    start = threading.Barrier(2 * MAX_LENT)

    def call(scale: int) -> np.ndarray:
        start.wait()
        return model.infer(X=ones * scale)["Y"]

    with concurrent.futures.ThreadPoolExecutor(2 * MAX_LENT) as pool:
        held = list(pool.map(call, range(2 * MAX_LENT)))
    assert sum(not array.flags.owndata for array in held) <= MAX_LENT
    for scale, array in enumerate(held):
        assert np.array_equal(array, 2 * scale * ones)
    del array
    del held
    assert not model.infer(X=ones)["Y"].flags.owndata  # regions came back: views again


def test_copied_outputs_leave_their_regions_free(make_client: Any) -> None:
    client = make_client(shared_memory="system", shared_memory_outputs="copy")
    model = client.model("big_fixed")
    ones = np.ones((1, SAMPLE), dtype=np.float32)
    held = [model.infer(X=ones * scale)["Y"] for scale in range(1, 4)]
    assert all(array.flags.owndata for array in held)
    assert len(own(client)) == 2  # one input region, one output region, reused by every call
    for scale, array in enumerate(held, start=1):
        assert np.array_equal(array, 2 * scale * ones)


def test_a_view_outlives_its_client(make_client: Any) -> None:
    client = make_client(shared_memory="system")
    batch = np.arange(2 * SAMPLE, dtype=np.float32).reshape(2, SAMPLE)
    result = client.model("big_fixed").infer(X=batch)["Y"]
    if hasattr(client, "close"):
        client.close()
    else:
        client.aclose()
    assert np.array_equal(result, 2 * batch)


def test_shared_memory_outputs_must_be_view_or_copy(make_client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="shared_memory_outputs"):
        make_client(shared_memory_outputs="borrow")


def in_region(array: np.ndarray[Any, Any]) -> bool:
    """Whether the array's memory is one of the client's regions (not an answer's bytes)."""
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_an_output_of_open_size_takes_a_region_once_a_call_has_shown_its_size(
    make_client: Any,
) -> None:
    client = make_client(shared_memory="system")
    model = client.model("big_ragged")  # Y = 2 * X, both [-1]
    first = np.arange(300_000, dtype=np.float32)[np.newaxis]
    answer = model.infer(X=first)["Y"]
    assert np.array_equal(answer, 2 * first)
    assert not in_region(answer)  # its size was unknown until it came
    longer = np.arange(600_000, dtype=np.float32)[np.newaxis]
    answer = model.infer(X=longer)["Y"]  # sized per byte of input from the first answer
    assert np.array_equal(answer, 2 * longer)
    assert in_region(answer)


def test_an_answer_that_outgrows_its_region_is_computed_again_over_the_socket(
    make_client: Any, server: LocalServer
) -> None:
    client = make_client(shared_memory="system")
    model = client.model("zeros")  # OUT is COUNT zeros: its size does not follow the input's

    assert not in_region(model.infer(COUNT=[100_000])["OUT"])  # 400 kB: now known
    before = inference_count(server, "zeros")
    answer = model.infer(COUNT=[300_000])["OUT"]  # estimated 400 kB; it needs 1.2 MB
    assert answer.shape == (300_000,)
    assert not answer.any()
    assert not in_region(answer)
    assert inference_count(server, "zeros") - before == 2  # refused, then run on the socket
    answer = model.infer(COUNT=[300_000])["OUT"]
    assert in_region(answer)  # the refusal's size was learned: no second run
    assert inference_count(server, "zeros") - before == 3


@pytest.mark.parametrize("shared_memory", ["system", "auto"])
def test_one_answer_with_outputs_in_regions_and_over_the_socket(
    make_client: Any, shared_memory: str
) -> None:
    # Triton's gRPC answer holds an empty raw entry for each output in a region: the
    # outputs after one were read from their neighbour's entry ("BYTES tensor truncated").
    client = make_client(shared_memory=shared_memory)
    model = client.model("all_dtypes")
    width = SAMPLE if shared_memory == "auto" else 3  # "auto": large enough for a region
    floats = np.random.default_rng(2).random((2, width), dtype=np.float32)
    ints = np.arange(2 * width, dtype=np.int32).reshape(2, width)
    texts = np.array([[b"a", b"", b"\x00z"], [b"bc", b"d", b"e"]], dtype=object)
    names = ["OUT_FP32", "OUT_BYTES", "OUT_INT32", "PARAMETERS"]
    for _ in range(2):  # "auto" places an output of open size once it has seen it
        result = model.infer(IN_FP32=floats, IN_BYTES=texts, IN_INT32=ints, outputs=names)
        assert np.array_equal(result["OUT_FP32"], floats)
        assert result["OUT_BYTES"].tolist() == texts.tolist()
        assert np.array_equal(result["OUT_INT32"], ints)
        assert result["PARAMETERS"].shape == (2, 1)
    assert in_region(result["OUT_FP32"])
    # Read-only, as an output read from the answer's bytes is: whether code may write
    # into an output must not depend on its size (writing into it worked).
    assert not result["OUT_FP32"].flags.writeable
    # For good: the flag could be set back, and writes then reached the region.
    with pytest.raises(ValueError, match="WRITEABLE"):
        result["OUT_FP32"].setflags(write=True)
    writable = result.as_numpy("OUT_FP32", writable=True)
    assert writable.flags.writeable
    assert not in_region(writable)


def test_off_registers_nothing(make_client: Any) -> None:
    client = make_client(shared_memory="off")
    batch = np.ones((2, SAMPLE), dtype=np.float32)
    answer = client.model("big_fixed").infer(X=batch)["Y"]
    assert np.array_equal(answer, 2 * batch)
    assert not answer.flags.writeable  # a view of the answer's body, as small ones are
    assert own(client) == []


@pytest.mark.parametrize(("shared_memory", "regions"), [("auto", 0), ("system", 4)])
def test_small_tensors_go_through_regions_only_when_forced(
    make_client: Any, shared_memory: str, regions: int
) -> None:
    client = make_client(shared_memory=shared_memory)
    result = client.model("add_sub").infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert np.array_equal(result["OUTPUT0"], [2, 3, 4, 5])
    assert np.array_equal(result["OUTPUT1"], [0, 1, 2, 3])
    assert len(own(client)) == regions  # two inputs, two outputs


def test_per_call_off_overrides_the_client(make_client: Any) -> None:
    client = make_client(shared_memory="system")
    batch = np.ones((1, SAMPLE), dtype=np.float32)
    before = own(client)
    assert np.array_equal(
        client.model("big_fixed").infer(X=batch, shared_memory="off")["Y"], 2 * batch
    )
    assert own(client) == before


def test_map_batches_use_regions(make_client: Any) -> None:
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    samples = [{"X": np.full(SAMPLE, value, dtype=np.float32)} for value in range(5)]
    results = list(model.map(samples, batch_size=2))
    for value, result in enumerate(results):
        assert np.array_equal(result["Y"], np.full(SAMPLE, 2 * value, dtype=np.float32))
    assert own(client)


def test_the_pool_shrinks_back_after_a_burst(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regions of a burst of concurrent calls stayed registered (and their memory taken)
    # for the client's life, though calls one at a time use two.
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    batch = np.ones((1, SAMPLE), dtype=np.float32)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for answer in pool.map(lambda _: model.infer(X=batch)["Y"].copy(), range(32)):
            assert np.array_equal(answer, 2 * batch)
    burst = len(own(client))
    assert burst > 2
    monkeypatch.setattr(shm, "SURPLUS_AFTER_S", 0.3)
    time.sleep(0.4)
    deadline = time.monotonic() + 15
    while len(own(client)) > 2:
        assert time.monotonic() < deadline, (burst, own(client))
        assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)
        time.sleep(0.1)
    assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)


def test_regions_a_failed_trim_kept_are_unregistered_at_close(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failed unregistration gave back only its own region: the others taken out for
    # freeing were neither freed nor the pool's, and stayed registered after close.
    failures = [0]

    class FailsOnce(ts.CallHook):
        def before_send(self, op: object, ctx: ts.CallContext) -> None:
            if failures[0] and isinstance(op, UnregisterSystemSharedMemory):
                failures[0] -= 1
                raise ts.TritonConnectionError("a failure that passes")

    client = make_client(shared_memory="system", hooks=[FailsOnce()])
    model = client.model("big_fixed")
    batch = np.ones((1, SAMPLE), dtype=np.float32)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: model.infer(X=batch)["Y"].copy(), range(32)))
    mine = set(own(client))
    assert len(mine) > 3
    monkeypatch.setattr(shm, "SURPLUS_AFTER_S", 0.2)
    time.sleep(shm.CHECK_EVERY_S + 0.1)  # (one check a second at most)
    failures[0] = 1
    assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)  # (its trim fails)
    assert failures == [0]
    other = make_client()
    close(client)
    assert not mine & set(ours(other))


@pytest.mark.parametrize("registered", [True, False])
def test_regions_whose_registration_was_cut_off_are_freed_by_the_next_registration(
    make_client: Any, registered: bool
) -> None:
    # They were kept (memory, a descriptor, maybe a registration) until close: a service
    # whose calls time out piled them up.
    cut: list[str] = []

    class CutOnce(ts.CallHook):
        def before_send(self, op: object, ctx: ts.CallContext) -> None:
            if isinstance(op, ops.RegisterSystemSharedMemory) and not cut and not registered:
                cut.append(op.name)
                raise ts.TritonTimeoutError("cut off before it went out")

        def after_receive(self, op: object, ctx: ts.CallContext, result: object) -> None:
            if isinstance(op, ops.RegisterSystemSharedMemory) and not cut and registered:
                cut.append(op.name)
                raise ts.TritonTimeoutError("cut off after the server had it")

    client = make_client(shared_memory="system", hooks=[CutOnce()])
    model = client.model("big_fixed")
    batch = np.ones((1, SAMPLE), dtype=np.float32)
    with pytest.raises(ts.TritonTimeoutError):
        model.infer(X=batch)
    pool = getattr(client, "target", client)._regions
    assert [region.name for region in pool._cut] == cut
    assert (cut[0] in own(client)) is registered
    assert np.array_equal(model.infer(X=2 * batch)["Y"], 4 * batch)  # (registers anew)
    assert not pool._cut
    assert cut[0] not in own(client)


def test_close_unregisters_the_clients_regions(make_client: Any) -> None:
    client = make_client(shared_memory="system")
    client.model("big_fixed").infer(X=np.ones((1, SAMPLE), dtype=np.float32))
    mine = set(own(client))
    assert mine
    other = make_client()
    close(client)
    assert not mine & set(ours(other))


def test_a_killed_clients_regions_are_gone_by_the_next_clients_first_use(
    server: LocalServer, protocol: str
) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    script = textwrap.dedent(
        f"""
        import os, signal, sys, numpy as np, triton_sdk as ts
        client = ts.Client({url!r}, shared_memory="system")
        client.model("big_fixed").infer(X=np.ones((1, {SAMPLE}), dtype=np.float32))
        print(os.getpid(), flush=True)
        sys.stdin.read()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        os.kill(pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert region_files(pid) == []  # (the killed client's files)
    with ts.Client(url, shared_memory="system") as next_client:
        status = next_client.system_shared_memory_status()
        left = [region.name for region in status if f"-{pid}-" in region.name]
        assert left, "the killed client had registered nothing"
        next_client.model("big_fixed").infer(X=np.ones((1, SAMPLE), dtype=np.float32))
        status = next_client.system_shared_memory_status()
        assert not [region.name for region in status if f"-{pid}-" in region.name]


def test_a_killed_clients_regions_in_use_are_gone_once_its_request_is_done(
    server: LocalServer, protocol: str, tmp_path: Path
) -> None:
    # Killed while the server ran its request: 2.50-2.51 refuse to unregister a region in
    # use, and the next client asked once, at its first call; they stayed for its life.
    url = server.grpc_url if protocol == "grpc" else server.http_url
    marker = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import os, numpy as np, triton_sdk as ts
        client = ts.Client({url!r}, shared_memory="system")
        print(os.getpid(), flush=True)
        client.model("sleep").infer(SECONDS=[2.0], parameters={{"started": {str(marker)!r}}})
        """
    )
    before = request_count(server, "sleep")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        wait_until_started(marker)
        os.kill(pid, signal.SIGKILL)
    finally:
        child.wait(30)

    def left(client: Any) -> list[str]:
        return [r.name for r in client.system_shared_memory_status() if f"-{pid}-" in r.name]

    with ts.Client(url, shared_memory="system") as next_client:
        assert left(next_client), "the killed client had registered nothing"
        big_fixed = next_client.model("big_fixed")
        big_fixed.infer(X=np.ones((1, SAMPLE), dtype=np.float32))
        wait_until_answered(server, "sleep", before + 1)  # its request is done
        deadline = time.monotonic() + 10
        while left(next_client):
            assert time.monotonic() < deadline, left(next_client)
            time.sleep(0.2)
            big_fixed.infer(X=np.ones((1, SAMPLE), dtype=np.float32))


def wait_until_answered(server: LocalServer, model: str, count: int) -> None:
    """Wait until the server has answered ``count`` requests of ``model`` in all."""
    wait_until(lambda: request_count(server, model) >= count, f"{model} answered {count}")


def wait_until_started(marker: Path) -> None:
    """Wait until the ``sleep`` model runs the request that named ``marker``."""
    wait_until(marker.exists, "the request started")


def test_a_timed_out_calls_regions_are_not_reused_while_the_server_runs_it(
    make_client: Any, server: LocalServer, tmp_path: Path
) -> None:
    """The server keeps running a request whose call timed out, and writes its answer into
    that call's regions when it is done: a later result must not change under its reader."""
    client = make_client(shared_memory="system")
    sleep = client.model("sleep")
    sleep.infer(SECONDS=[0.0])
    abandoned = set(own(client))  # the next call takes these two regions
    before = inference_count(server, "sleep")
    marker = tmp_path / "started"
    with pytest.raises(ts.TritonTimeoutError):
        sleep.infer(SECONDS=[2.0], timeout=0.3, parameters={"started": str(marker)})
    wait_until_started(marker)
    sleep.infer(SECONDS=[0.0])  # (not read: its regions go back to the pool at once)
    kept = sleep.infer(SECONDS=[0.0])["SLEPT"]  # a view of its region
    assert abandoned < set(own(client))  # still registered, and others taken instead
    wait_until_answered(server, "sleep", before + 3)  # the abandoned request is done
    assert kept.tolist() == [0.0]
    # Once the server has let go of them, a later call frees the abandoned regions.
    deadline = time.monotonic() + 10
    while abandoned & set(own(client)):
        assert time.monotonic() < deadline, own(client)
        time.sleep(0.2)
        assert sleep.infer(SECONDS=[0.0])["SLEPT"].tolist() == [0.0]


def test_a_cancelled_tasks_regions_are_not_reused_while_the_server_runs_it(
    server: LocalServer, url: str, tmp_path: Path
) -> None:
    async def main() -> tuple[list[float], bool]:
        async with ts.AsyncClient(url, shared_memory="system") as client:

            async def own() -> set[str]:
                tag = client._regions._tag + "-"
                status = await client.system_shared_memory_status()
                return {region.name for region in status if region.name.startswith(tag)}

            sleep = await client.model("sleep")
            await sleep.infer(SECONDS=[0.0])
            abandoned = await own()
            before = inference_count(server, "sleep")
            marker = tmp_path / "started"
            task = asyncio.create_task(
                sleep.infer(SECONDS=[1.5], parameters={"started": str(marker)})
            )
            await asyncio.to_thread(wait_until_started, marker)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await sleep.infer(SECONDS=[0.0])
            kept = (await sleep.infer(SECONDS=[0.0]))["SLEPT"]
            still_registered = abandoned < await own()
            await asyncio.to_thread(wait_until_answered, server, "sleep", before + 3)
            return kept.tolist(), still_registered

    kept, still_registered = asyncio.run(main())
    assert kept == [0.0]
    assert still_registered


def unregister_behind_its_back(server: LocalServer, names: list[str]) -> None:
    """What another tool (or a restart) does to the client's regions."""
    import tritonclient.http

    raw = tritonclient.http.InferenceServerClient(server.http_url.removeprefix("http://"))
    try:
        for name in names:
            raw.unregister_system_shared_memory(name)
    finally:
        raw.close()


def test_regions_the_server_lost_are_registered_anew(make_client: Any, server: LocalServer) -> None:
    client = make_client(shared_memory="system")
    model = client.model("big_fixed")
    model.infer(X=np.ones((2, SAMPLE), dtype=np.float32))
    lost = own(client)
    assert lost
    unregister_behind_its_back(server, lost)
    for value in (3, 4):
        batch = np.full((2, SAMPLE), value, dtype=np.float32)
        assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)
    assert own(client)
    assert not set(lost) & set(own(client))  # new regions, under new names
    assert region_files() == []


def test_shared_memory_calls_ride_out_a_server_restart(tmp_path: Any) -> None:
    repository = tmp_path / "models"
    repository.mkdir()
    models = Path(__file__).resolve().parent.parent / "models"
    (repository / "big_fixed").symlink_to(models / "big_fixed", target_is_directory=True)
    batch = np.full((1, SAMPLE), 5, dtype=np.float32)
    with LocalServer(repository) as restarted:
        urls = [restarted.grpc_url, restarted.http_url]
        clients = [ts.Client(url, retry=ts.RetryPolicy.resilient()) for url in urls]
        try:
            for client in clients:
                client.model("big_fixed").infer(X=batch)
                assert own(client)
            restarted.restart()
            for client in clients:
                assert np.array_equal(client.model("big_fixed").infer(X=batch)["Y"], 2 * batch)
        finally:
            for client in clients:
                client.close()


class Interrupted(BaseException):
    """Stands for a cancellation (or a KeyboardInterrupt) that comes as the answer does."""


class InterruptTheRegistration(ts.CallHook):
    def __init__(self) -> None:
        self.interrupted = False

    def after_receive(self, op: Any, ctx: Any, result: object) -> None:
        if op.call == "register_system_shared_memory" and not self.interrupted:
            self.interrupted = True
            raise Interrupted


def test_a_region_registered_as_the_call_was_interrupted_is_unregistered_on_close(
    make_client: Any,
) -> None:
    """The server registered the region, the call never learnt it: close must still
    unregister it (and the next call must work)."""
    hook = InterruptTheRegistration()
    client = make_client(shared_memory="system", hooks=[hook])
    model = client.model("big_fixed")
    with pytest.raises(Interrupted):
        model.infer(X=np.ones((1, SAMPLE), dtype=np.float32))
    assert hook.interrupted
    batch = np.full((1, SAMPLE), 7, dtype=np.float32)
    assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)
    tag = getattr(client, "target", client)._regions._tag + "-"
    registered = set(own(client))
    assert registered
    other = make_client()
    close(client)
    assert not [name for name in ours(other) if name.startswith(tag)]


def test_a_blocking_http_call_in_flight_reads_its_regions_after_close(
    server: LocalServer, tmp_path: Path
) -> None:
    client = ts.Client(server.http_url, shared_memory="system")
    sleep = client.model("sleep")
    sleep.infer(SECONDS=[0.0])  # its regions, registered, serve the next call
    marker = tmp_path / "started"
    outcome: list[object] = []

    def call() -> None:
        try:
            result = sleep.infer(SECONDS=[3.0], parameters={"started": str(marker)})
            outcome.append(result["SLEPT"].tolist())
        except BaseException as error:
            outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until_started(marker)  # the server runs it for 3 s
    client.close()
    assert caller.is_alive()  # closed while the call was in flight
    caller.join(10)
    assert outcome == [[3.0]]


def test_files_of_a_client_that_died_before_registering_are_removed(make_client: Any) -> None:
    dead = 999_999_999  # above any pid_max: no process has it
    left = f"triton_sdk-{HOST}-{dead}-abcdef-1"
    with open(f"/dev/shm/{left}", "wb") as file:
        file.write(b"\0" * 1024)
    try:
        client = make_client(shared_memory="system")
        client.model("big_fixed").infer(X=np.ones((1, SAMPLE), dtype=np.float32))
        assert not os.path.exists(f"/dev/shm/{left}")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{left}")


def _in_own_dev_shm(
    mount_options: str, script: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a process that sees a /dev/shm of its own (a tmpfs mounted with
    ``mount_options``), as a container with a small --shm-size does."""
    shell = f'mount -t tmpfs -o {mount_options} tmpfs /dev/shm && exec "$@"'
    command = ["unshare", "-m", "--propagation", "private", "sh", "-c", shell, "sh"]
    return subprocess.run(
        [*command, sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _can_mount_own_dev_shm() -> bool:
    try:
        return _in_own_dev_shm("size=1m", "pass").returncode == 0
    except FileNotFoundError:  # no unshare
        return False


@pytest.mark.skipif(not _can_mount_own_dev_shm(), reason="needs unshare and mount (root)")
@pytest.mark.parametrize("dev_shm_options", ["size=4m", "ro"], ids=["small", "read-only"])
def test_a_dev_shm_without_room_sends_over_the_socket_in_auto_and_raises_in_system(
    url: str, dev_shm_options: str
) -> None:
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, triton_sdk as ts
        batch = np.ones((8, {SAMPLE}), dtype=np.float32)  # 8 MiB
        with ts.Client(sys.argv[1]) as client:  # "auto"
            assert np.array_equal(client.model("big_fixed").infer(X=batch)["Y"], 2 * batch)
        with ts.Client(sys.argv[1], shared_memory="system") as client:
            try:
                client.model("big_fixed").infer(X=batch)
            except ts.TritonError as error:
                print(error)
        """
    )
    done = _in_own_dev_shm(dev_shm_options, script, url)
    # Without room taken up front, the first write past 4 MiB was a SIGBUS.
    assert done.returncode == 0, done.stderr
    assert "cannot make a shared-memory region of 8388608 bytes in /dev/shm" in done.stdout


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_json_http_sends_over_the_socket_in_auto_and_refuses_system_before_registering(
    server: LocalServer, loop_thread: LoopThread, mode: str
) -> None:
    batch = np.ones((2, SAMPLE), dtype=np.float32)
    client = open_client(server.http_url, mode, loop_thread, http_binary=False)
    try:
        model = client.model("big_fixed")
        # (refused: "shared memory needs Triton's binary HTTP", once regions were registered)
        assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)
        with pytest.raises(ts.InvalidInputError, match="http_binary=True"):
            model.infer(X=batch, shared_memory="system")
        assert own(client) == []
    finally:
        close_client(client, loop_thread)
    with pytest.raises(ts.InvalidInputError, match="http_binary=True"):
        ts.Client(server.http_url, http_binary=False, shared_memory="system")


def test_two_closes_at_once_leave_no_region_registered(make_client: Any) -> None:
    # Both passed the "closed?" check; the one that found the pool drained closed the
    # connection under the other's unregister calls, and its regions stayed registered.
    client = make_client(shared_memory="system")
    for rows in (1, 2, 4):  # regions of three sizes: the drain takes a while
        client.model("big_fixed").infer(X=np.ones((rows, SAMPLE), dtype=np.float32))
    tag = getattr(client, "target", client)._regions._tag + "-"
    assert own(client)
    together = threading.Barrier(2)

    def closing() -> None:
        together.wait()
        close(client)

    closers = [threading.Thread(target=closing) for _ in range(2)]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join()
    other = make_client()
    assert not [name for name in ours(other) if name.startswith(tag)]


class CallDuringClose(ts.CallHook):
    """Makes a shared-memory call while close is unregistering the client's regions."""

    def __init__(self) -> None:
        self.model: Any = None
        self.refused: list[ts.TritonError] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if isinstance(op, UnregisterSystemSharedMemory) and not self.refused:
            try:
                self.model.infer(X=np.ones((3, SAMPLE), dtype=np.float32))
            except ts.TritonError as error:
                self.refused.append(error)


def test_a_call_made_while_the_client_closes_registers_nothing(
    server: LocalServer, protocol: str, loop_thread: LoopThread
) -> None:
    # It made and registered new regions after close had drained the pool: they stayed
    # registered for the life of the process. (Blocking client only: a hook of an
    # AsyncClient cannot wait for a call of its own loop; both share this code.)
    hook = CallDuringClose()
    url = server_url(server, protocol)
    client = open_client(url, "sync", loop_thread, shared_memory="system", hooks=[hook])
    hook.model = client.model("big_fixed")
    hook.model.infer(X=np.ones((1, SAMPLE), dtype=np.float32))
    tag = client._regions._tag + "-"
    client.close()
    assert [str(error) for error in hook.refused] == ["this Client is closed"]
    other = open_client(url, "sync", loop_thread)
    try:
        assert not [name for name in ours(other) if name.startswith(tag)]
    finally:
        other.close()


def test_an_async_client_closed_in_another_loop_refuses_and_stays_open(
    server: LocalServer, protocol: str, loop_thread: LoopThread
) -> None:
    # It was marked closed with its regions left registered for the life of the process
    # (each unregister call failed in the wrong loop), or raised aiohttp's RuntimeError.
    client = ts.AsyncClient(server_url(server, protocol), shared_memory="system")
    model = loop_thread.run(client.model("big_fixed"))
    batch = np.ones((1, SAMPLE), dtype=np.float32)
    loop_thread.run(model.infer(X=batch))
    tag = client._regions._tag + "-"
    try:
        with pytest.raises(ts.TritonError, match="first used in another event loop"):
            asyncio.run(client.aclose())
        assert np.array_equal(loop_thread.run(model.infer(X=batch))["Y"], 2 * batch)
    finally:
        loop_thread.run(client.aclose())
    other = open_client(server_url(server, protocol), "sync", loop_thread)
    try:
        assert not [name for name in ours(other) if name.startswith(tag)]
    finally:
        other.close()


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_client_collected_unclosed_with_regions_registered_warns(
    server: LocalServer, protocol: str, loop_thread: LoopThread, kind: str
) -> None:
    # Nothing said so: its regions stayed registered for the life of the process.
    client = getattr(ts, kind)(server_url(server, protocol), shared_memory="system")
    resolved = client.model("big_fixed")
    model = loop_thread.run(resolved) if kind == "AsyncClient" else resolved
    outcome = model.infer(X=np.ones((1, SAMPLE), dtype=np.float32))
    if kind == "AsyncClient":
        loop_thread.run(outcome)
    tag = client._regions._tag + "-"
    held = [client, model, resolved, outcome]
    del client, model, resolved, outcome
    with pytest.warns(ResourceWarning, match="was not closed: its shared-memory regions"):
        collect(held)
    other = open_client(server_url(server, protocol), "sync", loop_thread)
    try:
        left = [name for name in ours(other) if name.startswith(tag)]
    finally:
        other.close()
    assert left  # (as the warning says; unregistered here, for the tests that follow)
    unregister_behind_its_back(server, left)


def collect(held: list[Any]) -> None:
    """Drop the last references to ``held`` and collect what they kept."""
    held.clear()
    gc.collect()


# (aiohttp cannot close its connections once their loop has closed: it warns.)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_an_async_client_whose_loop_has_ended_still_closes(
    server: LocalServer, protocol: str
) -> None:
    # asyncio.run(use(client)), then asyncio.run(client.aclose()): the first loop is gone,
    # so refusing to close in another loop would leave the client open for good.
    client = ts.AsyncClient(server_url(server, protocol))
    assert asyncio.run(client.server_metadata()).name == "triton"
    asyncio.run(client.aclose())
    with pytest.raises(ts.TritonError, match="this AsyncClient is closed"):
        asyncio.run(client.server_metadata())
    del client
    gc.collect()  # (aiohttp's warnings, now, under this test's filter)
