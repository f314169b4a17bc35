"""Shared memory decisions on a MockTransport: fallback, refusal, stale regions, cleanup."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
import types
from types import SimpleNamespace
from typing import Any

import attrs
import numpy as np
import pytest
import tritonclient.utils

import triton_sdk as ts
from triton_sdk import _shm as shm
from triton_sdk import ops
from triton_sdk._request import InferRequest
from triton_sdk._result import InferResult, read_region
from triton_sdk._shaping import Tensor
from triton_sdk._shm import (
    HOST,
    CudaRegion,
    Placement,
    PlacementPlan,
    RegionPool,
    Slot,
    check_mode,
    cuda_device,
    guards_regions_in_use,
    note_resend,
    place,
    remove_stale_files,
    stale_regions,
)
from triton_sdk.testing import MockTransport

from .._regions import region_files
from ._both import resolve

BIG = ts.ModelSpec(
    name="big",
    max_batch_size=4,
    inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(262144,))},
    outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(262144,))},
)
BATCH = np.ones((1, 262144), dtype=np.float32)


class Server:
    """Answers infer with zeros, and shared memory ops as a server that can (or cannot)
    read this host's memory."""

    def __init__(
        self,
        readable: bool = True,
        regions: list[dict[str, Any]] | None = None,
        opens_ipc_handles: bool = True,
    ):
        self.readable = readable
        self.regions = regions or []
        self.opens_ipc_handles = opens_ipc_handles
        self.cuda: list[ops.RegisterCudaSharedMemory] = []
        self.version = "2.51.0"

    def __call__(self, op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.GetServerMetadata):
            return {"name": "triton", "version": self.version, "extensions": []}
        if isinstance(op, ops.RegisterSystemSharedMemory):
            if not self.readable:
                return ts.InferenceError(
                    f"Unable to open shared memory region: '{op.key}'", status="INTERNAL"
                )
            self.regions.append({"name": op.name, "key": op.key, "byte_size": op.byte_size})
            return None
        if isinstance(op, ops.UnregisterSystemSharedMemory):
            self.regions = [r for r in self.regions if r["name"] != op.name]
            return None
        if isinstance(op, ops.GetSystemSharedMemoryStatus):
            return list(self.regions)
        if isinstance(op, ops.RegisterCudaSharedMemory):
            if not self.opens_ipc_handles:
                return ts.InferenceError(
                    f"failed to register CUDA shared memory region '{op.name}'",
                    status="INTERNAL",
                )
            self.cuda.append(op)
            return None
        if isinstance(op, ops.UnregisterCudaSharedMemory):
            self.cuda = [r for r in self.cuda if r.name != op.name]
            return None
        if isinstance(op, ops.GetCudaSharedMemoryStatus):
            return [{"name": r.name, "device_id": r.device_id} for r in self.cuda]
        if isinstance(op, ops.InferRequest):
            return {"Y": np.zeros((1, 262144), dtype=np.float32)}
        raise NotImplementedError(op)


def client_of(mode: str, server: Server, shared_memory: str) -> Any:
    kind = ts.Client if mode == "sync" else ts.AsyncClient
    return kind(
        "grpc://test", transport=MockTransport(server, models=[BIG]), shared_memory=shared_memory
    )


def sent(client: Any) -> list[ops.InferRequest]:
    mock = client._transport
    return [call.op for call in mock.calls if isinstance(call.op, ops.InferRequest)]


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_auto_falls_back_to_sockets_once_with_one_log_line(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    client = client_of(mode, Server(readable=False), "auto")
    model = await resolve(client.model("big"))
    for _ in range(3):
        await resolve(model.infer(X=BATCH))
    requests = sent(client)
    assert len(requests) == 3
    assert all(request.shared_memory is None for request in requests)
    lines = [r for r in caplog.records if "cannot read this host's shared memory" in r.message]
    assert len(lines) == 1
    registrations = [
        c for c in client._transport.calls if c.op.call == "register_system_shared_memory"
    ]
    assert len(registrations) == 1
    await resolve(client.aclose() if mode == "async" else client.close())


def test_calls_that_find_together_that_the_server_cannot_read_this_memory_log_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each call that was registering when the first refusal came logged its own line.
    caplog.set_level(logging.INFO, logger="triton_sdk")
    server = Server(readable=False)
    together = threading.Barrier(4)

    def refusing_together(op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.RegisterSystemSharedMemory):
            together.wait(10)
        return server(op, ctx)

    client = ts.Client(
        "grpc://test",
        transport=MockTransport(refusing_together, models=[BIG]),
        shared_memory="auto",
    )
    model = client.model("big")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: model.infer(X=BATCH), range(4)))
    lines = [r for r in caplog.records if "cannot read this host's shared memory" in r.message]
    assert len(lines) == 1
    client.close()


async def test_system_raises_when_the_server_cannot_read_this_hosts_memory(mode: str) -> None:
    client = client_of(mode, Server(readable=False), "system")
    model = await resolve(client.model("big"))
    with pytest.raises(ts.TritonError, match="cannot use this host's shared memory"):
        await resolve(model.infer(X=BATCH))
    assert sent(client) == []


