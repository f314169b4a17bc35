"""CUDA shared memory against the real server.

The extension's calls are checked on every host. The round trip through GPU memory runs
only where this host has a CUDA device (skipped otherwise); where it has none,
``shared_memory="cuda"`` must fail before anything is sent.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk.local import LocalServer

from .conftest import inference_count

SAMPLE = 262144  # FP32 elements per sample of big_fixed: 1 MiB


def cuda_devices() -> int:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return 0
    error, count = runtime.cudaGetDeviceCount()
    return int(count) if error == runtime.cudaError_t.cudaSuccess else 0


GPU = cuda_devices() > 0
needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA device on this host")
without_gpu = pytest.mark.skipif(GPU, reason="this host has a CUDA device")


def own_cuda(client: Any) -> list[str]:
    """The CUDA regions the server has of this process."""
    pid = f"-{os.getpid()}-"
    return sorted(r.name for r in client.cuda_shared_memory_status() if pid in r.name)


def test_the_cuda_status_is_a_list_of_regions(client: Any) -> None:
    regions = client.cuda_shared_memory_status()
    assert all(isinstance(region, ts.CudaSharedMemoryRegion) for region in regions)
    if not GPU:
        assert regions == []


@without_gpu
def test_a_cuda_registration_reaches_the_server(server: LocalServer, protocol: str) -> None:
    client = server.client(protocol)
    register = ops.RegisterCudaSharedMemory("triton_sdk-probe", bytes(64), 0, 1024)
    try:
        # The server read the request (over HTTP a body it cannot read is refused earlier,
        # naming what it lacks) and then could not open the handle: there is no GPU.
        with pytest.raises(ts.InferenceError, match="failed to register"):
            client._run(register, client._options(ts.NOT_GIVEN, None, ts.NOT_GIVEN))
        assert own_cuda(client) == []
    finally:
        client.close()


@without_gpu
def test_cuda_without_a_device_fails_clearly_and_sends_nothing(
    make_client: Any, server: LocalServer
) -> None:
    client = make_client(shared_memory="cuda")
    model = client.model("big_fixed")
    before = inference_count(server, "big_fixed")
    with pytest.raises(ts.TritonError, match=r"CUDA shared memory on device 0|cuda-python"):
        model.infer(X=np.ones((1, SAMPLE), dtype=np.float32))
    assert inference_count(server, "big_fixed") == before
    assert own_cuda(client) == []
    small = client.model("add_sub").infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert small["OUTPUT0"].tolist() == [2, 3, 4, 5]  # small tensors need no region


@needs_gpu
@pytest.mark.parametrize("shared_memory", ["cuda", "cuda:0"])
def test_large_tensors_go_through_gpu_memory_and_come_back_right(
    make_client: Any, shared_memory: str
) -> None:
    client = make_client(shared_memory=shared_memory)
    model = client.model("big_fixed")
    batch = np.random.default_rng(2).random((3, SAMPLE), dtype=np.float32)
    for scale in (1, 2, 3):
        answer = model.infer(X=batch * scale)["Y"]
        assert np.array_equal(answer, 2 * scale * batch)
        assert answer.flags.writeable  # a host copy of its own
    registered = own_cuda(client)
    assert len(registered) == 2  # the input's and the output's, reused by every call
    target = getattr(client, "target", client)
    assert all(name.startswith(target._cuda_regions[0]._tag) for name in registered)
    if hasattr(client, "close"):
        client.close()
    else:
        client.aclose()
    with ts.Client(target.url) as observer:
        assert own_cuda(observer) == []
