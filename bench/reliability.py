"""What callers see when the server is killed (SIGKILL) and restarted under load.

Starts one local tritonserver on the example repository that ships with triton_sdk. For
each transport (gRPC and HTTP, blocking and asyncio) and each of two retry policies
(``RetryPolicy()``, the default, and ``RetryPolicy.resilient()``), a few callers share
one client and call ``add_sub`` in a loop (threads for the blocking clients, tasks for
the asyncio ones; a short pause between calls). After ``--seconds`` of load the script
kills the server's process group with SIGKILL, waits one second, restarts it on the same
ports, and keeps the load going for ``--seconds`` more. Per transport and policy it
prints one row:

- the calls made, the requests sent (attempts, seen by a ``CallHook``), the calls that
  succeeded, the calls that raised (by exception class), and the calls that succeeded
  after the restart;
- how many requests the server executed, from its own statistics (read over plain HTTP,
  not through the SDK), against the calls that succeeded;
- the calls in flight at the kill, and how many of those later succeeded on the
  restarted server: their request may have run on the killed server too;
- the "may run it twice" warnings the SDK logged;
- the time from the restarted server being ready to the first success, and to the
  moment every caller has had one.

    python bench/reliability.py                          # all four transports, ~2 minutes
    python bench/reliability.py --transports grpc-sync --seconds 5 --callers 8

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http.client
import json
import logging
import os
import platform
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

import triton_sdk as ts
from triton_sdk.local import LocalServer

MODEL = "add_sub"
SYNC_TRANSPORTS = ("grpc-sync", "http-sync")
ASYNC_TRANSPORTS = ("grpc-aio", "http-aio")
POLICIES = {"default": ts.RetryPolicy(), "resilient": ts.RetryPolicy.resilient()}
TWICE = "may run it twice"
"""The words of the warning the SDK logs when it resends a request that had gone out."""

CALL_TIMEOUT = 5.0
"""The client's timeout for each attempt, in seconds."""
PAUSE = 0.002
"""Each caller's pause between two calls, in seconds: a steady load, not a saturating one."""
KILL_AFTER = 0.2
"""Seconds of full load between the last reading of the server's counters and the kill."""
DOWN_FOR = 1.0
"""Seconds between the kill and the restart."""
MAX_CALLS = 1_000_000
"""An upper bound on the loop of each caller, on top of its time bound."""
POLL = 0.01
"""Seconds between two readiness probes while the server restarts."""

Array = np.ndarray[Any, Any]


class Call(NamedTuple):
    """One call of one caller: ``time.monotonic()`` at its start and end, and its outcome."""

    start: float
    end: float
    error: str | None  # the exception's class name; None for a correct answer


# What the SDK shows: attempts (a hook) and warnings (a log handler)


class Attempts(ts.CallHook):
    """Counts the infer requests a client sends, retries included."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        if ctx.call == "infer":
            with self._lock:
                self.sent += 1


class TwiceWarnings(logging.Handler):
    """Counts the "may run it twice" warnings of the ``triton_sdk`` logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if TWICE in record.getMessage():
            self.count += 1  # handle() holds the handler's lock


# The server's own view, over plain HTTP


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def executed_count(server: LocalServer) -> int:
    """Requests of the model the server has executed (successful or failed) since it started.

    The server bumps its counters just after it answers, so the count is read until it
    holds still; callers must be idle.
    """

    def read() -> int:
        stats = get_json(f"{server.http_url}/v2/models/{MODEL}/stats")["model_stats"]
        inference = stats[0]["inference_stats"] if stats else {}
        counts = (int(inference.get(kind, {}).get("count", 0)) for kind in ("success", "fail"))
        return sum(counts)

    count = read()
    for _ in range(40):
        time.sleep(0.05)
        again = read()
        if again == count:
            return count
        count = again
    raise RuntimeError(f"the server's counters of {MODEL!r} did not settle")


class ReadyProbe(threading.Thread):
    """Polls ``/v2/health/ready`` every 10 ms and notes when the server first answers 200."""

    def __init__(self, port: int, limit: float) -> None:
        super().__init__(daemon=True, name="ready-probe")
        self.port = port
        self.limit = limit
        self.ready_at: float | None = None
        self.cancel = threading.Event()

    def run(self) -> None:
        give_up = time.monotonic() + self.limit
        for _ in range(int(self.limit / POLL) + 1):
            if self.cancel.is_set() or time.monotonic() > give_up:
                return
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=0.5)
            try:
                connection.request("GET", "/v2/health/ready")
                if connection.getresponse().status == 200:
                    self.ready_at = time.monotonic()
                    return
            except OSError:
                pass
            finally:
                connection.close()
            time.sleep(POLL)


