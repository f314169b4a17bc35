"""One client over three real servers: steady load while one of them is killed (SIGKILL)
and restarted, sequences on the killed one, and the spread of requests.

The balancer's decisions alone are tested in tests/unit/test_balance.py.
"""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from ._relay import Relay
from .conftest import (
    close_client,
    inference_count,
    open_client,
    server_url,
    unused_port,
    unused_ports,
    wait_until,
)
from .test_sequences import WIDE_CONFIG, new_sequence

WORKERS = 4
ONES = np.ones((1, 2, 2), dtype=np.float32)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LocalServer]]:
    """Three servers of one repository (each test leaves all three running): ``double``,
    ``repeat`` (decoupled) and ``accumulate`` with four sequence slots."""
    repository = tmp_path_factory.mktemp("fleet")
    models = Path(__file__).resolve().parent.parent / "models"
    for name in ("double", "repeat"):
        (repository / name).symlink_to(models / name, target_is_directory=True)
    accumulate = repository / "accumulate"
    (accumulate / "1").mkdir(parents=True)
    (accumulate / "config.pbtxt").write_text(WIDE_CONFIG)
    (accumulate / "1" / "model.py").symlink_to(models / "accumulate" / "1" / "model.py")
    yield from running([LocalServer(repository) for _ in range(3)])