async def test_regions_are_registered_once_used_and_unregistered_on_close(mode: str) -> None:
    server = Server()
    client = client_of(mode, server, "auto")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))
    await resolve(model.infer(X=BATCH))
    requests = sent(client)
    assert all(request.shared_memory is not None for request in requests)
    assert set(requests[0].shared_memory.inputs) == {"X"}
    assert set(requests[0].shared_memory.outputs) == {"Y"}
    assert len(server.regions) == 2  # one for X, one for Y, reused by the second call
    assert region_files() == []
    await resolve(client.aclose() if mode == "async" else client.close())
    assert server.regions == []


async def test_per_call_off_and_an_unknown_mode(mode: str) -> None:
    client = client_of(mode, Server(), "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH, shared_memory="off"))
    assert sent(client)[-1].shared_memory is None
    with pytest.raises(ts.InvalidInputError, match="shared_memory"):
        await resolve(model.infer(X=BATCH, shared_memory="gpu"))
    with pytest.raises(ts.InvalidInputError, match="shared_memory"):
        client_of(mode, Server(), "sometimes")


async def test_the_first_use_unregisters_regions_of_dead_processes(mode: str) -> None:
    dead = {"name": f"triton_sdk-{HOST}-999999999-abcdef-1", "key": "/x", "byte_size": 1}
    elsewhere = {"name": "triton_sdk-otherhost-999999999-abcdef-1", "key": "/y", "byte_size": 1}
    server = Server(regions=[dict(dead), dict(elsewhere)])
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))
    names = [region["name"] for region in server.regions]
    assert dead["name"] not in names
    assert elsewhere["name"] in names  # not this host's: not ours to judge


def test_stale_regions_are_those_of_this_host_and_a_dead_pid() -> None:
    alive = {"name": f"triton_sdk-{HOST}-{os.getpid()}-abcdef-1"}
    dead = {"name": f"triton_sdk-{HOST}-999999999-abcdef-2"}
    foreign = {"name": "someone-elses-region"}
    assert stale_regions([alive, dead, foreign]) == [dead["name"]]


def test_only_files_of_dead_processes_of_this_tag_are_removed() -> None:
    dead = 999_999_999  # above any pid_max: no process has it
    names = [
        f"triton_sdk-{HOST}-{dead}-abcdef-1",  # removed
        f"triton_sdk-{HOST}-{os.getppid()}-abcdef-1",  # its process lives
        f"triton_sdk-00000000-{dead}-abcdef-1",  # another host or PID namespace's
    ]
    for name in names:
        with open(f"/dev/shm/{name}", "wb"):
            pass
    try:
        remove_stale_files()
        assert [os.path.exists(f"/dev/shm/{name}") for name in names] == [False, True, True]
    finally:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")


def test_processes_in_another_pid_namespace_have_another_tag() -> None:
    """Their pids mean nothing here: none may take the other's regions for a dead
    process's (containers that share /dev/shm and the boot, with pids of their own)."""
    code = "from triton_sdk._shm import HOST; print(HOST)"
    try:
        other = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        pytest.skip("no unshare here")
    if other.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {other.stderr.strip()}")
    assert other.stdout.strip() != HOST


def spec_of(
    inputs: dict[str, tuple[str, tuple[int, ...]]],
    outputs: dict[str, tuple[str, tuple[int, ...]]],
    max_batch_size: int = 0,
) -> ts.ModelSpec:
    def tensors(given: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, ts.TensorSpec]:
        return {
            name: ts.TensorSpec(name=name, datatype=datatype, shape=shape)
            for name, (datatype, shape) in given.items()
        }

    return ts.ModelSpec(
        name="m", max_batch_size=max_batch_size, inputs=tensors(inputs), outputs=tensors(outputs)
    )


@pytest.mark.parametrize(
    ("spec", "sockets_only"),
    [
        (spec_of({"X": ("FP32", (4,))}, {"Y": ("FP32", (4,))}), True),
        # BYTES never travel in regions, whatever their size
        (spec_of({"X": ("BYTES", (-1,))}, {"Y": ("BYTES", (-1,))}), True),
        # an output of open size may grow past the threshold, so may an input of open size
        (spec_of({"X": ("FP32", (4,))}, {"Y": ("FP32", (-1,))}), False),
        (spec_of({"X": ("FP32", (4,))}, {"Y": ("BYTES", (-1,))}), True),
        (spec_of({"X": ("FP32", (-1,))}, {"Y": ("FP32", (4,))}), False),
        # sized by the largest batch a request can carry (larger ones are split)
        (spec_of({"X": ("FP32", (1024,))}, {"Y": ("FP32", (1,))}, max_batch_size=63), True),
        (spec_of({"X": ("FP32", (1024,))}, {"Y": ("FP32", (1,))}, max_batch_size=64), False),
        (spec_of({"X": ("UINT8", (1,))}, {"Y": ("FP64", (32768,))}), False),
    ],
)
def test_a_model_whose_tensors_are_all_small_skips_placement(
    spec: ts.ModelSpec, sockets_only: bool
) -> None:
    assert PlacementPlan(spec).sockets_only is sockets_only


