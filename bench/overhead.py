"""Per-call overhead of triton_sdk over hand-written tritonclient code, on all four transports.

Starts one local tritonserver on the example repository that ships with triton_sdk and
sends small requests to ``add_sub`` (two FP32 [4] inputs, OUTPUT0 requested) in two ways:

- raw: tritonclient as users write it by hand; every call builds the ``InferInput``
  objects (``set_data_from_numpy``) and the ``InferRequestedOutput``, calls ``infer``
  and reads the output with ``as_numpy``;
- sdk: ``model.infer(INPUT0=a, INPUT1=b, outputs=["OUTPUT0"])["OUTPUT0"]`` on a model
  handle made once, as the raw client is.

The two variants run in the same process, one request in flight, interleaved call by
call; which one goes first alternates from round to round. Each call is timed with
``time.perf_counter``. Per transport the script prints the median latency of each
variant over all calls, the ratio sdk/raw of those medians, the median (and range) of
the per-round ratios, and whether the ratio meets its target.

    python bench/overhead.py                      # all four transports
    python bench/overhead.py --transports grpc-sync --rounds 20 --calls 1000

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio

import triton_sdk as ts
from triton_sdk.local import LocalServer

MODEL = "add_sub"
OUTPUT = "OUTPUT0"
VARIANTS = ("raw", "sdk")
TARGETS = {"grpc-sync": 1.02, "http-sync": 1.02, "grpc-aio": 1.02, "http-aio": 1.02}
"""The largest acceptable ratio sdk/raw of the median latencies, per transport."""
CLIENT_WORK = "client-work"
"""gRPC sync with the network replaced by the server's recorded answer: the client-side
work of a call (building the request, serializing it, parsing and decoding the answer)."""
MAX_CLIENT_WORK_US = 5.0
"""The most the SDK's client-side work may exceed raw tritonclient's, in µs per call."""
SYNC_TRANSPORTS = ("grpc-sync", "http-sync")
ASYNC_TRANSPORTS = ("grpc-aio", "http-aio")

Array = np.ndarray[Any, Any]
SyncCall = Callable[[], Array]
AsyncCall = Callable[[], Awaitable[Array]]


# The two variants of one call


def raw_request(module: Any, a: Array, b: Array) -> tuple[list[Any], list[Any]]:
    """The inputs and outputs of one request, built the way tritonclient users do by hand."""
    input0 = module.InferInput("INPUT0", list(a.shape), "FP32")
    input0.set_data_from_numpy(a)
    input1 = module.InferInput("INPUT1", list(b.shape), "FP32")
    input1.set_data_from_numpy(b)
    return [input0, input1], [module.InferRequestedOutput(OUTPUT)]


def raw_sync_call(module: Any, client: Any, a: Array, b: Array) -> SyncCall:
    def call() -> Array:
        inputs, outputs = raw_request(module, a, b)
        result: Array = client.infer(MODEL, inputs, outputs=outputs).as_numpy(OUTPUT)
        return result

    return call


def raw_async_call(module: Any, client: Any, a: Array, b: Array) -> AsyncCall:
    async def call() -> Array:
        inputs, outputs = raw_request(module, a, b)
        result: Array = (await client.infer(MODEL, inputs, outputs=outputs)).as_numpy(OUTPUT)
        return result

    return call


def sdk_sync_call(model: ts.Model, a: Array, b: Array) -> SyncCall:
    def call() -> Array:
        return model.infer(INPUT0=a, INPUT1=b, outputs=[OUTPUT])[OUTPUT]

    return call


def sdk_async_call(model: ts.AsyncModel, a: Array, b: Array) -> AsyncCall:
    async def call() -> Array:
        return (await model.infer(INPUT0=a, INPUT1=b, outputs=[OUTPUT]))[OUTPUT]

    return call


# Timing: the only code that differs between sync and async is the timed loop itself.


def time_sync(calls: Sequence[SyncCall], count: int) -> list[list[float]]:
    """Run the calls in turn, ``count`` times; seconds per call, one list per call."""
    clock = time.perf_counter
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(count):
        for call, sink in zip(calls, samples, strict=True):
            start = clock()
            call()
            sink.append(clock() - start)
    return samples


async def time_async(calls: Sequence[AsyncCall], count: int) -> list[list[float]]:
    """The asynchronous twin of :func:`time_sync`: one request in flight at a time."""
    clock = time.perf_counter
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(count):
        for call, sink in zip(calls, samples, strict=True):
            start = clock()
            await call()
            sink.append(clock() - start)
    return samples


class Row(NamedTuple):
    transport: str
    raw_us: float
    sdk_us: float
    ratio: float
    round_ratio: float
    round_low: float
    round_high: float
    target: float
    max_delta_us: float | None = None

    @property
    def met(self) -> bool:
        if self.max_delta_us is not None:
            return self.sdk_us - self.raw_us <= self.max_delta_us
        return self.ratio <= self.target


class Comparison:
    """Rounds of interleaved calls of both variants on one transport, and their statistics."""

    def __init__(self, transport: str, rounds: int) -> None:
        self.transport = transport
        self.rounds = rounds
        self.samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        self.round_ratios: list[float] = []

    def orders(self) -> Iterator[tuple[str, ...]]:
        """The order of the variants in each round: it alternates, so neither always leads.

        Garbage left by the previous round is collected before each round starts.
        """
        for index in range(self.rounds):
            gc.collect()
            yield VARIANTS if index % 2 == 0 else VARIANTS[::-1]

    def record(self, order: Sequence[str], samples: Sequence[list[float]]) -> None:
        by_variant = dict(zip(order, samples, strict=True))
        for variant, values in by_variant.items():
            self.samples[variant].extend(values)
        raw, sdk = (statistics.median(by_variant[variant]) for variant in VARIANTS)
        self.round_ratios.append(sdk / raw)

    def row(self) -> Row:
        raw, sdk = (statistics.median(self.samples[variant]) for variant in VARIANTS)
        if self.transport == CLIENT_WORK:
            return Row(
                self.transport, raw * 1e6, sdk * 1e6, sdk / raw, 0, 0, 0, 0, MAX_CLIENT_WORK_US
            )
        return Row(
            transport=self.transport,
            raw_us=raw * 1e6,
            sdk_us=sdk * 1e6,
            ratio=sdk / raw,
            round_ratio=statistics.median(self.round_ratios),
            round_low=min(self.round_ratios),
            round_high=max(self.round_ratios),
            target=TARGETS[self.transport],
        )


def check_answers(transport: str, answers: dict[str, Array], expected: Array) -> None:
    """Both variants must compute the same thing before their speed means anything."""
    for variant, answer in answers.items():
        if answer.shape != expected.shape or not np.array_equal(answer, expected):
            raise AssertionError(
                f"{transport}: {variant} returned {answer!r}, expected {expected!r}"
            )


def measure_sync(
    transport: str, variants: dict[str, SyncCall], expected: Array, args: argparse.Namespace
) -> Row:
    check_answers(transport, {name: call() for name, call in variants.items()}, expected)
    time_sync(list(variants.values()), args.warmup)
    comparison = Comparison(transport, args.rounds)
    for order in comparison.orders():
        comparison.record(order, time_sync([variants[name] for name in order], args.calls))
    return report(comparison.row())


async def measure_async(
    transport: str, variants: dict[str, AsyncCall], expected: Array, args: argparse.Namespace
) -> Row:
    answers = {name: await call() for name, call in variants.items()}
    check_answers(transport, answers, expected)
    await time_async(list(variants.values()), args.warmup)
    comparison = Comparison(transport, args.rounds)
    for order in comparison.orders():
        comparison.record(order, await time_async([variants[name] for name in order], args.calls))
    return report(comparison.row())


# The four transports


def run_sync(
    transport: str, server: LocalServer, a: Array, b: Array, args: argparse.Namespace
) -> Row:
    if transport == "grpc-sync":
        module: Any = tritonclient.grpc
        raw_client = module.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        url = server.grpc_url
    else:
        module = tritonclient.http
        raw_client = module.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        url = server.http_url
    try:
        with ts.Client(url) as client:
            model = client.model(MODEL)
            variants = {
                "raw": raw_sync_call(module, raw_client, a, b),
                "sdk": sdk_sync_call(model, a, b),
            }
            return measure_sync(transport, variants, a + b, args)
    finally:
        raw_client.close()


def run_client_work(server: LocalServer, a: Array, b: Array, args: argparse.Namespace) -> Row:
    """Both gRPC clients with ``ModelInfer`` answering from a recorded response: what is
    left is the work each does in this process (the request is still serialized)."""
    module: Any = tritonclient.grpc
    raw_client = module.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        with ts.Client(server.grpc_url) as client:
            model = client.model(MODEL)
            recorded = raw_sync_call(module, raw_client, a, b)  # warms the channel up
            recorded()
            inputs, outputs = raw_request(module, a, b)
            answer = raw_client.infer(MODEL, inputs, outputs=outputs).get_response()
            wire = answer.SerializeToString()
            parse = type(answer).FromString

            def canned(request: Any, **_: Any) -> Any:
                request.SerializeToString()
                return parse(wire)

            canned_answers = [0]

            def canned_wire(request: bytes, **_: Any) -> bytes:
                canned_answers[0] += 1
                return wire  # the SDK sends plain requests in wire form

            raw_client._client_stub.ModelInfer = canned
            transport: Any = client._transport
            transport._stub.ModelInfer = canned
            transport._methods[("ModelInfer", "unary")] = canned_wire
            variants = {
                "raw": raw_sync_call(module, raw_client, a, b),
                "sdk": sdk_sync_call(model, a, b),
            }
            row = measure_sync(CLIENT_WORK, variants, a + b, args)
            if not canned_answers[0]:
                raise RuntimeError("the SDK's calls did not reach the recorded answer")
            return row
    finally:
        raw_client.close()


async def run_async(
    transport: str, server: LocalServer, a: Array, b: Array, args: argparse.Namespace
) -> Row:
    if transport == "grpc-aio":
        module: Any = tritonclient.grpc.aio
        raw_client = module.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        url = server.grpc_url
    else:
        module = tritonclient.http.aio
        raw_client = module.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        url = server.http_url
    try:
        async with ts.AsyncClient(url) as client:
            model = await client.model(MODEL)
            variants = {
                "raw": raw_async_call(module, raw_client, a, b),
                "sdk": sdk_async_call(model, a, b),
            }
            return await measure_async(transport, variants, a + b, args)
    finally:
        await raw_client.close()


async def run_all_async(
    transports: Sequence[str],
    server: LocalServer,
    a: Array,
    b: Array,
    args: argparse.Namespace,
) -> list[Row]:
    return [await run_async(transport, server, a, b, args) for transport in transports]


# Output

HEADER = (
    f"{'transport':<11} {'raw µs':>8} {'sdk µs':>8} {'Δ µs':>7} {'sdk/raw':>8} "
    f"{'per-round sdk/raw (min-max)':>28} {'target':>7}  met"
)


def format_row(row: Row) -> str:
    spread = f"{row.round_ratio:.3f} ({row.round_low:.3f}-{row.round_high:.3f})"
    target = f"<={row.target:.2f}"
    if row.max_delta_us is not None:
        spread = "-"
        target = f"Δ<={row.max_delta_us:.0f}"
    return (
        f"{row.transport:<11} {row.raw_us:8.1f} {row.sdk_us:8.1f} {row.sdk_us - row.raw_us:7.1f} "
        f"{row.ratio:8.3f} {spread:>28} {target:>7}  "
        f"{'yes' if row.met else 'NO'}"
    )


def report(row: Row) -> Row:
    print(format_row(row), flush=True)
    return row


def describe_setup(args: argparse.Namespace) -> str:
    versions = ", ".join(
        f"{name} {metadata.version(name)}"
        for name in ("triton-sdk-py", "tritonclient", "grpcio", "aiohttp", "numpy")
    )
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"Python {platform.python_version()}, {versions}\n"
        f"{os.cpu_count()} CPUs, load average {load}\n"
        f"{args.rounds} rounds x {args.calls} calls per variant, {args.warmup} warm-up calls; "
        f"model {MODEL!r}, 2 x FP32 [4] in, {OUTPUT} out, one request in flight"
    )


# Entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Per-call latency of triton_sdk against hand-written tritonclient code.",
    )
    parser.add_argument("--rounds", type=int, default=12, help="rounds per transport (12)")
    parser.add_argument(
        "--calls", type=int, default=600, help="calls of each variant per round (600)"
    )
    parser.add_argument(
        "--warmup", type=int, default=200, help="untimed calls of each variant first (200)"
    )
    parser.add_argument(
        "--transports",
        nargs="+",
        choices=[*SYNC_TRANSPORTS, *ASYNC_TRANSPORTS],
        default=[*SYNC_TRANSPORTS, *ASYNC_TRANSPORTS],
        metavar="TRANSPORT",
        help="any of grpc-sync http-sync grpc-aio http-aio (default: all four)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1 or args.warmup < 0:
        parser.error("--rounds and --calls must be >= 1, --warmup >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    repository = Path(ts.__file__).parent / "examples" / "models"
    rng = np.random.default_rng(0)
    a = rng.standard_normal(4).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    sync_transports = [t for t in SYNC_TRANSPORTS if t in args.transports]
    async_transports = [t for t in ASYNC_TRANSPORTS if t in args.transports]

    print(describe_setup(args))
    began = time.perf_counter()
    with LocalServer(repository) as server:
        print(f"server ready after {time.perf_counter() - began:.1f}s\n")
        print(HEADER, flush=True)
        rows = [run_sync(transport, server, a, b, args) for transport in sync_transports]
        if "grpc-sync" in sync_transports:
            rows.append(run_client_work(server, a, b, args))
        if async_transports:
            rows += asyncio.run(run_all_async(async_transports, server, a, b, args))
    print(
        "\nsdk/raw: ratio of the medians over all calls; per-round: median and range of the "
        "rounds' ratios.\n"
        f"{CLIENT_WORK}: gRPC sync with ModelInfer answering from a recorded response, so "
        "only the work in this process is timed.\n"
        f"{sum(row.met for row in rows)} of {len(rows)} targets met; "
        f"total {time.perf_counter() - began:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
