"""Picking endpoints, ejection and sequences: the balancer's decisions, without a server.

What a fleet of real servers does under failures is in tests/integration/test_fleet.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import triton_sdk as ts
from triton_sdk._balance import (
    FAILING_HALF_LIFE,
    HUNG_AFTER,
    LACKING_FOR,
    PIN_IDLE,
    PROBE_FIRST,
    PROBE_MAX,
    RESOLVE_GAP,
    Balancer,
    Discovery,
    Member,
    Route,
    same_endpoint,
)
from triton_sdk._base import parse_urls
from triton_sdk._call import CallContext, StreamStop
from triton_sdk._config import parse_dns, parse_url
from triton_sdk._errors import classify_status
from triton_sdk._ops import FetchMetrics, IsServerReady, StreamInfer
from triton_sdk._request import InferRequest
from triton_sdk._retry import TokenBucket
from triton_sdk._transports._balanced import AsyncBalancedTransport, BalancedTransport

READY = IsServerReady()
REFUSED = ts.TritonConnectionError("connection failed: refused", retryable=True)
FAILED = ts.InferenceError("the model failed")


def balancer(count: int = 3, seed: int = 1) -> Balancer[str]:
    members = [Member(parse_url(f"grpc://127.0.0.{i + 1}:8001"), f"t{i}") for i in range(count)]
    return Balancer(members, seed=seed)


def step(
    sequence: int, *, start: bool = False, end: bool = False, model: str = "m"
) -> InferRequest:
    return InferRequest(
        model=model, inputs=(), sequence_id=sequence, sequence_start=start, sequence_end=end
    )


def test_fewest_in_flight_wins_between_two() -> None:
    pool = balancer(2)
    busy = pool.route(READY)  # now in flight on one endpoint
    for _ in range(20):
        route = pool.route(READY)
        assert route.member is not busy.member
        pool.succeeded(route, READY)


def test_load_spreads_over_every_endpoint() -> None:
    pool = balancer(3)
    for _ in range(300):
        pool.succeeded(pool.route(READY), READY)
    counts = [state.requests for state in pool.states()]
    assert sum(counts) == 300
    assert min(counts) > 50, counts


def test_a_connection_failure_ejects_and_reroutes_an_idempotent_call() -> None:
    pool = balancer(3)
    route = pool.route(READY)
    first = route.member
    assert pool.failed(route, READY, REFUSED) is REFUSED
    assert pool.reroute(route, READY, REFUSED)
    assert route.member is not first
    states = {state.url: state for state in pool.states()}
    ejected = states[str(first.endpoint)]
    assert (ejected.healthy, ejected.failures, ejected.ejections) == (False, 1, 1)
    pool.succeeded(route, READY)
    for _ in range(20):  # an ejected endpoint gets no calls
        again = pool.route(READY)
        assert again.member is not first
        pool.succeeded(again, READY)


def test_no_reroute_for_model_failures_or_once_every_endpoint_was_tried() -> None:
    pool = balancer(2)
    route = pool.route(READY)
    pool.failed(route, READY, FAILED)
    assert not pool.reroute(route, READY, FAILED)
    assert all(state.healthy for state in pool.states())
    route = pool.route(READY)
    pool.failed(route, READY, REFUSED)
    assert pool.reroute(route, READY, REFUSED)
    pool.failed(route, READY, REFUSED)
    assert not pool.reroute(route, READY, REFUSED)


def test_a_full_queue_goes_to_another_endpoint_without_ejecting() -> None:
    overloaded = classify_status("UNAVAILABLE", "Exceeds maximum queue size")
    pool = balancer(2)
    route = pool.route(READY)
    first = route.member
    pool.failed(route, READY, overloaded)
    assert pool.reroute(route, READY, overloaded)
    assert route.member is not first
    assert all(state.healthy for state in pool.states())


def test_a_model_not_ready_on_one_endpoint_goes_to_another_without_ejecting() -> None:
    # A server shutting down (a pod being replaced) unloads its models before it closes
    # its ports: its answers failed the calls that landed there.
    not_ready = classify_status(
        "NOT_FOUND", "Request for unknown model: 'm' has no available versions"
    )
    pool = balancer(2)
    route = pool.route(READY)
    first = route.member
    pool.failed(route, READY, not_ready)
    assert pool.reroute(route, READY, not_ready)
    assert route.member is not first
    assert all(state.healthy for state in pool.states())


def test_when_every_endpoint_is_ejected_calls_still_try_one() -> None:
    pool = balancer(2)
    for _ in range(2):
        route = pool.route(READY)
        pool.failed(route, READY, REFUSED)
    assert not any(state.healthy for state in pool.states())
    route = pool.route(READY)
    assert route.member in pool.members


def test_probes_back_off_and_a_ready_probe_readmits() -> None:
    pool = balancer(2)
    route = pool.route(READY)
    pool.failed(route, READY, REFUSED)
    due, wait = pool.due_probes()
    assert due == []
    assert wait is not None
    assert 0 < wait <= PROBE_FIRST
    time.sleep(PROBE_FIRST)
    due, _ = pool.due_probes()
    assert due == [route.member]
    pool.probed(route.member, ready=False)
    assert route.member.probe_wait == 2 * PROBE_FIRST
    for _ in range(10):
        pool.probed(route.member, ready=False)
    assert route.member.probe_wait == PROBE_MAX
    pool.probed(route.member, ready=True)
    assert all(state.healthy for state in pool.states())
    assert pool.due_probes() == ([], None)


def test_a_sequence_stays_on_the_endpoint_that_started_it() -> None:
    pool = balancer(3)
    start = pool.route(step(7, start=True))
    pool.succeeded(start, step(7, start=True))
    for _ in range(10):
        route = pool.route(step(7))
        assert route.member is start.member
        pool.succeeded(route, step(7))
    end = pool.route(step(7, end=True))
    assert end.member is start.member
    pool.succeeded(end, step(7, end=True))
    assert pool._pins == {}


def test_sequences_of_two_models_with_one_id_keep_their_own_endpoints() -> None:
    # An id names a sequence of one model: another model's START, or END, of the same
    # id moved or forgot this one's endpoint.
    pool = balancer(8, seed=3)
    a = pool.route(step(7, start=True, model="a"))
    pool.succeeded(a, step(7, start=True, model="a"))
    for _ in range(20):
        b = pool.route(step(7, start=True, model="b"))
        pool.succeeded(b, step(7, start=True, model="b"))
        route = pool.route(step(7, model="a"))
        assert route.member is a.member
        pool.succeeded(route, step(7, model="a"))
        b_end = pool.route(step(7, end=True, model="b"))
        assert b_end.member is b.member
        pool.succeeded(b_end, step(7, end=True, model="b"))
    route = pool.route(step(7, end=True, model="a"))
    assert route.member is a.member
    pool.succeeded(route, step(7, end=True, model="a"))
    assert pool._pins == {}


def test_a_sequence_whose_endpoint_failed_is_lost_and_never_moves() -> None:
    pool = balancer(3)
    start = pool.route(step(9, start=True))
    pool.succeeded(start, step(9, start=True))
    route = pool.route(step(9))
    lost = pool.failed(route, step(9), REFUSED)
    assert isinstance(lost, ts.SequenceLostError)
    assert str(start.member.endpoint) in str(lost)
    assert not pool.reroute(route, step(9), REFUSED)
    with pytest.raises(ts.SequenceLostError, match="start it again"):
        pool.route(step(9))
    with pytest.raises(ts.SequenceLostError):
        pool.route(step(9, end=True))
    assert pool._pins == {}  # the END forgets it


def test_a_sequence_whose_endpoint_other_calls_saw_fail_is_lost_even_once_it_is_back() -> None:
    pool = balancer(2)
    start = pool.route(step(4, start=True))
    pool.succeeded(start, step(4, start=True))
    other = Route(start.member)  # a stateless call on the same endpoint fails: ejected
    start.member.in_flight += 1
    pool.failed(other, IsServerReady(), REFUSED)
    start.member.healthy = True  # readmitted by its probe (the server restarted)
    with pytest.raises(ts.SequenceLostError, match=str(start.member.endpoint)):
        pool.route(step(4))
    with pytest.raises(ts.SequenceLostError, match=str(start.member.endpoint)):
        pool.route(step(4))  # and every later request of it, until its END
    with pytest.raises(ts.SequenceLostError, match=str(start.member.endpoint)):
        pool.route(step(4, end=True))
    assert pool._pins == {}
    again = pool.route(step(4, start=True))  # started anew, it goes where a new one goes
    pool.succeeded(again, step(4, start=True))
    assert pool.route(step(4)).member is again.member


TIMED_OUT = ts.TritonTimeoutError("timed out after 0.5 s")


@pytest.mark.parametrize(("probe_failure", "lost"), [(REFUSED, True), (TIMED_OUT, False)])
def test_a_sequence_on_a_hung_endpoint_is_lost_once_a_probe_found_it_down(
    probe_failure: ts.TritonError, lost: bool
) -> None:
    # Ejected for its timeouts (hung: its state kept), then restarted at its address: only
    # the probes saw it down, and the sequence went on to a server that never knew it.
    pool = balancer(2)
    start = pool.route(step(6, start=True))
    pool.succeeded(start, step(6, start=True))
    hung = start.member
    for _ in range(HUNG_AFTER):
        hung.in_flight += 1
        pool.failed(Route(hung), READY, TIMED_OUT)
    assert not hung.healthy
    pool.probed(hung, False, probe_failure)
    pool.probed(hung, True)
    if lost:
        with pytest.raises(ts.SequenceLostError, match=str(hung.endpoint)):
            pool.route(step(6))
    else:  # still hung, then answering: the same server, its state intact
        assert pool.route(step(6)).member is hung


def test_calls_timing_out_in_a_row_eject_a_hung_endpoint() -> None:
    pool = balancer(2)
    hung, other = pool.members
    for _ in range(HUNG_AFTER - 1):
        hung.in_flight += 1
        assert pool.failed(Route(hung), READY, TIMED_OUT) is TIMED_OUT
    assert pool.states()[0].healthy
    hung.in_flight += 1
    pool.failed(Route(hung), READY, TIMED_OUT)
    state = pool.states()[0]
    assert (state.healthy, state.failures, state.ejections) == (False, 0, 1)
    for _ in range(20):  # no calls for it until a probe finds it ready
        route = pool.route(READY)
        assert route.member is other
        pool.succeeded(route, READY)
    pool.probed(hung, True)
    assert pool.states()[0].healthy


def test_only_timeouts_with_no_answer_between_them_eject() -> None:
    pool = balancer(2)
    hung = pool.members[0]
    stream = StreamInfer(step(0), None)  # (a stream may wait long for its next response)
    answers: list[tuple[Any, ts.TritonError | None]] = [
        (READY, None),
        (READY, FAILED),  # the model failed, but the server answered
        (stream, TIMED_OUT),
    ]
    for op, answer in answers:
        for _ in range(HUNG_AFTER - 1):
            hung.in_flight += 1
            pool.failed(Route(hung), READY, TIMED_OUT)
        hung.in_flight += 1
        pool.failed(Route(hung), op, answer)
        assert hung.healthy, op
    hung.in_flight += 1
    pool.abandoned(Route(hung), READY)  # a call given up (cancelled) says nothing
    hung.in_flight += 1
    pool.failed(Route(hung), READY, TIMED_OUT)
    assert not hung.healthy


def test_a_hung_endpoint_keeps_its_sequences() -> None:
    # Ejected for its timeouts, it may still hold the sequences' state: they stay on it;
    # a connection failure there afterwards loses them.
    pool = balancer(2)
    start = pool.route(step(5, start=True))
    pool.succeeded(start, step(5, start=True))
    for _ in range(HUNG_AFTER):
        start.member.in_flight += 1
        pool.failed(Route(start.member), READY, TIMED_OUT)
    assert not start.member.healthy
    route = pool.route(step(5))
    assert route.member is start.member
    pool.failed(route, step(5), TIMED_OUT)  # (a timed-out request does not lose it)
    assert pool.route(step(5)).member is start.member
    start.member.in_flight += 1
    pool.failed(Route(start.member), READY, REFUSED)
    with pytest.raises(ts.SequenceLostError):
        pool.route(step(5))


def test_parse_urls() -> None:
    assert parse_urls("localhost:8001") == (parse_url("localhost:8001"),)
    many = parse_urls(["grpc://a:8001", "grpc://b:8001"])
    assert [str(endpoint) for endpoint in many] == ["grpc://a:8001", "grpc://b:8001"]


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        ([], "non-empty list"),
        (["grpc://a:8001", "http://b:8000"], "one protocol"),
        (["grpc://a:8001", "grpcs://b:8001"], "one protocol"),
        (["grpc://a:8001", "a:8001"], "twice"),
        ([8001], "must be a str"),
    ],
)
def test_parse_urls_refuses(urls: object, message: str) -> None:
    with pytest.raises(ts.InvalidInputError, match=message):
        parse_urls(urls)


def test_a_client_over_many_endpoints_refuses_system_shared_memory() -> None:
    with pytest.raises(ts.InvalidInputError, match="one server"):
        ts.Client(["grpc://a:8001", "grpc://b:8001"], shared_memory="system")


# DNS names


@pytest.mark.parametrize(
    ("url", "protocol", "name", "port"),
    [
        ("dns:///triton-headless:8001", "grpc", "triton-headless", 8001),
        ("dns+grpc:///triton.ns.svc:9001", "grpc", "triton.ns.svc", 9001),
        ("dns+http:///triton-headless:8000", "http", "triton-headless", 8000),
        ("DNS:///t", "grpc", "t", 8001),
    ],
)
def test_parse_dns(url: str, protocol: str, name: str, port: int) -> None:
    dns = parse_dns(url)
    assert dns is not None
    assert (dns.name, dns.template.protocol, dns.template.port) == (name, protocol, port)
    endpoints = dns.endpoints(["10.0.0.7", "fd00::7"])
    assert [str(endpoint) for endpoint in endpoints] == [
        f"{protocol}://10.0.0.7:{port}",
        f"{protocol}://[fd00::7]:{port}",
    ]


def test_other_urls_are_not_dns() -> None:
    assert parse_dns("grpc://a:8001") is None
    assert parse_dns("localhost:8001") is None


@pytest.mark.parametrize("url", ["dns://8.8.8.8/triton:8001", "dns+grpcs:///t:443", "dns:t:8001"])
def test_unsupported_dns_urls_are_refused(url: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="dns:///name:port"):
        parse_dns(url)


def test_a_dns_client_reports_the_name() -> None:
    client = ts.Client("dns:///fleet.invalid:8001", resolver=lambda name: [])
    try:
        assert repr(client) == "<Client dns:///fleet.invalid:8001>"
        assert client.endpoints() == []
        assert not client.is_live()
        with pytest.raises(ts.TritonConnectionError, match="no address"):
            client.server_metadata()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("10.0.0.7", "not a list"),
        ([167772167], "not an address"),
        ([""], "not an address"),
        # What would stand in a URL's host as something else: another host, a path, a port.
        (["10.9.9.9@127.0.0.1"], "not an address"),
        (["127.0.0.1/x?"], "not an address"),
        (["10.0.0.7:9000"], "not an address"),
        (["not an address"], "not an address"),
        (["-pod.svc"], "not an address"),
    ],
)
def test_a_resolver_answer_that_is_no_list_of_addresses_is_a_failed_resolution(
    answer: object, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A str was read letter by letter (an endpoint per character); an int raised a raw
    # TypeError from the client's constructor.
    dns = parse_dns("dns:///fleet:8001")
    assert dns is not None
    assert Discovery(dns, lambda name: answer, 30.0).resolve() is None  # type: ignore[arg-type, return-value]
    assert why in caplog.text


def test_a_resolver_may_answer_ip_addresses_and_host_names() -> None:
    dns = parse_dns("dns:///fleet:8001")
    assert dns is not None
    answer = ["10.0.0.7", "fd00::7", "triton-0.triton.default.svc.cluster.local", "pod_1"]
    found = Discovery(dns, lambda name: answer, 30.0).resolve()
    assert [endpoint.host for endpoint in found or []] == answer


def test_a_resolver_giving_an_address_twice_makes_one_endpoint() -> None:
    dns = parse_dns("dns:///fleet:8001")
    assert dns is not None
    found = Discovery(dns, lambda name: ["10.0.0.7", "10.0.0.8", "10.0.0.7"], 30.0).resolve()
    assert [endpoint.host for endpoint in found or []] == ["10.0.0.7", "10.0.0.8"]


def discovery(answers: list[object], interval: float = 30.0) -> Discovery:
    """A Discovery whose resolver gives ``answers`` in turn (an exception is raised)."""
    dns = parse_dns("dns:///fleet:8001")
    assert dns is not None

    def resolver(name: str) -> list[str]:
        assert name == "fleet"
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, list)
        return answer

    return Discovery(dns, resolver, interval)


def test_discovery_resolves_at_once_then_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    found = discovery([["127.0.0.2", "127.0.0.3"], OSError("no such name"), []])
    assert found.wait() == 0
    assert [e.host for e in found.resolve() or []] == ["127.0.0.2", "127.0.0.3"]
    assert 29 < found.wait() <= 30
    assert found.resolve() is None  # a failure keeps what the client has
    assert found.resolve() is None
    assert "no such name" in caplog.text
    assert "resolved to no address" in caplog.text


def test_a_failure_brings_the_next_resolution_forward() -> None:
    found = discovery([["127.0.0.2"]])
    found.resolve()
    found.soon()
    assert found.wait() <= RESOLVE_GAP


def test_update_adds_and_retires_members_keeping_their_state() -> None:
    pool = balancer(2)
    kept = pool.members[1]
    new = parse_url("grpc://127.0.0.9:8001")
    pool.update([kept.endpoint, new], lambda endpoint: f"t-{endpoint.host}")
    assert [member.endpoint for member in pool.members] == [kept.endpoint, new]
    assert pool.members[0] is kept
    assert pool.members[1].transport == "t-127.0.0.9"
    assert [member.endpoint.host for member in pool.idle_retired()] == ["127.0.0.1"]
    assert pool.idle_retired() == []


def test_a_retired_member_is_closed_only_when_idle_and_free_of_sequences() -> None:
    pool = balancer(1)
    member = pool.members[0]
    start = pool.route(step(5, start=True))
    pool.succeeded(start, step(5, start=True))
    busy = pool.route(READY)
    pool.update([parse_url("grpc://127.0.0.9:8001")], str)
    assert pool.idle_retired() == []  # a call in flight, and a sequence
    pool.succeeded(busy, READY)
    assert pool.idle_retired() == []
    again = pool.route(step(5))  # the sequence stays where it began
    assert again.member is member
    pool.succeeded(again, step(5, end=True))
    assert pool.idle_retired() == [member]


# What the review of the transports found


def test_no_failover_once_the_request_may_have_run() -> None:
    broke = ts.TritonConnectionError("connection reset", retryable=True, may_have_run=True)
    pool = balancer(3)
    route = pool.route(READY)
    pool.failed(route, READY, broke)
    assert not pool.reroute(route, READY, broke)  # the retry policy decides, with its warning


def test_failover_needs_the_budget_and_says_so_when_it_is_spent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Under RetryPolicy.none() a failover the budget refused was silent (the retry
    # machinery, which logs it otherwise, never ran).
    pool = balancer(3)
    route = pool.route(READY)
    pool.failed(route, READY, REFUSED)
    with caplog.at_level(logging.WARNING, logger="triton_sdk"):
        assert not pool.reroute(route, READY, REFUSED, lambda: False)
    (record,) = caplog.records
    assert "not failing is_ready over to another endpoint" in record.getMessage()
    assert "retry budget is spent" in record.getMessage()


def test_sequences_left_open_are_forgotten_after_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    pool = balancer(2)
    for sequence in (1, 2):
        route = pool.route(step(sequence, start=True))
        pool.succeeded(route, step(sequence, start=True))
    now[0] += PIN_IDLE / 2
    pool.succeeded(pool.route(step(2)), step(2))  # 2 is still in use
    now[0] += PIN_IDLE / 2 + 120
    pool.succeeded(pool.route(step(3, start=True)), step(3, start=True))
    assert sorted(sequence for _, _, sequence in pool._pins) == [2, 3]


class Hanging:
    """An asyncio transport whose calls never end (until cancelled)."""

    async def acall(self, op: object, ctx: object) -> object:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_a_cancelled_call_leaves_nothing_in_flight() -> None:
    endpoints = [parse_url(f"grpc://127.0.0.{i}:8001") for i in (1, 2)]
    transport = AsyncBalancedTransport(endpoints, lambda endpoint: Hanging(), {})  # type: ignore[arg-type, return-value]
    ctx = CallContext("is_ready", None, {}, None)
    calls = [asyncio.ensure_future(transport.acall(READY, ctx)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert sum(state.in_flight for state in transport.endpoints()) == 5
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    assert [state.in_flight for state in transport.endpoints()] == [0, 0]
    assert all(state.healthy for state in transport.endpoints())


class Streaming:
    """An asyncio transport whose streams record when they are closed."""

    def __init__(self, closed: list[str]) -> None:
        self.closed = closed

    async def astream(self, op: object, ctx: object) -> AsyncIterator[int]:
        try:
            for item in range(10):
                yield item
        finally:
            self.closed.append("inner")


async def test_closing_a_stream_closes_the_endpoints_stream_at_once() -> None:
    # At once, not when the collector gets to it: closing is what cancels the request.
    closed: list[str] = []
    endpoints = [parse_url("grpc://127.0.0.1:8001")]
    transport = AsyncBalancedTransport(endpoints, lambda endpoint: Streaming(closed), {})  # type: ignore[arg-type, return-value]
    ctx = CallContext("stream", None, {}, None)
    stream: Any = transport.astream(READY, ctx)  # type: ignore[arg-type]
    assert await anext(stream) == 0
    await stream.aclose()
    assert closed == ["inner"]
    assert [state.in_flight for state in transport.endpoints()] == [0]


class Silent:
    """Transports whose streams send nothing: the async one waits, the blocking one
    fails as a stream cut by a stop from another thread does."""

    async def astream(self, op: object, ctx: object) -> AsyncIterator[int]:
        await asyncio.sleep(3600)
        yield 0

    def stream(self, op: object, ctx: CallContext) -> Iterator[int]:
        assert ctx._stop is not None
        ctx._stop.request()
        raise REFUSED  # (the stop shut the connection)
        yield 0

    def close(self) -> None:
        pass


async def test_a_stream_left_before_a_response_says_nothing_of_its_endpoint() -> None:
    # It counted as an answer, so a hung endpoint's timeouts started again from zero.
    endpoints = [parse_url("grpc://127.0.0.1:8001")]
    transport = AsyncBalancedTransport(endpoints, lambda endpoint: Silent(), {})  # type: ignore[arg-type, return-value]
    member = transport.balancer.members[0]
    member.timeouts = HUNG_AFTER - 1
    ctx = CallContext("stream", None, {}, None)
    stream: Any = transport.astream(READY, ctx)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), 0.05)
    await stream.aclose()
    assert (member.timeouts, member.in_flight, member.healthy) == (HUNG_AFTER - 1, 0, True)


def test_a_stream_stopped_from_another_thread_says_nothing_of_its_endpoint() -> None:
    # Over blocking HTTP the stop cuts the connection: the endpoint was ejected for it,
    # and the sequences on it were lost.
    endpoints = [parse_url(f"http://127.0.0.{i}:8000") for i in (1, 2)]
    transport = BalancedTransport(endpoints, lambda endpoint: Silent(), {})  # type: ignore[arg-type, return-value]
    ctx = CallContext("stream", None, {}, None)
    ctx._stop = StreamStop()
    with pytest.raises(ts.TritonConnectionError):
        list(transport.stream(READY, ctx))  # type: ignore[arg-type]
    states = transport.endpoints()
    assert [(state.healthy, state.failures, state.in_flight) for state in states] == [
        (True, 0, 0),
        (True, 0, 0),
    ]
    transport.close()


def test_timeouts_of_calls_in_flight_at_the_ejection_do_not_count_after_readmission() -> None:
    # A model slow everywhere: they ejected the endpoint again at its first new timeout.
    pool = balancer(2)
    hung = pool.members[0]
    in_flight = [Route(hung) for _ in range(HUNG_AFTER + 2)]
    hung.in_flight += len(in_flight)
    for route in in_flight[:HUNG_AFTER]:
        pool.failed(route, READY, TIMED_OUT)
    assert (hung.healthy, hung.ejections) == (False, 1)
    pool.probed(hung, True)
    for route in in_flight[HUNG_AFTER:]:  # sent before the ejection, time out after
        pool.failed(route, READY, TIMED_OUT)
    hung.in_flight += 1
    pool.failed(Route(hung), READY, TIMED_OUT)  # one timeout since the readmission
    assert (hung.healthy, hung.ejections, hung.timeouts) == (True, 1, 1)


def test_a_refusal_found_on_the_client_is_no_answer() -> None:
    pool = balancer(2)
    hung = pool.members[0]
    for error in [TIMED_OUT, TIMED_OUT, ts.InvalidInputError("FP16 over JSON"), TIMED_OUT]:
        hung.in_flight += 1
        pool.failed(Route(hung), READY, error)
    assert not hung.healthy


class MetricsDown:
    """A transport whose metrics endpoint (a port of its own) refuses connections."""

    def __init__(self) -> None:
        self.calls = 0

    def call(self, op: Any, ctx: CallContext) -> Any:
        self.calls += 1
        raise REFUSED

    def close(self) -> None:
        pass


def test_a_call_to_a_url_of_its_own_says_nothing_of_the_endpoints() -> None:
    # Metrics (and the OpenAI frontend) have URLs of their own: their failure ejected
    # the endpoint the call was routed through, and the call went round every endpoint.
    endpoints = [parse_url(f"grpc://127.0.0.{i}:8001") for i in (1, 2)]
    made: list[MetricsDown] = []

    def make(endpoint: Any) -> MetricsDown:
        made.append(MetricsDown())
        return made[-1]

    transport = BalancedTransport(endpoints, make, {})  # type: ignore[arg-type]
    op = FetchMetrics("http://127.0.0.1:9/metrics")
    with pytest.raises(ts.TritonConnectionError):
        transport.call(op, CallContext("metrics", None, {}, None))
    assert [state.healthy for state in transport.endpoints()] == [True, True]
    assert sum(transport.calls for transport in made) == 0  # sent by the client itself
    transport.close()


def test_health_checks_fail_over_without_drawing_on_the_retry_budget() -> None:
    # wait_until_ready polls a fleet still starting: each poll moved across the
    # endpoints on the budget, which was spent before the first real call.
    endpoints = [parse_url(f"grpc://127.0.0.{i}:8001") for i in (1, 2)]
    bucket = TokenBucket(ts.RetryBudget(ratio=0.1, reserve=2))
    transport = BalancedTransport(endpoints, lambda endpoint: MetricsDown(), {}, budget=bucket)  # type: ignore[arg-type, return-value]
    for _ in range(5):
        with pytest.raises(ts.TritonConnectionError):
            transport.call(READY, CallContext("is_ready", None, {}, None))
    assert bucket.withdraw()
    assert bucket.withdraw()
    transport.close()


def test_waiting_for_a_fleet_names_every_endpoint() -> None:
    urls = ["grpc://127.0.0.1:9", "grpc://127.0.0.2:9"]
    with ts.Client(urls) as client, pytest.raises(ts.TritonTimeoutError) as caught:
        client.wait_until_ready(timeout=0.3)
    assert "any of grpc://127.0.0.1:9, grpc://127.0.0.2:9 was not ready" in str(caught.value)


class Guarded:
    """An endpoint that fails its first call at the connection level, then answers only
    requests that carry the key (as a server run with a restricted protocol does)."""

    def __init__(self) -> None:
        self.calls = 0

    def call(self, op: Any, ctx: CallContext) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise REFUSED
        if ctx.headers.get("x-key") != "open":
            raise ts.InferenceError("This protocol is restricted", status="UNAVAILABLE")
        return True

    def close(self) -> None:
        pass


class AddKey(ts.CallHook):
    def __init__(self) -> None:
        self.ends = 0

    def before_send(self, op: Any, ctx: CallContext) -> None:
        ctx.headers = {**ctx.headers, "x-key": "open"}

    def on_end(self, op: Any, ctx: CallContext) -> None:
        self.ends += 1


def test_readiness_probes_go_through_the_hooks() -> None:
    # A key added by a hook (a rotating token) never reached the probes: the endpoint,
    # ejected once, was never readmitted.
    hook = AddKey()
    endpoints = [parse_url("grpc://127.0.0.1:8001")]
    transport = BalancedTransport(endpoints, lambda endpoint: Guarded(), {}, hooks=(hook,))  # type: ignore[arg-type, return-value]
    try:
        with pytest.raises(ts.TritonConnectionError):
            transport.call(READY, CallContext("is_ready", None, {}, None))
        assert [state.healthy for state in transport.endpoints()] == [False]
        deadline = time.monotonic() + 10
        while not transport.endpoints()[0].healthy:
            assert time.monotonic() < deadline, "the endpoint was never readmitted"
            time.sleep(0.01)
        assert hook.ends >= 1
    finally:
        transport.close()


# A replica that fails fast, a model some replicas lack, reads that make one answer

NOT_FOUND = classify_status("NOT_FOUND", "Request for unknown model: 'm' is not found")


def infer(model: str = "m") -> InferRequest:
    return InferRequest(model=model, inputs=())


def test_an_endpoint_that_fails_at_once_does_not_draw_every_pick() -> None:
    # It had nothing in flight, so it won nearly every pick against a busy healthy one:
    # 84% of a fleet's calls failed with one broken replica of two.
    pool = balancer(2)
    broken, healthy = pool.members
    healthy.in_flight = 3  # (calls of other threads, in flight there)
    picks = {id(broken): 0, id(healthy): 0}
    for _ in range(100):
        route = pool.route(infer())
        picks[id(route.member)] += 1
        if route.member is broken:
            pool.failed(route, infer(), FAILED)
        else:
            pool.succeeded(route, infer())
    assert picks[id(broken)] <= 5, picks
    assert all(state.healthy for state in pool.states())  # (not ejected: only avoided)


def test_failed_answers_count_less_with_time_and_a_request_s_own_fault_not_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = balancer(2)
    member = pool.members[0]
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now)
    for _ in range(4):
        pool.failed(Route(member), infer(), FAILED)
    assert member.load(now) == pytest.approx(member.in_flight + 4)
    assert member.load(now + 2 * FAILING_HALF_LIFE) == pytest.approx(member.in_flight + 1)
    assert member.load(now + 10 * FAILING_HALF_LIFE) == member.in_flight  # (forgotten)
    pool.succeeded(Route(member), infer())
    assert member.load(now) == member.in_flight
    malformed = classify_status("INVALID_ARGUMENT", "unexpected shape for input 'X'")
    for error in (malformed, ts.InvalidInputError("refused here")):
        pool.failed(Route(member), infer(), error)
    assert member.load(now) == member.in_flight


def test_an_endpoint_that_lacks_a_model_gets_no_calls_for_it_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each call went there again, moved, and drew on the retry budget: once the budget
    # was spent, 30% of the calls failed while a rolling update had the model on one
    # replica of two.
    pool = balancer(2)
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now)
    route = pool.route(infer())
    lacking = route.member
    pool.failed(route, infer(), NOT_FOUND)
    assert pool.reroute(route, infer(), NOT_FOUND, lambda: False)  # (no budget drawn)
    pool.succeeded(route, infer())
    for _ in range(20):
        route = pool.route(infer())
        assert route.member is not lacking
        pool.succeeded(route, infer())
    others = {pool.route(infer("other")).member for _ in range(20)}
    assert lacking in others  # (its other models are fine)
    now += LACKING_FOR
    assert lacking in {pool.route(infer()).member for _ in range(20)}  # asked again


def test_the_start_of_a_sequence_moves_when_nothing_of_it_ran() -> None:
    pool = balancer(2)
    start = step(7, start=True)
    route = pool.route(start)
    first = route.member
    failure = pool.failed(route, start, NOT_FOUND)
    assert failure is NOT_FOUND  # (not SequenceLostError: no sequence began)
    assert pool.reroute(route, start, NOT_FOUND)
    assert route.member is not first
    pool.succeeded(route, start)
    following = pool.route(step(7))
    assert following.member is route.member  # pinned where it started
    pool.succeeded(following, step(7))
    # A START refused by the connection moves too; the endpoint is ejected.
    start = step(8, start=True)
    route = pool.route(start)
    refused_at = route.member
    assert pool.failed(route, start, REFUSED) is REFUSED
    assert pool.reroute(route, start, REFUSED)
    assert route.member is not refused_at
    # A request of a sequence after its START never moves.
    pool = balancer(2)
    pool.succeeded(pool.route(step(9, start=True)), step(9, start=True))
    assert not pool.reroute(pool.route(step(9)), step(9), NOT_FOUND)


def test_reads_of_one_answer_go_to_one_endpoint() -> None:
    pool = balancer(3)
    with same_endpoint():
        members = set()
        for _ in range(10):
            route = pool.route(READY)
            members.add(route.member)
            pool.succeeded(route, READY)
        assert len(members) == 1
        # Moved (its endpoint failed), the reads that follow go where it moved.
        route = pool.route(READY)
        pool.failed(route, READY, REFUSED)
        assert pool.reroute(route, READY, REFUSED)
        pool.succeeded(route, READY)
        assert pool.route(READY).member is route.member
    assert len({pool.route(READY).member for _ in range(30)}) > 1


class FirstLacks:
    """Endpoint transports: the first has no model (its streams fail at once)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def stream(self, op: object, ctx: CallContext) -> Iterator[int]:
        if self.index == 0:
            raise NOT_FOUND
        yield from (1, 2)

    async def astream(self, op: object, ctx: object) -> AsyncIterator[int]:
        if self.index == 0:
            raise NOT_FOUND
        for item in (1, 2):
            yield item

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_a_stream_that_fails_before_anything_ran_moves() -> None:
    # It failed: "placed once", even where the endpoint answered it has no such model.
    endpoints = [parse_url(f"grpc://127.0.0.{i}:8001") for i in (1, 2)]
    transports = iter(range(4))
    blocking = BalancedTransport(endpoints, lambda e: FirstLacks(next(transports) % 2), {})  # type: ignore[arg-type, return-value]
    asyncio_ = AsyncBalancedTransport(endpoints, lambda e: FirstLacks(next(transports) % 2), {})  # type: ignore[arg-type, return-value]
    op = StreamInfer(infer(), ts.ModelSpec(name="m", inputs={}, outputs={}))
    for _ in range(10):
        assert list(blocking.stream(op, CallContext("stream", "m", {}, None))) == [1, 2]  # type: ignore[arg-type]
        ctx = CallContext("stream", "m", {}, None)
        assert [item async for item in asyncio_.astream(op, ctx)] == [1, 2]  # type: ignore[arg-type]
    assert [state.in_flight for state in blocking.endpoints()] == [0, 0]
    blocking.close()
    await asyncio_.aclose()


