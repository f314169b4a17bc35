"""A real tritonserver for the whole session, and clients on all four transports.

The model repository joins the models under tests/models with the examples the
package ships. The server listens on free loopback ports and stops with the session.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import Blocking, LoopThread

TESTS = Path(__file__).resolve().parent.parent
FIXTURE_MODELS = TESTS / "models"
EXAMPLE_MODELS = TESTS.parent / "triton_sdk" / "examples" / "models"

PROTOCOLS = ["grpc", "http"]
MODES = ["sync", "async"]

# The session server hands request headers named x-... to the models as request
# parameters (tritonserver matches the pattern case-insensitively, anywhere in the name,
# hence the ^). The echo_headers models send them back: see test_headers.py.
HEADER_FORWARD_PATTERN = "^(x-|traceparent$)"  # x-... headers, and the W3C trace context


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.integration)


def build_repository(target: Path) -> Path:
    """A model repository of links to every fixture and example model."""
    target.mkdir(parents=True, exist_ok=True)
    for source in (FIXTURE_MODELS, EXAMPLE_MODELS):
        for model in sorted(source.iterdir()):
            if (model / "config.pbtxt").is_file():
                (target / model.name).symlink_to(model, target_is_directory=True)
    return target


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("model_repository"))


@pytest.fixture(scope="session")
def server(repository: Path) -> Iterator[LocalServer]:
    forward = [
        f"--grpc-header-forward-pattern={HEADER_FORWARD_PATTERN}",
        f"--http-header-forward-pattern={HEADER_FORWARD_PATTERN}",
    ]
    with LocalServer(repository, extra_args=forward) as running:
        yield running


@pytest.fixture(autouse=True)
def _session_server_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail (an error at the teardown of) the test during which the session server died,
    with its exit code and log; then start it again on the same ports for the tests after.

    Without this a crash shows only as "connection refused" in every later test.
    """
    yield
    if "server" not in request.fixturenames:
        return
    server: LocalServer = request.getfixturevalue("server")
    if server.exit_code is None:  # (running, or stopped by a test: not a crash)
        return
    died = f"the session tritonserver exited (code {server.exit_code}) during this test; "
    died += f"its log ends:\n{server.log_tail(120)}"
    try:
        server.restart()
    except Exception as error:  # the crash is the news; a failed restart adds to it
        died += f"\nand it did not start again: {error!r}"
    pytest.fail(died, pytrace=False)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(server: LocalServer, protocol: str) -> str:
    return server_url(server, protocol)


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


def open_client(url: str | list[str], mode: str, loop: LoopThread, **options: Any) -> Any:
    """A Client, or a blocking view of an AsyncClient: the same calls work on both."""
    if mode == "sync":
        return ts.Client(url, **options)
    return Blocking(ts.AsyncClient(url, **options), loop)


def close_client(client: Any, loop: LoopThread) -> None:
    if isinstance(client, Blocking):
        loop.run(client.target.aclose())
    else:
        client.close()


def server_url(server: LocalServer, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@contextlib.contextmanager
def client_for(
    server: LocalServer, protocol: str, mode: str, loop: LoopThread, **options: Any
) -> Iterator[Any]:
    """A client (see open_client) of a server other than the session's, closed on exit."""
    client = open_client(server_url(server, protocol), mode, loop, **options)
    try:
        yield client
    finally:
        close_client(client, loop)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_client(url: str, mode: str, loop_thread: LoopThread) -> Iterator[Any]:
    """Open clients on this test's transport (closed at teardown): make_client(**options)."""
    opened: list[Any] = []

    def make(**options: Any) -> Any:
        client = open_client(url, mode, loop_thread, **options)
        opened.append(client)
        return client

    yield make
    for client in opened:
        close_client(client, loop_thread)


@pytest.fixture
def client(make_client: Any) -> Any:
    """A client on each of grpc/http x sync/async."""
    return make_client()


def server_statistics(server: LocalServer, model: str) -> dict[str, Any]:
    """The server's own counters for a model (read over plain HTTP, not through the SDK)."""
    with urllib.request.urlopen(f"{server.http_url}/v2/models/{model}/stats", timeout=10) as reply:
        stats = json.load(reply)["model_stats"]
    return stats[0] if stats else {}


def request_count(server: LocalServer, model: str) -> int:
    stats = server_statistics(server, model).get("inference_stats", {})
    success = int(stats.get("success", {}).get("count", 0))
    return success + int(stats.get("fail", {}).get("count", 0))


def inference_count(server: LocalServer, model: str, within: float = 10.0) -> int:
    """How many requests (successful or failed) of this model the server received.

    The server bumps its counters just after it answers, later still on a loaded machine,
    so the count is read until it has held still for a tenth of a second.
    """
    deadline = time.monotonic() + within
    count = request_count(server, model)
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = request_count(server, model)
        if again != count:
            count, still_since = again, time.monotonic()
        elif time.monotonic() - still_since >= 0.1:
            break
    return count


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    """Wait until ``condition()`` is true; fail, naming ``what``, after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def unused_port() -> int:
    return unused_ports(1)[0]


def unused_ports(count: int) -> list[int]:
    """``count`` different free ports (each held open until all are found)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
