"""Shared memory decisions on a MockTransport: fallback, refusal, stale regions, cleanup."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk._shm import HOST, stale_regions
from triton_sdk.testing import MockTransport

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

    def __init__(self, readable: bool = True, regions: list[dict[str, Any]] | None = None):
        self.readable = readable
        self.regions = regions or []

    def __call__(self, op: Any, ctx: Any) -> Any:
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
    assert not [name for name in os.listdir("/dev/shm") if name.startswith("triton_sdk-")]
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