def test_a_model_no_endpoint_has_costs_one_request_a_call() -> None:
    # Moves for a missing model were free and went on to endpoints known to lack it: a
    # name no server has cost a request to every endpoint on every call.
    pool = balancer(3)
    requests = 0
    for _ in range(10):
        route = pool.route(infer())
        requests += 1
        while True:
            pool.failed(route, infer(), NOT_FOUND)
            if not pool.reroute(route, infer(), NOT_FOUND, lambda: False):
                break
            requests += 1
    assert requests == 3 + 9  # every endpoint once, then one a call


def test_an_endpoint_lacking_one_version_still_gets_the_model_s_other_calls() -> None:
    pool = balancer(2)
    route = pool.route(infer())
    lacking = route.member
    version_3 = InferRequest(model="m", version="3", inputs=())
    not_ready = classify_status("UNAVAILABLE", "'m' version 3 is not at ready state")
    pool.failed(route, version_3, not_ready)
    assert lacking in {pool.route(infer()).member for _ in range(30)}
    assert all(pool.route(version_3).member is not lacking for _ in range(30))


def test_reads_of_one_answer_say_when_they_had_to_move() -> None:
    pool = balancer(2)
    with same_endpoint() as used:
        route = pool.route(READY)
        pool.succeeded(route, READY)
        route = pool.route(READY)  # (the same endpoint: it now lacks the model)
        pool.failed(route, READY, NOT_FOUND)
        assert pool.reroute(route, READY, NOT_FOUND)
        assert len(used) == 2
        assert used[0] is not used[1]
        assert pool.route(READY).member is used[-1]  # (the reads that follow go there)


def test_a_start_the_model_failed_keeps_its_endpoint() -> None:
    # Any answered error (not may_have_run) unpinned it: the sequence's next request went
    # to another endpoint, which had no such sequence.
    pool = balancer(3)
    start = step(11, start=True)
    route = pool.route(start)
    assert pool.failed(route, start, FAILED) is FAILED
    assert not pool.reroute(route, start, FAILED)
    for _ in range(10):
        following = pool.route(step(11))
        assert following.member is route.member
        pool.succeeded(following, step(11))