async def test_forced_shared_memory_carries_small_tensors_too(mode: str) -> None:
    small = spec_of({"X": ("FP32", (4,)), "S": ("BYTES", (1,))}, {"Y": ("FP32", (4,))})
    server = Server()

    def handler(op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.InferRequest):
            return {"Y": np.zeros(4, dtype=np.float32)}
        return server(op, ctx)

    kind = ts.Client if mode == "sync" else ts.AsyncClient
    client = kind(
        "grpc://test", transport=MockTransport(handler, models=[small]), shared_memory="system"
    )
    model = await resolve(client.model("m"))
    assert PlacementPlan(model.spec).sockets_only  # what "auto" would do
    await resolve(model.infer(X=np.ones(4, dtype=np.float32), S=[b"s"]))
    placement = sent(client)[0].shared_memory
    assert placement is not None
    assert set(placement.inputs) == {"X"}  # BYTES stay on the socket
    assert set(placement.outputs) == {"Y"}
    assert len(server.regions) == 2
    await resolve(model.infer(X=np.ones(4, dtype=np.float32), S=[b"s"], shared_memory="auto"))
    assert sent(client)[1].shared_memory is None
    await resolve(client.aclose() if mode == "async" else client.close())


async def test_system_raises_at_the_first_call_however_small(mode: str) -> None:
    small = spec_of({"X": ("FP32", (4,))}, {"Y": ("FP32", (4,))})
    server = Server(readable=False)
    kind = ts.Client if mode == "sync" else ts.AsyncClient
    client = kind(
        "grpc://test", transport=MockTransport(server, models=[small]), shared_memory="system"
    )
    model = await resolve(client.model("m"))
    with pytest.raises(ts.TritonError, match="cannot use this host's shared memory"):
        await resolve(model.infer(X=np.ones(4, dtype=np.float32)))
    assert sent(client) == []


def test_a_datatype_the_client_does_not_know_does_not_stop_a_plan() -> None:
    spec = spec_of({"X": ("FP32", (4,))}, {"Y": ("", (4,)), "Z": ("FP8", (4,))})
    assert PlacementPlan(spec).sockets_only


RAGGED = spec_of({"X": ("FP32", (-1,))}, {"Y": ("FP32", (-1,))}, max_batch_size=8)


def ragged_request(samples: int, length: int) -> InferRequest:
    array = np.ones((samples, length), dtype=np.float32)
    return InferRequest(model="m", inputs=[Tensor("X", "FP32", array)])


def answer(elements: int) -> InferResult:
    return InferResult(
        {"Y": np.zeros(elements, dtype=np.float32)},
        datatypes={"Y": "FP32"},
        model_name="m",
        model_version="1",
    )


def test_an_output_of_open_size_is_sized_per_byte_of_input_from_earlier_answers() -> None:
    plan = PlacementPlan(RAGGED)
    pool = RegionPool()
    try:
        small = ragged_request(1, 1000)  # 4 kB in: only the output could be large
        assert place(small, plan, pool) is None  # nothing known yet: the socket
        plan.learn(small, answer(100_000))  # 400 kB out: 100 bytes per byte in
        assert plan.open_outputs == {"Y": 100.0}
        plan.learn(small, answer(10))  # a smaller answer does not shrink the estimate
        assert plan.open_outputs == {"Y": 100.0}
        placed = place(ragged_request(2, 1000), plan, pool)
        assert placed is not None
        slot = placed[1].outputs["Y"]
        assert slot.region.size == 1 << 20  # 800 kB estimated, in a 1 MiB region
        assert slot.byte_size == slot.region.size  # the server may fill all of it
        assert place(ragged_request(1, 1), plan, pool) is None  # 400 B estimated: small
    finally:
        for region in pool.drain().regions:
            region.close()


def test_a_refused_answer_sizes_the_next_region_only_for_an_open_output() -> None:
    plan = PlacementPlan(RAGGED)
    pool = RegionPool()
    request = ragged_request(1, 1000)
    plan.learn(request, answer(100_000))
    placed = place(request, plan, pool)
    assert placed is not None
    placement = placed[1]
    refusal = ts.InferenceError(
        "shared memory size specified with the request for output 'Y' (524288 bytes) "
        "should be at least 800000 bytes to hold the results"
    )
    try:
        assert plan.outgrown(refusal, request, placement)
        assert plan.open_outputs == {"Y": 200.0}
        other = ts.InferenceError(str(refusal).replace("'Y'", "'Z'"))
        assert not plan.outgrown(other, request, placement)
        assert not plan.outgrown(ts.InferenceError("out of memory"), request, placement)
        in_sequence = attrs.evolve(request, sequence_id=7)
        assert not plan.outgrown(refusal, in_sequence, placement)  # never run twice
    finally:
        for region in pool.drain().regions:
            region.close()


