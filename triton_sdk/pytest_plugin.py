"""A pytest plugin for services that call Triton: a real local server for their tests.

Installed with the package (the ``pytest11`` entry point), it adds fixtures and two
settings; nothing starts unless a test asks for a fixture.

In ``pytest.ini`` / ``pyproject.toml`` (``[tool.pytest.ini_options]``)::

    triton_repository = tests/models     # the model repository, from the rootdir
    triton_protocol = grpc               # or http: what triton_client speaks

or ``pytest --triton-repository PATH`` (from the current directory). Fixtures:

- ``triton_server``: a :class:`~triton_sdk.local.LocalServer` on that repository, one for
  the whole session, on free loopback ports (needs the ``server`` extra).
- ``triton_url``: its URL for ``triton_protocol``.
- ``triton_client`` / ``triton_async_client``: a client of it for one test, closed after.
- ``triton_mock``: a :class:`~triton_sdk.testing.MockTransport` for tests with no server
  (``ts.Client("grpc://test", transport=triton_mock)``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ._async_client import AsyncClient
from ._client import Client
from .local import LocalServer
from .testing import MockTransport

__all__ = [
    "triton_async_client",
    "triton_client",
    "triton_mock",
    "triton_server",
    "triton_url",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("triton_sdk", "Triton Inference Server (triton_sdk)")
    group.addoption(
        "--triton-repository",
        metavar="PATH",
        help="the model repository triton_server serves, from the current directory "
        "(overrides the ini setting)",
    )
    parser.addini(
        "triton_repository", "the model repository triton_server serves (from the rootdir)"
    )
    parser.addini("triton_protocol", "grpc or http: what triton_client speaks", default="grpc")


def _repository(config: pytest.Config) -> Path:
    """The option's path from the directory pytest was started in; the ini's from the rootdir."""
    given = config.getoption("--triton-repository")
    base = config.invocation_params.dir
    if not given:
        given, base = config.getini("triton_repository"), config.rootpath
    if not given:
        raise pytest.UsageError(
            "triton_server needs a model repository: set triton_repository in the pytest "
            "configuration, or pass --triton-repository PATH"
        )
    return base / Path(str(given))


@pytest.fixture(scope="session")
def triton_server(pytestconfig: pytest.Config) -> Iterator[LocalServer]:
    """A real tritonserver on the configured repository, for the whole session."""
    _protocol(pytestconfig)  # (a misspelt one is said before a server starts for nothing)
    with LocalServer(_repository(pytestconfig)) as server:
        yield server


@pytest.fixture(scope="session")
def triton_url(triton_server: LocalServer, pytestconfig: pytest.Config) -> str:
    """The server's URL for the configured protocol."""
    protocol = _protocol(pytestconfig)
    return triton_server.grpc_url if protocol == "grpc" else triton_server.http_url


def _protocol(config: pytest.Config) -> str:
    protocol = str(config.getini("triton_protocol")).strip().lower()
    if protocol not in ("grpc", "http"):
        raise pytest.UsageError(f"triton_protocol must be grpc or http, got {protocol!r}")
    return protocol


@pytest.fixture
def triton_client(request: pytest.FixtureRequest, triton_url: str) -> Iterator[Client]:
    """A Client of triton_url (with triton_server's metrics URL when triton_url is that
    server's), closed after the test."""
    with Client(triton_url, metrics_url=_metrics_url(request)) as client:
        yield client


def _metrics_url(request: pytest.FixtureRequest) -> str | None:
    """triton_server's metrics URL, when the test's triton_url comes from it; None (the
    client's default) when a project overrides triton_url with a server of its own."""
    if "triton_server" not in request.fixturenames:
        return None
    server: LocalServer = request.getfixturevalue("triton_server")
    return server.metrics_url


@pytest.fixture
async def triton_async_client(
    request: pytest.FixtureRequest, triton_url: str
) -> AsyncIterator[AsyncClient]:
    """An AsyncClient of triton_url, as triton_client, closed after the test (needs
    pytest-asyncio or another plugin that runs async fixtures)."""
    async with AsyncClient(triton_url, metrics_url=_metrics_url(request)) as client:
        yield client


@pytest.fixture
def triton_mock() -> MockTransport:
    """A MockTransport with no answers yet: set its ``handler``, and put specs in its
    ``models`` (a dict by model name)."""
    return MockTransport()
