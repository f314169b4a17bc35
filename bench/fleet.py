"""One client over three local servers against one server: throughput and spread.

Starts three local tritonservers serving ``work``, a model that holds each request for
``--millis`` ms (one instance, no batching: each server runs one request at a time, so
its capacity is about 1000 / millis calls per second whatever the CPU). ``--threads``
threads share one blocking ``ts.Client`` and call ``work`` back to back for
``--seconds`` per variant:

- one server: ``ts.Client(url)``;
- three servers: ``ts.Client([url1, url2, url3])``, picking by fewest requests in
  flight between two random endpoints.

It prints calls per second, the ratio three/one (the ideal is 3.0), the p50 and p99
latency and how the calls spread over the endpoints (``client.endpoints()``), on gRPC
and on HTTP.

    python bench/fleet.py
    python bench/fleet.py --threads 12 --millis 5 --seconds 3

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import triton_sdk as ts
from triton_sdk.local import LocalServer

MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            millis = pb_utils.get_input_tensor_by_name(request, "MILLIS").as_numpy()
            time.sleep(float(millis[0]) / 1000)
            out = pb_utils.Tensor("DONE", np.ones(1, dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

CONFIG = """\
name: "work"
backend: "python"
max_batch_size: 0
input [ { name: "MILLIS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "DONE" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def repository(folder: Path) -> Path:
    model = folder / "work"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    return folder


def load(client: ts.Client, threads: int, seconds: float, millis: float) -> list[float]:
    """Latencies of every call made by ``threads`` threads for ``seconds``."""
    model = client.model("work")
    argument = np.array([millis], dtype=np.float32)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    stop = time.monotonic() + seconds

    def work(mine: list[float]) -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            model.infer(MILLIS=argument)
            mine.append(time.perf_counter() - started)

    workers = [threading.Thread(target=work, args=(mine,)) for mine in latencies]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return [latency for mine in latencies for latency in mine]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--millis", type=float, default=10.0, help="ms each request holds")
    args = parser.parse_args()
    print(f"triton-sdk-py {ts.__version__}, {args.threads} threads, {args.millis} ms per request")
    with tempfile.TemporaryDirectory() as folder:
        models = repository(Path(folder))
        servers = [LocalServer(models) for _ in range(3)]
        try:
            for server in servers:
                server.start()
            for protocol in ("grpc", "http"):
                urls = [s.grpc_url if protocol == "grpc" else s.http_url for s in servers]
                rates = {}
                for name, target in (("one server", urls[0]), ("three servers", urls)):
                    with ts.Client(target, timeout=30) as client:
                        client.model("work").infer(MILLIS=np.zeros(1, np.float32))  # warm
                        latencies = load(client, args.threads, args.seconds, args.millis)
                        spread = [state.requests for state in client.endpoints()]
                    rates[name] = len(latencies) / args.seconds
                    p50 = statistics.median(latencies) * 1e3
                    p99 = statistics.quantiles(latencies, n=100)[98] * 1e3
                    print(
                        f"{protocol:<5} {name:<14} {rates[name]:8.1f} calls/s   "
                        f"p50 {p50:6.1f} ms   p99 {p99:6.1f} ms   spread {spread}"
                    )
                ratio = rates["three servers"] / rates["one server"]
                print(f"{protocol:<5} three / one: {ratio:.2f}x")
        finally:
            for server in servers:
                server.stop()
    print("spread: requests sent to each endpoint (a client of one URL keeps no counters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