def test_stateful_models_keep_outputs_of_open_size_on_the_socket() -> None:
    stateful = attrs.evolve(RAGGED, sequence=True)
    plan = PlacementPlan(stateful)
    assert plan.open_outputs == {}
    assert plan.sockets_only is False  # (its input may still be large)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """tritonclient's CUDA shared-memory utilities over host memory: what CudaRegion
    calls, with the same names and arguments. Returns the live "device" allocations."""
    allocated: dict[str, Any] = {}
    listed: list[Any] = []  # tritonclient's allocated_shared_memory_regions()
    module = types.ModuleType("tritonclient.utils.cuda_shared_memory")

    def create(name: str, byte_size: int, device_id: int) -> Any:
        allocated[name] = SimpleNamespace(name=name, device=device_id, memory=bytearray(byte_size))
        listed.append(allocated[name])
        return allocated[name]

    def destroy(handle: Any) -> None:
        listed.remove(handle)  # ValueError when no longer listed, as tritonclient's
        allocated.pop(handle.name)

    def set_region(handle: Any, values: list[np.ndarray[Any, Any]]) -> None:
        data = b"".join(value.tobytes() for value in values)
        handle.memory[: len(data)] = data

    def contents(handle: Any, datatype: Any, shape: list[int]) -> np.ndarray[Any, Any]:
        count = int(np.prod(shape))
        return np.frombuffer(handle.memory, datatype, count).reshape(shape).copy()

    module.create_shared_memory_region = create  # type: ignore[attr-defined]
    module.set_shared_memory_region = set_region  # type: ignore[attr-defined]
    module.get_contents_as_numpy = contents  # type: ignore[attr-defined]
    module.get_raw_handle = lambda handle: base64.b64encode(handle.name.encode())  # type: ignore[attr-defined]
    module.destroy_shared_memory_region = destroy  # type: ignore[attr-defined]
    module.allocated_shared_memory_regions = lambda: listed  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(tritonclient.utils, "cuda_shared_memory", module, raising=False)
    return allocated


@pytest.mark.parametrize(
    ("given", "device"), [("cuda", 0), ("cuda:0", 0), ("cuda:3", 3), ("system", None)]
)
def test_cuda_modes_name_a_device(given: str, device: int | None) -> None:
    assert check_mode(given) == given
    assert cuda_device(given) == device


@pytest.mark.parametrize("given", ["cuda:", "cuda:x", "cuda:-1", "gpu", "CUDA"])
def test_other_device_spellings_are_refused(given: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="'cuda:<device>'"):
        check_mode(given)


async def test_cuda_regions_are_registered_by_ipc_handle_on_their_device_and_freed_on_close(
    mode: str, fake_cuda: dict[str, Any]
) -> None:
    server = Server()
    client = client_of(mode, server, "cuda:1")
    model = await resolve(client.model("big"))
    batch = np.arange(262144, dtype=np.float32)[np.newaxis]
    await resolve(model.infer(X=batch))
    await resolve(model.infer(X=batch))
    (request, _) = sent(client)
    placement = request.shared_memory
    assert placement is not None
    assert set(placement.inputs) == {"X"}
    assert set(placement.outputs) == {"Y"}
    assert [(r.device_id, r.byte_size) for r in server.cuda] == [(1, 1 << 20), (1, 1 << 20)]
    assert {r.raw_handle for r in server.cuda} == {name.encode() for name in fake_cuda}
    region = placement.inputs["X"].region
    assert bytes(fake_cuda[region.name].memory) == batch.tobytes()  # the input, on the device
    assert server.regions == []  # no system shared memory
    await resolve(client.aclose() if mode == "async" else client.close())
    assert server.cuda == []
    assert fake_cuda == {}  # device memory freed


def test_an_output_in_gpu_memory_comes_back_as_a_host_copy_of_its_own(
    fake_cuda: dict[str, Any],
) -> None:
    region = CudaRegion("r", 1024, 0)
    values = np.arange(8, dtype=np.float32)
    region.write(values)
    slot = Slot(region, 0, 1024, view=True)
    output = read_region("Y", "FP32", (2, 4), slot)
    assert np.array_equal(output, values.reshape(2, 4))
    assert output.flags.writeable
    assert slot.lent is None  # nothing holds the region: it is free for the next call
    fake_cuda["r"].memory[:4] = b"\0" * 4
    assert output[0, 1] == 1.0  # a copy: later writes to the region do not show
    region.close()
    assert fake_cuda == {}


async def test_cuda_without_cuda_python_fails_clearly_and_sends_nothing(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tritonclient.utils.cuda_shared_memory", None)
    monkeypatch.delattr(tritonclient.utils, "cuda_shared_memory", raising=False)
    client = client_of(mode, Server(), "cuda")
    model = await resolve(client.model("big"))
    with pytest.raises(ts.TritonError, match="needs the cuda-python package"):
        await resolve(model.infer(X=BATCH))
    assert sent(client) == []
    assert not [c for c in client._transport.calls if "shared_memory" in c.op.call]


def test_an_estimate_is_at_most_twice_the_largest_answer_yet() -> None:
    plan = PlacementPlan(RAGGED)
    plan.learn(ragged_request(1, 1), answer(100_000))  # 400 kB for 4 bytes in
    assert plan.estimate("Y", 4) == 400_000
    assert plan.estimate("Y", 4_000_000) == 800_000  # not 400 GB


def test_a_call_that_must_not_run_twice_keeps_open_outputs_on_the_socket() -> None:
    plan = PlacementPlan(RAGGED)
    request = ragged_request(1, 1000)
    plan.learn(request, answer(100_000))
    assert place(request, plan, RegionPool(), estimated=False) is None


def test_regions_taken_before_a_failure_go_back_to_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = PlacementPlan(BIG)
    pool = RegionPool()
    taken = []
    real_take = pool.take

    def take(size: int) -> Any:
        if taken:
            raise ts.TritonError("out of memory")
        taken.append(real_take(size))
        return taken[0]

    monkeypatch.setattr(pool, "take", take)
    request = InferRequest(model="big", inputs=[Tensor("X", "FP32", BATCH)])
    with pytest.raises(ts.TritonError, match="out of memory"):
        place(request, plan, pool)  # the input's region was taken, the output's was not
    assert pool.drain().regions == []  # the input's region, never registered, was closed


async def test_close_frees_every_cuda_region_after_user_code_destroyed_some(
    mode: str, fake_cuda: dict[str, Any]
) -> None:
    import tritonclient.utils.cuda_shared_memory as cudashm

    server = Server()
    client = client_of(mode, server, "cuda")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))
    assert len(server.cuda) == 2
    # The usual tritonclient clean-up, run by code that shares the process.
    for handle in list(cudashm.allocated_shared_memory_regions())[:1]:
        cudashm.destroy_shared_memory_region(handle)
    await resolve(client.aclose() if mode == "async" else client.close())
    assert server.cuda == []  # both unregistered: the first region's close did not stop it
    assert cudashm.allocated_shared_memory_regions() == []


async def test_a_server_that_cannot_open_gpu_memory_is_named_as_such(
    mode: str, fake_cuda: dict[str, Any]
) -> None:
    client = client_of(mode, Server(opens_ipc_handles=False), "cuda:1")
    model = await resolve(client.model("big"))
    with pytest.raises(ts.TritonError, match=r"cannot use this client's memory on GPU 1 \(a CUDA"):
        await resolve(model.infer(X=BATCH))
    assert sent(client) == []
    await resolve(client.aclose() if mode == "async" else client.close())


def test_cuda_failures_say_the_runtimes_words_as_text(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tritonclient.utils.cuda_shared_memory as cudashm

    def create(name: str, byte_size: int, device_id: int) -> Any:
        try:  # as tritonclient wraps the runtime's error
            raise Exception(b"out of memory")
        except Exception as error:
            raise RuntimeError("unable to create cuda shared memory handle") from error

    monkeypatch.setattr(cudashm, "create_shared_memory_region", create)
    with pytest.raises(ts.TritonError) as caught:
        CudaRegion("r", 1 << 30, 2)
    assert str(caught.value) == (
        "cannot allocate 1073741824 bytes of CUDA shared memory on device 2: out of memory"
    )


def test_copies_to_one_gpu_never_overlap(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tritonclient.utils.cuda_shared_memory as cudashm

    inside: list[int] = []
    overlaps: list[int] = []
    real_set = cudashm.set_shared_memory_region

    def set_region(handle: Any, values: list[np.ndarray[Any, Any]]) -> None:
        inside.append(1)
        if len(inside) > 1:
            overlaps.append(len(inside))
        time.sleep(0.02)  # as a first use making the device's stream would take
        real_set(handle, values)
        inside.pop()

    monkeypatch.setattr(cudashm, "set_shared_memory_region", set_region)
    regions = [CudaRegion(f"r{n}", 64, 0) for n in range(4)]
    threads = [
        threading.Thread(target=region.write, args=(np.arange(4, dtype=np.float32),))
        for region in regions
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert all(
        bytes(fake_cuda[f"r{n}"].memory[:16]) == np.arange(4, dtype="<f4").tobytes()
        for n in range(4)
    )
    for region in regions:
        region.close()


def test_big_endian_inputs_reach_gpu_memory_little_endian(fake_cuda: dict[str, Any]) -> None:
    region = CudaRegion("r", 64, 0)
    values = np.arange(4, dtype=">f4")
    region.write(values)
    assert bytes(fake_cuda["r"].memory[:16]) == values.astype("<f4").tobytes()
    region.close()


async def test_close_unregisters_with_the_headers_it_is_given(mode: str) -> None:
    server = Server()
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))
    headers = {"authorization": "Bearer t"}
    await resolve(
        client.aclose(headers=headers) if mode == "async" else client.close(headers=headers)
    )
    unregisters = [
        call
        for call in client._transport.calls
        if isinstance(call.op, ops.UnregisterSystemSharedMemory)
    ]
    assert len(unregisters) == 2
    assert all(dict(call.ctx.headers) == headers for call in unregisters)
    assert server.regions == []


@pytest.mark.parametrize(("forced", "ratio"), [(False, 1.001), (True, 251.0)])
def test_small_answers_size_regions_only_in_forced_modes(forced: bool, ratio: float) -> None:
    plan = PlacementPlan(RAGGED)
    plan.learn(ragged_request(1, 1), answer(251), forced=forced)  # 4 bytes in, 1004 out
    plan.learn(ragged_request(1, 262144), answer(262144 + 250), forced=forced)
    assert plan.open_outputs["Y"] == pytest.approx(ratio, rel=1e-3)


async def test_close_with_headers_it_cannot_send_keeps_the_client_open(mode: str) -> None:
    server = Server()
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))
    bad: Any = {"authorization": 5}
    with pytest.raises(ts.InvalidInputError):
        await resolve(client.aclose(headers=bad) if mode == "async" else client.close(headers=bad))
    assert len(server.regions) == 2
    await resolve(client.aclose() if mode == "async" else client.close())
    assert server.regions == []


class RunsOn(Server):
    """Fails the first infer once the request is out (the server may still run it), and
    keeps using that request's regions until ``done``: refusing to unregister them as
    Triton 2.50-2.51 do, or (``defers``) accepting and listing them until then, as 2.52+."""

    def __init__(self, defers: bool) -> None:
        super().__init__()
        self.defers = defers
        self.running: set[str] = set()
        self.pending: set[str] = set()
        self.infers = 0

    def done(self) -> None:
        self.running.clear()
        self.regions = [r for r in self.regions if r["name"] not in self.pending]

    def __call__(self, op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.InferRequest):
            self.infers += 1
            if self.infers == 1:
                self.running = {slot.region.name for slot in op.shared_memory.inputs.values()}
                self.running |= {slot.region.name for slot in op.shared_memory.outputs.values()}
                return ts.TritonConnectionError(
                    "connection reset", retryable=True, may_have_run=True
                )
        if isinstance(op, ops.UnregisterSystemSharedMemory) and op.name in self.running:
            if not self.defers:
                return ts.InferenceError(
                    f"Cannot unregister shared memory region '{op.name}', it is currently in use.",
                    status="INTERNAL",
                )
            self.pending.add(op.name)
            return None
        return super().__call__(op, ctx)


@pytest.mark.parametrize("defers", [False, True], ids=["refuses", "defers"])
async def test_regions_a_resent_request_used_are_freed_only_once_the_server_lets_go(
    mode: str, defers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("triton_sdk._shm.CHECK_EVERY_S", 0.0)
    server = RunsOn(defers)
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))  # attempt 1 may have run; attempt 2 answered
    first = {r["name"] for r in server.regions}
    assert server.running == first
    await resolve(model.infer(X=BATCH))
    second = sent(client)[-1].shared_memory
    assert second is not None
    assert not first & {region.name for region in second.regions}  # not used again
    assert first < {r["name"] for r in server.regions}  # kept while the server uses them
    server.done()
    await resolve(model.infer(X=BATCH))
    assert {r["name"] for r in server.regions} == {region.name for region in second.regions}
    await resolve(client.aclose() if mode == "async" else client.close())
    assert server.regions == []


def test_an_abandoned_region_that_a_view_uses_is_offered_for_freeing_once_the_view_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("triton_sdk._shm.CHECK_EVERY_S", 0.0)
    pool = RegionPool()
    lent, idle = pool.take(1024), pool.take(1024)
    lent.registered = idle.registered = True
    view = np.frombuffer(lent.view(16), dtype=np.float32)
    placement = Placement({"X": Slot(idle, 0, 16)}, {"Y": Slot(lent, 0, 16, True, view)})
    pool.release(placement, abandoned=True)
    assert pool.due_for_check() == [(idle,)]
    other = pool.take(1024)
    assert other not in (lent, idle)  # neither is used again
    del view
    assert [set(call) for call in pool.due_for_check()] == [{lent, idle}]
    pool.forget(idle)  # closed, and no longer the pool's
    left = pool.drain().regions
    assert set(left) == {lent, other}
    for region in left:
        region.close()


def test_abandoned_regions_are_checked_at_most_once_a_second() -> None:
    pool = RegionPool()
    region = pool.take(1024)
    region.registered = True
    pool.release(Placement({"X": Slot(region, 0, 16)}, {}), abandoned=True)
    assert pool.due_for_check() == [(region,)]
    assert pool.due_for_check() == []  # asked the server a moment ago
    assert pool.due_for_check(force=True) == [(region,)]  # (close() asks once more)
    for left in pool.drain().regions:
        left.close()


class FailsOnce(Server):
    """Answers the first infer with ``error``."""

    def __init__(self, error: ts.TritonError) -> None:
        super().__init__()
        self.error: ts.TritonError | None = error

    def __call__(self, op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.InferRequest) and self.error is not None:
            error, self.error = self.error, None
            return error
        return super().__call__(op, ctx)


@pytest.mark.parametrize(
    ("error", "abandoned"),
    [
        (ts.TritonTimeoutError("Deadline Exceeded", may_have_run=True), True),
        (ts.InferenceError("Received RST_STREAM with error code 2", status="INTERNAL"), True),
        (ts.InferenceError("Stream removed", status="UNKNOWN"), True),
        (ts.InferenceError("model failed: division by zero", status="INTERNAL"), False),
        (ts.TritonConnectionError("failed to connect: connection refused"), False),
    ],
    ids=["timeout", "reset-stream", "stream-removed", "model-failed", "never-connected"],
)
async def test_a_failed_calls_regions_are_reused_only_when_the_request_is_over(
    mode: str, error: ts.TritonError, abandoned: bool
) -> None:
    server = FailsOnce(error)
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    with pytest.raises(type(error)):
        await resolve(model.infer(X=BATCH))
    first = {r["name"] for r in server.regions}
    await resolve(model.infer(X=BATCH))
    second = sent(client)[-1].shared_memory
    assert second is not None
    reused = first == {region.name for region in second.regions}
    assert reused is not abandoned
    await resolve(client.aclose() if mode == "async" else client.close())


def test_a_resent_requests_outputs_are_copied_out_of_their_regions() -> None:
    pool = RegionPool()
    region = pool.take(1024)
    placement = Placement({}, {"Y": Slot(region, 0, 16, True)})
    request = InferRequest(model="big", inputs=[], shared_memory=placement)
    note_resend(request, ts.TritonConnectionError("failed to connect", retryable=True))
    assert placement.outputs["Y"].view  # that attempt never reached the server
    assert not placement.resent
    note_resend(request, ts.TritonConnectionError("reset", retryable=True, may_have_run=True))
    assert not placement.outputs["Y"].view  # the first attempt may write into it later
    assert placement.resent
    for left in pool.drain().regions:
        left.close()


async def test_close_leaves_regions_the_server_still_uses(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = RunsOn(defers=False)
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))  # resent: its regions are abandoned
    in_use = set(server.running)
    await resolve(model.infer(X=BATCH))  # in other regions
    assert in_use < {r["name"] for r in server.regions}
    await resolve(client.aclose() if mode == "async" else client.close())
    assert {r["name"] for r in server.regions} == in_use  # refused while in use
    assert "the server may still use shared memory" in caplog.text


async def test_close_keeps_gpu_memory_the_server_may_still_write(
    mode: str, fake_cuda: dict[str, Any]
) -> None:
    class RunsOnGpu(RunsOn):
        def __call__(self, op: Any, ctx: Any) -> Any:
            if isinstance(op, ops.UnregisterCudaSharedMemory) and op.name in self.running:
                return ts.InferenceError("it is currently in use", status="INTERNAL")
            return super().__call__(op, ctx)

    server = RunsOnGpu(defers=False)
    client = client_of(mode, server, "cuda")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))  # resent: its regions are abandoned
    await resolve(model.infer(X=BATCH))
    assert len(fake_cuda) == 4
    await resolve(client.aclose() if mode == "async" else client.close())
    assert set(fake_cuda) == server.running  # the others were freed
    assert {r.name for r in server.cuda} == server.running


async def test_a_server_before_2_50_keeps_abandoned_regions_registered(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unregistering a region under a running request could crash such a server."""
    monkeypatch.setattr("triton_sdk._shm.CHECK_EVERY_S", 0.0)
    server = RunsOn(defers=False)
    server.version = "2.49.0"
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    await resolve(model.infer(X=BATCH))  # resent: its regions are abandoned
    abandoned = set(server.running)
    await resolve(model.infer(X=BATCH))  # (a check is due: it sends no unregister)
    await resolve(client.aclose() if mode == "async" else client.close())
    unregistered = {
        call.op.name
        for call in client._transport.calls
        if isinstance(call.op, ops.UnregisterSystemSharedMemory)
    }
    assert not unregistered & abandoned
    assert {r["name"] for r in server.regions} == abandoned


