"""CUDA shared memory against the real server.

The extension's calls are checked on every host. The round trip through GPU memory runs
only where this host has a CUDA device (skipped otherwise); where it has none,
``shared_memory="cuda"`` must fail before anything is sent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk.local import LocalServer

from .conftest import inference_count

SAMPLE = 262144  # FP32 elements per sample of big_fixed: 1 MiB


def cuda_devices() -> tuple[int, str]:
    """How many CUDA devices this process can use, and why none when none."""
    try:
        from cuda.bindings import runtime
    except ImportError as error:
        return 0, f"cuda-python cannot be imported ({error})"
    status, count = runtime.cudaGetDeviceCount()
    if status != runtime.cudaError_t.cudaSuccess:
        return 0, f"cudaGetDeviceCount says {status.name}"
    return int(count), "no CUDA device on this host"


DEVICES, WHY_NONE = cuda_devices()
GPU = DEVICES > 0
needs_gpu = pytest.mark.skipif(not GPU, reason=WHY_NONE)
without_gpu = pytest.mark.skipif(GPU, reason="this host has a CUDA device")


def test_a_host_with_an_nvidia_gpu_runs_the_gpu_tests() -> None:
    """A GPU that CUDA cannot reach from here (a driver older than cuda-python needs)
    would otherwise skip every round trip below without anyone noticing."""
    if not Path("/dev/nvidia0").exists():
        pytest.skip("this host has no NVIDIA GPU")
    assert GPU, (
        f"this host has an NVIDIA GPU but {WHY_NONE}: install the cuda-python whose major "
        "version the driver supports (nvidia-smi shows it; 'cuda-python>=12.8,<13' before R580)"
    )


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
    add_sub = client.model("add_sub")
    with pytest.raises(ts.TritonError, match=r"CUDA shared memory on device 0|cuda-python"):
        add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])  # small tensors go there too
    small = add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1], shared_memory="off")
    assert small["OUTPUT0"].tolist() == [2, 3, 4, 5]


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