# The load: callers that share one client


class Load:
    """The callers' shared state; the main thread starts, pauses and stops them."""

    def __init__(self, callers: int, limit: float) -> None:
        self.calls: list[list[Call]] = [[] for _ in range(callers)]
        self.busy = [False] * callers
        self.go = threading.Event()  # cleared: callers start no new call
        self.go.set()
        self.stop = threading.Event()
        self.started = threading.Event()
        self.failure: BaseException | None = None
        self.give_up = time.monotonic() + limit  # a bound on every caller's loop

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.give_up

    def idle(self) -> bool:
        return not any(self.busy)

    def all_calls(self) -> list[Call]:
        return [call for calls in self.calls for call in calls]


def outcome(answer: ts.InferResult, expected: Array) -> str | None:
    return None if np.array_equal(answer["OUTPUT0"], expected) else "WrongAnswer"


def sync_caller(load: Load, index: int, model: ts.Model, a: Array, b: Array) -> None:
    clock = time.monotonic
    record = load.calls[index].append
    expected = a + b
    for _ in range(MAX_CALLS):
        if not load.running():
            break
        load.busy[index] = True  # before looking at `go`: see Scenario.quiesce
        if not load.go.is_set():
            load.busy[index] = False
            load.go.wait(0.05)
            continue
        start = clock()
        try:
            error = outcome(model.infer(INPUT0=a, INPUT1=b), expected)
        except Exception as caught:  # every failure is data here
            error = type(caught).__name__
        record(Call(start, clock(), error))
        load.busy[index] = False
        time.sleep(PAUSE)


async def async_caller(load: Load, index: int, model: ts.AsyncModel, a: Array, b: Array) -> None:
    clock = time.monotonic
    record = load.calls[index].append
    expected = a + b
    for _ in range(MAX_CALLS):
        if not load.running():
            break
        load.busy[index] = True
        if not load.go.is_set():
            load.busy[index] = False
            await asyncio.sleep(0.001)
            continue
        start = clock()
        try:
            error = outcome(await model.infer(INPUT0=a, INPUT1=b), expected)
        except Exception as caught:
            error = type(caught).__name__
        record(Call(start, clock(), error))
        load.busy[index] = False
        await asyncio.sleep(PAUSE)


class SyncLoad:
    """Callers on threads, sharing one ``Client``."""

    def __init__(self, url: str, policy: ts.RetryPolicy, hook: Attempts, load: Load) -> None:
        self.client = ts.Client(url, retry=policy, timeout=CALL_TIMEOUT, hooks=[hook])
        self.load = load
        self.threads: list[threading.Thread] = []

    def start(self, a: Array, b: Array) -> None:
        model = self.client.model(MODEL)
        for index in range(len(self.load.busy)):
            thread = threading.Thread(
                target=sync_caller, args=(self.load, index, model, a, b), daemon=True
            )
            thread.start()
            self.threads.append(thread)
        self.load.started.set()

    def finish(self, wait: float) -> bool:
        """Stop the callers and close the client; whether every caller ended within ``wait``."""
        self.load.stop.set()
        until = time.monotonic() + wait
        for thread in self.threads:
            thread.join(max(0.0, until - time.monotonic()))
        self.client.close()
        return not any(thread.is_alive() for thread in self.threads)


class AsyncLoad:
    """Callers as tasks sharing one ``AsyncClient``, on an event loop of their own thread."""

    def __init__(self, url: str, policy: ts.RetryPolicy, hook: Attempts, load: Load) -> None:
        self.url = url
        self.policy = policy
        self.hook = hook
        self.load = load
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="async-load")

    def start(self, a: Array, b: Array) -> None:
        self.a, self.b = a, b
        self.thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by the main thread
            self.load.failure = error
            self.load.started.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        client = ts.AsyncClient(
            self.url, retry=self.policy, timeout=CALL_TIMEOUT, hooks=[self.hook]
        )
        async with client:
            model = await client.model(MODEL)
            callers = [
                asyncio.create_task(async_caller(self.load, index, model, self.a, self.b))
                for index in range(len(self.load.busy))
            ]
            self.load.started.set()
            try:
                await asyncio.gather(*callers)
            finally:
                for caller in callers:
                    caller.cancel()
                await asyncio.gather(*callers, return_exceptions=True)

    def finish(self, wait: float) -> bool:
        self.load.stop.set()
        self.thread.join(wait)
        if self.thread.is_alive() and self.loop is not None and self.task is not None:
            # Callers stuck in retries: cancel them, which also closes the client.
            self.loop.call_soon_threadsafe(self.task.cancel)
            self.thread.join(5.0)
        return not self.thread.is_alive()