@pytest.mark.parametrize(
    ("name", "version", "guards"),
    [
        ("triton", "2.50.0", True),
        ("triton", "2.63.0", True),
        ("triton", "2.49.0", False),
        ("triton", "", False),
        ("mlserver", "1.7.1", False),
    ],
)
def test_which_servers_keep_a_region_in_use(name: str, version: str, guards: bool) -> None:
    assert guards_regions_in_use({"name": name, "version": version}) is guards


def test_regions_the_server_lost_close_once_no_call_uses_them() -> None:
    pool = RegionPool()
    idle, busy, later = pool.take(1024), pool.take(1024), pool.take(1024)
    for region in (idle, busy):
        pool.registered(region)
    before = pool.registrations()  # the server's list is asked for now...
    pool.registered(later)  # ...and this one registered meanwhile: the list may lack it
    pool.give_back([idle])
    pool.lost(listed=set(), before=before)
    assert idle._map.closed  # idle: closed at once
    assert not busy._map.closed  # a call uses it: its memory stays until it is done
    assert busy.registered  # (sending it makes the server refuse: the call places anew)
    pool.give_back([busy, later])
    assert busy._map.closed
    assert not later._map.closed  # registered after the list was asked for: kept
    assert pool.take(1024) is later  # reused; the lost ones are no longer the pool's
    assert pool.drain().regions == [later]
    later.close()


