"""A client or a local server inherited by a forked child (``os.fork()``, multiprocessing's
"fork" start method), against the real server: the child and the parent each get their
own answers, and the child leaves the parent's regions, connections and server alone."""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer, _stop_all

from .conftest import EXAMPLE_MODELS, PROTOCOLS, server_url
from .test_shared_memory import SAMPLE, own

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def forked(child: Callable[[], None]) -> int:
    """Run ``child`` in a forked process; its pid. The child exits 0 when ``child``
    returns, 1 when it raises (printing the error), and never returns into pytest."""
    with warnings.catch_warnings():
        # (Python 3.12+ warns that forking a process with threads may deadlock the
        # child: the SDK's own state is what this file tests.)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        child()
        code = 0
    except BaseException as exc:
        print(f"in the child: {exc!r}", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


def exit_code(pid: int, within: float = 120.0) -> int:
    """The child's exit code; a child still running after ``within`` seconds (hung) is
    killed, and the code says so (-SIGKILL)."""
    deadline = time.monotonic() + within
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)


def calls(model: ts.Model, seed: int, count: int = 12) -> None:
    """``count`` calls with inputs of this process's own: each answer must be its own."""
    rows = np.random.default_rng(seed).random((2, SAMPLE), dtype=np.float32)
    for step in range(count):
        batch = rows + step
        answer = model.infer(X=batch)["Y"]
        assert np.array_equal(answer, 2 * batch), f"process {seed} got another's answer"


@pytest.fixture(params=PROTOCOLS)
def client(request: pytest.FixtureRequest, server: LocalServer) -> Iterator[ts.Client]:
    with ts.Client(server_url(server, request.param)) as opened:
        yield opened


def test_a_forked_child_and_its_parent_each_get_their_own_answers(client: ts.Client) -> None:
    # Large tensors go through shared memory ("auto", same host): a region the child
    # reused from the parent's pool would be the same memory in both processes, and a
    # kept-alive connection the same socket.
    model = client.model("big_fixed")
    calls(model, 0, count=2)  # the parent's regions and connections exist now
    assert own(client)

    def child(seed: int) -> None:
        calls(model, seed)
        client.close()  # its own regions only

    children = [forked(lambda seed=seed: child(seed)) for seed in (1, 2)]
    calls(model, 0)
    assert [exit_code(pid) for pid in children] == [0, 0]
    left = [r.name for r in client.system_shared_memory_status()]
    assert not [name for name in left for pid in children if f"-{pid}-" in name]


def test_a_view_the_child_inherited_is_not_overwritten_by_the_parents_next_calls(
    client: ts.Client,
) -> None:
    # Once the parent dropped its view, the region went back to its pool, and its next
    # call wrote into the memory the child's copy of the view reads.
    model = client.model("big_fixed")
    ones = np.ones((1, SAMPLE), dtype=np.float32)
    children = []
    for scale in range(1, 6):
        held = model.infer(X=ones * scale)["Y"]
        assert not held.flags.owndata  # a view of a region

        def child(held: np.ndarray = held, scale: int = scale) -> None:
            time.sleep(0.3)  # the parent goes on meanwhile
            assert np.array_equal(held, 2 * scale * ones), f"the child's {scale} was overwritten"

        children.append(forked(child))
        del held
        assert np.array_equal(model.infer(X=ones * 7)["Y"], 14 * ones)
    assert [exit_code(pid) for pid in children] == [0] * 5
    # The regions the children shared are freed by later calls, not kept for good: an
    # input region, an output region, and the last one shared.
    assert len(own(client)) <= 3


def test_a_forked_child_that_closes_the_client_leaves_the_parents_regions(
    client: ts.Client,
) -> None:
    model = client.model("big_fixed")
    calls(model, 0, count=2)
    registered = own(client)

    def child() -> None:
        calls(model, 1, count=2)  # regions of its own, named after its own pid
        client.close()

    assert exit_code(forked(child)) == 0
    assert own(client) == registered  # the child unregistered none of the parent's
    calls(model, 0, count=2)
    assert own(client) == registered  # ...so the parent did not register them anew


def test_a_forked_child_does_not_stop_the_parents_local_server() -> None:
    with LocalServer(EXAMPLE_MODELS) as server:

        def child() -> None:
            server.stop()
            _stop_all()  # what the child's interpreter exit runs

        assert exit_code(forked(child)) == 0
        assert server.running
        with ts.Client(server.http_url) as client:
            assert client.is_live()
    assert not server.running


class Resolver:
    """Resolves one name to the loopback address; counts lookups (in each process)."""

    def __init__(self) -> None:
        self.lookups = 0

    def __call__(self, name: str) -> list[str]:
        self.lookups += 1
        return ["127.0.0.1"]


def test_a_forked_child_keeps_up_a_dns_clients_endpoints(server: LocalServer) -> None:
    # The parent's upkeep thread is not in the child: the child never resolved the name
    # again (nor probed an ejected endpoint back). And a lock the parent held at the fork
    # stayed held in the child: its first call hung.
    resolver = Resolver()
    url = f"dns+http:///fork.test:{server.http_port}"
    with ts.Client(url, resolver=resolver, resolve_interval=0.05) as client:
        model = client.model("big_fixed")
        calls(model, 0, count=1)
        balancer = client._transport.balancer  # type: ignore[attr-defined]

        def child() -> None:
            calls(model, 1, count=1)
            looked_up = resolver.lookups
            deadline = time.monotonic() + 10
            while resolver.lookups < looked_up + 2:
                assert time.monotonic() < deadline, "the child never resolved the name again"
                time.sleep(0.02)

        with balancer._lock:  # as another thread of the parent, in the middle of a pick
            pid = forked(child)
        assert exit_code(pid, within=30) == 0
        calls(model, 0, count=1)