# One scenario: load, kill, restart, load


class Row(NamedTuple):
    transport: str
    policy: str
    calls: int
    sent: int
    ok: int
    raised: int
    ok_after: int
    executed: int
    in_flight: int
    in_flight_ok: int
    warnings: int
    first_ok: float | None
    all_ok: float | None
    by_class: dict[str, int]

    @property
    def unanswered(self) -> int:
        return self.executed - self.ok


class Scenario:
    def __init__(
        self,
        server: LocalServer,
        transport: str,
        policy: str,
        args: argparse.Namespace,
        warnings: TwiceWarnings,
    ) -> None:
        self.server = server
        self.transport = transport
        self.policy = policy
        self.args = args
        self.warnings = warnings
        # Load, quiesce, kill, restart (bounded by its startup timeout), load, drain.
        limit = 2 * args.seconds + KILL_AFTER + DOWN_FOR + server.startup_timeout + 60
        self.load = Load(args.callers, limit)
        self.hook = Attempts()

    def quiesce(self) -> None:
        """Let the calls in flight end and start no new one (a caller marks itself busy
        before it looks at ``go``, so once all are idle none can be sending)."""
        self.load.go.clear()
        until = time.monotonic() + CALL_TIMEOUT + 5
        while not self.load.idle():
            if time.monotonic() > until:
                raise RuntimeError("callers still busy with a healthy server")
            time.sleep(0.001)

    def run(self, a: Array, b: Array) -> Row:
        server, load = self.server, self.load
        url = server.grpc_url if self.transport.startswith("grpc") else server.http_url
        runner: SyncLoad | AsyncLoad
        if self.transport in SYNC_TRANSPORTS:
            runner = SyncLoad(url, POLICIES[self.policy], self.hook, load)
        else:
            runner = AsyncLoad(url, POLICIES[self.policy], self.hook, load)
        base = executed_count(server)
        self.warnings.count = 0
        probe = ReadyProbe(server.http_port, server.startup_timeout)
        ended = False
        try:
            runner.start(a, b)
            if not load.started.wait(30) or load.failure is not None:
                raise RuntimeError(f"{self.transport}: the callers did not start") from (
                    load.failure
                )
            time.sleep(self.args.seconds)
            # The last exact reading of the counters before the kill: the callers pause
            # a moment, so that every request sent so far has been answered and counted.
            self.quiesce()
            before_kill = executed_count(server) - base
            read_at = time.monotonic()
            load.go.set()
            time.sleep(KILL_AFTER)
            kill_at = time.monotonic()
            server.kill()
            time.sleep(DOWN_FOR)
            restart_at = time.monotonic()
            probe.start()
            server.restart()
            probe.join(server.startup_timeout)
            ready_at = probe.ready_at if probe.ready_at is not None else time.monotonic()
            time.sleep(self.args.seconds)
            # Resilient calls stuck in backoff end within the policy's deadline.
            ended = runner.finish(wait=CALL_TIMEOUT + 35)
        finally:
            probe.cancel.set()
            if not ended:
                runner.finish(wait=2.0)
        after_restart = executed_count(server)
        return self.row(before_kill, after_restart, read_at, kill_at, restart_at, ready_at)

    def row(
        self,
        before_kill: int,
        after_restart: int,
        read_at: float,
        kill_at: float,
        restart_at: float,
        ready_at: float,
    ) -> Row:
        calls = self.load.all_calls()
        ok = [call for call in calls if call.error is None]
        # The old server's counters die with it: the requests it answered between the last
        # reading and the kill are known from the callers' side. Those whose answer the
        # kill destroyed are in no counter (see "in flight" instead).
        answered_late = sum(read_at < call.end < restart_at for call in ok)
        in_flight = [call for call in calls if call.start < kill_at < call.end]
        first = [
            min((c.end for c in caller if c.error is None and c.end > restart_at), default=None)
            for caller in self.load.calls
        ]
        firsts = [moment for moment in first if moment is not None]
        return Row(
            transport=self.transport,
            policy=self.policy,
            calls=len(calls),
            sent=self.hook.sent,
            ok=len(ok),
            raised=len(calls) - len(ok),
            ok_after=sum(call.end > restart_at for call in ok),
            executed=before_kill + answered_late + after_restart,
            in_flight=len(in_flight),
            in_flight_ok=sum(c.error is None and c.end > restart_at for c in in_flight),
            warnings=self.warnings.count,
            first_ok=min(firsts) - ready_at if firsts else None,
            all_ok=max(firsts) - ready_at if len(firsts) == len(first) else None,
            by_class=dict(collections.Counter(c.error for c in calls if c.error is not None)),
        )


