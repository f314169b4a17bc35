"""Picking endpoints, ejection and sequences: the balancer's decisions, without a server.

What a fleet of real servers does under failures is in tests/integration/test_fleet.py.
"""

from __future__ import annotations

import time

import pytest

import triton_sdk as ts
from triton_sdk._balance import PROBE_FIRST, PROBE_MAX, Balancer, Member
from triton_sdk._base import parse_urls
from triton_sdk._config import parse_url
from triton_sdk._errors import classify_status
from triton_sdk._ops import IsServerReady
from triton_sdk._request import InferRequest

READY = IsServerReady()
REFUSED = ts.TritonConnectionError("connection failed: refused", retryable=True)
FAILED = ts.InferenceError("the model failed")


def balancer(count: int = 3, seed: int = 1) -> Balancer[str]:
    members = [Member(parse_url(f"grpc://127.0.0.{i + 1}:8001"), f"t{i}") for i in range(count)]
    return Balancer(members, seed=seed)


def step(sequence: int, *, start: bool = False, end: bool = False) -> InferRequest:
    return InferRequest(
        model="m", inputs=(), sequence_id=sequence, sequence_start=start, sequence_end=end
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