def running(servers: list[LocalServer]) -> Iterator[list[LocalServer]]:
    """Start ``servers``, hand them to the test, stop every one of them afterwards."""
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def fleet_client(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    client = open_client([server_url(server, protocol) for server in fleet], mode, loop_thread)
    yield client
    close_client(client, loop_thread)


def states(client: Any) -> list[ts.EndpointState]:
    target = getattr(client, "target", client)
    return list(target.endpoints())


class SteadyLoad:
    """WORKERS threads calling ``double`` back to back; every outcome is kept."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.results = 0
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work) for _ in range(WORKERS)]

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                answer = self.model.infer(X=ONES)["Y"]
                assert np.array_equal(answer, 2 * ONES)
            except BaseException as exc:  # collected and checked by the test
                with self._lock:
                    self.failures.append(exc)
            else:
                with self._lock:
                    self.results += 1

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def wait_for(self, more: int) -> None:
        target = self.results + more
        wait_until(lambda: self.results >= target or self.failures, f"{more} more results")


def test_a_killed_server_fails_no_request_and_gets_traffic_back(
    fleet: list[LocalServer], fleet_client: Any
) -> None:
    victim = fleet[1]
    victim_url = str(states(fleet_client)[1].url)
    try:
        with SteadyLoad(fleet_client.model("double")) as load:
            load.wait_for(60)
            victim.kill()
            load.wait_for(200)  # the killed one is ejected; the others take everything
            ejected = {state.url: state for state in states(fleet_client)}[victim_url]
            assert not ejected.healthy
            assert ejected.ejections == 1
            victim.start()  # same ports
            wait_until(lambda: states(fleet_client)[1].healthy, "the restarted one is readmitted")
            load.wait_for(200)
        assert load.failures == []
        # The restarted server counts from zero: what it ran came after its return.
        assert inference_count(victim, "double") > 0
    finally:
        if not victim.running:
            victim.start()


def test_sequences_on_a_killed_server_fail_clearly_and_the_others_go_on(
    fleet: list[LocalServer], fleet_client: Any, loop_thread: LoopThread
) -> None:
    victim = fleet[1]
    model = fleet_client.model("accumulate")
    sequences: list[Any] = []
    try:
        # Start sequences until one lands on the victim (each endpoint is as likely),
        # keeping two on the others (each server has four sequence slots).
        # The client counts a request it sends at once; the server only after answering.
        for _ in range(40):
            if len(sequences) == 2:
                sequences.pop().infer(INPUT=[0], end=True)
            seq = new_sequence(model, loop_thread)
            sent = states(fleet_client)[1].requests
            assert seq.infer(INPUT=[1])["OUTPUT"].tolist() == [[1]]
            sequences.append(seq)
            if states(fleet_client)[1].requests > sent:
                break
        else:
            raise AssertionError("no sequence started on the second server")
        victim.kill()
        lost: list[tuple[Any, str]] = []
        kept = []
        for seq in sequences:
            try:
                total = seq.infer(INPUT=[10])["OUTPUT"].tolist()
            except ts.SequenceLostError as error:
                lost.append((seq, str(error)))
            else:
                assert total == [[11]]  # each step ran once: nothing was replayed elsewhere
                kept.append(seq)
        assert len(lost) == 1  # the last one started, the only one on the victim
        ((lost_one, message),) = lost
        assert lost_one is sequences[-1]
        assert states(fleet_client)[1].url in message  # it names the endpoint
        victim.start()
        wait_until(lambda: states(fleet_client)[1].healthy, "the restarted one is readmitted")
        with pytest.raises(ts.SequenceLostError):  # it never restarts silently elsewhere
            lost_one.infer(INPUT=[100])
        for seq in kept:
            assert seq.infer(INPUT=[100], end=True)["OUTPUT"].tolist() == [[111]]
        assert inference_count(victim, "accumulate") == 0
    finally:
        if not victim.running:
            victim.start()


def test_a_sequence_whose_server_failed_and_came_back_between_its_requests_is_lost(
    fleet: list[LocalServer], fleet_client: Any, loop_thread: LoopThread
) -> None:
    """Other calls saw its server fail and come back, restarted: the sequence's state is
    gone, so its next request raises SequenceLostError (not the server's refusal of a
    request without START)."""
    victim = fleet[1]
    model = fleet_client.model("accumulate")
    double = fleet_client.model("double")
    ejections = states(fleet_client)[1].ejections
    seq = None
    try:
        for _ in range(40):  # each endpoint is as likely
            if seq is not None:
                seq.infer(INPUT=[0], end=True)
            seq = new_sequence(model, loop_thread)
            sent = states(fleet_client)[1].requests
            seq.infer(INPUT=[1])
            if states(fleet_client)[1].requests > sent:
                break
        else:
            raise AssertionError("no sequence started on the second server")
        victim.kill()
        wait_until(
            lambda: double.infer(X=ONES) is not None and not states(fleet_client)[1].healthy,
            "stateless calls see the killed server fail",
        )
        victim.start()
        wait_until(lambda: states(fleet_client)[1].healthy, "the restarted one is readmitted")
        assert states(fleet_client)[1].ejections == ejections + 1
        with pytest.raises(ts.SequenceLostError, match="start it again"):
            seq.infer(INPUT=[10])
        with pytest.raises(ts.SequenceLostError):
            seq.infer(INPUT=[100], end=True)
        assert inference_count(victim, "accumulate") == 0  # nothing of it reached the new one
    finally:
        if not victim.running:
            victim.start()


def test_a_model_one_server_does_not_have_ready_is_served_by_the_others(
    fleet: list[LocalServer], fleet_client: Any, loop_thread: LoopThread
) -> None:
    # As on a server shutting down, which unloads its models before closing its ports:
    # the calls that landed there failed (ModelNotReadyError) instead of moving on.
    # Then each call went there again and moved, drawing on the retry budget: once it
    # was spent, a third of the calls failed; streams and sequence STARTs never moved.
    with ts.Client(fleet[0].grpc_url) as direct:
        for name in ("double", "repeat", "accumulate"):
            direct.unload_model(name)
        wait_until(lambda: not direct.is_model_ready("double"), "double is unloaded")
        try:
            model = fleet_client.model("double")
            for _ in range(200):
                assert np.array_equal(model.infer(X=ONES)["Y"], 2 * ONES)
            repeat = fleet_client.model("repeat")
            for _ in range(8):
                assert [int(r["OUT"][0]) for r in repeat.stream(IN=[5, 6])] == [5, 6]
            accumulate = fleet_client.model("accumulate")
            for _ in range(8):
                seq = new_sequence(accumulate, loop_thread)
                assert seq.infer(INPUT=[1])["OUTPUT"].tolist() == [[1]]
                assert seq.infer(INPUT=[2], end=True)["OUTPUT"].tolist() == [[3]]
            assert all(state.healthy for state in states(fleet_client))
        finally:
            for name in ("double", "repeat", "accumulate"):
                direct.load_model(name)


DOUBLE_CONFIG = {
    "name": "double",
    "backend": "python",
    "max_batch_size": 4,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2, 2]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2, 2]}],
}
"""tests/models/double's config, as load_model takes it."""


def test_a_model_s_spec_is_read_from_one_server_mid_rollout(
    fleet: list[LocalServer], fleet_client: Any
) -> None:
    # Its metadata and its config were two calls, each routed on its own: mid-rollout a
    # spec could mix them (a batched scalar input, or no batch axis and [-1, 2, 2]).
    rolled_out = {
        "name": "double",
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
    }
    with ts.Client(fleet[0].grpc_url) as direct:
        direct.load_model("double", config=rolled_out)
        try:
            seen = set()
            for _ in range(30):
                spec = fleet_client.model("double").spec
                seen.add((spec.max_batch_size, spec.inputs["X"].shape))
            assert seen == {(4, (2, 2)), (0, (4,))}
        finally:
            # (without a config, the server keeps the override: its files did not change)
            direct.load_model("double", config=DOUBLE_CONFIG)


BROKEN_DOUBLE = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        error = pb_utils.TritonError("this replica is broken")
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
"""


def test_a_server_that_fails_every_call_at_once_gets_few_of_them(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread, tmp_path: Path
) -> None:
    # It had no request in flight, so it won nearly every pick: with one broken server
    # of two, most calls of a busy client failed.
    broken = tmp_path / "double"
    (broken / "1").mkdir(parents=True)
    models = Path(__file__).resolve().parent.parent / "models"
    (broken / "config.pbtxt").write_text((models / "double" / "config.pbtxt").read_text())
    (broken / "1" / "model.py").write_bytes(BROKEN_DOUBLE)
    with LocalServer(tmp_path) as replica:
        urls = [server_url(replica, protocol), server_url(fleet[1], protocol)]
        client = open_client(urls, mode, loop_thread)
        try:
            model = client.model("double")
            failed = []

            def work() -> None:
                for _ in range(50):
                    try:
                        model.infer(X=ONES)
                    except ts.InferenceError as error:
                        failed.append(error)

            threads = [threading.Thread(target=work) for _ in range(WORKERS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert failed, "the broken server got no call at all"
            assert len(failed) < 0.1 * 50 * WORKERS, len(failed)
            assert all(state.healthy for state in states(client))
        finally:
            close_client(client, loop_thread)


def test_requests_spread_over_every_server(fleet: list[LocalServer], fleet_client: Any) -> None:
    model = fleet_client.model("double")
    before = [inference_count(server, "double") for server in fleet]
    for _ in range(90):
        model.infer(X=ONES)
    after = [inference_count(server, "double") for server in fleet]
    ran = [now - was for now, was in zip(after, before, strict=True)]
    assert sum(ran) == 90
    assert min(ran) >= 10, ran
    assert all(state.healthy and state.in_flight == 0 for state in states(fleet_client))


def test_streams_stay_on_one_server_and_spread_between_streams(
    fleet: list[LocalServer], fleet_client: Any
) -> None:
    model = fleet_client.model("repeat")
    before = [inference_count(server, "repeat") for server in fleet]
    for _ in range(12):
        results = list(model.stream(IN=[5, 6, 7]))
        assert [int(result["OUT"][0]) for result in results] == [5, 6, 7]
    after = [inference_count(server, "repeat") for server in fleet]
    ran = [now - was for now, was in zip(after, before, strict=True)]
    assert sum(ran) == 12  # each stream is one request, on one server
    assert sum(1 for count in ran if count) >= 2, ran
    assert all(state.in_flight == 0 for state in states(fleet_client))


def test_a_server_down_from_the_start_is_skipped(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    urls = [server_url(fleet[0], protocol), f"{protocol}://127.0.0.1:{unused_port()}"]
    client = open_client(urls, mode, loop_thread)
    try:
        model = client.model("double")
        for _ in range(20):
            assert np.array_equal(model.infer(X=ONES)["Y"], 2 * ONES)
        dead = states(client)[1]
        assert not dead.healthy
        assert dead.failures >= 1
    finally:
        close_client(client, loop_thread)


# A DNS name with three addresses: three servers on 127.0.0.1-3, on the same ports


HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def ports_free_on_every_host() -> tuple[int, int, int]:
    for _ in range(20):
        ports = unused_ports(3)
        try:
            for host in HOSTS:
                for port in ports:
                    with socket.socket() as probe:
                        probe.bind((host, port))
        except OSError:
            continue
        return (ports[0], ports[1], ports[2])
    raise AssertionError("no ports free on every loopback address")


@pytest.fixture(scope="module")
def named_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LocalServer]]:
    repository = tmp_path_factory.mktemp("named_fleet")
    models = Path(__file__).resolve().parent.parent / "models"
    (repository / "double").symlink_to(models / "double", target_is_directory=True)
    ports = ports_free_on_every_host()
    yield from running([LocalServer(repository, host=host, ports=ports) for host in HOSTS])


class Resolver:
    """A DNS resolver for one name whose answer the test changes; counts lookups."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.lookups = 0

    def __call__(self, name: str) -> list[str]:
        assert name == "fleet.test"
        self.lookups += 1
        return list(self.addresses)


def named_url(server: LocalServer, protocol: str) -> str:
    port = server.grpc_port if protocol == "grpc" else server.http_port
    return f"{'dns' if protocol == 'grpc' else 'dns+http'}:///fleet.test:{port}"


def ran_on(servers: list[LocalServer], before: list[int]) -> list[int]:
    after = [inference_count(server, "double") for server in servers]
    return [now - was for now, was in zip(after, before, strict=True)]


def test_a_dns_name_spreads_calls_over_its_addresses_and_follows_changes(
    named_fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    resolver = Resolver("127.0.0.1", "127.0.0.2")
    url = named_url(named_fleet[0], protocol)
    client = open_client(url, mode, loop_thread, resolver=resolver, resolve_interval=0.2)
    try:
        model = client.model("double")
        before = [inference_count(server, "double") for server in named_fleet]
        for _ in range(40):
            model.infer(X=ONES)
        first = ran_on(named_fleet, before)
        assert first[2] == 0  # not in DNS yet
        assert min(first[:2]) >= 5, first
        # A pod joins and another leaves: the next resolution follows.
        resolver.addresses = ["127.0.0.2", "127.0.0.3"]
        looked_up = resolver.lookups
        wait_until(lambda: resolver.lookups >= looked_up + 2, "the name is resolved again")
        before = [inference_count(server, "double") for server in named_fleet]
        for _ in range(40):
            model.infer(X=ONES)
        second = ran_on(named_fleet, before)
        assert second[0] == 0, second
        assert min(second[1:]) >= 5, second
        assert sorted(state.url.split("//")[1].split(":")[0] for state in states(client)) == [
            "127.0.0.2",
            "127.0.0.3",
        ]
    finally:
        close_client(client, loop_thread)


def test_a_dns_name_that_stops_resolving_keeps_its_endpoints(
    named_fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    resolver = Resolver(*HOSTS)
    url = named_url(named_fleet[0], protocol)
    client = open_client(url, mode, loop_thread, resolver=resolver, resolve_interval=0.1)
    try:
        model = client.model("double")
        model.infer(X=ONES)
        resolver.addresses = []
        looked_up = resolver.lookups
        wait_until(lambda: resolver.lookups >= looked_up + 2, "the name is resolved again")
        for _ in range(10):
            assert np.array_equal(model.infer(X=ONES)["Y"], 2 * ONES)
        assert len(states(client)) == 3
    finally:
        close_client(client, loop_thread)


# A slow server gets fewer requests


def test_a_slow_server_gets_fewer_requests(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    slow_port = fleet[0].grpc_port if protocol == "grpc" else fleet[0].http_port
    with Relay("127.0.0.1", slow_port, mode="delay", delay=0.2) as slow:
        urls = [f"{protocol}://{slow.address}"]
        urls += [server_url(server, protocol) for server in fleet[1:]]
        client = open_client(urls, mode, loop_thread)
        try:
            with SteadyLoad(client.model("double")) as load:
                load.wait_for(300)
            assert load.failures == []
            requests = [state.requests for state in states(client)]
        finally:
            close_client(client, loop_thread)
    assert requests[0] * 2 < min(requests[1:]), requests


def test_a_hung_server_is_ejected_after_calls_time_out_there(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    # It accepts connections and never answers (a stopped process): each call there
    # times out, and it is ejected after three in a row; its readiness probe times out too.
    target = fleet[0].grpc_port if protocol == "grpc" else fleet[0].http_port
    with Relay("127.0.0.1", target, mode="blackhole") as hung:
        urls = [f"{protocol}://{hung.address}"]
        urls += [server_url(server, protocol) for server in fleet[1:]]
        client = open_client(urls, mode, loop_thread, timeout=0.3, retry=ts.RetryPolicy.none())
        try:
            timeouts = 0
            for _ in range(40):  # (the model's metadata may be asked of it too)
                try:
                    answer = client.model("double").infer(X=ONES)["Y"]
                    assert np.array_equal(answer, 2 * ONES)
                except ts.TritonTimeoutError:
                    timeouts += 1
            ejected = states(client)[0]
            assert not ejected.healthy
            assert (ejected.ejections, ejected.failures) == (1, 0)
            assert timeouts == ejected.requests == 3, ejected
        finally:
            close_client(client, loop_thread)


class FaultyOnProbes(ts.CallHook):
    """A hook with a bug: it raises on every readiness probe's answer or error."""

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        if ctx.call == "is_ready":
            raise RuntimeError("a bug in a hook")

    def on_error(self, op: Any, ctx: ts.CallContext, error: ts.TritonError) -> None:
        if ctx.call == "is_ready":
            raise RuntimeError("a bug in a hook")


class SeenProbes(ts.CallHook):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        if ctx.call == "is_ready":
            self.seen.append("after_receive")

    def on_error(self, op: Any, ctx: ts.CallContext, error: ts.TritonError) -> None:
        if ctx.call == "is_ready":
            self.seen.append("on_error")


def test_a_hook_failing_on_probes_neither_hides_them_nor_keeps_an_endpoint_out(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    # (The first hook's failure skipped the others' on_error and after_receive, and a
    # ready answer read as not ready: the endpoint never came back.)
    target = fleet[1].grpc_port if protocol == "grpc" else fleet[1].http_port
    with Relay("127.0.0.1", target, mode="reset") as flaky:
        urls = [server_url(fleet[0], protocol), f"{protocol}://{flaky.address}"]
        seen = SeenProbes()
        client = open_client(urls, mode, loop_thread, hooks=[FaultyOnProbes(), seen])
        try:
            model = client.model("double")
            for _ in range(6):
                assert np.array_equal(model.infer(X=ONES)["Y"], 2 * ONES)
            assert not states(client)[1].healthy
            wait_until(lambda: "on_error" in seen.seen, "the probe's error reached the hook")
            flaky.mode = "pass"
            wait_until(lambda: states(client)[1].healthy, "the endpoint came back", timeout=15)
            assert "after_receive" in seen.seen
        finally:
            close_client(client, loop_thread)


class WhereItWent(ts.CallHook):
    def __init__(self) -> None:
        self.sent_to: list[str] = []
        self.answered_by: list[str] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        self.sent_to.append(ctx.url)

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        self.answered_by.append(ctx.url)


def test_hooks_and_spans_name_the_endpoint_each_attempt_went_to(
    fleet: list[LocalServer], protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from triton_sdk.otel import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    urls = [server_url(server, protocol) for server in fleet[:2]]
    where = WhereItWent()
    client = open_client(urls, mode, loop_thread, hooks=[where, Tracing(provider)])
    try:
        model = client.model("double")
        exporter.clear()
        where.answered_by.clear()
        for _ in range(200):  # (each pick is random between equals: until both served)
            model.infer(X=ONES)
            if len(set(where.answered_by)) == len(urls):
                break
    finally:
        close_client(client, loop_thread)
    assert set(where.sent_to) == {urls[0]}  # (before the pick)
    assert set(where.answered_by) == set(urls)
    ports = {dict(span.attributes or {})["server.port"] for span in exporter.get_finished_spans()}
    assert ports == {int(url.rsplit(":", 1)[1]) for url in urls}
    provider.shutdown()


def upkeep_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "triton_sdk-upkeep"}


def test_a_client_dropped_without_close_lets_its_upkeep_thread_end(
    fleet: list[LocalServer], protocol: str
) -> None:
    # (The thread held the transport: it probed, connections open, for the process's life.)
    before = upkeep_threads()
    urls = [server_url(fleet[0], protocol), f"{protocol}://127.0.0.1:{unused_port()}"]
    client = ts.Client(urls)
    model = client.model("double")
    for _ in range(4):
        assert np.array_equal(model.infer(X=ONES)["Y"], 2 * ONES)
    assert not states(client)[1].healthy
    assert upkeep_threads() - before  # probing the dead endpoint
    del client, model
    gc.collect()
    wait_until(lambda: not upkeep_threads() - before, "the upkeep thread ended", timeout=5)


@contextlib.contextmanager
def dropping_connections() -> Iterator[int]:
    """A port whose connections are never made: its accept queue is full, so the
    kernel drops new SYNs (as a host gone from the network does)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    try:
        for _ in range(3):
            waiting = socket.socket()
            waiting.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                waiting.connect(("127.0.0.1", port))
            queued.append(waiting)
        time.sleep(0.1)
        yield port
    finally:
        for waiting in queued:
            waiting.close()
        listener.close()


def test_a_connection_that_cannot_be_made_in_time_fails_over_at_once(
    server: LocalServer, mode: str, loop_thread: LoopThread
) -> None:
    # A connect timeout was a timeout after which "the server may still run the
    # request": the call failed, and the endpoint kept its share of the calls.
    with dropping_connections() as port:
        urls = [f"http://127.0.0.1:{port}", server.http_url]
        client = open_client(urls, mode, loop_thread, timeout=0.5)
        try:
            model = client.model("double")
            for _ in range(40):  # until a call was sent there (picks are random)
                assert np.array_equal(model.infer(X=ONES)["Y"], 2 * ONES)
                if states(client)[0].requests:
                    break
            unreachable = states(client)[0]
        finally:
            close_client(client, loop_thread)
    assert not unreachable.healthy
    assert unreachable.failures >= 1


# HTTP keep-alive connections with a maximum age


@pytest.mark.parametrize("max_age", [None, 0.3])
def test_http_connections_are_renewed_after_their_maximum_age(
    server: LocalServer, mode: str, loop_thread: LoopThread, max_age: float | None
) -> None:
    with Relay("127.0.0.1", server.http_port) as relay:
        url = f"http://{relay.address}"
        client = open_client(url, mode, loop_thread, max_connection_age=max_age)
        try:
            for _ in range(6):  # one call every 0.2 s, one at a time
                assert client.is_ready()
                time.sleep(0.2)
        finally:
            close_client(client, loop_thread)
    # A connection is reused until its age passes 0.3 s, then a new one replaces it.
    if max_age is None:
        assert relay.connections == 1
    else:
        assert relay.connections >= 2


def test_a_dns_client_with_no_address_yet_still_reads_metrics(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> None:
    """Calls to URLs of their own pick no endpoint: they need none to be resolved."""
    url = f"{'dns' if protocol == 'grpc' else 'dns+http'}:///fleet.test:8001"
    client = open_client(
        url, mode, loop_thread, resolver=lambda name: [], metrics_url=server.metrics_url
    )
    try:
        assert client.endpoints() == []
        metrics = client.metrics()
        assert any(entry.model == "double" for entry in metrics.models)
    finally:
        close_client(client, loop_thread)


def test_another_event_loop_is_refused_before_an_endpoint_is_picked(
    fleet: list[LocalServer], protocol: str, loop_thread: LoopThread
) -> None:
    # Each endpoint checked the loop itself: one not yet used took calls from a second
    # loop, and the client then could be closed in neither.
    import asyncio

    client = ts.AsyncClient([server_url(server, protocol) for server in fleet])
    try:
        assert loop_thread.run(client.is_live())  # (one endpoint opened in that loop)

        async def from_another_loop() -> list[str]:
            outcomes = []
            for _ in range(2 * len(fleet)):
                try:
                    await client.server_metadata()
                    outcomes.append("sent")
                except ts.TritonError as error:
                    outcomes.append(
                        "refused" if "another event loop" in str(error) else repr(error)
                    )
            return outcomes

        assert asyncio.run(from_another_loop()) == ["refused"] * (2 * len(fleet))
        for _ in range(2 * len(fleet)):
            loop_thread.run(client.server_metadata())
    finally:
        loop_thread.run(client.aclose())
