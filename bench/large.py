"""Large tensors: a round trip of 1, 16 and 64 MiB of FP32, side by side in one run.

Starts one local tritonserver with copy models (``Y = X``, FP32, a fixed size each) and,
for each size, times in turn:

- raw tritonclient over gRPC and over HTTP (``InferInput.set_data_from_numpy``, the
  binary extension on HTTP), as people write it;
- raw tritonclient with system shared memory set up by hand (regions created and
  registered once, inputs copied in, outputs read out with a copy), the fastest that
  tritonclient offers;
- triton_sdk over gRPC and HTTP with ``shared_memory="off"`` (sockets) and ``"auto"``
  (shared memory, the default on a local server; outputs are views of their regions),
  and over gRPC with ``shared_memory_outputs="copy"`` (outputs copied out, as by hand).

Rounds interleave the variants, in a new (seeded) order each round; the script prints
each one's median time, its throughput (payload in + out over time) and its ratio to raw
sockets and to raw shared memory.

    python bench/large.py                    # 1, 16 and 64 MiB, about 2-3 minutes
    python bench/large.py --sizes 16 --rounds 10

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

import triton_sdk as ts
from triton_sdk.local import LocalServer

MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())
                ]
            )
            for r in requests
        ]
"""

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {count} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {count} ] }} ]
"""


def repository(folder: Path, sizes: list[int]) -> Path:
    for mib in sizes:
        model = folder / f"copy_{mib}m"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(CONFIG.format(name=model.name, count=mib * 2**20 // 4))
        (model / "1" / "model.py").write_text(MODEL)
    return folder


class RawShm:
    """tritonclient with system shared memory, set up once, as a careful user would."""

    def __init__(self, client: Any, module: Any, model: str, nbytes: int, tag: str) -> None:
        self.client, self.module, self.model, self.nbytes = client, module, model, nbytes
        self.names = (f"bench_in_{tag}", f"bench_out_{tag}")
        self.handles = [
            shm.create_shared_memory_region(name, f"/{name}", nbytes) for name in self.names
        ]
        for name in self.names:
            client.register_system_shared_memory(name, f"/{name}", nbytes)

    def __call__(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        shm.set_shared_memory_region(self.handles[0], [array])
        given = self.module.InferInput("X", list(array.shape), "FP32")
        given.set_shared_memory(self.names[0], self.nbytes)
        wanted = self.module.InferRequestedOutput("Y")
        wanted.set_shared_memory(self.names[1], self.nbytes)
        self.client.infer(self.model, [given], outputs=[wanted])
        return np.array(shm.get_contents_as_numpy(self.handles[1], np.float32, list(array.shape)))

    def close(self) -> None:
        for name, handle in zip(self.names, self.handles, strict=True):
            self.client.unregister_system_shared_memory(name)
            shm.destroy_shared_memory_region(handle)


def raw_sockets(client: Any, module: Any, model: str) -> Callable[[Any], Any]:
    def call(array: np.ndarray[Any, Any]) -> Any:
        given = module.InferInput("X", list(array.shape), "FP32")
        if module is httpclient:
            given.set_data_from_numpy(array, binary_data=True)
            wanted = [module.InferRequestedOutput("Y", binary_data=True)]
        else:
            given.set_data_from_numpy(array)
            wanted = [module.InferRequestedOutput("Y")]
        return client.infer(model, [given], outputs=wanted).as_numpy("Y")

    return call


def sdk(client: ts.Client, model: str, mode: str) -> Callable[[Any], Any]:
    handle = client.model(model)

    def call(array: np.ndarray[Any, Any]) -> Any:
        return handle.infer(X=array, shared_memory=mode)["Y"]

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="MiB")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    print(
        f"Python {platform.python_version()}, triton-sdk-py {ts.__version__}, "
        f"numpy {np.__version__}"
    )
    with (
        tempfile.TemporaryDirectory() as folder,
        LocalServer(repository(Path(folder), args.sizes)) as server,
    ):
        grpc_raw = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
        http_raw = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        grpc_sdk = ts.Client(server.grpc_url, timeout=120)
        http_sdk = ts.Client(server.http_url, timeout=120)
        copying_sdk = ts.Client(server.grpc_url, timeout=120, shared_memory_outputs="copy")
        columns = ("median ms", "GB/s", "vs raw sockets", "vs raw shm")
        print(f"{'MiB':>4} {'variant':<22} {columns[0]:>10} {columns[1]:>6} ", end="")
        print(f"{columns[2]:>15} {columns[3]:>11}")
        try:
            for mib in args.sizes:
                model = f"copy_{mib}m"
                nbytes = mib * 2**20
                array = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
                shm_by_hand = RawShm(grpc_raw, grpcclient, model, nbytes, str(mib))
                variants: dict[str, Callable[[Any], Any]] = {
                    "raw grpc sockets": raw_sockets(grpc_raw, grpcclient, model),
                    "raw http sockets": raw_sockets(http_raw, httpclient, model),
                    "raw grpc shm by hand": shm_by_hand,
                    "sdk grpc off": sdk(grpc_sdk, model, "off"),
                    "sdk http off": sdk(http_sdk, model, "off"),
                    "sdk grpc auto (shm)": sdk(grpc_sdk, model, "auto"),
                    "sdk http auto (shm)": sdk(http_sdk, model, "auto"),
                    "sdk grpc auto, copy": sdk(copying_sdk, model, "auto"),
                }
                times: dict[str, list[float]] = {name: [] for name in variants}
                for name, call in variants.items():  # warm-up and check
                    assert np.array_equal(np.asarray(call(array)).reshape(-1), array), name
                shuffler = random.Random(mib)
                for _ in range(args.rounds):
                    # A new order each round, so that no variant always runs right after
                    # the same other one (and pays for its memory churn).
                    names = list(variants)
                    shuffler.shuffle(names)
                    for name in names:
                        call = variants[name]
                        started = time.perf_counter()
                        call(array)
                        times[name].append(time.perf_counter() - started)
                shm_by_hand.close()
                medians = {name: statistics.median(values) for name, values in times.items()}
                sockets = min(medians["raw grpc sockets"], medians["raw http sockets"])
                for name, median in medians.items():
                    rate = 2 * nbytes / median / 1e9
                    by_hand = medians["raw grpc shm by hand"] / median
                    print(f"{mib:>4} {name:<22} {median * 1e3:>10.1f} {rate:>6.2f} ", end="")
                    print(f"{sockets / median:>14.1f}x {by_hand:>10.2f}x")
        finally:
            grpc_sdk.close()
            http_sdk.close()
            copying_sdk.close()
            grpc_raw.close()
            http_raw.close()
    print("vs raw sockets: the faster raw socket transport's time / this one's (higher is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
