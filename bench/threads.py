"""Many threads on one blocking client: throughput of triton_sdk against raw tritonclient.

Starts one local tritonserver on the example repository and has ``--threads`` threads
(64 by default) send small ``add_sub`` requests as fast as they can, for a fixed time
per variant:

- raw gRPC: one ``tritonclient.grpc.InferenceServerClient`` shared by every thread (it
  is thread-safe), requests built by hand on each call;
- raw HTTP: one ``tritonclient.http.InferenceServerClient`` per thread, made in that
  thread: the gevent-based client can be used only by the thread that made it;
- sdk: one ``ts.Client`` (gRPC or HTTP) and one model handle shared by every thread.

Rounds alternate the variants. The script prints each variant's calls per second
(median over rounds), the p50 and p99 latency over all calls, and the ratio sdk/raw
of the throughputs (the target: at least 1.0).

    python bench/threads.py                       # gRPC and HTTP, 64 threads
    python bench/threads.py --threads 16 --seconds 2

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc
import tritonclient.http

import triton_sdk as ts
from triton_sdk.local import LocalServer

MODEL = "add_sub"
OUTPUT = "OUTPUT0"
A = np.arange(4, dtype=np.float32)
B = np.ones(4, dtype=np.float32)

Call = Callable[[], Any]


def raw_call(module: Any, client: Any) -> Call:
    def call() -> Any:
        input0 = module.InferInput("INPUT0", [4], "FP32")
        input0.set_data_from_numpy(A)
        input1 = module.InferInput("INPUT1", [4], "FP32")
        input1.set_data_from_numpy(B)
        outputs = [module.InferRequestedOutput(OUTPUT)]
        return client.infer(MODEL, [input0, input1], outputs=outputs).as_numpy(OUTPUT)

    return call


def sdk_call(model: ts.Model) -> Call:
    def call() -> Any:
        return model.infer(INPUT0=A, INPUT1=B, outputs=[OUTPUT])[OUTPUT]

    return call


def run_round(calls: list[Call], seconds: float) -> tuple[float, list[float]]:
    """Every thread runs its call until the time is up: calls per second, latencies."""
    latencies: list[list[float]] = [[] for _ in calls]
    start = threading.Barrier(len(calls) + 1)
    stop_at = 0.0

    def worker(call: Call, sink: list[float]) -> None:
        clock = time.perf_counter
        call()  # untimed: a per-thread client connects
        start.wait()
        while True:
            began = clock()
            if began >= stop_at:
                return
            call()
            sink.append(clock() - began)

    threads = [
        threading.Thread(target=worker, args=(call, sink), daemon=True)
        for call, sink in zip(calls, latencies, strict=True)
    ]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    stop_at = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    flat = [latency for sink in latencies for latency in sink]
    return len(flat) / elapsed, flat


def per_thread_raw_http(port: int) -> tuple[Call, Callable[[], None]]:
    """A raw HTTP call that uses a client of the calling thread's own; and a closer."""
    local = threading.local()
    clients: list[Any] = []
    lock = threading.Lock()

    def call() -> Any:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{port}")
            with lock:
                clients.append(client)
        return raw_call(tritonclient.http, client)()

    def close() -> None:
        for client in clients:
            client.close()

    return call, close


def compare(name: str, variants: dict[str, list[Call]], rounds: int, seconds: float) -> float:
    rates: dict[str, list[float]] = {variant: [] for variant in variants}
    latencies: dict[str, list[float]] = {variant: [] for variant in variants}
    order = list(variants)
    for round_index in range(rounds):
        for variant in order if round_index % 2 == 0 else reversed(order):
            rate, flat = run_round(variants[variant], seconds)
            rates[variant].append(rate)
            latencies[variant].extend(flat)
    for variant in variants:
        flat = sorted(latencies[variant])
        p50 = flat[len(flat) // 2] * 1e3
        p99 = flat[int(len(flat) * 0.99)] * 1e3
        print(
            f"{name:<5} {variant:<4} {statistics.median(rates[variant]):9.0f} calls/s   "
            f"p50 {p50:6.2f} ms   p99 {p99:6.2f} ms",
            flush=True,
        )
    ratio = statistics.median(rates["sdk"]) / statistics.median(rates["raw"])
    print(f"{name:<5} sdk/raw throughput {ratio:.3f} (target >= 1.0)", flush=True)
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="per variant and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--protocols", nargs="+", choices=["grpc", "http"], default=["grpc", "http"]
    )
    args = parser.parse_args(argv)
    repository = Path(ts.__file__).parent / "examples" / "models"
    print(f"{args.threads} threads, {args.rounds} rounds x {args.seconds}s per variant")
    with LocalServer(repository) as server:
        for protocol in args.protocols:
            if protocol == "grpc":
                shared = tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
                raw = [raw_call(tritonclient.grpc, shared)] * args.threads
                url = server.grpc_url
                closers = [shared.close]
            else:
                call, close = per_thread_raw_http(server.http_port)
                raw = [call] * args.threads
                url = server.http_url
                closers = [close]
            try:
                with ts.Client(url) as client:
                    sdk = [sdk_call(client.model(MODEL))] * args.threads
                    compare(protocol, {"raw": raw, "sdk": sdk}, args.rounds, args.seconds)
            finally:
                for close in closers:
                    close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