def test_a_drained_gpu_region_of_a_call_that_may_still_run_is_not_freed(
    fake_cuda: dict[str, Any],
) -> None:
    pool = RegionPool(device=0)
    region = pool.take(1024)
    pool.registered(region)
    drained = pool.drain()
    assert drained.busy == {region}  # the client closes while a call uses it
    pool.release(Placement({"X": Slot(region, 0, 16)}, {}), abandoned=True)
    assert region.name in fake_cuda  # the server may still write into it
    other = RegionPool(device=0)
    done = other.take(1024)
    other.drain()
    other.release(Placement({"X": Slot(done, 0, 16)}, {}))
    assert done.name not in fake_cuda  # a call that ended with its answer frees it


class CutOffOnce(Server):
    """A server whose first registration the client gives up on: before it arrives, or
    after (the server has it, the answer never came)."""

    def __init__(self, arrives: bool) -> None:
        super().__init__()
        self.arrives = arrives

    def __call__(self, op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.RegisterSystemSharedMemory) and not hasattr(self, "cut"):
            self.cut = op.name
            if self.arrives:
                super().__call__(op, ctx)
            raise ts.TritonTimeoutError("timed out registering")
        return super().__call__(op, ctx)


@pytest.mark.parametrize(
    ("arrives", "version"), [(False, "2.51.0"), (True, "2.51.0"), (True, "2.45.0")]
)
async def test_a_region_whose_registration_was_cut_off_is_never_sent(
    mode: str, arrives: bool, version: str
) -> None:
    # (Counted as registered, it went back to the pool: a later call sent it to a server
    # that never had it, and was refused "Unable to find shared memory region". Before
    # 2.50 the server does not guard regions in use, yet this one, never used, is
    # unregistered at close.)
    server = CutOffOnce(arrives)
    server.version = version
    client = client_of(mode, server, "system")
    model = await resolve(client.model("big"))
    with pytest.raises(ts.TritonTimeoutError):
        await resolve(model.infer(X=BATCH))
    for _ in range(3):
        await resolve(model.infer(X=BATCH))
    placements = [request.shared_memory for request in sent(client) if request.shared_memory]
    placed = {
        slot.region.name
        for placement in placements
        for slot in (*placement.inputs.values(), *placement.outputs.values())
    }
    assert placed
    assert server.cut not in placed
    await resolve(client.aclose() if mode == "async" else client.close())
    assert server.regions == []
    tag = client._regions._tag
    assert [name for name in os.listdir("/dev/shm") if name.startswith(tag)] == []