# Output

HEADER = (
    f"{'transport':<10} {'policy':<9} {'calls':>6} {'sent':>6} {'ok':>6} {'raised':>6} "
    f"{'ok after':>8} {'executed':>8} {'exec-ok':>7} {'in flight':>9} {'→ ok':>5} "
    f"{'twice':>5} {'ready→1st':>9} {'ready→all':>9}  raised by class"
)


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.3f}s"


def format_row(row: Row) -> str:
    by_class = ", ".join(f"{name} {count}" for name, count in sorted(row.by_class.items()))
    return (
        f"{row.transport:<10} {row.policy:<9} {row.calls:6d} {row.sent:6d} {row.ok:6d} "
        f"{row.raised:6d} {row.ok_after:8d} {row.executed:8d} {row.unanswered:7d} "
        f"{row.in_flight:9d} {row.in_flight_ok:5d} {row.warnings:5d} "
        f"{seconds(row.first_ok):>9} {seconds(row.all_ok):>9}  {by_class or '-'}"
    )


LEGEND = """\
calls: calls made; sent: infer requests sent, retries included; ok: calls answered
correctly; raised: calls that raised (by class at the end of the row); ok after: calls
that succeeded on the restarted server. executed: requests the server executed, from its
statistics read just before the kill and at the end (the counters restart with the
server), plus the calls the killed server answered after that reading; exec-ok: executed
minus ok, requests that ran without their answer reaching a caller as far as the
counters can see (a request whose answer the kill destroyed is in no counter). in
flight: calls under way at the kill; → ok: those that later succeeded on the restarted
server (a retry: their request may have run on the killed server as well). twice: "may
run it twice" warnings logged (the SDK cannot tell a request that reached the server as
it died from one that ran, so they may outnumber the calls in flight). ready→1st /
ready→all: from the restarted server answering its readiness probe (polled every 10 ms)
to the first success, and to every caller's first success ("never": a caller had none)."""


def describe_setup(args: argparse.Namespace, server: LocalServer) -> str:
    names = ("triton-sdk-py", "grpcio", "aiohttp", "numpy")
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in names)
    server_version = get_json(f"{server.http_url}/v2").get("version", "?")
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"Python {platform.python_version()}, {versions}; tritonserver {server_version}\n"
        f"{os.cpu_count()} CPUs, load average {load}\n"
        f"{args.callers} callers per client (threads or tasks), {PAUSE * 1000:.0f} ms pause "
        f"between calls, timeout {CALL_TIMEOUT:.0f}s; {args.seconds:g}s of load, SIGKILL, "
        f"restart after {DOWN_FOR:g}s, {args.seconds:g}s of load; model {MODEL!r}"
    )


# Entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Callers of triton_sdk through a kill -9 and a restart of the server.",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=3.0,
        help="seconds of load before the kill, and again after the restart (3)",
    )
    parser.add_argument("--callers", type=int, default=4, help="concurrent callers per client (4)")
    parser.add_argument(
        "--transports",
        nargs="+",
        choices=[*SYNC_TRANSPORTS, *ASYNC_TRANSPORTS],
        default=[*SYNC_TRANSPORTS, *ASYNC_TRANSPORTS],
        metavar="TRANSPORT",
        help="any of grpc-sync http-sync grpc-aio http-aio (default: all four)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 600 or not 1 <= args.callers <= 256:
        parser.error("--seconds must be in (0, 600], --callers in [1, 256]")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    repository = Path(ts.__file__).parent / "examples" / "models"
    rng = np.random.default_rng(0)
    a = rng.standard_normal(4).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    transports = [t for t in (*SYNC_TRANSPORTS, *ASYNC_TRANSPORTS) if t in args.transports]

    warnings = TwiceWarnings()
    logger = logging.getLogger("triton_sdk")
    logger.addHandler(warnings)  # also keeps the warnings off stderr
    began = time.perf_counter()
    try:
        with LocalServer(repository) as server:  # stopped on any exception, Ctrl-C included
            print(describe_setup(args, server))
            print(f"server ready after {time.perf_counter() - began:.1f}s\n")
            print(HEADER, flush=True)
            for transport in transports:
                for policy in POLICIES:
                    row = Scenario(server, transport, policy, args, warnings).run(a, b)
                    print(format_row(row), flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted; the server is stopped", file=sys.stderr)
        return 130
    finally:
        logger.removeHandler(warnings)
    print(f"\n{LEGEND}\ntotal {time.perf_counter() - began:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
