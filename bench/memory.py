"""Peak memory of a large round trip over sockets: triton_sdk against raw tritonclient.

Starts one local tritonserver with a copy model (``Y = X``, FP32, 64 MiB by default) and
measures, for each variant in a fresh process of its own, how far the process's resident
memory rises above what it held just before the call (the input array already made):
the copies a client makes on the way out and back. The answer itself is one payload;
everything above that is the client's own. Variants:

- raw tritonclient over gRPC and HTTP (``set_data_from_numpy``, binary data on HTTP);
- triton_sdk over gRPC and HTTP, blocking and asyncio, with ``shared_memory="off"``, as
  for a remote server.

    python bench/memory.py               # 64 MiB
    python bench/memory.py --mib 16

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from large import repository

from triton_sdk.local import LocalServer

VARIANTS = ("raw-grpc", "sdk-grpc", "sdk-grpc-aio", "raw-http", "sdk-http", "sdk-http-aio")

CHILD = """
import json, resource, sys
import numpy as np

variant, url, model, mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()

protocol = variant.split("-")[1]
if variant.startswith("raw"):
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    client = module.InferenceServerClient(url)

    def call(array):
        given = module.InferInput("X", list(array.shape), "FP32")
        given.set_data_from_numpy(array)
        wanted = [module.InferRequestedOutput("Y")]
        return client.infer(model, [given], outputs=wanted).as_numpy("Y")
elif variant.endswith("aio"):
    import asyncio
    import triton_sdk as ts

    async def infer(array):
        async with ts.AsyncClient(url, shared_memory="off") as client:
            handle = await client.model(model)  # opens the channel
            global before
            before = resident()
            return (await handle.infer(X=array))["Y"]

    def call(array):
        return asyncio.run(infer(array))
else:
    import triton_sdk as ts
    handle = ts.Client(url, shared_memory="off").model(model)

    def call(array):
        return handle.infer(X=array)["Y"]

array = np.random.default_rng(0).random(mib * 2**20 // 4, dtype=np.float32)
before = resident()
result = call(array)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
assert np.array_equal(result, array)
print(json.dumps({"rise": peak - before}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    payload = args.mib * 2**20
    with (
        tempfile.TemporaryDirectory() as folder,
        LocalServer(repository(Path(folder), [args.mib])) as server,
    ):
        model = f"copy_{args.mib}m"
        urls = {
            "raw-grpc": f"127.0.0.1:{server.grpc_port}",
            "raw-http": f"127.0.0.1:{server.http_port}",
            "sdk-grpc": server.grpc_url,
            "sdk-http": server.http_url,
            "sdk-grpc-aio": server.grpc_url,
            "sdk-http-aio": server.http_url,
        }
        print(f"{args.mib} MiB FP32 round trip; rise of resident memory during the call")
        print(f"{'variant':<12} {'MiB':>7} {'x payload':>10}")
        for variant in VARIANTS:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, variant, urls[variant], model, str(args.mib)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rise = json.loads(out.strip().splitlines()[-1])["rise"]
            print(f"{variant:<12} {rise / 2**20:7.0f} {rise / payload:10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