async def test_an_aclose_cut_off_by_a_timeout_still_unregisters_its_regions() -> None:
    # (The first aclose stopped where it was cut off, marked the client closed, and a
    # second returned at once: regions stayed registered for the life of the process.)
    import asyncio

    server = Server()

    async def slow_server(op: Any, ctx: Any) -> Any:
        if isinstance(op, ops.UnregisterSystemSharedMemory):
            await asyncio.sleep(0.05)
        return server(op, ctx)

    client = ts.AsyncClient(
        "grpc://test",
        transport=MockTransport(slow_server, models=[BIG]),
        shared_memory="system",
    )
    model = await client.model("big")
    await model.infer(X=BATCH)
    assert server.regions
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.aclose(), 0.01)
    for _ in range(100):
        if not server.regions:
            break
        await asyncio.sleep(0.02)
    assert server.regions == []
    await client.aclose()
    with pytest.raises(ts.TritonError, match="closed"):
        await client.server_metadata()


def test_regions_the_server_keeps_are_asked_for_less_and_less_often() -> None:
    pool = RegionPool()
    assert pool.claim_sweep()
    waits = []
    for kept in ({"a"}, {"a"}, {"a"}, {"b"}, set()):
        pool.swept(kept)
        waits.append(pool._sweep_wait)
    assert waits == [1.0, 2.0, 4.0, 1.0, 1.0]
    assert not pool.claim_sweep()  # (nothing kept: no sweep again)


def test_one_sweep_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Calls that came while the first sweep ran each swept too (16 at once: 16 sweeps).
    pool = RegionPool()
    assert pool.claim_sweep()
    assert not pool.claim_sweep()
    pool.sweep_over()  # (cut short: due again at once)
    assert pool.claim_sweep()
    pool.swept({"a"})
    now = time.monotonic()
    monkeypatch.setattr(shm.time, "monotonic", lambda: now + 60)
    assert pool.claim_sweep()
    assert not pool.claim_sweep()


def test_a_sweep_that_could_not_read_the_regions_is_due_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A failed status read ended the sweeps for good (and the first one's, every sweep).
    pool = RegionPool()
    pool.swept({"a"})
    pool.sweep_later()
    assert not pool.claim_sweep()
    assert pool._still_stale == {"a"}
    now = time.monotonic()
    monkeypatch.setattr(shm.time, "monotonic", lambda: now + 60)
    assert pool.claim_sweep()


def test_surplus_is_what_calls_of_its_size_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shm, "SURPLUS_AFTER_S", 0.0)
    monkeypatch.setattr(shm, "CHECK_EVERY_S", 0.0)
    pool = RegionPool()
    burst = []
    try:
        burst += [pool.take(1 << 20) for _ in range(3)]
        for region in burst:
            pool.registered(region)
        pool.give_back(burst)
        # A client that calls now and then: its region was idle, but never passed over.
        assert pool.surplus() == []
        one = pool.take(1 << 20)  # calls one at a time take the last given back
        assert one is burst[-1]
        pool.give_back([one])
        assert set(pool.surplus()) == set(burst[:2])
        assert pool.take(1 << 20) is one  # the one in use stays the pool's
    finally:
        for region in {*pool.drain().regions, *burst}:  # (surplus ones are the caller's)
            region.close()


def test_a_region_larger_than_a_file_can_be_is_no_room() -> None:
    # A model declaring an output of 2**61 FP32 raised a raw OverflowError from the pool,
    # and "auto" did not fall back to the socket as it does for a region /dev/shm lacks.
    name = f"triton_sdk_test_{os.getpid()}_huge"
    with pytest.raises(shm.NoRoomForRegion, match=f"region of {2**63} bytes"):
        shm.Region(name, 2**63)
    assert not os.path.exists(f"/dev/shm/{name}")
